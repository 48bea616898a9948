#!/usr/bin/env python3
"""Make the FlashMLA folder a GPU machine without vLLM needs: ``MLA_FLASHMLA_DIR``.

    python3 scripts/flashmla_carry.py OUTDIR [--wheel VLLM_WHEEL | --vllm-version X]

vLLM's CUDA wheels ship DeepSeek's FlashMLA as two extensions on torch's stable ABI,
``vllm/_flashmla_C.abi3.so`` (dense decode) and ``vllm/_flashmla_extension_C.abi3.so`` (the
SM90 e4m3 path), about 4 MB together. This copies both out of a vLLM wheel (downloaded with
pip when none is given: the cp312 manylinux wheel of ``--vllm-version``, default the engine
target's pinned release) into OUTDIR with a ``provenance.json`` (the wheel, its sha256, each
file's sha256), which the ``flashmla`` backend records in its runs. Exit 1 with one line when
the wheel lacks a file or cannot be had.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.flashmla.ops import DENSE_LIB, FP8_LIB, PROVENANCE_FILE
from conformance.targets import BUILTIN_TARGETS
from scripts.vllm_gpu_carry import vllm_wheel, wheel_arguments

MEMBERS = (f"vllm/{DENSE_LIB}", f"vllm/{FP8_LIB}")


def extract(wheel: Path, out: Path) -> dict[str, object]:
    """Copy the two extensions into `out`; the provenance written beside them."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    with zipfile.ZipFile(wheel) as archive:
        present = set(archive.namelist())
        for member in MEMBERS:
            if member not in present:
                raise SystemExit(f"{wheel.name}: no {member}")
            data = archive.read(member)
            (out / Path(member).name).write_bytes(data)
            files[Path(member).name] = hashlib.sha256(data).hexdigest()
            print(f"{Path(member).name}: {len(data)} bytes, sha256 {files[Path(member).name]}")
    provenance = {
        "wheel": wheel.name,
        "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "files": files,
    }
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    return provenance


def main(argv: list[str]) -> int:
    parser = wheel_arguments(__doc__.splitlines()[0], BUILTIN_TARGETS["vllm"].version)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = vllm_wheel(args, Path(tmp))
        if wheel is None:
            return 1
        provenance = extract(wheel, args.outdir)
    print(f"{args.outdir}: FlashMLA from {provenance['wheel']}; set MLA_FLASHMLA_DIR to it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
