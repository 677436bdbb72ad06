"""Dead-code analysis and pruned evaluation of a traced policy step (private).

The exported step must contain only what the requested outputs need: the value head
(and a value head's own recurrent carry) when no value is asked for, the log-likelihood
of the action, the noise keys a variational layer still advances in ``eval()`` mode.
XLA removes such dead code by itself, an ONNX converter does not have to, and a dead
computation may use an operation the converter cannot express. So the step is traced
to a jaxpr, the equations that no requested output depends on are dropped, and only the
rest is evaluated again (under the exporter's own trace).

The dependency analysis treats a nested jaxpr (``jit``, ``custom_jvp_call``, ...) as one
operation: all its inputs count as used when any of its outputs is used. The evaluation
inlines the nested jaxprs of ``jit`` and of custom-derivative calls (an exported step is
never differentiated, so only the primal computation is kept), which lets the pruning
reach inside them and lets integer ``rem`` be rewritten (``_int_rem``) wherever it occurs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.extend import core as jex_core

__all__: list[str] = []


def _is_var(atom: Any) -> bool:
    return not isinstance(atom, jex_core.Literal)


def needed_inputs(closed: Any, used_outputs: Sequence[bool]) -> list[bool]:
    """Which inputs of ``closed`` (a `ClosedJaxpr`) the used outputs depend on."""
    jaxpr = closed.jaxpr
    needed = {v for v, used in zip(jaxpr.outvars, used_outputs, strict=True) if used and _is_var(v)}
    for eqn in reversed(jaxpr.eqns):
        if any(v in needed for v in eqn.outvars):
            needed.update(v for v in eqn.invars if _is_var(v))
    return [v in needed for v in jaxpr.invars]


def _live_equations(jaxpr: Any, used_outputs: Sequence[bool]) -> list[Any]:
    needed = {v for v, used in zip(jaxpr.outvars, used_outputs, strict=True) if used and _is_var(v)}
    live = []
    for eqn in reversed(jaxpr.eqns):
        if any(v in needed for v in eqn.outvars):
            live.append(eqn)
            needed.update(v for v in eqn.invars if _is_var(v))
    live.reverse()
    return live


# Primitives whose nested jaxpr is evaluated in place, and the parameter holding it.
_INLINED = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


def _int_rem(x: Any, y: Any) -> Any:
    """``lax.rem`` of integers as ``x - trunc(x / y) * y`` (the same C semantics).

    jax2onnx 0.17.1 cannot lower ``rem`` when the batch dimension is symbolic (it fails
    with ``InconclusiveDimensionOperation``); its ``div``, ``mul`` and ``sub`` work. The
    population graph advances its circular-buffer positions with ``%``.
    """
    return lax.sub(x, lax.mul(lax.div(x, y), y))


def _bind(eqn: Any, invals: Sequence[Any]) -> Any:
    """Bind ``eqn``'s primitive again, as `jax.core.eval_jaxpr` does."""
    params = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(params, tuple):  # jax < 0.8: (subfuns, params)
        subfuns, params = params
        return eqn.primitive.bind(*subfuns, *invals, **params)
    return eqn.primitive.bind(*invals, **params)


def eval_pruned(
    closed: Any, used_outputs: Sequence[bool], args: Sequence[Any], *, rewrite_rem: bool = False
) -> list[Any]:
    """Evaluate only the equations of ``closed`` that the used outputs need.

    Args:
        closed: A `ClosedJaxpr` (from `jax.make_jaxpr`).
        used_outputs: One bool per output of ``closed``.
        args: The inputs (arrays or tracers of the exporter's trace).
        rewrite_rem: Evaluate integer ``rem`` as `_int_rem` (for the ONNX converter).

    Returns:
        The used outputs, in order.
    """
    jaxpr = closed.jaxpr
    env: dict[Any, Any] = {}

    def read(atom: Any) -> Any:
        return atom.val if isinstance(atom, jex_core.Literal) else env[atom]

    for var, value in zip(jaxpr.constvars, closed.consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for eqn in _live_equations(jaxpr, used_outputs):
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        inner = eqn.params.get(_INLINED.get(name, ""))
        if inner is not None and hasattr(inner, "consts"):
            n_in = len(inner.jaxpr.invars)
            used = [True] * len(inner.jaxpr.outvars)
            outs = eval_pruned(inner, used, invals[-n_in:], rewrite_rem=rewrite_rem)
        elif (
            name == "rem"
            and rewrite_rem
            and np.issubdtype(np.dtype(eqn.outvars[0].aval.dtype), np.integer)
        ):
            outs = [_int_rem(*invals)]
        else:
            out = _bind(eqn, invals)
            outs = out if eqn.primitive.multiple_results else [out]
        for var, value in zip(eqn.outvars, outs, strict=True):
            env[var] = value
    return [read(v) for v, used in zip(jaxpr.outvars, used_outputs, strict=True) if used]


def pruned(
    fn: Callable[..., Sequence[Any]], used_outputs: Sequence[bool], *, rewrite_rem: bool = False
) -> Callable[..., Any]:
    """``fn`` (flat arrays in, a flat sequence out) restricted to the used outputs,
    with the computations only the other outputs need removed."""

    def run(*args: Any) -> tuple[Any, ...]:
        closed = jax.make_jaxpr(lambda *a: tuple(fn(*a)))(*args)
        return tuple(eval_pruned(closed, used_outputs, args, rewrite_rem=rewrite_rem))

    return run


def _site(eqn: Any) -> str:
    """``file:line (function)`` of the user code that emitted ``eqn``, if known."""
    try:
        from jax._src import source_info_util

        return str(source_info_util.summarize(eqn.source_info))
    except Exception:  # private API; the location is a courtesy
        return "an unknown location"


def primitive_sites(fn: Callable[..., Any], avals: Sequence[Any]) -> dict[str, str]:
    """Every primitive ``fn`` uses (nested jaxprs included), with where it was emitted."""
    sites: dict[str, str] = {}

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            sites.setdefault(eqn.primitive.name, _site(eqn))
            for param in eqn.params.values():
                for sub in param if isinstance(param, list | tuple) else [param]:
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*avals).jaxpr)
    return sites


HOST_CALLBACKS = ("pure_callback", "io_callback", "debug_callback", "callback")
"""Primitives that call back into Python: no artefact can contain them."""


def describe_failure(sites: dict[str, str], error: BaseException) -> str:
    """The primitives named in ``error``'s message with their source, else all of them.

    Args:
        sites: `primitive_sites` of the function that failed (traced unpruned, so the
            locations are the modules' own lines).
        error: The converter's exception.
    """
    message = str(error)
    named = [p for p in sites if f"'{p}'" in message or f"`{p}`" in message]
    if named:
        return "; ".join(f"operation {p!r} at {sites[p]}" for p in named)
    return "operations [" + ", ".join(sites) + "]"
