"""Timing: CUDA-graph replays with L2 flushed before each, the median reported.

Each implementation is captured in a CUDA graph (eager if capture fails) and replayed; L2 is
flushed before every timed replay by reading a 256 MiB buffer (a read leaves no dirty lines
whose write-back would land in the timed call); the median of ≥ 5 replays after a warm-up is
reported.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

FLUSH_BYTES = 256 << 20


class Timer:
    """CUDA-graph replay timing with an L2 flush (a 256 MiB read) before every timed replay."""

    def __init__(self, *, budget_ms: float, min_reps: int = 5, max_reps: int = 100) -> None:
        import torch

        self.flush = torch.ones(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        self.budget_ms = budget_ms
        self.min_reps = min_reps
        self.max_reps = max_reps

    def __call__(self, fn: Callable[[], Any]) -> dict[str, Any]:
        """Median microseconds of `fn` (graph-captured when possible) and how it was timed."""
        import torch

        fn()  # warm-up: compilation, autotuning, allocator
        torch.cuda.synchronize()
        graph = None
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            graph.replay()
            torch.cuda.synchronize()
        except Exception:  # capture is an optimisation: fall back to eager launches
            graph = None
            torch.cuda.synchronize()
        run = graph.replay if graph is not None else fn
        times = self._times(run, 3)
        est = max(statistics.median(times), 1e-3)
        reps = int(min(self.max_reps, max(self.min_reps, self.budget_ms / est)))
        times = self._times(run, reps)
        return {
            "us": statistics.median(times) * 1e3,
            "min_us": min(times) * 1e3,
            "reps": reps,
            "graph": graph is not None,
        }

    def _times(self, run: Callable[[], Any], reps: int) -> list[float]:
        import torch

        events = [flushed_run(self.flush, run) for _ in range(reps)]
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]


def flushed_run(flush: Any, run: Callable[[], Any]) -> tuple[Any, Any]:
    """Evict L2 by reading `flush` (no dirty lines left behind), then `run` between two
    recorded CUDA events; the caller synchronizes before reading their elapsed time."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.sum()
    start.record()
    run()
    end.record()
    return start, end
