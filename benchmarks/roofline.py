"""Roofline arithmetic of MLA decode, and the device ceilings it is measured against.

Counts for the absorbed MLA decode of DeepSeek-V2/V3/R1 (arXiv 2405.04434; latent 512, rope 64):

- FLOPs ``= 2·B·s_q·h·L·(576 + 512)``: QKᵀ over 576 dims plus PV over 512, every request
  attending to all ``L`` cached tokens (the causal trim of MTP rows is ignored, < s_q/L).
- Bytes (the fewest any kernel must move): the KV cache once (``L·b_tok`` per request), q
  once, the bf16 output and the fp32 LSE once. Split-KV partials are a kernel's own cost and
  are not part of the floor.
- Floor ``= max(bytes / copy bandwidth, FLOPs / matmul rate)``, both ceilings measured on
  the device in the same run (`measure_ceilings`); ``fraction = floor / measured time``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

LATENT_DIM = 512
ROPE_DIM = 64
CACHE_DIM = LATENT_DIM + ROPE_DIM
FLOPS_PER_TOKEN_HEAD = 2 * (CACHE_DIM + LATENT_DIM)  # 2176

# Bytes per cached token of each KV format: 576 bf16 or 576 e4m3 values (per-tensor scale).
KV_BYTES_PER_TOKEN: dict[str, int] = {"bf16": 2 * CACHE_DIM, "fp8": CACHE_DIM}
Q_BYTES_PER_ELEMENT: dict[str, int] = {"bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class Ceilings:
    """Device ceilings: copy bandwidth (bytes read + written per second) and matmul rate."""

    copy_bytes_per_s: float
    matmul_flops_per_s: float
    fp8_matmul_flops_per_s: float | None = None
    """The e4m3 matmul rate (None: not measured): the compute ceiling of an e4m3-q case."""

    def as_dict(self) -> dict[str, float | None]:
        """JSON-ready record (with the ridge point)."""
        return {**asdict(self), "ridge_flops_per_byte": self.ridge_flops_per_byte}

    def at_fp8_rate(self) -> Ceilings:
        """The same ceilings with the e4m3 matmul rate as the compute ceiling."""
        if self.fp8_matmul_flops_per_s is None:
            raise ValueError("the e4m3 matmul rate was not measured")
        return Ceilings(self.copy_bytes_per_s, self.fp8_matmul_flops_per_s)

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a kernel is compute-bound."""
        return self.matmul_flops_per_s / self.copy_bytes_per_s


@dataclass(frozen=True)
class DecodeShape:
    """One uniform decode batch: B requests of s_q query tokens over L cached tokens each."""

    batch: int
    heads: int
    context: int
    q_len: int
    kv_format: str  # "bf16" or "fp8"
    q_format: str = "bf16"

    @property
    def rows(self) -> int:
        """Query rows (token × head) of the whole batch."""
        return self.batch * self.q_len * self.heads

    @property
    def flops(self) -> int:
        """QKᵀ + PV floating-point operations."""
        return FLOPS_PER_TOKEN_HEAD * self.rows * self.context

    @property
    def kv_bytes(self) -> int:
        """Bytes of the cached tokens read once."""
        return self.batch * self.context * KV_BYTES_PER_TOKEN[self.kv_format]

    @property
    def min_bytes(self) -> int:
        """KV once + q once + bf16 output + fp32 LSE."""
        q = self.rows * CACHE_DIM * Q_BYTES_PER_ELEMENT[self.q_format]
        out = self.rows * LATENT_DIM * 2
        lse = self.rows * 4
        return self.kv_bytes + q + out + lse

    @property
    def intensity(self) -> float:
        """FLOPs per byte of the floor's traffic."""
        return self.flops / self.min_bytes

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "context", "q_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"DecodeShape.{name}: expected a positive int, got {value!r}")
        if self.kv_format not in KV_BYTES_PER_TOKEN:
            raise ValueError(
                f"DecodeShape.kv_format: expected one of {sorted(KV_BYTES_PER_TOKEN)}, "
                f"got {self.kv_format!r}"
            )
        if self.q_format not in Q_BYTES_PER_ELEMENT:
            raise ValueError(
                f"DecodeShape.q_format: expected one of {sorted(Q_BYTES_PER_ELEMENT)}, "
                f"got {self.q_format!r}"
            )


@dataclass(frozen=True)
class Floor:
    """The roofline floor of one shape under given ceilings (seconds)."""

    memory_s: float
    compute_s: float

    @property
    def seconds(self) -> float:
        """The larger of the two terms."""
        return max(self.memory_s, self.compute_s)

    @property
    def bound(self) -> str:
        """``"memory"`` or ``"compute"``: which term sets the floor."""
        return "memory" if self.memory_s >= self.compute_s else "compute"


def floor(shape: DecodeShape, ceilings: Ceilings) -> Floor:
    """``max(bytes / copy bandwidth, FLOPs / matmul rate)`` as its two terms."""
    if ceilings.copy_bytes_per_s <= 0 or ceilings.matmul_flops_per_s <= 0:
        raise ValueError(f"ceilings must be positive, got {ceilings}")
    return Floor(
        memory_s=shape.min_bytes / ceilings.copy_bytes_per_s,
        compute_s=shape.flops / ceilings.matmul_flops_per_s,
    )


def achieved(shape: DecodeShape, ceilings: Ceilings, seconds: float) -> dict[str, float]:
    """Rates and fractions of a measured time: TFLOP/s, GB/s, % of each floor term."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    f = floor(shape, ceilings)
    return {
        "tflops": shape.flops / seconds / 1e12,
        "gbps": shape.min_bytes / seconds / 1e9,
        "floor_us": f.seconds * 1e6,
        "floor_memory_us": f.memory_s * 1e6,
        "floor_compute_us": f.compute_s * 1e6,
        "fraction_of_floor": f.seconds / seconds,
        "fraction_of_memory_floor": f.memory_s / seconds,
        "fraction_of_compute_floor": f.compute_s / seconds,
    }


def measure_ceilings(
    *, copy_bytes: int = 2 << 30, matmul_n: int = 8192, device: str = "cuda"
) -> tuple[Ceilings, dict[str, float]]:
    """Measure the device's copy bandwidth and bf16 and e4m3 matmul rates (CUDA needed).

    Copy: ``dst.copy_(src)`` of `copy_bytes` random bytes, counting bytes read plus written.
    Matmul: ``a @ b`` of random bf16 ``n × n`` matrices, ``2·n³`` FLOPs; the e4m3 one the
    same product through ``torch._scaled_mm`` (per-tensor scales, bf16 out), left None where
    this torch or device has none. Each is the median of timed runs after a warm-up
    (`triton.testing.do_bench`). Returns the ceilings and the raw timings.
    """
    from triton.testing import do_bench

    copy_ms = _time_copy(copy_bytes, device, do_bench)
    mm_ms = _time_matmul(matmul_n, device, do_bench)
    fp8_ms, fp8_note = _time_fp8_matmul(matmul_n, device, do_bench)
    flops = 2 * matmul_n**3
    ceilings = Ceilings(
        copy_bytes_per_s=2 * copy_bytes / (copy_ms * 1e-3),
        matmul_flops_per_s=flops / (mm_ms * 1e-3),
        fp8_matmul_flops_per_s=None if fp8_ms is None else flops / (fp8_ms * 1e-3),
    )
    raw = {"copy_ms": copy_ms, "copy_bytes": copy_bytes, "matmul_ms": mm_ms, "matmul_n": matmul_n}
    raw |= {"fp8_matmul_ms": fp8_ms} if fp8_ms is not None else {"fp8_matmul": fp8_note}
    return ceilings, raw


def _time_copy(copy_bytes: int, device: str, do_bench: Any) -> float:
    import torch

    src = torch.empty(copy_bytes, dtype=torch.uint8, device=device).random_(0, 256)
    dst = torch.empty_like(src)
    return do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")


def _time_matmul(n: int, device: str, do_bench: Any) -> float:
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=gen, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, generator=gen, dtype=torch.bfloat16)
    return do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")


def _time_fp8_matmul(n: int, device: str, do_bench: Any) -> tuple[float | None, str]:
    """(median ms of an e4m3 ``n × n`` matmul, "") or (None, why it could not run)."""
    import torch

    try:
        gen = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(n, n, device=device, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device, generator=gen).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)

        def run() -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        run()
    except Exception as exc:  # no fp8 tensor cores, or a torch without _scaled_mm
        return None, f"not measured: {type(exc).__name__}: {exc}"[:200]
    return do_bench(run, warmup=100, rep=500, return_mode="median"), ""
