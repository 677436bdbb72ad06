"""The benchmarks with published numbers: plain data (no JAX import).

Each `Benchmark` names a gymnax environment, the observation entries it keeps, the
published figure with its source, and the published hyperparameters translated into
`PPOConfig` fields, with every translation that is not one-to-one written down in
``translation`` (the results page prints them).

The rl-baselines3-zoo figures (``*_novel``) are from its ``benchmark.md``: one trained
RecurrentPPO agent (sb3-contrib, ``MlpLstmPolicy``) evaluated over about 150,000 steps,
mean and standard deviation over episodes; its hyperparameters are the zoo's
``hyperparams/ppo_lstm.yml`` (the entries marked "Tuned"). The T-Maze figures are the
task's analytic optimum and memoryless value as POBAX states them, trained with
POBAX's default PPO hyperparameters (``pobax/config.py``, ``PPOHyperparams``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["BENCHMARKS", "CONV_FAMILIES", "FAMILIES", "Benchmark", "Published"]

ZOO_BENCHMARK = "rl-baselines3-zoo, benchmark.md (ppo_lstm rows)"
ZOO_HYPERPARAMS = "rl-baselines3-zoo, hyperparams/ppo_lstm.yml"
POBAX = "POBAX (Tao et al. 2025), pobax/envs/jax/tmaze.py and pobax/config.py"

FAMILIES = ("lstm", "gru", "mlp")
"""``lstm`` and ``gru``: the published recurrent layer (one per port, as sb3-contrib's
``enable_critic_lstm=True``) then the published heads; ``mlp``: the same network with
the recurrent layer replaced by a dense layer of the same width (no memory)."""

CONV_FAMILIES = ("conv_lstm", "conv_mlp")
"""The families of an image benchmark (`Benchmark.image`): one `ConvEncoder` per port,
then, in ``conv_lstm``, an LSTM of ``recurrent_size`` and, in ``conv_mlp``, a dense
layer of the same width in its place (no memory); then the heads."""


@dataclasses.dataclass(frozen=True)
class Published:
    """A published figure.

    Attributes:
        value: The figure (mean return, or the analytic value).
        spread: Its standard deviation over evaluation episodes, if published.
        steps: The training budget it was reached with, if any.
        what: What the figure is, one line.
        source: Where it is published.
    """

    value: float
    spread: float | None
    steps: int | None
    what: str
    source: str


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One published benchmark and its translation.

    Attributes:
        name: Key on the command line and in the results.
        title: The task's published name.
        env: gymnax environment name, or ``"tmaze"`` (`.tmaze.TMaze`).
        keep: Observation entries shown to the policy (``None``: all).
        episode_length: The time limit (gymnax's, which the published task also has).
        total_steps: Training budget in env steps (the published one).
        ppo: `PPOConfig` fields.
        linear_decay: The learning rate decays linearly to 0 over training.
        recurrent_size: Width of the recurrent layer (and of the ``mlp`` family's
            dense layer that replaces it).
        heads: Hidden widths of both heads after it.
        activation: ``"relu"`` or ``"tanh"``.
        entropy_cost: The sampler's entropy weight (the published ``ent_coef``).
        normalize_obs: Observation normalizer first (the zoo's ``normalize``).
        resample_every: Steps each Gaussian exploration draw is held (the
            `NormalTanhSampler` option that stands for gSDE's ``sde_sample_freq``).
        references: The published figures (the first is the one compared with).
        translation: How the published settings became ours, where not one-to-one.
        image: ``(H, W, C)`` of an image observation (the policies start with a
            `ConvEncoder` and the families are `CONV_FAMILIES`); ``None``: a vector.
    """

    name: str
    title: str
    env: str
    keep: tuple[int, ...] | None
    episode_length: int
    total_steps: int
    ppo: dict[str, Any]
    linear_decay: bool
    recurrent_size: int
    heads: tuple[int, ...]
    activation: str
    entropy_cost: float
    normalize_obs: bool
    references: tuple[Published, ...]
    translation: tuple[str, ...] = ()
    resample_every: int = 1
    image: tuple[int, int, int] | None = None

    @property
    def discrete(self) -> bool:
        """Discrete actions (CartPole, the T-Mazes)."""
        return self.env in ("CartPole-v1", "tmaze", "pixel_tmaze")

    @property
    def families(self) -> tuple[str, ...]:
        """The families this benchmark trains: `CONV_FAMILIES` for an image,
        `FAMILIES` for a vector."""
        return CONV_FAMILIES if self.image is not None else FAMILIES


_ZOO_COMMON = (
    "VecNormalize's observation normalisation -> the network's `Normalizer`; its reward "
    "normalisation (returns divided by a running std) -> `normalize_values=True` "
    "(value targets standardised by running statistics), the trainer's nearest option",
    "SB3's defaults kept where the zoo sets nothing: `vf_coef` 0.5 -> "
    "`critic_loss_weight`, `max_grad_norm` 0.5, advantage normalisation per minibatch",
    "one LSTM per port (`enable_critic_lstm=True`), then one hidden layer per head "
    "(`net_arch=dict(pi=[64], vf=[64])`)",
)

_SB3_PPO = {"clip_range": 0.2, "critic_loss_weight": 0.5, "max_grad_norm": 0.5}
"""SB3's PPO defaults (``clip_range``, ``vf_coef``, ``max_grad_norm``) as `PPOConfig`
fields, for the zoo's benchmarks that do not set them."""

_POBAX_REFERENCES = (
    Published(4.0, None, None, "optimal return", POBAX),
    Published(1.95, None, None, "best memoryless return", POBAX),
)
"""The T-Maze's analytic values as POBAX states them."""


def _zoo(*, ppo: dict[str, Any], translation: tuple[str, ...], **fields: Any) -> Benchmark:
    """A benchmark with an rl-baselines3-zoo figure: ``ppo`` (the zoo's settings) with
    SB3's defaults (`_SB3_PPO`) where it sets none, VecNormalize's normalisations, one
    hidden layer of 64 per head and the notes every zoo translation shares
    (`_ZOO_COMMON`) before its own ``translation``."""
    defaults = {name: value for name, value in _SB3_PPO.items() if name not in ppo}
    return Benchmark(
        ppo={**ppo, **defaults, "normalize_values": True},
        heads=(64,),
        normalize_obs=True,
        translation=(*_ZOO_COMMON, *translation),
        **fields,
    )


def _pobax(**fields: Any) -> Benchmark:
    """A T-Maze benchmark with POBAX's settings: the learning rate annealed to 0, ReLU,
    entropy weight 0.01, no observation normalisation, POBAX's figures."""
    return Benchmark(
        linear_decay=True,
        activation="relu",
        entropy_cost=0.01,
        normalize_obs=False,
        references=_POBAX_REFERENCES,
        **fields,
    )


def _sde(sample_freq: int) -> str:
    """The note for gSDE (`use_sde=True`, `sde_sample_freq`)."""
    return (
        f"gSDE (`use_sde=True`, `sde_sample_freq: {sample_freq}`) -> our tanh-squashed "
        f"Gaussian (`NormalTanhSampler`) with its noise held for {sample_freq} steps "
        f"(`resample_every={sample_freq}`): exploration correlated in time as gSDE's, "
        "but the noise multiplies the std the network outputs instead of the policy's "
        "last features"
    )


def _split(zoo_envs: int, zoo_steps: int, batch_size: int, ours_steps: int) -> str:
    """The note for a rollout re-split: same steps per iteration, same minibatch size."""
    per_iteration = zoo_envs * zoo_steps
    n_envs = per_iteration // ours_steps
    return (
        f"rollout of {zoo_envs} envs x {zoo_steps} steps, minibatches of {batch_size} "
        f"steps -> {n_envs} envs x {ours_steps} steps ({per_iteration} steps per "
        f"iteration either way), {per_iteration // batch_size} minibatches of "
        f"{n_envs * ours_steps // (per_iteration // batch_size)} steps: our minibatches "
        "are whole environment sequences, so the truncated backpropagation window is "
        f"{ours_steps} steps"
    )


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        _zoo(
            name="cartpole_novel",
            title="CartPoleNoVel-v1",
            env="CartPole-v1",
            keep=(0, 2),
            episode_length=500,
            total_steps=100_000,
            ppo=dict(
                n_envs=8,
                rollout_length=32,
                n_minibatches=1,
                n_epochs=20,
                learning_rate=1e-3,
                gae_lambda=0.8,
                discounting_factor=0.98,
            ),
            linear_decay=True,
            recurrent_size=64,
            activation="relu",
            entropy_cost=0.0,
            references=(
                Published(
                    500.0, 0.0, 100_000, "RecurrentPPO, mean over 300 episodes", ZOO_BENCHMARK
                ),
            ),
            translation=(
                "`clip_range: lin_0.2` (decaying to 0) -> a constant 0.2: the trainer's "
                "clip range is a constant",
                "gym's CartPole-v1 -> gymnax's (same dynamics, 500-step limit); "
                "velocities removed: observation entries 0 and 2 (cart position, pole "
                "angle)",
            ),
        ),
        _zoo(
            name="pendulum_novel",
            title="PendulumNoVel-v1",
            env="Pendulum-v1",
            keep=(0, 1),
            episode_length=200,
            total_steps=100_000,
            ppo=dict(
                n_envs=32,
                rollout_length=128,
                n_minibatches=32,
                n_epochs=10,
                learning_rate=1e-3,
                gae_lambda=0.95,
                discounting_factor=0.9,
            ),
            linear_decay=False,
            recurrent_size=64,
            activation="relu",
            entropy_cost=0.0,
            resample_every=4,
            references=(
                Published(
                    -217.9, 140.1, 100_000, "RecurrentPPO, mean over 750 episodes", ZOO_BENCHMARK
                ),
            ),
            translation=(
                _split(4, 1024, 128, 128),
                _sde(4),
                "velocities removed: observation entries 0 and 1 (cos and sin of the "
                "angle); episodes of 200 steps with staggered starts (our default)",
            ),
        ),
        _zoo(
            name="mountaincar_novel",
            title="MountainCarContinuousNoVel-v0",
            env="MountainCarContinuous-v0",
            keep=(0,),
            episode_length=999,
            total_steps=300_000,
            ppo=dict(
                n_envs=64,
                rollout_length=128,
                n_minibatches=32,
                n_epochs=10,
                learning_rate=7.77e-5,
                gae_lambda=0.9,
                discounting_factor=0.9999,
                clip_range=0.1,
                critic_loss_weight=0.19,
                max_grad_norm=5.0,
            ),
            linear_decay=False,
            recurrent_size=32,
            activation="tanh",
            entropy_cost=0.00429,
            resample_every=8,
            references=(
                Published(
                    91.47, 1.78, 300_000, "RecurrentPPO, mean over 1340 episodes", ZOO_BENCHMARK
                ),
            ),
            translation=(
                _split(8, 1024, 256, 128),
                _sde(8) + " (`log_std_init=0`: our initial std is softplus(0) = 0.69)",
                "velocity removed: observation entry 0 (position)",
            ),
        ),
        _pobax(
            name="tmaze",
            title="T-Maze (POBAX tmaze_5)",
            env="tmaze",
            keep=None,
            episode_length=1000,
            total_steps=1_500_000,
            ppo=dict(
                n_envs=4,
                rollout_length=128,
                n_minibatches=4,
                n_epochs=4,
                learning_rate=2.5e-4,
                gae_lambda=0.95,
                discounting_factor=0.99,
                clip_range=0.2,
                critic_loss_weight=0.5,
                max_grad_norm=0.5,
            ),
            recurrent_size=128,
            heads=(128,),
            translation=(
                "POBAX's actor-critic shares one GRU trunk (a dense layer then the GRU) "
                "between two heads; ours has one recurrent layer per port and no dense "
                "layer before it",
                "`anneal_lr=True` -> the learning rate decays linearly to 0",
                "no observation normalisation (POBAX has none; the observations are 0/1)",
            ),
        ),
        _pobax(
            name="pixel_tmaze",
            title="Pixel T-Maze (POBAX's T-Maze, corridor of 2, as a 3x4 image)",
            env="pixel_tmaze",
            keep=None,
            episode_length=100,
            total_steps=61_440,
            ppo=dict(
                n_envs=16,
                rollout_length=32,
                n_minibatches=4,
                n_epochs=4,
                learning_rate=1e-3,
                gae_lambda=0.95,
                discounting_factor=0.99,
                clip_range=0.2,
                critic_loss_weight=0.5,
                max_grad_norm=0.5,
            ),
            recurrent_size=64,
            heads=(64,),
            image=(3, 4, 3),
            translation=(
                "not a published task: POBAX's T-Maze (same actions and rewards) with a "
                "corridor of 2 cells instead of tmaze_5's 5, and the observation drawn as "
                "a 3x4 image of 3 channels (maze, agent, and the cue on the goal's arm "
                "while the agent is on the start cell; `pixel_tmaze.PixelTMaze`): the "
                "shorter corridor is what lets both families train 5 seeds in minutes on "
                "a 2-core CPU; the figures are the task's analytic values",
                "POBAX's PPO settings with the rollout re-split for a 2-core CPU: 4 envs x "
                "128 steps -> 16 envs x 32 steps (512 steps per iteration either way, 4 "
                "minibatches of 128 steps, 4 epochs), so the truncated backpropagation "
                "window is 32 steps; learning rate 1e-3 (POBAX: 2.5e-4), decaying "
                "linearly to 0; budget 61,440 steps",
                "networks: per port a `ConvEncoder` (3x3 conv of 16 channels, SAME "
                "padding, ReLU, dense 64) then an LSTM of 64 (`conv_lstm`) or a dense "
                "layer of 64 (`conv_mlp`), then a hidden layer of 64; width 64 instead of "
                "128 to fit the CPU budget",
                "time limit 100 steps instead of 1000 (the optimum takes 4 steps): "
                "evaluations of a policy that never turns stay cheap",
            ),
        ),
    )
}
"""Benchmark name -> :class:`Benchmark`."""
