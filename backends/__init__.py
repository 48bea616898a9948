"""Backends behind one `Backend` interface, found by name through `backends.registry`."""
