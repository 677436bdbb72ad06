"""Per-task training presets (``--preset``): MuJoCo Playground's own tuned brax-PPO
settings for its DeepMind Control Suite tasks, translated to the quickstart's options.

A preset supplies defaults: an option given explicitly (command line, ``--config``,
the run's record on ``--resume``) wins. ``--preset auto`` (the default) picks the
preset named like ``--env``, else ``quickstart`` (the quickstart's own defaults, which
every brax env uses).

The translation of Playground's `brax_ppo_config` fields (read from
``mujoco_playground.config.dm_control_suite_params`` at run time, never copied):

| Playground (brax PPO) | quickstart option | how |
|---|---|---|
| ``num_envs`` | ``--n-envs`` | the same |
| ``unroll_length`` | ``--rollout-length`` | the same |
| ``batch_size``, ``num_minibatches`` | ``--n-minibatches`` | ``num_envs // batch_size`` |
| ``num_updates_per_batch`` | ``--n-epochs`` | the same (4 for a recurrent ``--network``) |
| ``learning_rate`` | ``--learning-rate`` | the same |
| ``entropy_cost`` | ``--entropy-cost`` | the sampler's entropy weight |
| ``discounting`` | ``--discount`` | the same |
| ``reward_scaling`` | ``--reward-scaling`` | the same |
| ``episode_length`` | ``--episode-length`` | the same |
| ``action_repeat`` | ``--action-repeat`` | the same |
| ``clipping_epsilon`` | ``--clip-range`` | brax's default when Playground sets none |
| ``normalize_observations`` | (always on) | the presets' networks normalise |
| network sizes | ``--network mlp`` | brax's defaults, 32x4 policy and 256x5 value |
| auto-reset (cached first states) | ``--reset cached`` | set by ``parse_args`` for every preset |
| ``num_timesteps`` | (not taken) | 60-100 M steps; pass ``--steps`` |

Brax PPO collects ``batch_size * num_minibatches`` sequences of ``unroll_length`` per
update (``batch_size * num_minibatches / num_envs`` rollouts per environment) and cuts
them into ``num_minibatches`` minibatches of ``batch_size`` sequences. The quickstart
collects one rollout per environment per iteration and cuts it into ``--n-minibatches``
minibatches of whole sequences; with ``num_envs // batch_size`` minibatches each holds
``batch_size`` sequences, as in brax, and the gradient steps per environment step
(``n_epochs * n_minibatches / (n_envs * rollout_length)``) are brax's too.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = [
    "NETWORK_SIZES",
    "QUICKSTART",
    "RECURRENT_N_EPOCHS",
    "preset_names",
    "preset_options",
    "resolve_preset",
]

QUICKSTART = "quickstart"
"""The preset of the quickstart's own defaults (brax envs, and any env without a tuned
preset)."""

NETWORK_SIZES = {"policy": (32,) * 4, "value": (256,) * 5}
"""The hidden sizes ``--network mlp`` builds: brax's ``make_ppo_networks`` defaults,
which Playground's DeepMind Control Suite presets use (they name no network)."""


RECURRENT_N_EPOCHS = 4
"""``--n-epochs`` of a Playground preset with ``--network lstm``, ``gru`` or ``graph``, in
place of Playground's ``num_updates_per_batch`` (16 on every dm_control task), which was tuned for
its MLP. Measured with staggered episode starts (the quickstart's), 5 seeds per cell, at
each task's preset otherwise: on ``CheetahRun`` (TPU, 2M steps) the LSTM ended at a
median return of 742 with 4 epochs against 393 with 16 (every seed higher), the
recommended graph at 638 against 417 (less clearly: p = 0.55), the MLP at 876 with 16 and
829 with 4; on ``CartpoleBalance`` with the velocities masked (CPU, 1M steps) at 749 against
290, the recommended graph at 464 against 310 (less clearly: p = 0.15), the MLP at 587.
With 16 epochs each update moved the LSTM's policy about four times as far as the MLP's
(``actor/approx_kl``). See 'Stateful families' on the benchmarks page. The GRU preset
(the LSTM's network with a GRU cell) takes the LSTM's setting; it was not measured apart."""


def _suite() -> Any:
    from mujoco_playground._src import dm_control_suite

    return dm_control_suite


def preset_names() -> tuple[str, ...]:
    """``quickstart`` and Playground's DeepMind Control Suite task names (empty of the
    latter when Playground is not installed)."""
    try:
        tasks = tuple(_suite().ALL_ENVS)
    except ImportError:
        tasks = ()
    return (QUICKSTART, *tasks)


def resolve_preset(name: str, env: str) -> str:
    """The preset ``--preset name`` means for ``--env env``: ``auto`` is the preset
    named ``env`` if there is one, else ``quickstart``.

    Raises:
        ValueError: For a name that is no preset (the message lists them).

    Examples:
        >>> resolve_preset("auto", "CheetahRun"), resolve_preset("auto", "ant")
        ('CheetahRun', 'quickstart')
    """
    names = preset_names()
    if name == "auto":
        return env if env in names else QUICKSTART
    if name not in names:
        raise ValueError(f"unknown --preset {name!r}; valid choices: auto, {', '.join(names)}")
    return name


def preset_options(name: str, network: str = "mlp") -> dict[str, Any]:
    """The option values (by ``dest``) of the preset ``name`` (see the module's table)
    for ``--network network``; ``{}`` for ``quickstart``.

    Raises:
        ValueError: For an unknown preset, or a Playground setting the quickstart cannot
            follow (observations not normalised, ``num_envs`` not a multiple of
            ``batch_size``).
    """
    if name == QUICKSTART:
        return {}
    if name not in preset_names():
        raise ValueError(f"unknown --preset {name!r}; valid choices: {', '.join(preset_names())}")
    from brax.training.agents.ppo import train as brax_ppo
    from mujoco_playground.config import dm_control_suite_params

    tuned = dm_control_suite_params.brax_ppo_config(name)
    brax_defaults = {
        key: value.default for key, value in inspect.signature(brax_ppo.train).parameters.items()
    }
    if not tuned.normalize_observations:
        raise ValueError(
            f"--preset {name}: Playground trains it without observation normalisation, "
            "which the quickstart's networks always do; use --preset quickstart"
        )
    if tuned.num_envs % tuned.batch_size:
        raise ValueError(
            f"--preset {name}: Playground's num_envs {tuned.num_envs} is not a multiple of "
            f"its batch_size {tuned.batch_size}; use --preset quickstart"
        )
    clip = tuned.get("clipping_epsilon", brax_defaults["clipping_epsilon"])
    return {
        "n_envs": int(tuned.num_envs),
        "rollout_length": int(tuned.unroll_length),
        "n_minibatches": int(tuned.num_envs // tuned.batch_size),
        "n_epochs": int(tuned.num_updates_per_batch) if network == "mlp" else RECURRENT_N_EPOCHS,
        "learning_rate": float(tuned.learning_rate),
        "entropy_cost": float(tuned.entropy_cost),
        "discount": float(tuned.discounting),
        "reward_scaling": float(tuned.reward_scaling),
        "episode_length": int(tuned.episode_length),
        "action_repeat": int(tuned.action_repeat),
        "clip_range": float(clip),
    }
