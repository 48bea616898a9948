"""Kernel and planner benchmarks of the MLA Conformance Suite (``nox -s bench``)."""
