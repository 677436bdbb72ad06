"""`SupervisedConfig`: the settings of a supervised run on a task's trial datasets."""

from __future__ import annotations

import dataclasses
from typing import Any

from nnx_ppo.algorithms._config_base import check_float, check_int, config_to_json

__all__ = ["SupervisedConfig"]


@dataclasses.dataclass(frozen=True)
class SupervisedConfig:
    """A supervised run: backpropagation through time on fresh batches of trials.

    Every update draws ``batch_size`` new trials (`nnx_ppo.envs.cognitive.trial_dataset`,
    PsychRNN's and NeuroGym's online data), replays the network over them from its
    initial carry and takes one Adam step on the masked cross-entropy of its action
    logits against the trials' targets.

    Attributes:
        n_updates: Gradient steps (``>= 0``; ``0`` only builds the result).
        batch_size: Trials per update, ``N >= 1``.
        learning_rate: Adam's step size, ``> 0``.
        max_grad_norm: If set (``> 0``), clip gradients to this global norm.
        weight_decay: Decoupled weight decay (AdamW) if ``> 0``, else plain Adam.
        adam_eps: Adam's ``eps``, ``> 0``.
        grace_ms: Milliseconds after the first response epoch's onset left out of the
            loss (`trial_dataset`'s mask), ``>= 0``.
        regularization_weight: Weight of the network's own per-sample
            ``regularization_loss`` (activity penalties, KL terms of variational
            layers, ...), masked like the cross-entropy, ``>= 0``. A sampler's entropy
            bonus is left out: it has no place in a supervised loss.
        updates_per_call: Updates per jitted device call; the result's curve and
            ``log_fn`` get one point per update, delivered after each call.
        seed: The run's seed: ``make_network(nnx.Rngs(seed))`` and the trials' key.

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If a value is out of range.

    Examples:
        >>> SupervisedConfig(batch_size=32, n_updates=500).batch_size
        32
        >>> SupervisedConfig(learning_rate=0.0)
        Traceback (most recent call last):
            ...
        ValueError: learning_rate=0.0 must be > 0.0.
    """

    n_updates: int = 2000
    batch_size: int = 64
    learning_rate: float = 1e-3
    max_grad_norm: float | None = 1.0
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    grace_ms: float = 0.0
    regularization_weight: float = 1.0
    updates_per_call: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("n_updates", self.n_updates, minimum=0)
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("updates_per_call", self.updates_per_call, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_float("learning_rate", self.learning_rate, low=0.0, low_open=True)
        check_float("max_grad_norm", self.max_grad_norm, low=0.0, low_open=True, optional=True)
        check_float("weight_decay", self.weight_decay, low=0.0)
        check_float("adam_eps", self.adam_eps, low=0.0, low_open=True)
        check_float("grace_ms", self.grace_ms, low=0.0)
        check_float("regularization_weight", self.regularization_weight, low=0.0)

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-ready data (numbers, ``None``)."""
        return config_to_json(self)
