"""``--randomization``: Playground's domain randomizer for the task, or one's own
``module:function``, found and checked against the environment's model before anything
is compiled."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["RANDOMIZATIONS", "check_randomizer", "own_randomizer", "randomizer"]

RANDOMIZATIONS = ("none", "playground")
"""The named choices of ``--randomization``: ``playground`` trains on the domain
randomizer Playground's registry provides for the task
(``registry.get_domain_randomizer``); ``module:function`` names one's own."""


def randomizer(name: str, env: str) -> Any:
    """The ``randomization_fn`` of ``--randomization name`` for ``--env env``
    (``None`` for ``none``): Playground's for ``playground``, the user's own for
    ``module:function``.

    Raises:
        ValueError: If Playground provides no domain randomizer for ``env``, or
            ``name`` is no choice, names a module that cannot be imported or a
            function the module does not have.
    """
    if name == "none":
        return None
    if ":" in name:
        return own_randomizer(name)
    if name not in RANDOMIZATIONS:
        raise ValueError(
            f"--randomization {name!r} is neither a choice ({', '.join(RANDOMIZATIONS)}) nor "
            "MODULE:FUNCTION (one's own randomizer, e.g. my_randomizers:heavier_pole)"
        )
    try:
        from mujoco_playground import registry
    except ImportError:
        registry = None
    known = registry is not None and env in registry.ALL_ENVS
    randomizer = registry.get_domain_randomizer(env) if known else None
    if randomizer is None:
        where = "a Playground env" if known else "not a Playground env"
        raise ValueError(
            f"--randomization {name}: MuJoCo Playground provides no domain randomizer for "
            f"--env {env} ({where}; its registry has them for some locomotion and "
            "manipulation tasks); leave --randomization out"
        )
    return randomizer


def own_randomizer(spec: str) -> Any:
    """``--randomization module:function``: the function, imported (the current folder
    first, as ``python -m`` would).

    Raises:
        ValueError: Naming the option, its value, why and the fix.
    """
    import importlib
    import os

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"--randomization {spec!r} must be MODULE:FUNCTION, e.g. "
            "my_randomizers:heavier_pole (a function in my_randomizers.py)"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"--randomization {spec}: cannot import {module_name!r} ({error}); run from the "
            f"folder holding {module_name.replace('.', '/')}.py, or install its package"
        ) from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(
            f"--randomization {spec}: {module_name} has no function {attr!r}; give the name "
            "of a function (model, rng) -> (batched_model, in_axes)"
        )
    return function


def check_randomizer(spec: str, function: Any, env: Any, n_envs: int) -> None:
    """Trace ``--randomization``'s function on the training env's model (nothing is
    compiled or run), so a mismatch is a one-line error before any training.

    Raises:
        ValueError: Naming the option, its value and what does not fit.
    """
    from nnx_ppo.algorithms.core.randomization import make_randomization

    try:
        make_randomization(env, function, n_envs, env_name="--env")
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as error:
        # The trainer's note on what to check; not JAX's on its filtered traceback.
        notes = " ".join(n for n in getattr(error, "__notes__", []) if n.startswith("("))
        text = f"{type(error).__name__}: {error}" if not isinstance(error, ValueError) else error
        raise ValueError(
            f"--randomization {spec} does not fit --env's model: {text}"
            + (f" {notes}" if notes else "")
        ) from None
