"""The results files: ``<date>-<gpu>.json`` (everything measured) and ``.md`` (the tables).

The markdown gives, per case, the roofline floor, each implementation's median time with its
share of the floor, and ours ÷ peer (below 1.00 ours is faster; above, bold); then the
details (rates, plan, errors), and the cases whose "ours" ran over a plan other than the
backend's (a `--tune` launch option). Both files also hold the environment, the ceilings
measured in the run and the peers' status. A run names its files once (`report_paths`:
``-2``, ``-3``, ... after an earlier run's) and rewrites only its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DIR = ROOT / "kernels"
# (record key, column title), in table order; ours is "triton".
COLUMNS = (
    ("flashmla", "FlashMLA"),
    ("flashinfer_fa3", "FlashInfer fa3"),
    ("flashinfer_fa2", "FlashInfer fa2"),
    ("baseline", "baseline"),
    ("sdpa", "SDPA"),
)


def fmt_us(entry: dict[str, Any]) -> str:
    """A console summary of one timed entry."""
    if "us" in entry:
        text = f"{entry['us']:.1f} µs (err {entry.get('max_abs_err', float('nan')):.1e})"
        return text + (f" WRONG: {entry['wrong']}" if "wrong" in entry else "")
    return entry.get("error", entry.get("skipped", "?"))


def pct(value: float | None) -> str:
    """A fraction as a percentage, ``–`` when absent."""
    return "–" if value is None else f"{100 * value:.1f} %"


def kernel_digest() -> str:
    """sha256 (16 hex digits) of every kernel source (``kernels/**/*.py``: the Triton and
    Gluon decodes, the planner, their shared parts), by path in path order: what was timed,
    whether or not the tree's git metadata came along."""
    digest = hashlib.sha256()
    for path in sorted(KERNEL_DIR.rglob("*.py")):
        name = path.relative_to(KERNEL_DIR).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


NVIDIA_SMI = [
    "nvidia-smi",
    "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
    "--format=csv,noheader",
]


def _command(args: list[str]) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "unavailable"
    return done.stdout.strip() or "unavailable"


def environment() -> dict[str, Any]:
    """Versions and device facts for the results file."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "sms": props.multi_processor_count,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "nvidia_smi": _command(NVIDIA_SMI),
        "kernel_sha256": kernel_digest(),
        "git_head": os.environ.get("MLA_CONFORMANCE_GIT_COMMIT", "")[:7] or git_head(ROOT),
    }


def git_head(root: Path) -> str:
    """The tree's commit, ``+modified`` where tracked files differ from it (a copy of the tree
    whose git metadata did not follow its files); "unavailable" without git."""
    head = _command(["git", "-C", str(root), "rev-parse", "--short", "HEAD"])
    if head == "unavailable":
        return head
    changes = ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"]
    clean = _command(changes) == "unavailable"  # no output: no tracked file changed
    return head if clean else head + "+modified"


def _time_cell(entry: dict[str, Any]) -> str:
    if "us" not in entry:
        return "skipped" if "skipped" in entry else "–"
    cell = f"{entry['us']:.1f} ({pct(entry.get('fraction_of_floor'))})"
    return cell + (" WRONG" if "wrong" in entry else "")


def _ratio_cell(record: dict[str, Any], key: str) -> str:
    ratio = record.get(f"ours_over_{key}")
    if ratio is not None:
        return f"**{ratio:.2f}**" if ratio > 1.0 else f"{ratio:.2f}"
    wrong = "wrong" in record.get("triton", {}) or "wrong" in record.get(key, {})
    return "WRONG" if wrong else "–"


def _fp8_floor_cell(record: dict[str, Any]) -> str:
    """The fp8-rate floor of an e4m3-q case, with ours' and FlashMLA's share of it."""
    f = record.get("floor_fp8_rate")
    if f is None:
        return "–"
    shares = [
        f"{name} {pct(record.get(key, {}).get('fraction_of_fp8_rate_floor'))}"
        for key, name in (("triton", "ours"), ("flashmla", "FlashMLA"))
        if "us" in record.get(key, {})
    ]
    return f"{f['us']:.1f} ({f['bound']}; {', '.join(shares)})"


def _fastest_cell(record: dict[str, Any]) -> str:
    ratio = record.get("ours_over_fastest_peer")
    if ratio is None:
        return "–"
    return f"**{ratio:.2f}**" if ratio > 1.0 else f"{ratio:.2f}"


def comparison_table(records: Sequence[dict[str, Any]]) -> str:
    """Floor, ours and every peer (µs and % of the floor), ours ÷ peer, ours ÷ the fastest
    production peer (FlashMLA, fa3), and the fp8-rate floor of e4m3-q cases."""
    head = "| case | floor µs (bound) | ours µs (% of floor) |"
    head += "".join(f" {title} µs (%) | ours ÷ {title} |" for _, title in COLUMNS)
    head += " ours ÷ min(FlashMLA, fa3) | fp8-rate floor µs (% of it) |"
    width = 5 + 2 * len(COLUMNS)
    lines = [head, "|---" * width + "|"]
    for r in records:
        if "skipped" in r:
            lines.append(f"| {r['case']} | skipped: {r['skipped']} |" + " |" * (width - 2))
            continue
        f = r["floor"]
        cells = [r["case"], f"{f['us']:.1f} ({f['bound']})", _time_cell(r.get("triton", {}))]
        for key, _ in COLUMNS:
            cells += [_time_cell(r.get(key, {})), _ratio_cell(r, key)]
        cells += [_fastest_cell(r), _fp8_floor_cell(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _err(entry: dict[str, Any], key: str) -> str:
    return f"{entry[key]:.1e}" if key in entry else "–"


def details_table(records: Sequence[dict[str, Any]]) -> str:
    """Ours' rates and plan, the peers' facts, every output's error."""
    names = ("triton", *(k for k, _ in COLUMNS))
    lines = [
        "| case | ours TFLOP/s | ours GB/s | plan ms (works/partials) | baseline splits | "
        "SDPA backend | max err vs fp32: ours / FlashMLA / fa3 / fa2 / baseline / SDPA | "
        "max diff vs ours: FlashMLA / fa3 / fa2 / baseline / SDPA |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if "skipped" in r:
            continue
        t, plan = r.get("triton", {}), r.get("plan", {})
        lines.append(
            f"| {r['case']} | {t.get('tflops', 0):.0f} | {t.get('gbps', 0):.0f} | "
            f"{plan.get('ms', float('nan')):.1f} ({plan.get('num_works', '–')}/"
            f"{plan.get('num_partials', '–')}) | {r.get('baseline', {}).get('num_splits', '–')} | "
            f"{r.get('sdpa', {}).get('backend', '–')} | "
            + " / ".join(_err(r.get(n, {}), "max_abs_err") for n in names)
            + " | "
            + " / ".join(_err(r.get(k, {}), "max_diff_vs_ours") for k, _ in COLUMNS)
            + " |"
        )
    return "\n".join(lines)


def plan_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per case whose "ours" ran over a plan made for fewer heads than the case's
    (a launch option `--tune` chose), with ours over the plan the backend makes."""
    notes = []
    for r in records:
        folded = r.get("triton_folded_plan")
        if folded is None:
            continue
        heads = r.get("plan", {}).get("planned_heads", "fewer")
        notes.append(
            f"{r['case']}: ours over a plan for {heads} heads, run once per head group; over "
            f"the backend's plan (all heads, folded): {fmt_us(folded)}"
        )
    return notes


def problems(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per implementation that was wrong or skipped on a case."""
    found = []
    for r in records:
        for key in ("triton", "triton_folded_plan", *(k for k, _ in COLUMNS)):
            entry = r.get(key, {})
            for what in ("wrong", "skipped"):
                if what in entry:
                    found.append(f"{r['case']}: {key} {what}: {entry[what]}")
    return found


def markdown(payload: dict[str, Any]) -> str:
    """The whole markdown results file."""
    c, env = payload["ceilings"], payload["environment"]
    fi, fm = payload.get("flashinfer", {}), payload.get("flashmla", {})
    peers = (
        f"FlashInfer {fi['version']} (`BatchMLAPagedAttentionWrapper`, backends fa3 and fa2; "
        f"JIT warm-up: {fi.get('warm_up', {})})"
        if fi.get("available")
        else f"FlashInfer not timed: {fi.get('reason', 'not requested')}"
    )
    peers += (
        f"; FlashMLA from {fm['source']}"
        if fm.get("available")
        else f"; FlashMLA not timed: {fm.get('reason', 'not requested')}"
    )
    fp8_rate = c.get("fp8_matmul_flops_per_s")
    fp8_text = (
        f", e4m3 matmul {fp8_rate / 1e12:.0f} TFLOP/s (the compute ceiling of the fp8-rate floor)"
        if fp8_rate
        else f", e4m3 matmul {c.get('fp8_matmul', 'not measured')}"
    )
    lines = [
        f"# MLA decode benchmark, {env['gpu']}, {payload['date']}",
        "",
        f"Command: `{payload['command']}`",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
        f"Ceilings measured in this run: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s "
        f"(bytes read + written), bf16 matmul {c['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s"
        f"{fp8_text}, ridge {c['ridge_flops_per_byte']:.0f} FLOP/B.",
        "",
        f"Timing: {payload['timing']}. Peers: {peers}.",
        "",
        "Decode configs used: "
        + ", ".join(f"{k}: {v}" for k, v in payload.get("decode_configs", {}).items()),
        "",
        "Hopper (Gluon kernel) configs, used instead where they apply (sm_90; bf16 q and KV at 64 "
        "rows, e4m3 q and KV at up to 64): "
        + (", ".join(f"{k}: {v}" for k, v in payload.get("hopper_configs", {}).items()) or "none"),
        "",
        "Warp-specialized Gluon decode, by KV kind (used instead at 64 rows of the kinds "
        "`by_default`): " + str(payload.get("ws_configs", "not recorded")),
        "",
        "ours ÷ peer below 1.00: ours is faster (bold: slower). % of floor: the roofline floor "
        "÷ the time. WRONG: the output failed its check, so no ratio (reason below).",
        "",
        comparison_table(payload["cases"]),
        "",
        details_table(payload["cases"]),
        "",
    ]
    notes = plan_notes(payload["cases"])
    if notes:
        lines += ["Plans other than the backend's:", "", *(f"- {line}" for line in notes), ""]
    issues = problems(payload["cases"])
    if issues:
        lines += ["Wrong or skipped:", "", *(f"- {line}" for line in issues), ""]
    return "\n".join(lines)


def report_paths(out_dir: Path, payload: dict[str, Any]) -> tuple[Path, Path]:
    """The (``.json``, ``.md``) paths of a new run's results under `out_dir`:
    ``<date>-<gpu>``, else ``-2``, ``-3``, ... where an earlier run's files hold the name (a
    run never overwrites another's)."""
    gpu = payload["environment"]["gpu"].lower().replace("nvidia", "").strip().split()[0]
    base = f"{payload['date']}-{gpu}"
    stem, n = base, 1
    while (out_dir / f"{stem}.json").exists() or (out_dir / f"{stem}.md").exists():
        n += 1
        stem = f"{base}-{n}"
    return out_dir / f"{stem}.json", out_dir / f"{stem}.md"


def write_reports(paths: tuple[Path, Path], payload: dict[str, Any]) -> tuple[Path, Path]:
    """The run's results into `paths` (`report_paths`): its JSON payload and the markdown."""
    json_path, md_path = paths
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    md_path.write_text(markdown(payload))
    return json_path, md_path
