"""Moving the reports a new full run supersedes to ``reports/previous/<UTC stamp>/``.

A new unsharded run supersedes every earlier file of its backend; a shard run supersedes the
unsharded file, the shard files of another shard count and its own file. The sign-off
outputs beside the JUnit directory (``reports/signoff.{md,json,html}``, ``conformance.xml``)
no longer describe the reports once a new run writes there: they move into the same folder,
so no verdict stands over reports it did not see (sign off again). Nothing is deleted,
and only a run whose arguments were all accepted gets here (the plugin calls `archive_superseded`
at session start, after pytest and the plugins have validated every option).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from conformance.harness.sharding import Shard, parse_junit_name, sidecar_path
from conformance.signoff.outputs import existing_outputs, move_outputs


def superseded(junit_dir: Path, backend: str, shard: Shard | None, own: Path) -> list[Path]:
    """The JUnit files in `junit_dir` that a run of `backend`/`shard` writing `own` supersedes."""
    stale = []
    for path in sorted(junit_dir.glob(f"{backend}*.xml")):
        try:
            name, other = parse_junit_name(path.name)
        except ValueError:
            continue
        if name != backend:
            continue
        if path == own or shard is None or other is None or other.count != shard.count:
            stale.append(path)
    return stale


def archive_superseded(own: Path, backend: str, shard: Shard | None) -> Path | None:
    """Move what `own`'s run supersedes (and their sidecars), and the sign-off outputs that
    described them, aside; the folder, or None when there was nothing to move."""
    stale = superseded(own.parent, backend, shard, own)
    reports_dir = own.parent.parent
    if not stale and not existing_outputs(reports_dir):
        return None
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = reports_dir / "previous" / stamp
    target.mkdir(parents=True, exist_ok=True)
    for path in stale:
        for item in (path, sidecar_path(path)):
            if item.exists():
                shutil.move(str(item), target / item.name)
    move_outputs(reports_dir, target)
    return target
