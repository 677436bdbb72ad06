"""Hyperparameter search with Optuna that trains each round of trials as one program.

`run_search` is an ask/tell driver for an Optuna study: every round it asks the study for
``runs_per_round`` trials, trains them together as **one** `train_many` program (each
trial's values as that program's per-run overrides), tells the study each trial's
objective, and goes on to the next round, so the sampler learns from every finished
round::

    import optuna
    from optuna.distributions import FloatDistribution

    study = optuna.create_study(
        study_name="lstm-lr", storage="sqlite:///runs/search/study.db",
        direction="maximize", load_if_exists=True,
    )
    run_search(study, env, make_network, config,
               {"learning_rate": FloatDistribution(1e-4, 3e-2, log=True),
                "clip_range": FloatDistribution(0.05, 0.4)},
               rounds=4, runs_per_round=8, directory="runs/search")
    study.best_params

**What can be searched.** The fields the config declares sweepable (`sweep_fields`:
for PPO the learning rate, weight decay, gradient-clipping norm, clip range, critic
weight, value clip range, GAE lambda and discount), since every trial of a round is a
run of one program. A name outside them is refused before the study is asked anything,
with the valid names. Choices that change the program (the network's size or kind,
``n_envs``, the entropy weight) are not this driver's: search those with one study per
choice.

**The objective.** By default a trial's value is its final deterministic evaluation's
mean return (`final_return`; the study must maximize). ``objective=fn`` replaces it:
``fn(result, run) -> float`` gets the round's `SweepResult` and the index of one run.
The result's ``eval_histories`` and ``metrics`` are the whole round's, read back from the
round's log, also when the round was resumed. With several ``seeds`` every trial is
trained once per seed (``runs_per_round * len(seeds)`` runs in the program) and told the
mean over its seeds. Each round's ``results.json`` lists its trials with their
parameters and per-seed values (or why they failed). A value that is not finite fails
its trial; a run that diverges (`NonFiniteError`) fails its trial and ends its round:
the round's other trials are failed too (their program stopped), and the search goes on
with the next round. There is no pruning: a round's trials are one program, trained to
its end together.

**Resuming.** Everything the driver needs lives in the study's storage and in
``directory``: each trial records its round and its place in it (user attributes
``"nnx_ppo.round"`` and ``"nnx_ppo.slot"``), and each round trains in its own folder,
``<directory>/round_<r>/``, with a `Checkpointer` (``checkpoints/``), its log
(``log.jsonl``) and its trials (``trials.json``, written before training). A killed
driver started again with the same arguments (and the study
loaded from the same storage, e.g. ``load_if_exists=True`` on a SQLite file) finds the
round whose trials were asked but not told, resumes that round's program from its last
checkpoint (exactly, as `train_many` resumes), tells its trials and continues with the
remaining rounds. ``rounds`` counts the study's rounds in total, not this call's. With
``stop=StopOnSignal()`` a ``SIGTERM`` stops the round at a checkpoint and `run_search`
returns with ``stopped=True`` (the request is also asked before a new round
starts). The study remembers the search's config, space, seeds,
``runs_per_round`` and objective (by name; its user attribute ``"nnx_ppo.search"``) and
refuses to be continued with other ones. One driver works on a study at a time.

Optuna is an optional dependency: ``pip install "nnx-ppo-train[search]"``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import numpy as np
from flax import nnx

from nnx_ppo.algorithms._config_base import check_swept
from nnx_ppo.algorithms.analysis.curves import EVAL_REWARD
from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import DistillationConfig, TrainConfig, config_to_dict
from nnx_ppo.algorithms.core.faults import NonFiniteError
from nnx_ppo.algorithms.core.logging import RunLogFn
from nnx_ppo.algorithms.core.preemption import agreed_stop
from nnx_ppo.algorithms.sweeps.many import (
    SweepConfig,
    SweepResult,
    plan_runs,
    run_config,
    train_many,
)
from nnx_ppo.algorithms.trainer.options import RunOptions

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

__all__ = ["Objective", "SearchResult", "final_return", "run_search"]

Objective = Callable[[SweepResult, int], Any]
"""``objective(result, run) -> float`` (a sequence of floats for a multi-objective
study): the value of run ``run`` of a round's `SweepResult`."""

ROUND = "nnx_ppo.round"
SLOT = "nnx_ppo.slot"
SEARCH = "nnx_ppo.search"
_OWNED = ("checkpoint", "jsonl_path")  # run options the driver sets per round


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "nnx_ppo.algorithms.sweeps.search needs Optuna: pip install 'nnx-ppo-train[search]'."
        ) from error
    return optuna


def final_return(result: SweepResult, run: int) -> float:
    """The default objective: run ``run``'s last evaluation's mean return
    (``"eval/episode_reward/mean"``), the evaluation `train_many` runs at the end.

    Raises:
        ValueError: If the run has no evaluation (``config.eval.enabled=False``).
    """
    history = result.eval_histories[run]
    if not history or EVAL_REWARD not in history[-1][1]:
        raise ValueError(
            f"run {run} has no evaluation to score: enable config.eval or pass "
            "objective=fn(result, run) -> float."
        )
    return float(history[-1][1][EVAL_REWARD])


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """What `run_search` returns.

    Attributes:
        study: The study (also holding the rounds of earlier calls).
        rounds_done: The study's rounds whose trials are all told.
        stopped: Whether the ``stop`` request ended this call inside a round (after a
            checkpoint; call `run_search` again to continue).
    """

    study: optuna.Study
    rounds_done: int
    stopped: bool = False

    @property
    def best_params(self) -> dict[str, Any]:
        """The best finished trial's values (``study.best_params``)."""
        return dict(self.study.best_params)


# --------------------------------------------------------------------------- checks


def _check_space(
    config: TrainConfig | DistillationConfig, space: Any, optuna: Any
) -> dict[str, Any]:
    """Names sweepable, distributions Optuna's, and every value the space can take a
    valid config value (its bounds and choices tried with `plan_runs`)."""
    if not isinstance(space, Mapping) or not space:
        raise TypeError(
            f"space={space!r} must be a non-empty dict {{field: optuna distribution}}, e.g. "
            "{'learning_rate': FloatDistribution(1e-4, 1e-2, log=True)}."
        )
    algorithm = type(config.algorithm)
    for name, distribution in space.items():
        check_swept(algorithm, name, f"space[{name!r}]")
        if not isinstance(distribution, optuna.distributions.BaseDistribution):
            raise TypeError(
                f"space[{name!r}]={distribution!r} is not an Optuna distribution; use e.g. "
                "optuna.distributions.FloatDistribution(low, high, log=...)."
            )
        if isinstance(distribution, optuna.distributions.CategoricalDistribution):
            values = list(distribution.choices)
        else:
            values = [distribution.low, distribution.high]
        try:
            plan_runs(config, [0] * len(values), {name: values})
        except (TypeError, ValueError) as error:
            raise type(error)(
                f"space[{name!r}]={distribution!r} can take a value the config refuses: {error}"
            ) from error
    return dict(space)


def _fingerprint(
    config: Any, space: Mapping[str, Any], seeds: list[int], k: int, objective: Any
) -> str:
    """The search's identity: what its trials' values depend on (the objective by its
    qualified name)."""
    optuna = _optuna()
    name = getattr(objective, "__qualname__", type(objective).__qualname__)
    data = {
        "config": config_to_dict(config),
        "space": {n: optuna.distributions.distribution_to_json(d) for n, d in space.items()},
        "seeds": seeds,
        "runs_per_round": k,
        "objective": f"{getattr(objective, '__module__', '?')}.{name}",
    }
    return json.dumps(data, sort_keys=True)


def _claim(study: Any, fingerprint: str) -> None:
    """Record the search's identity in the study, or check it against the recorded one."""
    known = study.user_attrs.get(SEARCH)
    if known is None:
        study.set_user_attr(SEARCH, fingerprint)
        return
    if known != fingerprint:
        ours, theirs = json.loads(fingerprint), json.loads(known)
        differ = [key for key in ours if ours[key] != theirs.get(key)]
        raise ValueError(
            f"study {study.study_name!r} belongs to a search with another "
            f"{', '.join(differ)}; continue it with the same config, space, seeds, "
            "runs_per_round and objective, or create a new study (and directory) for this "
            "search."
        )


# --------------------------------------------------------------------------- rounds


def _rounds(study: Any) -> dict[int, list[Any]]:
    """The study's search trials by round, each round's in slot order."""
    rounds: dict[int, list[Any]] = {}
    for trial in study.get_trials(deepcopy=False):
        if ROUND in trial.user_attrs:
            rounds.setdefault(int(trial.user_attrs[ROUND]), []).append(trial)
    return {r: sorted(ts, key=lambda t: t.user_attrs[SLOT]) for r, ts in rounds.items()}


def _open_round(study: Any, k: int, optuna: Any) -> tuple[int, list[Any]]:
    """The round to train next and its trials so far: the unfinished round (asked, not
    all told) if there is one, else a new one with no trials."""
    running = optuna.trial.TrialState.RUNNING
    rounds = _rounds(study)
    for r in sorted(rounds):
        trials = rounds[r]
        if len(trials) < k or any(t.state == running for t in trials):
            return r, trials
    # Trials asked by a driver killed before it could record their round: never trained.
    for trial in study.get_trials(deepcopy=False, states=(running,)):
        if ROUND not in trial.user_attrs:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    return (max(rounds) + 1 if rounds else 0), []


def _fill(study: Any, r: int, trials: list[Any], k: int, space: Mapping[str, Any]) -> list[Any]:
    """``trials`` plus newly asked ones up to ``k``, in slot order (frozen trials)."""
    numbers = [t.number for t in trials]
    for slot in range(len(trials), k):
        trial = study.ask(fixed_distributions=dict(space))
        trial.set_user_attr(ROUND, r)
        trial.set_user_attr(SLOT, slot)
        numbers.append(trial.number)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    return [by_number[n] for n in numbers]


def _record_trials(folder: Path, trials: list[Any], seeds: list[int]) -> None:
    """Write the round's trials into its folder, or check that a folder left by an
    earlier attempt trained these very trials (else its checkpoint is another round's)."""
    data = {"trials": [t.number for t in trials], "params": [t.params for t in trials]}
    data["seeds"] = seeds  # type: ignore[assignment]
    path = folder / "trials.json"
    if path.exists():
        if json.loads(path.read_text()) != json.loads(json.dumps(data)):
            raise ValueError(
                f"{folder} holds a round of other trials than the study's (trials.json "
                "differs): the directory belongs to another study. Pass the directory "
                "of this study's search, or a new directory with a new study."
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(path, data)


def _from_log(result: SweepResult, path: Path) -> SweepResult:
    """``result`` with the evaluation histories and latest metrics of the whole round,
    read from its JSONL log (a resumed program's result holds only its own call's)."""
    if not path.exists():  # nothing was logged (no evaluation, no log due)
        return result
    histories: list[list[tuple[int, dict[str, float]]]] = [[] for _ in range(result.n_runs)]
    latest: list[dict[str, float]] = [{} for _ in range(result.n_runs)]
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            run, step = int(record.pop("run")), int(record.pop("step"))
            values = {k: math.nan if v is None else float(v) for k, v in record.items()}
            latest[run].update(values)
            evaluation = {k: v for k, v in values.items() if k.startswith("eval/")}
            if evaluation:
                histories[run].append((step, evaluation))
    return dataclasses.replace(result, eval_histories=histories, metrics=latest)


def _values(
    objective: Objective, result: SweepResult, trial: int, n_seeds: int, n_objectives: int
) -> np.ndarray:
    """``[n_seeds, n_objectives]``: the objective of each of trial ``trial``'s runs."""
    rows = []
    for run in range(trial * n_seeds, (trial + 1) * n_seeds):
        value = np.atleast_1d(np.asarray(objective(result, run), dtype=np.float64))
        if value.shape != (n_objectives,):
            raise ValueError(
                f"objective(result, {run}) returned {value.tolist()}: the study has "
                f"{n_objectives} objective(s), so it must return {n_objectives} number(s)."
            )
        rows.append(value)
    return np.stack(rows)


def _write_json(path: Path, data: Any) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(data, indent=1))
    os.replace(scratch, path)


def _tell_round(
    study: Any, folder: Path, trials: list[Any], outcomes: list[Any]
) -> list[dict[str, Any]]:
    """Tell the round's unfinished trials their outcome: a ``[n_seeds, n_objectives]``
    array of values (told their mean over seeds; not finite: failed) or a failure
    message; and write every trial's outcome to ``results.json`` first. Returns its
    rows."""
    optuna = _optuna()
    rows = []
    for trial, outcome in zip(trials, outcomes, strict=True):
        row: dict[str, Any] = {"trial": trial.number, "params": trial.params}
        if isinstance(outcome, str):
            row["failure"] = outcome
        else:
            mean = outcome.mean(axis=0)
            row["values"] = [[v if math.isfinite(v) else None for v in r] for r in outcome.tolist()]
            if np.all(np.isfinite(mean)):
                row["value"] = mean.tolist()
            else:
                row["failure"] = f"objective not finite: {mean.tolist()}"
        rows.append(row)
    _write_json(folder / "results.json", {"trials": rows})
    for trial, row in zip(trials, rows, strict=True):
        if trial.state != optuna.trial.TrialState.RUNNING:
            continue  # told before the driver was stopped
        if "failure" in row:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        else:
            value = row["value"]
            study.tell(trial.number, value if len(value) > 1 else value[0])
    return rows


def _report_round(study: Any, r: int, rounds: int, rows: list[dict[str, Any]]) -> None:
    """One line on stderr when a round is told: its trials, failures and the study's best
    so far (a single objective), so a batch job's log shows the search progressing."""
    failed = sum("failure" in row for row in rows)
    text = f"run_search: round {r + 1}/{rounds} told: {len(rows)} trials, {failed} failed"
    if len(study.directions) == 1:
        try:
            best = study.best_trial
        except ValueError:  # no trial completed yet
            best = None
        if best is not None:
            text += f"; best so far {best.value:.4g} (trial {best.number}, {best.params})"
    print(text, file=sys.stderr, flush=True)


def _divergence(trials: list[Any], error: NonFiniteError, n_seeds: int) -> list[str]:
    """Each trial's failure message when run ``error.run`` of the round diverged."""
    culprit = None if error.run is None else error.run // n_seeds
    return [
        f"diverged: {error}"
        if slot == culprit
        else "aborted: another trial of its round diverged, which stops the round's program"
        for slot in range(len(trials))
    ]


# --------------------------------------------------------------------------- the driver


def run_search(
    study: optuna.Study,
    env: Any,
    make_network: Callable[[nnx.Rngs], nnx.Module],
    config: SweepConfig,
    space: Mapping[str, BaseDistribution],
    *,
    rounds: int,
    runs_per_round: int,
    directory: str | os.PathLike[str],
    seeds: Sequence[int] = (0,),
    objective: Objective | None = None,
    save_every_steps: int | None = None,
    teacher: nnx.Module | None = None,
    **options: Unpack[RunOptions[RunLogFn]],
) -> SearchResult:
    """Search ``space`` with ``study`` in rounds of ``runs_per_round`` trials, each round
    one `train_many` program (see the module docstring).

    Args:
        study: The Optuna study (its sampler proposes, its storage remembers); load it
            from persistent storage (``"sqlite:///<file>"``) for a resumable search.
        env: The unbatched environment (as for `train_many`).
        make_network: ``make_network(rngs) -> network``, as for `train_many`.
        config: The base config; the trials' values replace its fields named in
            ``space``.
        space: ``{field: optuna distribution}`` for sweepable fields (`sweep_fields`).
        rounds: The study's rounds in total (a resumed search trains the rest).
        runs_per_round: Trials asked, trained and told together per round.
        directory: The search's folder: ``round_<r>/`` per round (checkpoints, log).
        seeds: Each trial trains once per seed and is told the mean over them
            (default one seed, 0, shared by all trials).
        objective: ``objective(result, run) -> float``; default `final_return`.
        save_every_steps: The rounds' checkpoint period in env steps (``None``: at the
            end of a round and when stopped only). A killed driver resumes its round
            from the last checkpoint.
        teacher: For a `DistillationConfig`: the teacher (as for `train_many`).
        **options: `train_many`'s run options, except ``checkpoint`` and ``jsonl_path``,
            which the driver sets for every round (``stop`` ends the search early).
            Unless ``progress=False``, every round's program shows its progress (a bar
            on a terminal, plain lines elsewhere) and the driver prints a line on
            stderr when a round is told (its trials, failures and the best so far).

    Returns:
        A `SearchResult`.

    Raises:
        ImportError: If Optuna is not installed.
        TypeError: If an argument is of the wrong kind or an option is one the driver
            sets.
        ValueError: Before a trial is asked: a field of ``space`` that is not
            sweepable (naming the valid ones) or bounds the config refuses, a study of
            another search (other config, space, seeds, ``runs_per_round`` or
            objective), a
            default objective without evaluation or with a study that minimizes; later,
            a round folder holding another study's trials.
    """
    optuna = _optuna()
    if not isinstance(study, optuna.Study):
        raise TypeError(f"study={study!r} must be an optuna.Study (optuna.create_study(...)).")
    for name, count in (("rounds", rounds), ("runs_per_round", runs_per_round)):
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"{name}={count!r} must be an int >= 1.")
        if count < 1:
            raise ValueError(f"{name}={count} must be >= 1.")
    owned = [name for name in _OWNED if name in options]
    if owned:
        raise TypeError(
            f"run_search() sets {', '.join(owned)} itself (a Checkpointer and a log per round, "
            "in directory/round_<r>/); leave them out."
        )
    seed_list = list(seeds)
    plan_runs(config, seed_list)  # the seeds' own checks
    train_config = run_config(config)
    space = _check_space(train_config, space, optuna)
    n_objectives = len(study.directions)
    if objective is None:
        if not train_config.eval.enabled:
            raise ValueError(
                "the default objective (final_return) scores the final evaluation, but "
                "config.eval.enabled=False: enable it or pass objective=fn(result, run)."
            )
        if study.directions != [optuna.study.StudyDirection.MAXIMIZE]:
            raise ValueError(
                f"study {study.study_name!r} has directions {study.directions}; the default "
                "objective (final_return) is a return to maximize: create the study with "
                "direction='maximize' or pass objective=fn(result, run)."
            )
        objective = final_return
    elif not callable(objective):
        raise TypeError(f"objective={objective!r} must be a function (result, run) -> float.")
    _claim(study, _fingerprint(train_config, space, seed_list, runs_per_round, objective))
    root = Path(directory).expanduser().absolute()
    n_seeds = len(seed_list)
    report = options.get("progress") is not False  # a line per round, as progress goes

    while True:
        r, trials = _open_round(study, runs_per_round, optuna)
        if r >= rounds:
            return SearchResult(study, len(_rounds(study)))
        stop = options.get("stop")
        if not trials and stop is not None and agreed_stop(stop):
            return SearchResult(study, r, stopped=True)  # asked to stop between rounds
        trials = _fill(study, r, trials, runs_per_round, space)
        folder = root / f"round_{r:04d}"
        _record_trials(folder, trials, seed_list)
        overrides = {name: [t.params[name] for t in trials for _ in seed_list] for name in space}
        with Checkpointer(
            folder / "checkpoints", config=train_config, save_every_steps=save_every_steps
        ) as checkpoint:
            try:
                result = train_many(
                    env,
                    make_network,
                    train_config,
                    seeds=[seed for _ in trials for seed in seed_list],
                    overrides=overrides,
                    teacher=teacher,
                    checkpoint=checkpoint,
                    jsonl_path=folder / "log.jsonl",
                    **options,
                )
            except NonFiniteError as error:
                rows = _tell_round(study, folder, trials, _divergence(trials, error, n_seeds))
                if report:
                    _report_round(study, r, rounds, rows)
                continue
        if result.stopped:
            return SearchResult(study, r, stopped=True)
        result = _from_log(result, folder / "log.jsonl")
        outcomes = [
            _values(objective, result, slot, n_seeds, n_objectives) for slot in range(len(trials))
        ]
        rows = _tell_round(study, folder, trials, outcomes)
        if report:
            _report_round(study, r, rounds, rows)
