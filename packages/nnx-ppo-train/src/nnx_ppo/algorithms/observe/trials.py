"""Trial-level evaluation of cognitive tasks: `evaluate_trials` and its results,
`TrialResults` (`nnx_ppo.algorithms.analysis.trial_results`, re-exported here).

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
rates, a table per condition, psychometric fits (`nnx_ppo.algorithms.analysis.psychometrics`)
and chronometric curves; `nnx_ppo.algorithms.analysis.plotting` draws the last two.

With ``record=True`` the results also hold the network's activations
(`nnx_ppo.networks.recording`), the observations, the actions and the epochs of every
step, ``[T, B, ...]`` with ``T = env.max_trial_steps`` and ``B = N``, and ``valid
[T, B]``, true on the steps that belong to the trial (up to and including the step that
ended it). Memory: ``T * B * U`` float32 numbers for ``U`` recorded units per trial
(see `nnx_ppo.algorithms.observe.activations`).

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

import numbers
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.algorithms.analysis.trial_results import TrialResults
from nnx_ppo.algorithms.core.checks import check_env_network
from nnx_ppo.algorithms.core.rollout import network_step, ppo_output, split_network
from nnx_ppo.networks.recording import extract_activations, is_recording, with_recording
from nnx_ppo.networks.types import StatefulModule

__all__ = ["TrialResults", "evaluate_trials", "evaluate_trials_many"]


class _Runs(Protocol):
    """What `evaluate_trials_many` reads of a sweep's result (`train_many`'s
    `SweepResult`, `merge_shards`' `MergedSweep`): the runs and each run's network."""

    n_runs: int

    def network(self, run: int) -> nnx.Module: ...


_SAMPLING = 0x7361  # fold_in data of the samplers' keys with deterministic=False


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
        keep = lambda info: {k: info[k] for k in (*TrialResults.PER_TRIAL, "condition")}

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
        **{k: final[k] for k in TrialResults.PER_TRIAL},
        condition=dict(final["condition"]),
        psychometric_variable=str(getattr(env, "psychometric_variable", "")),
        criterion=tuple(getattr(env, "criterion", (0.99, 0.8))),
        epoch_names=tuple(getattr(env, "epochs", ())),
        action_names=tuple(getattr(env, "actions", ())),
        condition_units=dict(getattr(env, "condition_units", {})),
        opt_out_action=getattr(env, "opt_out_action", None),
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
    sweep: _Runs,
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
