"""Computations behind the backends: torch reference kernels and plan execution."""
