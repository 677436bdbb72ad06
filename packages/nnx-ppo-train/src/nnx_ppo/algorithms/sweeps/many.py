"""Many runs in one program: seeds and hyperparameter sweeps (`train_many`), of PPO or
of distillation.

``train_many(env, make_network, config, seeds=[0, 1, 2, 3])`` trains one run per seed,
all in **one** jitted XLA program: the network factory is called once per seed
(``make_network(nnx.Rngs(seed))``, so every run starts from its own parameters), the
runs' training states are stacked along a leading *run axis* and the PPO iteration is
``jax.vmap``-ed over it. Runs may also differ in numeric hyperparameters
(``overrides={"learning_rate": [3e-4, 1e-3, ...]}``, one value per run): those enter
the program as traced ``[K]`` arrays instead of constants.

Run ``i`` is the run ``train_ppo(env, make_network(nnx.Rngs(seeds[i])), config_i)``
would train, with ``config_i`` the base config with ``seed=seeds[i]`` and run ``i``'s
overrides (`SweepResult.configs`): the same initial state, the same keys, the same
updates, the same models under domain randomization, the same videos. With a
`DistillationConfig` and ``teacher=``, run ``i`` is ``train_distillation(env, teacher,
make_network(nnx.Rngs(seeds[i])), config_i)`` (one teacher, shared by every run). Both
are `trainer.run` with ``runs=K``: the single-run path, vmapped. Its numbers agree
with that run's to float32 rounding, not bit for bit:
vmapping changes how XLA fuses and orders some reductions, and traced config values
are not folded into the program as constants.

**What can differ between runs.** The fields each config declares sweepable
(`sweep_fields`; for PPO `TRACEABLE_FIELDS`: learning rate, weight decay,
gradient-clipping norm, clip range, critic weight, value clip range, GAE lambda,
discount; for distillation the first three and the regularization weight). Every other
field says why it cannot (`why_fixed`): it sizes an array or a loop of the one program
(``n_envs``, ``rollout_length``, ``n_minibatches``, ``n_epochs``,
``iterations_per_call``, and ``total_steps``, since all runs share the loop), selects
which code is compiled (the booleans and choices), or is compiled in as the adaptive-KL
rule's constants. A learning-rate *schedule* is Python code and cannot vary either (a
float rate can), nor can ``None`` versus a number for ``max_grad_norm`` /
``value_clip_range`` (it removes a transform or a term). Two quantities often swept are
not config fields: the **entropy weight** is an attribute of the network's sampler and
the **reward scale** a constant of the environment's `RewardScalingWrapper`; both are
static parts of the one network or environment the runs share, so a factory that builds
different entropy weights per seed is rejected as a network of another structure. Sweep
those with one `train_many` per value.

**Results per run.** `SweepResult` holds each run's evaluation history and final
metrics; ``result.network(i)`` is run ``i``'s trained network as an ordinary module
(for `evaluate`, export or as the template of `load_network`). Logging happens per run:
``log_fn(metrics, step, run)`` (`RunLogFn`; `PerRun` gives every run its own
TensorBoard or W&B sink), JSONL lines carry a ``"run"`` field, and one progress bar
counts the env steps of all runs. A `Checkpointer` saves the whole sweep (the stacked
state) and resumes it exactly; ``load_network(directory, template, run=i)`` reads one
run's network from it. Videos (``config.video``) are every run's, in
``<directory>/run_<i>/``.

**Devices.** As for `train_ppo`, ``devices=None`` uses every device. On a mesh the
runs are *replicated* and the environments *sharded*: every device holds all ``K``
runs' parameters and optimizer states and its slice of every run's environments (the
environment axis, axis 1 of the stacked batch fields, along the mesh's ``"data"`` axis),
so ``n_envs`` must be a multiple of ``n_minibatches`` times the device count, as for one
run, and gradients are reduced across devices per run. The result equals a one-device
sweep up to float32 reduction order. One process only (no ``jax.distributed``).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Unpack

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.algorithms._config_base import check_swept
from nnx_ppo.algorithms.config import (
    DistillationConfig,
    PPOConfig,
    TrainConfig,
    why_fixed,
)
from nnx_ppo.algorithms.core.distributed import state_shardings
from nnx_ppo.algorithms.core.logging import RunLogFn
from nnx_ppo.algorithms.core.rollout import split_network
from nnx_ppo.algorithms.core.trees import key_path
from nnx_ppo.algorithms.distillation.pairing import TargetFn
from nnx_ppo.algorithms.distillation.train import distillation_algorithm
from nnx_ppo.algorithms.ppo.iteration import TRACEABLE_FIELDS
from nnx_ppo.algorithms.ppo.train import as_train_config, ppo_algorithm
from nnx_ppo.algorithms.trainer.options import RunOptions, resolve_options
from nnx_ppo.algorithms.trainer.run_axis import Runs
from nnx_ppo.algorithms.trainer.skeleton import Algorithm, run
from nnx_ppo.algorithms.types import TrainState

__all__ = [
    "TRACEABLE_FIELDS",
    "SweepResult",
    "grid",
    "plan_runs",
    "run_config",
    "sweep_shardings",
    "train_many",
]

SweepConfig = TrainConfig | PPOConfig | DistillationConfig
"""The base config of a sweep: PPO's (a bare `PPOConfig` gets the default evaluation)
or distillation's."""


def run_config(config: SweepConfig) -> TrainConfig | DistillationConfig:
    """The config each run of a sweep starts from: a `DistillationConfig` as it is, a
    `TrainConfig` as it is, a bare `PPOConfig` in a `TrainConfig` with the default
    evaluation, video and logging (`as_train_config`).

    Examples:
        >>> run_config(PPOConfig(n_envs=8, n_minibatches=2)).eval.enabled
        True
    """
    return config if isinstance(config, DistillationConfig) else as_train_config(config)


def sweep_shardings(state: Any, mesh: Any) -> Any:
    """The layout of a sweep's state on ``mesh``: the batch fields' environment axis
    (axis 1, after the run axis) sharded along ``"data"``, everything else (every run's
    parameters, optimizer state, keys, counters) replicated (`state_shardings` with
    ``axis=1``).

    Returns:
        A state of the same structure whose leaves are ``NamedSharding``.
    """
    return state_shardings(state, mesh, axis=1)


# --------------------------------------------------------------------------- planning


def grid(**values: Sequence[Any]) -> dict[str, list[Any]]:
    """The Cartesian product of per-field choices as `train_many` overrides (and seeds).

    Args:
        **values: Field name -> the values to try; ``seeds=[...]`` may be one of them.

    Returns:
        ``{name: [value of run 0, value of run 1, ...]}``, one entry per combination, the
        last name varying fastest.

    Examples:
        >>> runs = grid(seeds=[0, 1], learning_rate=[1e-3, 3e-4])
        >>> runs["seeds"], runs["learning_rate"]
        ([0, 0, 1, 1], [0.001, 0.0003, 0.001, 0.0003])
        >>> seeds = runs.pop("seeds")  # then: train_many(..., seeds=seeds, overrides=runs)
    """
    names = list(values)
    for name, choices in values.items():
        if isinstance(choices, str | bytes) or not isinstance(choices, Iterable):
            raise TypeError(f"grid: {name}={choices!r} must be a list of values to try.")
    combos = list(itertools.product(*(list(values[name]) for name in names)))
    return {name: [combo[i] for combo in combos] for i, name in enumerate(names)}


def _seeds_of(seeds: Any) -> list[int]:
    if isinstance(seeds, int | str | bytes) or not isinstance(seeds, Iterable):
        raise TypeError(
            f"seeds={seeds!r} must be a list of ints, one per run (e.g. seeds=range(5) "
            "for five runs)."
        )
    out = list(seeds)
    if not out:
        raise ValueError("seeds=[] gives no run: pass at least one seed (K >= 1 runs).")
    for seed in out:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise TypeError(f"seeds={out!r}: {seed!r} is not a non-negative int seed.")
    return [int(seed) for seed in out]


def _check_override_name(config: TrainConfig | DistillationConfig, name: Any) -> None:
    where = f"overrides[{name!r}]"
    if name in ("eval", "video", "log_every_calls"):
        raise ValueError(
            f"{where}: the {type(config).__name__}'s {name} is shared by every run of a "
            f"sweep ({why_fixed(type(config), name)})."
        )
    check_swept(type(config.algorithm), name, where)


def plan_runs(
    config: SweepConfig,
    seeds: Iterable[int],
    overrides: Mapping[str, Sequence[Any]] | None = None,
) -> list[Any]:
    """Each run's own validated config: ``config`` with ``seed=seeds[i]`` and run
    ``i``'s override values, checked as usual when built.

    Args:
        config: The base config: a `TrainConfig` (a bare `PPOConfig` gets the default
            evaluation) or a `DistillationConfig`.
        seeds: One seed per run (``K = len(seeds) >= 1``); it seeds both the network
            factory's ``nnx.Rngs`` and the run's key (the config's ``seed``).
        overrides: ``{field: [value of run 0, ..., value of run K-1]}`` for fields the
            algorithm's config declares sweepable (`sweep_fields`).

    Returns:
        ``K`` configs of the base config's kind.

    Raises:
        TypeError: If ``config`` is not a config, ``seeds`` not a list of non-negative
            ints, an override not a list, or a value of the wrong type (named with its
            run).
        ValueError: If there are no seeds, an override list's length is not ``K``, a
            name is not a field or cannot differ between runs (the message says why,
            `why_fixed`), a value is out of range (named with its run and seed), or a
            learning rate is a schedule or an optional value ``None`` where the runs
            need a number.

    Examples:
        >>> base = PPOConfig(n_envs=8, n_minibatches=2)
        >>> runs = plan_runs(base, [0, 1], {"clip_range": [0.1, 0.3]})
        >>> [(run.seed, run.ppo.clip_range) for run in runs]
        [(0, 0.1), (1, 0.3)]
        >>> plan_runs(base, [0, 1], {"n_envs": [8, 16]})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: overrides['n_envs'] cannot differ between the runs of one program: ...
    """
    config = run_config(config)
    seed_list = _seeds_of(seeds)
    k = len(seed_list)
    overrides = {} if overrides is None else overrides
    if not isinstance(overrides, Mapping):
        raise TypeError(
            f"overrides={overrides!r} must be a dict {{field: [one value per run]}}, "
            "e.g. {'learning_rate': [1e-3, 3e-4]}."
        )
    values: dict[str, list[Any]] = {}
    for name, column in overrides.items():
        _check_override_name(config, name)
        if isinstance(column, str | bytes) or not isinstance(column, Sequence | np.ndarray):
            raise TypeError(
                f"overrides[{name!r}]={column!r} must be a list with one value per run ({k} runs)."
            )
        values[name] = list(column)
    lengths = {name: len(column) for name, column in values.items()}
    if any(n != k for n in lengths.values()):
        raise ValueError(
            f"the override lists and seeds have different lengths ({k} seeds; "
            + ", ".join(f"{name}: {n}" for name, n in lengths.items())
            + "): give every field one value per run, in the order of the seeds (grid() "
            "builds the product of choices)."
        )
    runs = []
    for i, seed in enumerate(seed_list):
        mine = {name: column[i] for name, column in values.items()}
        where = f"run {i} (seed {seed}, {mine})" if mine else f"run {i} (seed {seed})"
        try:
            runs.append(config.with_run(seed, mine))
        except (TypeError, ValueError) as error:
            raise type(error)(f"{where}: {error}") from error
    return runs


def _values(runs: Sequence[Any], names: Iterable[str]) -> dict[str, jax.Array]:
    """float32 ``[K]`` per overridden field: the runs' values, the iteration's inputs."""
    return {
        name: jnp.asarray([float(getattr(run.algorithm, name)) for run in runs], jnp.float32)
        for name in names
    }


# --------------------------------------------------------------------------- networks


def _layout(state: nnx.State) -> dict[str, tuple[tuple[int, ...], str]]:
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {key_path(path): (tuple(np.shape(x)), str(jnp.result_type(x))) for path, x in leaves}


def _build_networks(
    make_network: Callable[[nnx.Rngs], nnx.Module], seeds: Sequence[int]
) -> tuple[list[nnx.Module], nnx.GraphDef, list[nnx.State], list[nnx.State]]:
    """Call the factory once per seed and check that every network has the first one's
    structure (graph, variable paths, shapes and dtypes): ``(networks, graphdef,
    params, network_states)``."""
    if not callable(make_network):
        raise TypeError(
            f"make_network={make_network!r} must be a function rngs -> network, e.g. "
            "lambda rngs: make_mlp_actor_critic(obs_size, action_size, (32,), (32,), "
            "rngs=rngs)."
        )
    networks, params, network_states = [], [], []
    graphdef, first, first_text = None, None, ""
    for seed in seeds:
        network = make_network(nnx.Rngs(seed))
        if not isinstance(network, nnx.Module):
            raise TypeError(
                f"make_network(nnx.Rngs({seed})) returned {type(network).__name__}, not an "
                "nnx.Module; it must build and return the PPO network."
            )
        network.train()
        this_graphdef, this_params, this_state = split_network(network)
        layout = {"params": _layout(this_params), "network_state": _layout(this_state)}
        if first is None:
            graphdef, first, first_text = this_graphdef, layout, _static_text(this_graphdef)
        else:
            same_graph = _static_text(this_graphdef) == first_text
            _check_same(first, layout, same_graph, seeds[0], seed)
        networks.append(network)
        params.append(this_params)
        network_states.append(this_state)
    assert graphdef is not None
    return networks, graphdef, params, network_states


def _static_text(graphdef: nnx.GraphDef) -> str:
    """The graph definition's text without object addresses: the module layout and
    constant attributes, with a function compared by its name (a factory that builds
    ``Filter(lambda x: ...)`` makes a new function object per call, the same code)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(graphdef))


def _check_same(
    first: dict[str, dict[str, Any]],
    other: dict[str, dict[str, Any]],
    same_graph: bool,
    first_seed: int,
    seed: int,
) -> None:
    for group in ("params", "network_state"):
        a, b = first[group], other[group]
        for path in list(a) + [p for p in b if p not in a]:
            if a.get(path) != b.get(path):
                mine = "missing" if path not in b else f"shape {b[path][0]}, {b[path][1]}"
                theirs = "missing" if path not in a else f"shape {a[path][0]}, {a[path][1]}"
                raise ValueError(
                    f"make_network(nnx.Rngs({seed})) built a network of another structure "
                    f"than for seed {first_seed}: {group} '{path}' is {mine} there and "
                    f"{theirs} for seed {first_seed}. The runs of a sweep share one "
                    "program, so the factory must build the same network for every seed "
                    "(only the initial values may differ)."
                )
    if not same_graph:
        raise ValueError(
            f"make_network(nnx.Rngs({seed})) built a network whose static structure differs "
            f"from seed {first_seed}'s (same variables, but another module layout or a "
            "constant attribute such as an activation or a sampler's entropy_weight). The "
            "runs of a sweep share one program, so the factory must build the same network "
            "for every seed; sweep such a constant with one train_many per value."
        )


def _stack(trees: Sequence[Any]) -> Any:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def _take(tree: Any, run: int) -> Any:
    """Run ``run``'s slice of every leaf, as plain copies on the default device."""
    device = jax.devices()[0]
    return jax.tree.map(lambda x: jax.device_put(jnp.copy(x[run]), device), tree)


# --------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What `train_many` returns.

    Attributes:
        state: The final `TrainState` of all runs, every leaf with a leading ``[K]``
            run axis.
        graphdef: The networks' ``GraphDef`` (train mode).
        configs: Each run's own config (seed and overrides applied): a `TrainConfig`
            for PPO runs, a `DistillationConfig` for distillation runs.
        eval_histories: Per run, ``[(step, eval_metrics), ...]`` of the evaluations this
            call ran (as `RunResult.eval_history`).
        metrics: Per run, the last logged training metrics (and evaluation's), floats.
        total_steps: Env steps trained by each run, an exact ``int`` (all runs together
            trained ``n_runs * total_steps``).
        stopped: Whether the ``stop`` request ended the sweep early (after a checkpoint;
            resume to continue).
    """

    state: TrainState
    graphdef: nnx.GraphDef
    configs: tuple[TrainConfig | DistillationConfig, ...]
    eval_histories: list[list[tuple[int, dict[str, float]]]]
    metrics: list[dict[str, float]]
    total_steps: int
    stopped: bool = False

    @property
    def n_runs(self) -> int:
        """``K``, the number of runs."""
        return len(self.configs)

    @property
    def seeds(self) -> list[int]:
        """The runs' seeds, in order."""
        return [config.seed for config in self.configs]

    def _check_run(self, run: Any) -> int:
        if isinstance(run, bool) or not isinstance(run, int | np.integer):
            raise TypeError(f"run={run!r} must be an int run index in [0, {self.n_runs}).")
        if not 0 <= run < self.n_runs:
            raise IndexError(
                f"run={run} is not a run of this sweep: indices are 0..{self.n_runs - 1}."
            )
        return int(run)

    def run_state(self, run: int) -> TrainState:
        """Run ``run``'s `TrainState` (copies, no run axis): what its own `train_ppo`
        run would have ended with."""
        return _take(self.state, self._check_run(run))

    def network(self, run: int) -> nnx.Module:
        """Run ``run``'s trained network: a new module of the factory's class (in
        ``train()`` mode) holding copies of that run's parameters and statistics.

        Raises:
            TypeError: If ``run`` is not an int.
            IndexError: If ``run`` is not in ``[0, n_runs)``.
        """
        run = self._check_run(run)
        network = nnx.merge(
            self.graphdef, _take(self.state.params, run), _take(self.state.network_state, run)
        )
        network.train()
        return network


# --------------------------------------------------------------------------- training


def train_many(
    env: Any,
    make_network: Callable[[nnx.Rngs], nnx.Module],
    config: SweepConfig,
    *,
    seeds: Iterable[int],
    overrides: Mapping[str, Sequence[Any]] | None = None,
    teacher: nnx.Module | None = None,
    target_fn: TargetFn | None = None,
    algorithm: Algorithm | None = None,
    **options: Unpack[RunOptions[RunLogFn]],
) -> SweepResult:
    """Train ``K = len(seeds)`` runs in one jitted program (see the module docstring).

    Args:
        env: The unbatched environment (as for `train_ppo`).
        make_network: ``make_network(rngs) -> network``, called once per seed with
            ``nnx.Rngs(seed)``; every call must build the same structure.
        config: The base config; its ``seed`` is replaced by each run's. A `TrainConfig`
            (or a bare `PPOConfig`) trains PPO runs; a `DistillationConfig` (with
            ``teacher``) distills the teacher into each run's network.
        seeds: One seed per run, ``K >= 1``.
        overrides: ``{field: [one value per run]}`` for the fields the algorithm's
            config declares sweepable (`sweep_fields`; `grid` builds a product of
            choices).
        teacher: The teacher of a distillation sweep (as for `train_distillation`),
            shared by every run; only with a `DistillationConfig`.
        target_fn: A distillation sweep's ``target_fn(teacher_extras,
            student_extras)``, as for `train_distillation` (only with ``teacher``).
        algorithm: A variant of PPO to train instead of `ppo_algorithm`'s: an
            `Algorithm` record whose iteration factory builds the variant (e.g.
            `make_training_iteration` with its ``advantage_fn`` or
            ``statistics_first``). Only without ``teacher``.
        **options: The run options, `RunOptions`, as for `train_ppo` (each documented
            there with its default). Particular to a sweep: ``log_fn`` is called as
            ``log_fn(metrics, step, run)`` (`RunLogFn`), once per run per log (`PerRun`
            gives each run its own sink); ``progress`` shows one bar over the env
            steps of all runs; ``jsonl_path`` gets one line per run per log, with a
            ``"run"`` field; ``checkpoint`` saves the stacked state of the whole sweep
            and resumes it exactly (pass the same ``seeds``, ``overrides`` and factory
            again); on a ``mesh`` the runs are replicated and the environments sharded
            (see the module docstring); with ``randomization_fn`` each run draws its
            environments' models from its own key, as its own run with the same seed
            does (and redraws them every ``redraw_every`` iterations).

    Returns:
        A `SweepResult`.

    Raises:
        TypeError: If an argument is of the wrong kind, an option is not a run option
            (`resolve_options`), ``make_network`` does not return a module,
            ``teacher`` is missing for (or given without) a `DistillationConfig`,
            ``target_fn`` is given without ``teacher``, or ``algorithm`` is not an
            `Algorithm` or is given with ``teacher``.
        ValueError: Before anything is compiled: no seeds, an invalid or fixed
            override (`plan_runs`), a factory building different structures for
            different seeds (naming the variable and the seed), a network that does not
            fit the environment (or the teacher), a video the eval environment cannot
            render, invalid ``devices`` / ``mesh``, ``n_envs`` not a multiple of
            ``n_minibatches`` times the devices, or several processes.
        NonFiniteError: If a run diverges (its index is in the message and ``run``).
    """
    distills = isinstance(config, DistillationConfig)
    if distills != (teacher is not None):
        raise TypeError(
            f"teacher={type(teacher).__name__ if teacher is not None else None} with a "
            f"{type(config).__name__}: a distillation sweep takes a DistillationConfig and "
            "teacher=<the trained network>; a PPO sweep a TrainConfig or PPOConfig and no "
            "teacher."
        )
    if target_fn is not None and teacher is None:
        raise TypeError(
            f"target_fn={target_fn!r} without a teacher: target_fn builds a distillation "
            "sweep's targets from the teacher's rollout_extras; pass teacher=... and a "
            "DistillationConfig, or leave target_fn out."
        )
    if algorithm is not None and not isinstance(algorithm, Algorithm):
        raise TypeError(
            f"algorithm={algorithm!r} must be an Algorithm record: a variant of PPO, e.g. "
            "ppo_algorithm() with another prepare (dataclasses.replace)."
        )
    if algorithm is not None and teacher is not None:
        raise TypeError(
            f"algorithm={algorithm.name!r} with a teacher: a teacher makes the sweep a "
            "distillation, which has its own algorithm; pass one or the other."
        )
    runs = plan_runs(config, seeds, overrides)
    # Run 0's config decides the program; the overridden fields are inputs of it.
    base = runs[0]
    settings = resolve_options("train_many", options, env=env)
    seed_list = [run.seed for run in runs]
    networks, graphdef, params, network_states = _build_networks(make_network, seed_list)
    if teacher is not None:
        algorithm = distillation_algorithm(teacher, networks[0], target_fn=target_fn)
    elif algorithm is None:
        algorithm = ppo_algorithm()
    k = len(runs)
    algorithm = dataclasses.replace(algorithm, name=f"train_many ({k} runs)")
    stacked = Runs(
        seeds=tuple(seed_list),
        params=_stack(params),
        network_states=_stack(network_states),
        values=_values(runs, (overrides or {}).keys()),
    )
    loop = run(algorithm, env, networks[0], base, settings, runs=stacked)
    histories: list[list[tuple[int, dict[str, float]]]] = [[] for _ in range(k)]
    for at_step, records in loop.eval_history:
        for index, record in enumerate(records):
            histories[index].append((at_step, record))
    return SweepResult(
        state=loop.state,
        graphdef=graphdef,
        configs=tuple(runs),
        eval_histories=histories,
        metrics=list(loop.metrics),
        total_steps=loop.step,
        stopped=loop.stopped,
    )
