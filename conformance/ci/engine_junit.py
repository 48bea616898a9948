"""CI's check of an engine run: its JUnit file must show the real builders built.

``python -m conformance.ci.engine_junit reports/junit/vllm.xml`` exits 0 only when, for each
builder the target must build, the test ``test_builder_builds[<BUILDER>]`` is in the file
and passed (no failure, error or skip), and no test failed; otherwise it prints one line
naming what is missing and exits 1.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from conformance.engines.target import engine_target

BUILD_TEST = "test_builder_builds[{}]"


def problems(path: Path, must_build: Iterable[str]) -> list[str]:
    """What the JUnit file at `path` lacks for a passing engine run."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        return [f"{path}: not a readable JUnit file ({error})"]
    outcome: dict[str, str] = {}
    for case in root.iter("testcase"):
        children = {child.tag for child in case}
        state = next((tag for tag in ("failure", "error", "skipped") if tag in children), "passed")
        outcome[case.get("name", "")] = state
    found = [f"{name} {state}" for name, state in outcome.items() if state in ("failure", "error")]
    for builder in must_build:
        state = outcome.get(BUILD_TEST.format(builder))
        if state != "passed":
            found.append(f"{builder} did not build ({state or 'no such test'})")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m conformance.ci.engine_junit reports/junit/<engine>.xml")
        return 2
    path = Path(argv[0])
    try:
        target = engine_target(path.stem)
    except KeyError as error:
        print(f"{path}: {error.args[0]}")
        return 2
    found = problems(path, target.must_build)
    if found:
        print(f"{path}: " + "; ".join(found))
        return 1
    print(f"{path}: {', '.join(target.must_build)} built on {target.name}'s own code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
