"""Trial-level evaluation of cognitive tasks: `evaluate_trials` and `TrialResults`.

A cognitive task (`nnx_ppo.envs.cognitive`) plays one trial per episode and reports
in ``state.info`` how it ended. `evaluate_trials` plays ``trials_per_condition`` trials
of every row of the task's condition table, ``N = trials_per_condition * C`` trials in
all, in one jitted ``lax.scan`` of ``env.max_trial_steps`` steps (long enough for every
trial to end): trial ``j`` starts from ``env.reset_condition(jax.random.split(key,
N)[j], j % C)`` with a fresh carry (``initialize_state``), so the same key gives the same
trials (durations, noise) whatever the network. The network runs in ``eval()`` mode
(every sampler at its mode) unless ``deterministic=False``, where its samplers draw
from keys derived from ``key`` too. The caller's network (its variables and its mode)
is not changed.

Per trial it keeps the ``info`` of the step that ended it: the outcome
(`nnx_ppo.envs.cognitive.Outcome`), the choice, the answer, the decision and reaction
times and the condition. `TrialResults` scores them: decision, abort and correct
rates, a table per condition, psychometric fits (`nnx_ppo.algorithms.psychometrics`)
and chronometric curves; `nnx_ppo.algorithms.plotting` draws the last two.

With ``record=True`` the results also hold the network's activations
(`nnx_ppo.networks.recording`), the observations, the actions and the epochs of every
step, ``[T, B, ...]`` with ``T = env.max_trial_steps`` and ``B = N``, and ``valid
[T, B]``, true on the steps that belong to the trial (up to and including the step that
ended it). Memory: ``T * B * U`` float32 numbers for ``U`` recorded units per trial
(see `nnx_ppo.algorithms.activations`).

Examples:
    >>> import jax
    >>> import numpy as np
    >>> from flax import nnx
    >>> from nnx_ppo.envs.cognitive import PerceptualDecisionMaking
    >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
    >>> env = PerceptualDecisionMaking(dt=20)
    >>> net = make_mlp_actor_critic(3, 3, (8,), (8,), rngs=nnx.Rngs(0),
    ...                             action_distribution="categorical")
    >>> results = evaluate_trials(env, net, trials_per_condition=2, key=jax.random.key(0))
    >>> results.n_trials, np.bincount(results.condition_index).tolist()
    (20, [2, 2, 2, 2, 2, 2, 2, 2, 2, 2])
    >>> table = results.by_condition("direction")
    >>> table["direction"].tolist(), table["n"].tolist()
    ([-1.0, 1.0], [10, 10])
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.algorithms.checks import check_env_network
from nnx_ppo.algorithms.psychometrics import PsychometricFit, PsychometricKind, fit_psychometric
from nnx_ppo.algorithms.rollout import network_step, ppo_output, split_network
from nnx_ppo.envs.cognitive import Outcome
from nnx_ppo.networks.recording import extract_activations, is_recording, with_recording
from nnx_ppo.networks.types import StatefulModule

if TYPE_CHECKING:
    from nnx_ppo.algorithms.sweeps import SweepResult

__all__ = ["TrialResults", "evaluate_trials", "evaluate_trials_many"]

_CORRECT, _WRONG, _ABORTED = Outcome.CORRECT, Outcome.WRONG, Outcome.ABORTED
_SAMPLING = 0x7361  # fold_in data of the samplers' keys with deterministic=False
_PER_TRIAL = {  # the per-trial info fields kept, with their dtypes
    "outcome": np.int32,
    "choice": np.int32,
    "answer": np.int32,
    "decision_time": np.float32,
    "reaction_time": np.float32,
    "condition_index": np.int32,
}


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def _ratio(numerator: Any, denominator: Any) -> float:
    return float(numerator) / float(denominator) if denominator else math.nan


@dataclasses.dataclass(frozen=True, eq=False)
class TrialResults:
    """What `evaluate_trials` returns: per-trial numpy arrays ``[N]`` and their scores.

    Build one yourself from any trials (e.g. a task's final infos) with the per-trial
    fields; the recording fields are ``None`` unless ``record=True``.

    Attributes:
        outcome: int32 ``[N]``, how each trial ended (``Outcome``: 1 correct, 2 wrong,
            3 aborted, 4 no decision; 0 if it had not ended by the last step).
        choice: int32 ``[N]``, the action that decided the trial (``0`` if none).
        answer: int32 ``[N]``, the correct action (``0``: withhold).
        decision_time: float32 ``[N]``, ms from the trial's start to the decision
            (``-1`` without one).
        reaction_time: float32 ``[N]``, ms from the first response epoch's start to the
            decision (``-1`` without one).
        condition_index: int32 ``[N]``, the row of the task's condition table.
        condition: ``{name: float32 [N]}``, the trial's condition values.
        psychometric_variable: The condition value psychometric fits use by default.
        criterion: The task's training criterion ``(decision rate, accuracy)``, the
            default of `criteria`.
        epoch_names: The task's epochs (``epoch`` indexes them).
        action_names: The task's actions.
        activations: With ``record``: the recorded activations, the network's container
            tree with leaves ``[T, N, ...]``; else ``None``.
        observations: With ``record``: the observations fed, leaves ``[T, N, ...]``.
        actions: With ``record``: int32 ``[T, N]``, the actions taken.
        epoch: With ``record``: int32 ``[T, N]``, the epoch of each step's observation.
        valid: With ``record``: bool ``[T, N]``, true on the steps of the trial (up to
            and including the one that ended it).
    """

    outcome: np.ndarray
    choice: np.ndarray
    answer: np.ndarray
    decision_time: np.ndarray
    reaction_time: np.ndarray
    condition_index: np.ndarray
    condition: dict[str, np.ndarray]
    psychometric_variable: str = ""
    criterion: tuple[float, float] = (0.99, 0.8)
    epoch_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()
    activations: Any = None
    observations: Any = None
    actions: np.ndarray | None = None
    epoch: np.ndarray | None = None
    valid: np.ndarray | None = None

    def __post_init__(self) -> None:
        shape = np.shape(self.outcome)
        if len(shape) != 1:
            raise ValueError(f"TrialResults: outcome must be [N], got shape {shape}.")
        for name, dtype in _PER_TRIAL.items():
            value = np.asarray(getattr(self, name), dtype)
            if value.shape != shape:
                raise ValueError(
                    f"TrialResults: {name} has shape {value.shape}, but outcome has {shape}; "
                    "every per-trial field is [N]."
                )
            object.__setattr__(self, name, value)
        condition = {k: np.asarray(v, np.float32) for k, v in dict(self.condition).items()}
        for name, value in condition.items():
            if value.shape != shape:
                raise ValueError(
                    f"TrialResults: condition[{name!r}] has shape {value.shape}, but outcome "
                    f"has {shape}."
                )
        object.__setattr__(self, "condition", condition)

    # ------------------------------------------------------------------ rates

    @property
    def n_trials(self) -> int:
        """``N``, the number of trials."""
        return int(self.outcome.shape[0])

    @property
    def decided(self) -> np.ndarray:
        """bool ``[N]``: the trials ended by a choice in a response epoch."""
        return np.isin(self.outcome, (_CORRECT, _WRONG)) & (self.choice != 0)

    @property
    def withholding(self) -> bool:
        """Whether withholding is an answer of some trial (``answer == 0``, e.g. no-go
        trials): `accuracy` then counts correct trials over all trials."""
        return bool(np.any(self.answer == 0))

    @property
    def outcome_counts(self) -> dict[str, int]:
        """Trials per outcome, by name (``"correct"``, ``"wrong"``, ...)."""
        counts = np.bincount(self.outcome, minlength=len(Outcome.NAMES))
        return {name: int(c) for name, c in zip(Outcome.NAMES, counts, strict=False)}

    @property
    def responded(self) -> np.ndarray:
        """bool ``[N]``: the trials given an answer, a decision or, where withholding
        is the answer (a no-go trial), a correct withholding."""
        withheld = (self.answer == 0) & (self.outcome == _CORRECT)
        return self.decided | withheld

    @property
    def decision_rate(self) -> float:
        """Trials given an answer (`responded`: decided, or a correctly withheld no-go)
        over all trials."""
        return _ratio(self.responded.sum(), self.n_trials)

    @property
    def abort_rate(self) -> float:
        """Trials ended by breaking fixation over all trials."""
        return _ratio(np.sum(self.outcome == _ABORTED), self.n_trials)

    @property
    def accuracy(self) -> float:
        """Correct decisions over decided trials (``nan`` without a decision). For a
        task where withholding is an answer (`withholding`: go/no-go), correct trials
        (a right choice, or a withheld no-go) over **all** trials instead."""
        return self._accuracy(np.ones(self.n_trials, bool))

    def _accuracy(self, mask: np.ndarray) -> float:
        correct = self.outcome == _CORRECT
        if self.withholding:
            return _ratio(np.sum(correct & mask), np.sum(mask))
        chosen = mask & self.decided
        return _ratio(np.sum(correct & chosen), np.sum(chosen))

    def criteria(self, decision: float | None = None, correct: float | None = None) -> bool:
        """Whether a training criterion is met: ``decision_rate >= decision`` and
        ``accuracy >= correct``. The defaults are the task's published criterion
        (`criterion`, from ``env.criterion``; Song, Yang & Wang 2017), else decisions
        on 99 % of trials and 80 % of them correct."""
        decision = self.criterion[0] if decision is None else decision
        correct = self.criterion[1] if correct is None else correct
        for name, value in (("decision", decision), ("correct", correct)):
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Real)
                or not (0 <= value <= 1)
            ):
                raise ValueError(f"criteria: {name}={value!r} must be a fraction in [0, 1].")
        return bool(self.decision_rate >= decision and self.accuracy >= correct)

    # ------------------------------------------------------------------ tables and fits

    def _values(self, variable: str | None) -> tuple[str, np.ndarray]:
        name = self.psychometric_variable if variable is None else variable
        if name not in self.condition:
            hint = "" if name else " (these results name no psychometric variable)"
            raise ValueError(
                f"variable={name!r} is not a condition value of these trials{hint}; pick one "
                f"of {sorted(self.condition)}."
            )
        return name, self.condition[name]

    def by_condition(self, name: str | None = None) -> dict[str, np.ndarray]:
        """A table, one row per value of condition ``name`` (sorted), or per row of the
        condition table if ``None``.

        Returns:
            Columns as numpy arrays ``[M]``: the grouping (``name``'s values, or
            ``condition_index`` and every condition value), ``n`` (trials),
            ``decision_rate``, ``accuracy`` (as `accuracy`, within the group),
            ``p_choose_2`` (the fraction of decided trials choosing action 2) and
            ``reaction_time`` (the mean reaction time of correct decisions, ms). A rate
            with no trial to count is ``nan``. ``pandas.DataFrame(table)`` reads it.
        """
        if name is None:
            keys = self.condition_index
            groups, first = np.unique(keys, return_index=True)
            table: dict[str, np.ndarray] = {"condition_index": groups}
            table.update({k: v[first] for k, v in self.condition.items()})
        else:
            name, keys = self._values(name)
            groups = np.unique(keys)
            table = {name: groups}
        decided = self.decided
        timed = (self.outcome == _CORRECT) & decided & (self.reaction_time >= 0)
        rows = [keys == g for g in groups]
        table["n"] = np.array([m.sum() for m in rows], np.int64)
        responded = self.responded
        table["decision_rate"] = np.array([_ratio((m & responded).sum(), m.sum()) for m in rows])
        table["accuracy"] = np.array([self._accuracy(m) for m in rows])
        table["p_choose_2"] = np.array(
            [_ratio((m & decided & (self.choice == 2)).sum(), (m & decided).sum()) for m in rows]
        )
        table["reaction_time"] = np.array(
            [float(self.reaction_time[m & timed].mean()) if (m & timed).any() else math.nan
             for m in rows]
        )  # fmt: skip
        return table

    def psychometric(
        self,
        variable: str | None = None,
        kind: PsychometricKind = "logistic",
        *,
        lapse: float | None = None,
    ) -> PsychometricFit:
        """Fit ``P(choice == 2 | decided)`` against a condition value
        (`fit_psychometric`).

        Args:
            variable: The condition value (default `psychometric_variable`, e.g.
                ``"signed_coherence"``).
            kind: ``"logistic"`` or ``"probit"``.
            lapse: ``None`` fits the lapse rate; a number fixes it.

        Raises:
            ValueError: If ``variable`` is not a condition value, or the decided trials
                cover fewer than two of its values.
        """
        name, x = self._values(variable)
        decided = self.decided
        if not decided.any():
            raise ValueError(
                f"psychometric: none of the {self.n_trials} trials was decided (outcomes: "
                f"{self.outcome_counts}); a psychometric curve needs choices."
            )
        return fit_psychometric(
            x[decided], self.choice[decided] == 2, kind=kind, lapse=lapse, variable=name
        )

    def chronometric(self, variable: str | None = None) -> dict[str, np.ndarray]:
        """Reaction times of correct decisions per ``|variable|`` (e.g. per unsigned
        coherence).

        Args:
            variable: The condition value (default `psychometric_variable`).

        Returns:
            ``{"value": |variable| [M] (sorted), "n": [M] correct decisions, "mean": [M]
            ms, "sem": [M] ms}``; ``mean`` is ``nan`` without a correct decision and
            ``sem`` (``std(ddof=1) / sqrt(n)``) with fewer than two.
        """
        _, x = self._values(variable)
        magnitude = np.abs(x)
        timed = (self.outcome == _CORRECT) & self.decided & (self.reaction_time >= 0)
        values = np.unique(magnitude)
        n, mean, sem = [], [], []
        for v in values:
            rt = self.reaction_time[timed & (magnitude == v)].astype(np.float64)
            n.append(rt.size)
            mean.append(rt.mean() if rt.size else math.nan)
            sem.append(rt.std(ddof=1) / math.sqrt(rt.size) if rt.size > 1 else math.nan)
        return {"value": values, "n": np.array(n, np.int64), "mean": np.array(mean),
                "sem": np.array(sem)}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The rates, the per-condition table and every trial's fields as JSON-ready
        Python values (``nan`` as ``None``; the recordings are left out)."""
        table = {k: _nan_to_none(v.tolist()) for k, v in self.by_condition().items()}
        trials: dict[str, Any] = {k: getattr(self, k).tolist() for k in _PER_TRIAL}
        trials["condition"] = {k: v.tolist() for k, v in self.condition.items()}
        return {
            "n_trials": self.n_trials,
            "decision_rate": _nan_to_none(self.decision_rate),
            "abort_rate": _nan_to_none(self.abort_rate),
            "accuracy": _nan_to_none(self.accuracy),
            "outcomes": self.outcome_counts,
            "psychometric_variable": self.psychometric_variable,
            "criterion": list(self.criterion),
            "criteria_met": self.criteria(),
            "by_condition": table,
            "trials": trials,
        }


# --------------------------------------------------------------------------- evaluation


def _check_arguments(
    fn: str, env: Any, trials_per_condition: Any, key: Any, record: Any, deterministic: Any
) -> tuple[int, int]:
    """Validate the shared arguments; ``(n_trials, n_steps)``."""
    required = ("reset_condition", "n_conditions", "max_trial_steps")
    missing = [a for a in required if not hasattr(env, a)]
    if missing:
        raise TypeError(
            f"{fn}: env={type(env).__name__} is not a cognitive task: it has no "
            f"{', '.join(missing)}. Pass a task of nnx_ppo.envs.cognitive (e.g. "
            "PerceptualDecisionMaking(dt=20)), or give your environment reset_condition("
            "key, index), n_conditions and max_trial_steps."
        )
    if not hasattr(type(env), "reset_condition"):  # forwarded by a wrapper's __getattr__
        inner = type(getattr(env, "unwrapped", env)).__name__
        raise TypeError(
            f"{fn}: env is a {type(env).__name__} around {inner}, whose reset_condition "
            "would start trials without the wrapper's own reset; pass the task itself "
            "(env.unwrapped)."
        )
    for name in ("n_conditions", "max_trial_steps"):
        value = getattr(env, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{fn}: env.{name}={value!r} must be an int >= 1.")
    if isinstance(trials_per_condition, bool) or not isinstance(
        trials_per_condition, numbers.Integral
    ):
        raise TypeError(
            f"{fn}: trials_per_condition={trials_per_condition!r} must be an int >= 1 (got "
            f"{type(trials_per_condition).__name__}), e.g. trials_per_condition=100."
        )
    if trials_per_condition < 1:
        raise ValueError(
            f"{fn}: trials_per_condition={trials_per_condition} must be >= 1: every one of "
            f"the task's {env.n_conditions} conditions is played that many times (e.g. "
            "trials_per_condition=100)."
        )
    if not (hasattr(key, "dtype") and hasattr(key, "shape")):
        raise TypeError(
            f"{fn}: key={key!r} must be a JAX PRNG key, e.g. jax.random.key(0), not a "
            f"{type(key).__name__}."
        )
    for name, value in (("record", record), ("deterministic", deterministic)):
        if not isinstance(value, bool):
            raise TypeError(f"{fn}: {name}={value!r} must be True or False.")
    return int(trials_per_condition) * int(env.n_conditions), int(env.max_trial_steps)


def _check_network(fn: str, network: Any, name: str = "network") -> StatefulModule:
    """``network``, checked to be a `StatefulModule` (a `TypeError` naming ``name``)."""
    if not isinstance(network, StatefulModule):
        raise TypeError(
            f"{fn}: {name} must be a StatefulModule ending in a PPOAdapter, got "
            f"{type(network).__name__}."
        )
    return network


def _reseed(network: nnx.Module, key: jax.Array) -> None:
    """Give every RNG stream of ``network`` (a copy) a key derived from ``key``."""
    typed = key if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else None
    if typed is None:
        typed = jax.random.wrap_key_data(key)
    streams = [node for _, node in nnx.iter_graph(network) if isinstance(node, nnx.RngStream)]
    for i, stream in enumerate(streams):
        new = jax.random.fold_in(typed, i)
        if not jax.dtypes.issubdtype(stream.key[...].dtype, jax.dtypes.prng_key):
            new = jax.random.key_data(new)
        stream.key[...] = new
        stream.count[...] = jnp.zeros_like(stream.count[...])


def _prepare(
    network: StatefulModule, key: jax.Array, *, record: bool, deterministic: bool
) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """A split copy of ``network`` in the requested mode (recording if asked)."""
    base = with_recording(network) if record and not is_recording(network) else network
    copy = nnx.clone(base)  # new variables: the caller's network, mode included, is untouched
    if deterministic:
        copy.eval()
    else:
        copy.train()
        _reseed(copy, jax.random.fold_in(key, _SAMPLING))
    return split_network(copy)


def _trial_program(env: Any, graphdef: nnx.GraphDef, n_trials: int, n_steps: int, record: bool):
    """The jitted ``run(params, network_state, key) -> (final infos, recordings)``,
    reused for the same task object, graph definition and sizes (`_PROGRAMS`)."""
    try:
        cache_key = (env, graphdef, n_trials, n_steps, record)
        hash(cache_key)
    except TypeError:  # an unhashable environment: compile for this call only
        return _build_program(env, graphdef, n_trials, n_steps, record)
    program = _PROGRAMS.pop(cache_key, None) or _build_program(*cache_key)
    _PROGRAMS[cache_key] = program  # most recently used last
    while len(_PROGRAMS) > _MAX_PROGRAMS:
        _PROGRAMS.pop(next(iter(_PROGRAMS)))
    return program


_MAX_PROGRAMS = 8
_PROGRAMS: dict[tuple[Any, ...], Any] = {}
"""The compiled trial programs of the last few (task, graph definition, sizes): scoring
several checkpoints of one network compiles once."""


def _build_program(env: Any, graphdef: nnx.GraphDef, n_trials: int, n_steps: int, record: bool):

    def run(params: nnx.State, network_state: nnx.State, key: jax.Array) -> Any:
        keys = jax.random.split(key, n_trials)
        conditions = jnp.arange(n_trials, dtype=jnp.int32) % env.n_conditions
        env_state = jax.vmap(env.reset_condition)(keys, conditions)
        carry = nnx.merge(graphdef, params, network_state).initialize_state(n_trials)
        keep = lambda info: {k: info[k] for k in (*_PER_TRIAL, "condition")}

        def step(loop: Any, _: None) -> Any:
            net_state, env_s, net_carry, ended, final = loop
            net_state, out = network_step(graphdef, params, net_state, net_carry, env_s.obs)
            actions = ppo_output(out).actions
            following = jax.vmap(env.step)(env_s, actions)
            done = jnp.asarray(following.done) > 0
            first = done & ~ended  # the step that ends the trial
            final = jax.tree.map(
                lambda old, new: jnp.where(first.reshape(first.shape + (1,) * (new.ndim - 1)),
                                           new, old),
                final, keep(following.info),
            )  # fmt: skip
            ys = None
            if record:
                ys = {
                    "activations": extract_activations(out.metrics),
                    "observations": env_s.obs,
                    "actions": actions,
                    "epoch": env_s.info["epoch"],
                    "valid": ~ended,
                }
            return (net_state, following, out.next_state, ended | done, final), ys

        ended = jnp.zeros((n_trials,), bool)
        start = (network_state, env_state, carry, ended, keep(env_state.info))
        (_, _, _, _, final), ys = jax.lax.scan(step, start, None, length=n_steps)
        return final, ys

    return jax.jit(run)


def _results(env: Any, final: Any, ys: Any) -> TrialResults:
    final, ys = jax.device_get((final, ys))
    recorded = {} if ys is None else {k: ys[k] for k in ("observations", "activations")}
    if ys is not None:
        recorded.update(
            actions=np.asarray(ys["actions"], np.int32),
            epoch=np.asarray(ys["epoch"], np.int32),
            valid=np.asarray(ys["valid"], bool),
        )
    return TrialResults(
        **{k: final[k] for k in _PER_TRIAL},
        condition=dict(final["condition"]),
        psychometric_variable=str(getattr(env, "psychometric_variable", "")),
        criterion=tuple(getattr(env, "criterion", (0.99, 0.8))),
        epoch_names=tuple(getattr(env, "epochs", ())),
        action_names=tuple(getattr(env, "actions", ())),
        **recorded,
    )


def evaluate_trials(
    env: Any,
    network: nnx.Module,
    *,
    trials_per_condition: int,
    key: jax.Array,
    record: bool = False,
    deterministic: bool = True,
) -> TrialResults:
    """Play every condition of a cognitive task equally often and score the trials
    (see the module docstring).

    Args:
        env: The unbatched cognitive task (`nnx_ppo.envs.cognitive`; unwrapped): it
            has ``reset_condition(key, index)``, ``n_conditions`` and
            ``max_trial_steps``.
        network: The PPO network (ending in a ``PPOAdapter`` with discrete actions).
        trials_per_condition: Trials of each condition, ``>= 1``.
        key: A PRNG key: the trials' resets and, with ``deterministic=False``, the
            samplers' draws.
        record: Also return the activations, observations, actions, epochs and
            ``valid`` mask of every step (``[T, N, ...]``).
        deterministic: Run the samplers at their mode (``eval()``); ``False`` samples.

    Returns:
        A `TrialResults` of ``trials_per_condition * env.n_conditions`` trials, trial
        ``j`` of condition ``j % env.n_conditions``.

    Raises:
        TypeError: If ``env`` is not a cognitive task (or is a wrapper around one),
            ``network`` is not a module, or an argument has the wrong type.
        ValueError: If ``trials_per_condition < 1`` or the network does not fit
            ``env`` (`check_env_network`), before anything is compiled.
    """
    fn = "evaluate_trials"
    n_trials, n_steps = _check_arguments(fn, env, trials_per_condition, key, record, deterministic)
    checked = _check_network(fn, network)
    check_env_network(env, checked)
    graphdef, params, network_state = _prepare(
        checked, key, record=record, deterministic=deterministic
    )
    program = _trial_program(env, graphdef, n_trials, n_steps, record)
    return _results(env, *program(params, network_state, key))


def evaluate_trials_many(
    env: Any,
    sweep: SweepResult,
    *,
    trials_per_condition: int,
    key: jax.Array,
    record: bool = False,
    deterministic: bool = True,
) -> list[TrialResults]:
    """`evaluate_trials` for every run of a sweep (`train_many`'s `SweepResult`),
    compiled once: the runs share the graph definition and pass their variables.

    Every run plays the same trials (the same ``key``), so the runs' scores are paired.
    Run ``i``'s results equal ``evaluate_trials(env, sweep.network(i), ...)``.

    Args:
        env: The unbatched cognitive task.
        sweep: The `SweepResult`.
        trials_per_condition: Trials of each condition, ``>= 1``.
        key: A PRNG key, as for `evaluate_trials`.
        record: As for `evaluate_trials`.
        deterministic: As for `evaluate_trials`.

    Returns:
        One `TrialResults` per run, in run order.

    Raises:
        TypeError: If ``sweep`` is not a `SweepResult`, or as for `evaluate_trials`.
        ValueError: As for `evaluate_trials`.
    """
    fn = "evaluate_trials_many"
    n_trials, n_steps = _check_arguments(fn, env, trials_per_condition, key, record, deterministic)
    if not (hasattr(sweep, "network") and isinstance(getattr(sweep, "n_runs", None), int)):
        raise TypeError(
            f"{fn}: sweep must be the SweepResult train_many returns, got "
            f"{type(sweep).__name__}; for one network call evaluate_trials."
        )
    networks = [
        _check_network(fn, sweep.network(i), f"sweep.network({i})") for i in range(sweep.n_runs)
    ]
    check_env_network(env, networks[0])
    prepared = [_prepare(n, key, record=record, deterministic=deterministic) for n in networks]
    graphdef = prepared[0][0]
    program = _trial_program(env, graphdef, n_trials, n_steps, record)
    return [_results(env, *program(params, state, key)) for _, params, state in prepared]
