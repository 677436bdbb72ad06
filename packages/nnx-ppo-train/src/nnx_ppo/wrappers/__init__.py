"""Environment wrappers: episode truncation and reward scaling."""

__all__: list[str] = []
