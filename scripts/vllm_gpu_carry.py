#!/usr/bin/env python3
"""Make the vLLM bundle a GPU machine without internet needs for ``vllm_gpu``: OUTDIR/.

    python3 scripts/vllm_gpu_carry.py OUTDIR [--wheel VLLM_WHEEL | --vllm-version X]
        [--have NAME ...]

vLLM's CUDA wheel (about 340 MB) is too big to carry; its MLA decode needs only a part of it.
This writes into OUTDIR:

- ``vllm.tar.xz``: the wheel's Python files, its ``.dist-info`` and FlashMLA's two stable-ABI
  extensions (``_flashmla_C``, ``_flashmla_extension_C``), about 11 MB; no other extension
  (``_C_stable_libtorch`` is stood in on the GPU machine: `conformance.engines.vllm.extensions`);
- ``wheels/``: the small pure or cp312 wheels vLLM's attention modules import
  (`IMPORTED`) and those of their requirements a GPU machine lacks (`DEPENDENCIES`), at the
  versions vLLM's pins resolve to, less each ``--have NAME`` the machine already has;
- ``provenance.json``: the wheel, its sha256, and each file's sha256.

``scripts/gpu_vllm.sh`` unpacks it there (``MLA_VLLM_BUNDLE``, default .vllm-gpu/). Exit 1 with
one line when the wheel lacks a file or something cannot be downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.flashmla.ops import DENSE_LIB, FP8_LIB
from conformance.targets import BUILTIN_TARGETS

EXTENSIONS = (f"vllm/{DENSE_LIB}", f"vllm/{FP8_LIB}")
IMPORTED = (
    "pydantic", "pyzmq", "msgspec", "cbor2", "pybase64", "cachetools", "openai",
    "openai-harmony", "partial-json-parser", "fastapi", "starlette", "blake3", "nvidia-ml-py",
    "py-cpuinfo", "prometheus_client", "gguf", "diskcache", "lark", "python-json-logger",
    "xgrammar",
)  # fmt: skip
"""What vLLM's config, platform and attention modules import at load time."""
DEPENDENCIES = (
    "pydantic-core", "annotated-types", "typing-inspection", "annotated-doc", "anyio", "sniffio",
    "h11", "httpx", "httpcore", "httpx2", "httpcore2", "jiter", "distro", "apache-tvm-ffi",
    "truststore",
)  # fmt: skip
"""Their own requirements that a GPU machine with torch and transformers lacks. Nothing else
of the resolution is carried: a carried copy of torch's stack, or of transformers' own
requirements (Hugging Face's ``kernels``), would shadow the machine's."""


def download(requirements: list[str], into: Path, *, deps: bool) -> list[Path]:
    """cp312 manylinux (or pure) wheels of `requirements` into `into`."""
    command = [
        sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version",
        "3.12", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
        "--platform", "manylinux2014_x86_64", "-d", str(into), *([] if deps else ["--no-deps"]),
        *requirements,
    ]  # fmt: skip
    subprocess.run(command, check=True)
    return sorted(into.glob("*.whl"))


def wheel_arguments(description: str, default_version: str) -> argparse.ArgumentParser:
    """The command line ``OUTDIR [--wheel VLLM_WHEEL | --vllm-version X]`` of a script that
    takes a vLLM CUDA wheel (`vllm_wheel`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("outdir", type=Path)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--wheel", type=Path, help="a vLLM CUDA wheel already downloaded")
    source.add_argument("--vllm-version", default=default_version)
    return parser


def vllm_wheel(args: argparse.Namespace, into: Path) -> Path | None:
    """The wheel ``--wheel`` names, else vLLM's CUDA wheel of ``--vllm-version`` downloaded
    into `into`; None, after one line on stderr, when there is none."""
    if args.wheel is not None:
        if args.wheel.is_file():
            return args.wheel
        print(f"--wheel {args.wheel}: no such file", file=sys.stderr)
        return None
    print(f"downloading vllm=={args.vllm_version} (about 340 MB) ...", flush=True)
    try:
        return download([f"vllm=={args.vllm_version}"], into, deps=False)[0]
    except (subprocess.CalledProcessError, IndexError):
        print(f"vllm=={args.vllm_version}: no CUDA wheel could be downloaded", file=sys.stderr)
        return None


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def vllm_pins(archive: zipfile.ZipFile) -> dict[str, str]:
    """vLLM's own requirement of each distribution (extras and markers dropped)."""
    metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    pins = {}
    for line in archive.read(metadata).decode().splitlines():
        if not line.startswith("Requires-Dist:") or "extra ==" in line:
            continue
        spec = line.removeprefix("Requires-Dist:").split(";")[0].strip()
        name = re.split(r"[\s\[<>=!~(]", spec, maxsplit=1)[0]
        pins[normal(name)] = re.sub(r"\[[^\]]*\]", "", spec)
    return pins


def carried(wheel: Path, have: set[str]) -> bool:
    """Whether `wheel` is one of `IMPORTED` or `DEPENDENCIES`, and not in `have`."""
    name = normal(wheel.name.split("-")[0])
    wanted = {normal(n) for n in (*IMPORTED, *DEPENDENCIES)} - {normal(h) for h in have}
    return name in wanted


def python_tree(archive: zipfile.ZipFile, out: Path) -> dict[str, str]:
    """vllm.tar.xz: the Python files, the dist-info and FlashMLA's extensions."""
    names = set(archive.namelist())
    for member in EXTENSIONS:
        if member not in names:
            raise SystemExit(f"the wheel has no {member}")
    chosen = sorted(
        n
        for n in names
        if (n.startswith("vllm/") and n.endswith(".py"))
        or n in EXTENSIONS
        or re.match(r"vllm-[^/]+\.dist-info/(METADATA|entry_points\.txt)$", n)
    )
    digests = {}
    with tarfile.open(out / "vllm.tar.xz", "w:xz") as tar:
        for name in chosen:
            data = archive.read(name)
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith(".so") else 0o644
            tar.addfile(info, io.BytesIO(data))
            if name in EXTENSIONS:
                digests[name] = hashlib.sha256(data).hexdigest()
    print(f"vllm.tar.xz: {len(chosen)} files, {(out / 'vllm.tar.xz').stat().st_size} bytes")
    return digests


def main(argv: list[str]) -> int:
    parser = wheel_arguments(__doc__.splitlines()[0], BUILTIN_TARGETS["vllm_gpu"].version)
    parser.add_argument("--have", action="append", default=[], help="a distribution the GPU "
                        "machine has (not carried)")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = vllm_wheel(args, Path(tmp))
        if wheel is None:
            return 1
        args.outdir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            digests = python_tree(archive, args.outdir)
            pins = vllm_pins(archive)
        requirements = [pins.get(normal(name), name) for name in IMPORTED]
        wheels_dir = args.outdir / "wheels"
        wheels_dir.mkdir(exist_ok=True)
        for old in wheels_dir.glob("*.whl"):
            old.unlink()
        try:
            fetched = download(requirements, Path(tmp) / "wheels", deps=True)
        except subprocess.CalledProcessError:
            print(f"cannot download {requirements}", file=sys.stderr)
            return 1
        kept = [w for w in fetched if carried(w, set(args.have))]
        for w in kept:
            (wheels_dir / w.name).write_bytes(w.read_bytes())
        provenance = {
            "wheel": wheel.name,
            "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "files": digests,
            "wheels": {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in kept},
        }
    (args.outdir / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    size = sum(p.stat().st_size for p in args.outdir.rglob("*") if p.is_file())
    print(f"{args.outdir}: {len(kept)} wheels; {size / 2**20:.1f} MiB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
