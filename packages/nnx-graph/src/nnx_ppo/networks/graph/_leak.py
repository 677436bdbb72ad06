"""Leaky populations: their time constants and update (package-internal).

A population declared with ``tau=`` follows

    a_t = a_{t-1} + (dt / tau) * (f(input_t) - a_{t-1}),    a_{-1} = 0,

where ``f(input_t)`` is what a non-leaky population would output and ``dt`` is the
graph's step. A fixed ``tau`` is a Python float (no parameter); a learned one is
``tau = dt + softplus(raw)`` with ``raw`` an ``nnx.Param`` ``[size]``, so that
``dt / tau`` stays in ``(0, 1)`` whatever the optimizer does.

A leaky population declared with ``sigma_rec > 0`` adds recurrent noise after the leak,

    a_t <- a_t + sqrt(2 dt / tau) * sigma_rec * N(0, 1)

(Song, Yang & Wang 2016's scaling, see `nnx_ppo.networks.recurrent_noise`), drawn
from the graph's per-environment key in the carry (``"noise_key"``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.networks import recurrent_noise
from nnx_ppo.networks.graph.topology import ExecutionPlan, Population

__all__ = [
    "NOISE_KEY",
    "add_noise",
    "check_dt",
    "check_noise",
    "check_time_constant",
    "draw_noise",
    "initial_raw_tau",
    "leak_factors",
    "mix",
    "noisy_populations",
    "time_constant",
]


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_dt(value: Any) -> float:
    """Validate the graph's step ``dt`` (a positive, finite number)."""
    if not _is_real(value) or not math.isfinite(value) or value <= 0:
        raise (ValueError if _is_real(value) else TypeError)(
            f"PopulationGraph: dt must be a positive number (the duration of one step, in "
            f"the units of the populations' tau), got {value!r}; e.g. dt=0.02 for a 50 Hz "
            "control loop, or the default dt=1.0 to count tau in steps."
        )
    return float(value)


def check_time_constant(
    call: str, tau: Any, learn_tau: Any, dt: float
) -> tuple[float | None, bool]:
    """Validate a population's ``tau`` and ``learn_tau`` against the graph's ``dt``.

    Returns:
        ``(tau, learn_tau)``: ``tau`` as a float (or ``None``: non-leaky).

    Raises:
        TypeError: If ``tau`` is not a number or ``None``, or ``learn_tau`` not a bool.
        ValueError: If ``tau`` is not positive and finite, the leak factor ``dt / tau``
            is above 1, or ``learn_tau=True`` comes without ``tau > dt``.
    """
    if not isinstance(learn_tau, bool):
        raise TypeError(f"{call}: learn_tau must be a bool, got {learn_tau!r}.")
    if tau is None:
        if learn_tau:
            raise ValueError(
                f"{call}: learn_tau=True needs the initial time constant; pass e.g. "
                f"tau={10 * dt:g} (the graph's dt is {dt:g})."
            )
        return None, False
    fix = (
        f"pass a time constant in the units of the graph's dt={dt:g}, e.g. tau={10 * dt:g}, "
        "or tau=None for a population without leak"
    )
    if not _is_real(tau):
        raise TypeError(
            f"{call}: tau must be a positive number or None, got {tau!r} of type "
            f"{type(tau).__name__}; {fix}."
        )
    if not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"{call}: tau must be a positive, finite number, got {tau!r}; {fix}.")
    tau = float(tau)
    if dt / tau > 1:
        raise ValueError(
            f"{call}: tau={tau:g} is shorter than the graph's step dt={dt:g}, so the leak "
            f"factor dt/tau = {dt / tau:.3g} is outside (0, 1]: each step would overshoot "
            f"the input. Use tau >= {dt:g} (tau=dt is the non-leaky update), or build the "
            "graph with a smaller step, PopulationGraph(rngs, dt=...)."
        )
    if learn_tau and tau == dt:
        raise ValueError(
            f"{call}: learn_tau=True needs tau > dt, got tau = dt = {dt:g}: a learned "
            "time constant is dt + softplus(parameter) > dt, and tau = dt would start the "
            f"parameter at -inf. Start above it, e.g. tau={2 * dt:g}, or keep tau={dt:g} "
            "fixed (learn_tau=False)."
        )
    return tau, learn_tau


NOISE_KEY = "noise_key"
"""The carry entry of a noisy graph's per-environment PRNG keys."""


def check_noise(call: str, sigma_rec: Any, tau: float | None) -> float:
    """Validate a population's ``sigma_rec``: a number >= 0, positive only if leaky."""
    sigma = recurrent_noise.check_sigma_rec(call, sigma_rec)
    if sigma > 0 and tau is None:
        raise ValueError(
            f"{call}: sigma_rec={sigma:g} needs a leaky population, because the noise "
            "is scaled by its time constant (sqrt(2 dt / tau) * sigma_rec per step); pass "
            "tau= as well (tau equal to the graph's dt is the non-leaky update)."
        )
    return sigma


def noisy_populations(plan: ExecutionPlan) -> tuple[Population, ...]:
    """The populations with recurrent noise, in execution order."""
    return tuple(p for p in plan.order if p.sigma_rec > 0)


def draw_noise(
    plan: ExecutionPlan, state: Any, deterministic: bool
) -> tuple[dict[str, jax.Array] | None, jax.Array | None]:
    """One step's standard-normal draws ``{population: [B, size]}`` of the noisy
    populations and the keys to carry (``(None, None)`` for a noise-free graph; no
    draws and the keys unchanged when ``deterministic``)."""
    noisy = noisy_populations(plan)
    if not noisy:
        return None, None
    keys = state[NOISE_KEY]
    if deterministic:
        return None, keys
    width = sum(p.size for p in noisy)
    keys, xi = recurrent_noise.split_keys(keys, (width,))
    draws, start = {}, 0
    for p in noisy:
        draws[p.name] = xi[:, start : start + p.size]
        start += p.size
    return draws, keys


def initial_raw_tau(tau: float, dt: float, size: int) -> jax.Array:
    """The parameter ``raw`` (float32 ``[size]``) with ``dt + softplus(raw) = tau > dt``:
    ``log(expm1(tau - dt))``, computed as ``y + log(-expm1(-y))`` (``y = tau - dt``) so
    that a large ``y`` does not overflow."""
    y = tau - dt
    return jnp.full((size,), y + math.log(-math.expm1(-y)), jnp.float32)


def time_constant(pop: Population, dt: float, raw_tau: Mapping[str, Any]) -> Any:
    """``tau`` of a leaky population: ``pop.tau`` (a float) if fixed, else
    ``dt + softplus(raw_tau[pop.name])`` (``[size]``, differentiable in the parameter)."""
    if pop.learn_tau:
        return dt + jax.nn.softplus(raw_tau[pop.name][...])
    return pop.tau


def leak_factors(plan: ExecutionPlan, dt: float, raw_tau: Mapping[str, Any]) -> dict[str, Any]:
    """``{population: dt / tau}`` for the leaky populations of ``plan`` (a Python float
    for a fixed ``tau``, exactly 1.0 when ``tau == dt``; ``[size]`` for a learned one)."""
    return {
        pop.name: dt / time_constant(pop, dt, raw_tau) for pop in plan.order if pop.tau is not None
    }


def mix(previous: jax.Array, value: jax.Array, alpha: Any) -> jax.Array:
    """The leaky update ``a_t = a_{t-1} + alpha * (value - a_{t-1})``, ``alpha = dt / tau``.

    Written as the convex mix ``(1 - alpha) * a_{t-1} + alpha * value`` so that
    ``alpha == 1`` gives ``value`` exactly (``0 * a_{t-1} + 1 * value``), bit for bit the
    non-leaky population.

    Args:
        previous: ``a_{t-1}``, ``[B, size]``.
        value: ``f(input_t)``, ``[B, size]``.
        alpha: A float, or ``[size]`` for a learned time constant.

    Returns:
        ``a_t``, ``[B, size]``.
    """
    return (1.0 - alpha) * previous + alpha * value


def add_noise(value: jax.Array, pop: Population, alpha: Any, xi: jax.Array) -> jax.Array:
    """``value + sqrt(2 alpha) * sigma_rec * xi`` (``xi`` ``[B, size]``)."""
    return value + recurrent_noise.noise_std(pop.sigma_rec, alpha) * xi
