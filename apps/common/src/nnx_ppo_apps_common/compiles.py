"""The programs a run compiles: how many, which, how long, how many came from the cache.

`CompileLog` listens to JAX's own monitoring events while it is active: every XLA
program that is compiled or loaded from the persistent compilation cache
(``/jax/core/compile/backend_compile_duration``, with the jitted function's name) and
every load from the cache (``/jax/compilation_cache/cache_hits``). The apps print its
`CompileLog.note` at the end of a run and keep its `CompileLog.summary` with the run's
results, so a slow start can be read off: the training step, the evaluation, the
network's and the environment's set-up and the small eager operations each count as
programs.

Examples:
    >>> import jax, jax.numpy as jnp
    >>> with CompileLog() as log:
    ...     _ = jax.jit(lambda x: x * 2.0 + 1.0)(jnp.arange(3.0))
    >>> log.summary()["programs"] >= 1, "jit(<lambda>)" in log.summary()["names"]
    (True, True)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["CompileLog"]

_COMPILED = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_BEFORE = {  # the stages before XLA's: tracing to a jaxpr, lowering it to StableHLO
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
}


_ACTIVE: set[CompileLog] = set()
_LISTENING = False


def _listen() -> None:
    """Register this module's two JAX listeners, once per process: they hand every
    event to the active logs (JAX's floor, 0.7.1, has no public way to unregister a
    listener, so the logs come and go, not the listeners)."""
    global _LISTENING
    if _LISTENING:
        return
    import jax

    def on_duration(event: str, duration: float, **kwargs: Any) -> None:
        for log in tuple(_ACTIVE):
            log._on_duration(event, duration, **kwargs)

    def on_event(event: str, **kwargs: Any) -> None:
        for log in tuple(_ACTIVE):
            log._on_event(event, **kwargs)

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    _LISTENING = True


class CompileLog:
    """Counts and names the XLA programs compiled (or loaded from the persistent cache)
    while active, as a context manager or between `start` and `stop`."""

    def __init__(self) -> None:
        self.programs: list[tuple[str, float]] = []
        """``(function name, seconds)`` of each program, in order (a cache load's
        seconds are the load's)."""
        self.cache_hits = 0
        """How many of `programs` were loaded from the persistent cache."""
        self.loaded: list[str] = []
        """The names of the programs loaded from the persistent cache, in order."""
        self.before_seconds = {"trace": 0.0, "lower": 0.0}
        """Seconds spent tracing functions to jaxprs and lowering them to StableHLO
        (before XLA; not saved by the cache)."""
        self._hit = False

    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == _COMPILED:  # ends after the cache hit of the same program, if any
            name = str(kwargs.get("fun_name", "?"))
            self.programs.append((name, float(duration)))
            if self._hit:
                self.loaded.append(name)
            self._hit = False
        elif event in _BEFORE:
            self.before_seconds[_BEFORE[event]] += float(duration)

    def _on_event(self, event: str, **_: Any) -> None:
        if event == _CACHE_HIT:
            self.cache_hits += 1
            self._hit = True

    def start(self) -> CompileLog:
        """Start listening (idempotent); returns ``self``."""
        _listen()
        _ACTIVE.add(self)
        return self

    def stop(self) -> CompileLog:
        """Stop listening (idempotent); returns ``self``."""
        _ACTIVE.discard(self)
        return self

    def __enter__(self) -> CompileLog:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """``programs`` (count), ``seconds`` (XLA's compilation or the cache's load,
        in total), ``from_cache`` (how many were loaded from the persistent cache),
        ``names`` (function name -> count, the most frequent first),
        ``seconds_by_name`` (function name -> seconds, the slowest first), ``loaded``
        (the names loaded from the cache -> count), and ``trace_seconds`` and
        ``lower_seconds`` (tracing and lowering, which the cache does not save; a
        jitted function called inside another is counted in both).

        Examples:
            >>> log = CompileLog()
            >>> log.programs = [("jit(copy)", 0.25), ("jit(step)", 2.0), ("jit(copy)", 0.5)]
            >>> log.summary()  # doctest: +NORMALIZE_WHITESPACE
            {'programs': 3, 'seconds': 2.75, 'from_cache': 0,
             'names': {'jit(copy)': 2, 'jit(step)': 1},
             'seconds_by_name': {'jit(step)': 2.0, 'jit(copy)': 0.75}, 'loaded': {},
             'trace_seconds': 0.0, 'lower_seconds': 0.0}
        """
        names = Counter(name for name, _ in self.programs)
        seconds: Counter[str] = Counter()
        for name, duration in self.programs:
            seconds[name] += duration
        return {
            "programs": len(self.programs),
            "seconds": round(sum(s for _, s in self.programs), 3),
            "from_cache": self.cache_hits,
            "names": dict(names.most_common()),
            "seconds_by_name": {k: round(v, 3) for k, v in seconds.most_common()},
            "loaded": dict(Counter(self.loaded).most_common()),
            "trace_seconds": round(self.before_seconds["trace"], 3),
            "lower_seconds": round(self.before_seconds["lower"], 3),
        }

    def note(self, cache_dir: Path | None) -> str:
        """One line for the end of a run, e.g. ``Compiled 70 programs in 154.2 s (62
        loaded from the compilation cache in ~/.cache/nnx-ppo/jax)``; ``cache_dir`` is
        the cache's folder, ``None`` when it is off.

        Examples:
            >>> log = CompileLog()
            >>> log.programs, log.cache_hits = [("step", 2.0), ("eval", 0.5)], 1
            >>> log.note(Path("/tmp/cache"))
            'Compiled 2 programs in 2.5 s (1 loaded from the compilation cache in /tmp/cache)'
            >>> log.note(None)
            'Compiled 2 programs in 2.5 s (compilation cache off)'
        """
        done = f"Compiled {len(self.programs)} programs in {sum(s for _, s in self.programs):.1f} s"
        if cache_dir is None:
            return f"{done} (compilation cache off)"
        return f"{done} ({self.cache_hits} loaded from the compilation cache in {cache_dir})"
