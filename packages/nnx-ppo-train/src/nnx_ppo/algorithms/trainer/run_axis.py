"""What a leading run axis changes in a run (`run(..., runs=Runs(...))`, the engine of
`nnx_ppo.algorithms.sweeps.many`): the initial state (every run's own variables, keys,
models and optimizer, vmapped) and the iteration (vmapped, the swept values as ``[K]``
inputs that run ``i``'s config holds, `OnPolicyRun.with_values`). The layout on a mesh
and the resume are the single run's with the batch axis at 1
(`state_shardings`, `restore_checkpoint`); the evaluations and videos are built by
`nnx_ppo.algorithms.trainer.tasks` for one run or ``K``.

Run ``i`` of ``K`` is the run its own trainer call would train with ``seeds[i]``, the
``i``-th network and the ``i``-th values of the swept fields: the same keys split from
the same seed, the same models drawn from them, the same updates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from nnx_ppo.algorithms.core.phases import OnPolicyConfig, with_redraws
from nnx_ppo.algorithms.core.randomization import Randomization
from nnx_ppo.algorithms.core.schedules import Optimization, optimization
from nnx_ppo.algorithms.trainer.initial_state import init_state

__all__ = [
    "Runs",
    "init_runs",
    "run_keys",
    "runs_iteration",
]


@dataclasses.dataclass(frozen=True)
class Runs:
    """The ``K`` runs of one program, as `run` takes them.

    Attributes:
        seeds: Each run's seed (its keys are split from it as a single run's are).
        params: Every run's initial parameters, stacked (leading ``[K]`` axis).
        network_states: Every run's initial network state, stacked.
        values: ``{field: float32 [K]}``: the swept config values, inputs of the
            program (`sweep_fields`); run ``i``'s config holds the ``i``-th.
    """

    seeds: tuple[int, ...]
    params: Any
    network_states: Any
    values: Mapping[str, jax.Array]

    @property
    def count(self) -> int:
        """``K``."""
        return len(self.seeds)


def run_keys(seeds: tuple[int, ...], n: int) -> list[jax.Array]:
    """The ``n`` keys a single run splits from its seed, for every run: ``n`` arrays of
    ``[K, 2]``."""
    keys = jnp.stack([jax.random.split(jax.random.PRNGKey(seed), n) for seed in seeds])
    return [keys[:, i] for i in range(n)]


def init_runs(
    env: Any,
    graphdef: nnx.GraphDef,
    runs: Runs,
    config: OnPolicyConfig,
    keys: jax.Array,
    *,
    state_type: type,
    randomization: Randomization | None,
    fields: Mapping[str, Any],
) -> Any:
    """Every run's initial state (`init_state`, vmapped), stacked along a leading axis.

    Each run's first models are drawn from its key as its own run draws them, here
    rather than in the vmapped program: the draw checks the randomizer eagerly.
    """
    models = None
    if randomization is not None:
        models = jax.tree.map(lambda *xs: jnp.stack(xs), *map(randomization.initial, keys))

    def init_one(params: Any, network_state: Any, key: jax.Array, values: Any, models: Any) -> Any:
        network = nnx.merge(graphdef, params, network_state)
        _, state = init_state(
            env, network, optimization(config.with_values(values)).optimizer, key,
            n_envs=config.n_envs, reset_mode=config.reset_mode, models=models,
            state_type=state_type, **fields,
        )  # fmt: skip
        return state

    return jax.jit(jax.vmap(init_one))(
        runs.params, runs.network_states, keys, dict(runs.values), models
    )


def runs_iteration(
    iteration_of: Callable[[Any, Optimization], Callable[..., tuple[Any, Any]]],
    config: OnPolicyConfig,
    env: Any,
    randomization: Randomization | None,
    mesh: Mesh | None,
    n_args: int,
) -> Callable[..., tuple[Any, Any]]:
    """The iteration of every run at once: ``(state, values, *args)``, vmapped over the
    state's run axis and the ``[K]`` values of the swept fields (``args``, e.g. a
    teacher's variables, shared). ``iteration_of(run_config, optimization)`` is one
    run's iteration: run ``i``'s config holds its own values
    (`OnPolicyRun.with_values`), and its optimizer and learning-rate rule are built from
    it (`optimization`)."""

    def one(state: Any, values: Any, *args: Any) -> tuple[Any, Any]:
        run_config = config.with_values(values)
        body = iteration_of(run_config, optimization(run_config))
        return with_redraws(body, env, randomization, config.reset_mode, mesh)(state, *args)

    return jax.vmap(one, in_axes=(0, 0, *[None] * n_args))
