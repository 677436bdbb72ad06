"""The memory-task demo: which networks can reproduce a cue seen a few steps ago."""

__all__: list[str] = []
