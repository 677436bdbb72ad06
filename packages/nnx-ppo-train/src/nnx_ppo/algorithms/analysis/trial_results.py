"""The scores of a cognitive task's trials: `TrialResults`, what `evaluate_trials`
(`nnx_ppo.algorithms.observe.trials`) returns. Per trial the outcome, choice, answer, decision
and reaction times and condition; from them decision, abort and correct rates, a table
per condition, psychometric fits (`nnx_ppo.algorithms.analysis.psychometrics`) and chronometric
curves, and with ``record=True`` the recorded activity."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, ClassVar

import numpy as np

from nnx_ppo.algorithms.analysis.psychometrics import (
    PsychometricFit,
    PsychometricKind,
    fit_psychometric,
)
from nnx_ppo.envs.cognitive import Outcome

__all__ = ["TrialResults"]

_CORRECT, _WRONG, _ABORTED = Outcome.CORRECT, Outcome.WRONG, Outcome.ABORTED
_ONGOING = Outcome.ONGOING
_PER_TRIAL: dict[str, Any] = {  # the per-trial info fields kept, with their dtypes
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
        condition_units: The unit of each condition value that has one (e.g.
            ``{"signed_coherence": "%"}``, the task's ``condition_units``), for labels.
        opt_out_action: The task's opt-out action (``env.opt_out_action``: the sure
            option of `PostDecisionWager`), or ``None``: choosing it answers the trial
            (`responded`) but is no decision (`decided`), so `accuracy` counts the
            other choices only.
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
    condition_units: dict[str, str] = dataclasses.field(default_factory=dict)
    opt_out_action: int | None = None
    activations: Any = None
    observations: Any = None
    actions: np.ndarray | None = None
    epoch: np.ndarray | None = None
    valid: np.ndarray | None = None

    PER_TRIAL: ClassVar[dict[str, Any]] = _PER_TRIAL
    """The per-trial fields (the task's ``info`` keys kept from the step that ended each
    trial) and their dtypes."""

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
        """bool ``[N]``: the trials ended by a choice in a response epoch (other than
        the `opt_out_action`)."""
        chose = np.isin(self.outcome, (_CORRECT, _WRONG)) & (self.choice != 0)
        return chose & ~self.opted_out

    @property
    def opted_out(self) -> np.ndarray:
        """bool ``[N]``: the trials answered with the `opt_out_action` (all false
        without one)."""
        if self.opt_out_action is None:
            return np.zeros(self.outcome.shape, bool)
        ended = np.isin(self.outcome, (_CORRECT, _WRONG))
        return ended & (self.choice == self.opt_out_action)

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
        """bool ``[N]``: the trials given an answer, a decision, the `opt_out_action`
        or, where withholding is the answer (a no-go trial), a correct withholding."""
        withheld = (self.answer == 0) & (self.outcome == _CORRECT)
        return self.decided | withheld | self.opted_out

    @property
    def decision_rate(self) -> float:
        """Trials given an answer (`responded`: decided, opted out, or a correctly
        withheld no-go) over all trials."""
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

    def _grouped(self, name: str | None) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(keys [N], groups [G], table)``: each trial's group key and the sorted groups,
        by condition (``name=None``: the table starts with ``condition_index`` and every
        condition variable) or by the values of ``name`` (`_values`)."""
        if name is None:
            keys = self.condition_index
            groups, first = np.unique(keys, return_index=True)
            table: dict[str, np.ndarray] = {"condition_index": groups}
            table.update({k: v[first] for k, v in self.condition.items()})
            return keys, groups, table
        name, keys = self._values(name)
        groups = np.unique(keys)
        return keys, groups, {name: groups}

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
        keys, groups, table = self._grouped(name)
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

    @property
    def default_choices(self) -> tuple[int, int]:
        """The action pair a psychometric curve compares by default: ``(1, 2)``
        (P(action 2) among choices of 1 and 2), or ``(0, 1)`` for a task with a single
        choice (go/no-go: P(go) against withholding)."""
        return (0, 1) if len(self.action_names) == 2 else (1, 2)

    def label(self, name: str) -> str:
        """``name`` with its unit, for an axis: ``"signed_coherence (%)"``."""
        unit = self.condition_units.get(name)
        return f"{name} ({unit})" if unit else name

    def _choices(self, fn: str, choices: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """``(trials, chose_second, pair)``: the trials that ended in either action of
        the pair (``0``: withheld to the trial's end, neither aborted nor cut short),
        and which of them chose the second."""
        pair = self.default_choices if choices is None else choices
        known = len(self.action_names) or None
        valid = (
            isinstance(pair, tuple | list)
            and len(pair) == 2
            and all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in pair)
            and pair[0] != pair[1]
            and all(0 <= a < (known or 2**31) for a in pair)
        )
        if not valid:
            actions = dict(enumerate(self.action_names)) if known else "unknown"
            raise ValueError(
                f"{fn}: choices={choices!r} must be two different action indices (a, b), "
                f"the curve being P(b) among trials choosing a or b (0: withholding); the "
                f"task's actions are {actions}, so e.g. choices={self.default_choices}."
            )
        first, second = int(pair[0]), int(pair[1])
        ended = (self.outcome != _ONGOING) & (self.outcome != _ABORTED)
        trials = ended & np.isin(self.choice, (first, second))
        return trials, self.choice == second, (first, second)

    def choice_rate(
        self, variable: str | None = None, *, choices: tuple[int, int] | None = None
    ) -> dict[str, np.ndarray]:
        """The fraction of trials choosing the second action of ``choices`` among those
        choosing either, per value of a condition value, with its binomial standard
        error: the points of a psychometric curve, or P(go) per condition of go/no-go.

        Args:
            variable: The condition value (default `psychometric_variable`); where the
                results have none, per row of the condition table.
            choices: ``(a, b)``, action indices, ``0`` meaning withheld to the end
                (default `default_choices`).

        Returns:
            Columns ``[M]``: the grouping (``variable``'s values sorted, or
            ``condition_index`` and every condition value), ``n`` (trials choosing ``a``
            or ``b``), ``k`` (of them ``b``), ``p = k / n`` (``nan`` where ``n = 0``) and
            ``sem = sqrt(p (1 - p) / n)``.

        Raises:
            ValueError: If ``variable`` is not a condition value, or ``choices`` is not
                a pair of the task's actions.

        Examples:
            >>> results = TrialResults(
            ...     outcome=[1, 4, 2, 1], choice=[1, 0, 1, 0], answer=[1, 1, 0, 0],
            ...     decision_time=[1, -1, 1, -1], reaction_time=[1, -1, 1, -1],
            ...     condition_index=[1, 1, 0, 0], condition={"go": [1, 1, 0, 0]},
            ...     action_names=("fixate", "go"))
            >>> results.choice_rate("go")["p"].tolist()  # P(go) on no-go and go trials
            [0.5, 0.5]
        """
        trials, second, _ = self._choices("choice_rate", choices)
        if variable is None:  # the psychometric variable, or by condition without one
            variable = self.psychometric_variable or None
        keys, groups, table = self._grouped(variable)
        n = np.array([np.sum(trials & (keys == g)) for g in groups], np.int64)
        k = np.array([np.sum(trials & second & (keys == g)) for g in groups], np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(n > 0, k / np.maximum(n, 1), np.nan)
            sem = np.sqrt(p * (1.0 - p) / n)
        table.update(n=n, k=k, p=p, sem=sem)
        return table

    def psychometric(
        self,
        variable: str | None = None,
        kind: PsychometricKind = "logistic",
        *,
        lapse: float | None = None,
        choices: tuple[int, int] | None = None,
    ) -> PsychometricFit:
        """Fit the probability of the second action of ``choices`` among trials choosing
        either against a condition value (`fit_psychometric`); by default P(action 2)
        among choices of 1 and 2, or P(go) against withholding for a task with one
        choice (`default_choices`). Check the fit's `PsychometricFit.problems` before
        reporting its numbers.

        Args:
            variable: The condition value (default `psychometric_variable`, e.g.
                ``"signed_coherence"``).
            kind: ``"logistic"`` or ``"probit"``.
            lapse: ``None`` fits the lapse rate; a number fixes it.
            choices: ``(a, b)``, the action pair (``0``: withholding); default
                `default_choices`.

        Raises:
            ValueError: If ``variable`` is not a condition value, ``choices`` is not a
                pair of the task's actions, or the trials choosing either cover fewer
                than two of the variable's values.
        """
        name, x = self._values(variable)
        trials, second, (first, last) = self._choices("psychometric", choices)
        if not trials.any():
            what = "decided" if first else "decided or withheld"
            raise ValueError(
                f"psychometric: none of the {self.n_trials} trials was {what} with action "
                f"{first} or {last} (outcomes: {self.outcome_counts}); a psychometric curve "
                "needs choices."
            )
        return fit_psychometric(x[trials], second[trials], kind=kind, lapse=lapse, variable=name)

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
