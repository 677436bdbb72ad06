"""Several seeds of one benchmark cell: trained together, each evaluated the same way.

`train_seeds` trains the seeds as one `train_many` program and times it; `final_return`
is every benchmark's final evaluation of one trained policy, on fresh episodes whose
keys are drawn from ``seed + 10_000`` (never the training keys). Both import the trainer
when called, so importing this module costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["final_return", "train_seeds"]


def train_seeds(
    env: Any, make_network: Callable[..., Any], config: Any, seeds: Sequence[int], **options: Any
) -> tuple[Any, float]:
    """Train ``seeds`` as one `train_many` program (no progress bar).

    Args:
        env: The training environment.
        make_network: ``make_network(rngs)``, called once per seed.
        config: The `TrainConfig` (its seed is replaced by each run's).
        seeds: One run per seed.
        **options: Passed on to `train_many` (``eval_env``, ``overrides``, ...).

    Returns:
        ``(result, seconds)``: the `train_many` result and its wall time, compilation
        included.
    """
    from nnx_ppo.algorithms.sweeps.many import train_many

    start = time.perf_counter()
    result = train_many(env, make_network, config, seeds=list(seeds), progress=False, **options)
    return result, time.perf_counter() - start


def final_return(
    env: Any, network: Any, seed: int, *, n_envs: int, max_episode_length: int, **options: Any
) -> float:
    """Mean return of ``network`` over ``n_envs`` fresh episodes of ``env`` (`evaluate`,
    deterministic unless ``options`` say otherwise), keyed by ``seed + 10_000``."""
    import jax

    from nnx_ppo.algorithms.observe.evaluation import evaluate

    key = jax.random.PRNGKey(seed + 10_000)
    metrics = evaluate(
        env, network, key, n_envs=n_envs, max_episode_length=max_episode_length, **options
    )
    return metrics["eval/episode_reward/mean"]
