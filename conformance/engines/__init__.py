"""Engine targets: the conformance families run on an engine's own code (vLLM first).

A backend is one decode implementation behind the suite's `Backend` interface; an engine target
drives an engine's *own* metadata record, builders and layer objects in an environment of its
own, and writes what it saw as measured facts (`conformance.engines.facts`).
"""
