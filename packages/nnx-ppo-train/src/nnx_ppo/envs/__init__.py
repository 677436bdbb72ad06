"""Tiny pure-JAX environments for tests, docs and smoke runs."""

__all__: list[str] = []
