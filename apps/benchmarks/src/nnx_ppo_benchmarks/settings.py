"""What is benchmarked: implementations, network families and the shared settings.

Everything here is plain data (stdlib only): the parent turns a :class:`RunSpec` into
JSON, and the child process of each implementation reads it back with
:func:`RunSpec.from_json` in its own environment.

The PPO hyperparameters are MuJoCo Playground's brax PPO settings for
``CartpoleBalance`` (``mujoco_playground.config.dm_control_suite_params``: observation
normalisation, reward scaling 10, discount 0.995, learning rate 1e-3, entropy cost 1e-2,
episode length 1000, brax's default clipping 0.3 and GAE lambda 0.95) with the sizes of
the benchmark (256 envs, rollout 20, 8 minibatches, 4 epochs).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

__all__ = [
    "IMPLEMENTATIONS",
    "NETWORKS",
    "SPEED_NETWORKS",
    "EvalSettings",
    "NetworkFamily",
    "PPOSettings",
    "RunSpec",
    "chunk_plan",
]

IMPLEMENTATIONS: dict[str, str] = {
    "ours": "nnx-ppo (this workspace): train_ppo",
    "ours-minibatch-gae": (
        "nnx-ppo (this workspace): train_ppo with advantage_estimation='minibatch' "
        "(advantages recomputed in every minibatch, as brax PPO does)"
    ),
    "brax": "brax 0.14.2: brax.training.agents.ppo.train",
    "nnx-ppo-0.3.0": "nnx-ppo 0.3.0 from PyPI: train_ppo",
    "env-only": "environment only: random actions, jitted lax.scan with auto-reset",
}
"""Implementation key -> what runs."""


@dataclasses.dataclass(frozen=True)
class NetworkFamily:
    """One network configuration, built the same way by every implementation.

    Attributes:
        name: Key used on the command line and in the results.
        description: One line for the table.
        kind: ``"mlp"``, ``"lstm"``, ``"graph"`` (the ring) or ``"graph_rnn"`` (the
            library's recommended graph, ``make_graph_actor_critic``).
        policy_hidden: Hidden widths of the policy MLP (after the LSTM for ``"lstm"``,
            after the memory population for ``"graph_rnn"``).
        value_hidden: Hidden widths of the value MLP, likewise.
        lstm_size: LSTM width of each port (``"lstm"`` only).
        memory_size: Units of each port's memory population (``"graph_rnn"`` only).
        implementations: Implementations that support this family.
        cell: ``"recurrent"`` only: `make_recurrent_actor_critic`'s memory cell, with
            ``layer_norm`` and ``torso_blocks`` (its residual torso; 0: none); the
            cell's width is ``lstm_size``.
    """

    name: str
    description: str
    kind: str
    policy_hidden: tuple[int, ...] = ()
    value_hidden: tuple[int, ...] = ()
    lstm_size: int = 0
    implementations: tuple[str, ...] = ("ours", "ours-minibatch-gae", "brax", "nnx-ppo-0.3.0")
    memory_size: int = 0
    cell: str = "lstm"
    layer_norm: bool = False
    torso_blocks: int = 0


NETWORKS: dict[str, NetworkFamily] = {
    family.name: family
    for family in (
        NetworkFamily(
            "mlp_small",
            "MLP, policy 32x32, value 64x64",
            "mlp",
            policy_hidden=(32, 32),
            value_hidden=(64, 64),
        ),
        NetworkFamily(
            "mlp_default",
            "MLP, Playground default: policy 32x4, value 256x5",
            "mlp",
            policy_hidden=(32,) * 4,
            value_hidden=(256,) * 5,
        ),
        NetworkFamily(
            "lstm",
            "LSTM 64 per port, then policy 32, value 64",
            "lstm",
            policy_hidden=(32,),
            value_hidden=(64,),
            lstm_size=64,
            implementations=("ours", "nnx-ppo-0.3.0"),
        ),
        NetworkFamily(
            "graph",
            "PopulationGraph: 8 populations of 16 in a ring, delays 1-2",
            "graph",
            implementations=("ours", "nnx-ppo-0.3.0"),
        ),
        NetworkFamily(
            "lstm_quickstart",
            "LSTM 128 per port, then policy 64x64, value 256x256 (make_lstm_actor_critic's "
            "defaults: the quickstart's --network lstm)",
            "lstm",
            policy_hidden=(64, 64),
            value_hidden=(256, 256),
            lstm_size=128,
            implementations=("ours",),
        ),
        *(
            NetworkFamily(
                name,
                f"{description} 128 per port, then policy 64x64, value 256x256 "
                "(make_recurrent_actor_critic)",
                "recurrent",
                policy_hidden=(64, 64),
                value_hidden=(256, 256),
                lstm_size=128,
                implementations=("ours",),
                cell=cell,
                layer_norm=layer_norm,
                torso_blocks=blocks,
            )
            for name, description, cell, layer_norm, blocks in (
                ("lstm_ln", "LayerNorm LSTM", "lstm", True, 0),
                ("gru_ln", "LayerNorm GRU", "gru", True, 0),
                ("mingru", "MinGRU", "mingru", False, 0),
                ("lru", "LRU", "lru", False, 0),
                ("mingru_torso", "residual torso (1 block), MinGRU", "mingru", False, 1),
            )
        ),
        NetworkFamily(
            "graph_quickstart",
            "recommended graph per port: tanh memory 64 with a delay-1 self-loop, then "
            "policy 32x4, value 256x5 (make_graph_actor_critic's defaults: the "
            "quickstart's --network graph)",
            "graph_rnn",
            policy_hidden=(32,) * 4,
            value_hidden=(256,) * 5,
            memory_size=64,
            implementations=("ours",),
        ),
    )
}
"""The benchmarked network families (brax PPO has no stateful networks)."""

SPEED_NETWORKS = ("mlp_small", "mlp_default", "lstm", "graph")
"""The families ``nnx-ppo-bench`` times by default (the ``*_quickstart`` families are the
control suite's: the quickstart's networks, ours only)."""

GRAPH_POPULATIONS = 8
"""Hidden populations of the ``graph`` family."""
GRAPH_POPULATION_SIZE = 16
"""Units per hidden population of the ``graph`` family."""


@dataclasses.dataclass(frozen=True)
class PPOSettings:
    """The hyperparameters every implementation is given (see the module docstring)."""

    n_envs: int = 256
    rollout_length: int = 20
    n_minibatches: int = 8
    n_epochs: int = 4
    learning_rate: float = 1e-3
    discounting: float = 0.995
    gae_lambda: float = 0.95
    clip_range: float = 0.3
    entropy_cost: float = 1e-2
    critic_loss_weight: float = 0.5
    """Weight of ``0.5 * MSE`` (brax: ``vf_loss_coefficient``)."""
    reward_scaling: float = 10.0
    normalize_observations: bool = True
    episode_length: int = 1000
    min_std: float = 1e-3

    @property
    def steps_per_iteration(self) -> int:
        """Env steps per PPO iteration (``n_envs * rollout_length``)."""
        return self.n_envs * self.rollout_length


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """The final deterministic evaluation (run once, after training)."""

    n_envs: int = 128
    episode_length: int = 1000


def chunk_plan(total_steps: int, n_chunks: int, steps_per_iteration: int) -> tuple[int, int]:
    """Round a step budget up to ``n_chunks`` equal chunks of whole iterations.

    Args:
        total_steps: The requested budget (env steps).
        n_chunks: Progress reports (brax: ``num_evals - 1`` epochs).
        steps_per_iteration: ``n_envs * rollout_length``.

    Returns:
        ``(iterations_per_chunk, total_steps)`` with ``total_steps`` the exact budget
        every implementation trains for.

    Example:
        >>> chunk_plan(100_000, 4, 5120)
        (5, 102400)
    """
    if total_steps < 1 or n_chunks < 1 or steps_per_iteration < 1:
        raise ValueError(
            f"total_steps={total_steps}, n_chunks={n_chunks} and "
            f"steps_per_iteration={steps_per_iteration} must all be >= 1."
        )
    iterations = -(-total_steps // steps_per_iteration)
    per_chunk = -(-iterations // n_chunks)
    return per_chunk, per_chunk * n_chunks * steps_per_iteration


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything one child process needs.

    Attributes:
        implementation: A key of :data:`IMPLEMENTATIONS`.
        network: A key of :data:`NETWORKS` (ignored by ``env-only``).
        env_name: MuJoCo Playground environment (loaded with ``impl="jax"``), or a brax
            environment as ``brax/<name>`` (``backend="generalized"``).
        seed: Seed of the run (repeat ``r`` uses ``base_seed + r``).
        total_steps: The exact training budget (from :func:`chunk_plan`).
        n_chunks: Progress reports during training.
        ppo: Shared hyperparameters.
        eval: Final evaluation.
        iterations_per_call: ``ours*`` only: ``PPOConfig.iterations_per_call``
            (``None``: the trainer's default).
        profile_dir: If set, ``ours*`` write a ``jax.profiler`` trace there.
        stagger: ``ours*`` only: each training episode starts at a random step in
            ``[0, stagger)`` (`nnx_ppo.wrappers.EpisodeWrapper`'s ``stagger``, the
            quickstart's way); 0: every episode at step 0, as brax PPO's.
    """

    implementation: str
    network: str
    env_name: str = "CartpoleBalance"
    seed: int = 0
    total_steps: int = 102_400
    n_chunks: int = 4
    ppo: PPOSettings = dataclasses.field(default_factory=PPOSettings)
    eval: EvalSettings = dataclasses.field(default_factory=EvalSettings)
    iterations_per_call: int | None = None
    profile_dir: str | None = None
    stagger: int = 0

    def ppo_config_fields(self) -> dict[str, Any]:
        """The shared hyperparameters and the budget as ``PPOConfig`` keywords, which
        this workspace's trainer and nnx-ppo 0.3.0 name alike.

        Example:
            >>> fields = RunSpec("ours", "mlp_small").ppo_config_fields()
            >>> fields["discounting_factor"], fields["total_steps"], len(fields)
            (0.995, 102400, 10)
        """
        same = ("n_envs", "rollout_length", "n_epochs", "n_minibatches", "learning_rate")
        same += ("gae_lambda", "clip_range", "critic_loss_weight")
        fields = {name: getattr(self.ppo, name) for name in same}
        fields.update(discounting_factor=self.ppo.discounting, total_steps=self.total_steps)
        return fields

    @property
    def iterations_per_chunk(self) -> int:
        """Iterations between two progress reports."""
        return self.total_steps // (self.n_chunks * self.ppo.steps_per_iteration)

    @property
    def family(self) -> NetworkFamily:
        """The :class:`NetworkFamily` named by ``network``."""
        return NETWORKS[self.network]

    def to_json(self) -> str:
        """Serialise (for the child's command line)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """Inverse of :meth:`to_json`."""
        data: dict[str, Any] = json.loads(text)
        data["ppo"] = PPOSettings(**data["ppo"])
        data["eval"] = EvalSettings(**data["eval"])
        return cls(**data)


BRAX_PREFIX = "brax/"


def is_brax_env(env_name: str) -> bool:
    """``brax/<name>`` names a brax environment; anything else a Playground one."""
    return env_name.startswith(BRAX_PREFIX)


def describe_env(env_name: str) -> str:
    """How the report names the environment's source."""
    if is_brax_env(env_name):
        return "brax, backend generalized"
    return "MuJoCo Playground, impl jax"
