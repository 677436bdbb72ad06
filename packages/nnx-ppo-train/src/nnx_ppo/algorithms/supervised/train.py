"""`train_supervised`: the PPO networks trained by BPTT on a task's trial datasets.

Each update draws a fresh batch of trials (`trial_dataset`), runs the network step by
step from its initial carry over them in ``eval()`` mode (its samplers return their
mode and draw nothing), reads the action logits from its `CategoricalSampler` (the
distribution parameters the sampler reports, `record_sampler_calls`) and takes one
optax step on the masked cross-entropy against the targets; the network's running
statistics (a `Normalizer`'s) are then updated with the batch, as PPO updates them with
a rollout (every step counts, padding included). ``K`` seeds train in one jitted program,
vmapped over a leading run axis as `train_many`'s runs are; run ``i`` equals the run
with ``seeds=[seeds[i]]`` alone, to float32 rounding.

The networks are the PPO trainers' own (e.g. the cognitive app's GRU actor-critic,
`make_recurrent_actor_critic` with ``action_distribution="categorical"``): the result's
networks go unchanged to `evaluate_trials`, export, `train_ppo` (fine-tuning starts
from the network it is given) and `train_many` (``make_network=result.make_network``,
``seeds=result.seeds``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from nnx_ppo.algorithms.core.rollout import eval_graphdef, split_network
from nnx_ppo.algorithms.supervised.config import SupervisedConfig
from nnx_ppo.envs.cognitive import CognitiveTask, TrialDataset, trial_dataset
from nnx_ppo.networks.sampling_layers import CategoricalSampler, record_sampler_calls

__all__ = ["SupervisedLogFn", "SupervisedResult", "train_supervised"]

SupervisedLogFn = Callable[[dict[str, float], int, int], None]
"""``log_fn(metrics, update, run)``: one call per run per update, after each device
call; ``metrics`` are the `SupervisedResult.curves` values of that update."""

CURVES = ("loss", "cross_entropy", "accuracy", "step_accuracy")


@dataclasses.dataclass(frozen=True)
class SupervisedResult:
    """What `train_supervised` returns.

    Attributes:
        graphdef: The networks' ``GraphDef`` (train mode).
        params: Every run's parameters, leaves with a leading ``[K]`` run axis.
        network_state: Every run's other network state (statistics, RNG streams),
            ``[K, ...]``.
        seeds: The runs' seeds, in order.
        config: The config the runs shared (``seed`` is each run's own).
        curves: ``{name: float32 [K, n_updates]}``, one point per update, measured on
            that update's batch before its step: ``loss`` (what was minimised),
            ``cross_entropy`` (its masked mean over steps), ``accuracy`` (the fraction
            of trials the network, choosing its most likely action, would end
            correctly by the task's rules: `TrialDataset.correct`) and
            ``step_accuracy`` (masked steps whose most likely action is the target).
    """

    graphdef: nnx.GraphDef
    params: nnx.State
    network_state: nnx.State
    seeds: tuple[int, ...]
    config: SupervisedConfig
    curves: dict[str, np.ndarray]

    @property
    def n_runs(self) -> int:
        """``K``, the number of runs."""
        return len(self.seeds)

    def network(self, run: int = 0) -> nnx.Module:
        """Run ``run``'s trained network: a new module (``train()`` mode) holding copies
        of its parameters and statistics, for evaluation, export or PPO.

        Raises:
            IndexError: If ``run`` is not in ``[0, n_runs)``.
        """
        if isinstance(run, bool) or not isinstance(run, int | np.integer):
            raise TypeError(f"run={run!r} must be an int run index in [0, {self.n_runs}).")
        if not 0 <= run < self.n_runs:
            raise IndexError(f"run={run} is not a run of this result: 0..{self.n_runs - 1}.")
        take = lambda tree: jax.tree.map(lambda x: jnp.copy(x[run]), tree)
        network = nnx.merge(self.graphdef, take(self.params), take(self.network_state))
        network.train()
        return network

    @property
    def networks(self) -> list[nnx.Module]:
        """Every run's trained network, in the order of `seeds`."""
        return [self.network(i) for i in range(self.n_runs)]

    def make_network(self, rngs: nnx.Rngs) -> nnx.Module:
        """A network factory for `train_many`: ``make_network(nnx.Rngs(seed))`` gives
        the trained network of the run with that seed, so ``train_many(env,
        result.make_network, config, seeds=result.seeds)`` fine-tunes every run with
        PPO from where supervised training left it.

        Raises:
            ValueError: If ``rngs`` was not made from one of the runs' seeds.
        """
        key = jax.random.key_data(rngs.default.key[...])
        for run, seed in enumerate(self.seeds):
            if np.array_equal(key, jax.random.key_data(jax.random.key(seed))):
                return self.network(run)
        raise ValueError(
            f"make_network: these rngs were not made as nnx.Rngs(seed) from a seed of the "
            f"runs {list(self.seeds)}; train_many(..., seeds=result.seeds) passes them."
        )


# --------------------------------------------------------------------------- checks


def _check_task(task: Any) -> CognitiveTask:
    if not isinstance(task, CognitiveTask):
        why = (
            "it has no trial structure to give inputs, targets and a loss mask"
            if getattr(task, "discrete", False)
            else "a continuous-action environment has no correct action per step to "
            "train against (no targets)"
        )
        raise TypeError(
            f"train_supervised: task={type(task).__name__} cannot be trained supervised: "
            f"{why}. Pass an (unwrapped) cognitive task of nnx_ppo.envs.cognitive, or a "
            "CognitiveTask subclass of your own; train other environments with train_ppo."
        )
    return task


def _check_network(network: Any, task: CognitiveTask, seed: int) -> None:
    """One categorical sampler with one logit per task action (traced abstractly)."""
    if not isinstance(network, nnx.Module) or not hasattr(network, "initialize_state"):
        raise TypeError(
            f"make_network(nnx.Rngs({seed})) returned {type(network).__name__}, not a "
            "StatefulModule network; return the PPO network (e.g. a GRU actor-critic)."
        )
    found: list[tuple[bool, str, tuple[int, ...]]] = []
    graphdef, params, state = split_network(network)
    graphdef = eval_graphdef(network)

    def probe(obs: Any) -> None:
        model = nnx.merge(graphdef, params, state)
        with record_sampler_calls() as calls:
            model(model.initialize_state(1), obs)
        found.extend(
            (
                isinstance(c.sampler, CategoricalSampler),
                type(c.sampler).__name__,
                tuple(jax.tree.leaves(c.params)[0].shape),
            )
            for c in calls
        )

    size = task.observation_size
    if task.dict_obs:
        obs: Any = {k: jnp.zeros((1, *shape), jnp.float32) for k, shape in size.items()}
    else:
        obs = jnp.zeros((1, size), jnp.float32)
    try:
        jax.eval_shape(probe, obs)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"train_supervised: the network of seed {seed} does not take the task's "
            f"observations ({task.observation_size}): {error}"
        ) from error
    n_actions = task.action_size
    if len(found) != 1 or not found[0][0] or found[0][2][-1:] != (n_actions,):
        raise ValueError(
            f"train_supervised: the network of seed {seed} has the samplers "
            f"{[f'{name}{list(shape)}' for _, name, shape in found]}; supervised training "
            f"needs exactly one CategoricalSampler with {n_actions} logits (the task's "
            f"actions {list(task.actions)}), whose log-probabilities the cross-entropy "
            "reads. Build the network with action_distribution='categorical' and "
            "action_size=task.action_size."
        )


def _build(
    make_network: Callable[[nnx.Rngs], nnx.Module], seeds: list[int], task: CognitiveTask
) -> tuple[nnx.Module, list[nnx.State], list[nnx.State]]:
    if not callable(make_network):
        raise TypeError(f"make_network={make_network!r} must be a function rngs -> network.")
    first: nnx.Module | None = None
    params, states, structure = [], [], None
    for seed in seeds:
        network = make_network(nnx.Rngs(seed))
        _check_network(network, task, seed)
        network.train()
        _, p, s = split_network(network)
        leaves = jax.tree_util.tree_flatten_with_path((p, s))[0]
        layout = [(jax.tree_util.keystr(k), np.shape(x), str(x.dtype)) for k, x in leaves]
        if first is None:
            first, structure = network, layout
        elif layout != structure:
            raise ValueError(
                f"make_network(nnx.Rngs({seed})) built a network of another structure than "
                f"for seed {seeds[0]}; the runs share one program, so the factory must build "
                "the same network for every seed (only the initial values may differ)."
            )
        params.append(p)
        states.append(s)
    assert first is not None
    return first, params, states


def _seeds(seeds: Iterable[int] | None, config: SupervisedConfig) -> list[int]:
    if seeds is None:
        return [config.seed]
    if isinstance(seeds, int | str | bytes) or not isinstance(seeds, Iterable):
        raise TypeError(f"seeds={seeds!r} must be a list of ints, one per run (e.g. range(5)).")
    out = list(seeds)
    if not out:
        raise ValueError("seeds=[] gives no run: pass at least one seed.")
    for seed in out:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise TypeError(f"seeds={out!r}: {seed!r} is not a non-negative int seed.")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds={out!r} repeats a seed: the runs would be identical.")
    return [int(seed) for seed in out]


# --------------------------------------------------------------------------- the update


def _optimizer(config: SupervisedConfig) -> optax.GradientTransformation:
    if config.weight_decay > 0:
        base = optax.adamw(config.learning_rate, eps=config.adam_eps,
                           weight_decay=config.weight_decay)  # fmt: skip
    else:
        base = optax.adam(config.learning_rate, eps=config.adam_eps)
    if config.max_grad_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base)


def _forward(graphdef: nnx.GraphDef, params: nnx.State, state: nnx.State, inputs: Any) -> Any:
    """The network stepped over ``inputs`` ``[T, N, ...]`` from its initial carry:
    ``(log_probs [T, N, A], actions [T, N], regularization [T, N], extras)``."""
    n = jax.tree.leaves(inputs)[0].shape[1]
    carry = nnx.merge(graphdef, params, state).initialize_state(n)

    def step(carry: Any, obs: Any) -> tuple[Any, Any]:
        model = nnx.merge(graphdef, params, state)
        with record_sampler_calls() as calls:
            out = model(carry, obs)
        (call,) = calls
        own = jnp.asarray(out.regularization_loss) - jnp.asarray(
            call.output.regularization_loss
        )  # the network's regularization without the sampler's entropy bonus
        mode = jnp.argmax(call.params, axis=-1).astype(jnp.int32)
        return out.next_state, (call.params, mode, jnp.broadcast_to(own, (n,)),
                                out.rollout_extras)  # fmt: skip

    return jax.lax.scan(step, carry, inputs)[1]


def _make_update(
    task: CognitiveTask, network: nnx.Module, config: SupervisedConfig
) -> Callable[..., Any]:
    train_graphdef = split_network(network)[0]
    graphdef = eval_graphdef(network)
    optimizer = _optimizer(config)

    def loss_fn(params: nnx.State, state: nnx.State, data: TrialDataset) -> Any:
        log_probs, actions, own, extras = _forward(graphdef, params, state, data.inputs)
        picked = jnp.take_along_axis(log_probs, data.targets[..., None], axis=-1)[..., 0]
        weight = data.mask / jnp.maximum(jnp.sum(data.mask), 1.0)
        cross_entropy = -jnp.sum(weight * picked)
        loss = cross_entropy + config.regularization_weight * jnp.sum(weight * own)
        metrics = {
            "loss": loss,
            "cross_entropy": cross_entropy,
            "accuracy": jnp.mean(data.correct(actions).astype(jnp.float32)),
            "step_accuracy": jnp.sum(weight * (actions == data.targets)),
        }
        return loss, (metrics, extras)

    def update(carry: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        params, state, opt_state = carry
        data = trial_dataset(task, key, config.batch_size, grace_ms=float(config.grace_ms))
        grad_fn = jax.grad(loss_fn, has_aux=True)
        grads, (metrics, extras) = grad_fn(params, state, data)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        model = nnx.merge(train_graphdef, params, state)
        model.update_statistics(extras)
        _, _, state = split_network(model)
        return (params, state, opt_state), metrics

    def chunk(params: Any, state: Any, opt_state: Any, key: jax.Array, start: jax.Array,
              n: int) -> Any:  # fmt: skip
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(start + jnp.arange(n))
        return jax.lax.scan(update, (params, state, opt_state), keys)

    return chunk


# --------------------------------------------------------------------------- training


def train_supervised(
    task: CognitiveTask,
    make_network: Callable[[nnx.Rngs], nnx.Module],
    config: SupervisedConfig | None = None,
    *,
    seeds: Iterable[int] | None = None,
    log_fn: SupervisedLogFn | None = None,
) -> SupervisedResult:
    """Train ``K = len(seeds)`` networks on ``task``'s trials in one program (module
    docstring).

    Args:
        task: The cognitive task (`nnx_ppo.envs.cognitive`, unwrapped), a user's own
            `CognitiveTask` subclass included.
        make_network: ``make_network(rngs) -> network``, called once per seed with
            ``nnx.Rngs(seed)``; every call must build the same structure, ending in one
            `CategoricalSampler` over the task's actions (a PPO network, e.g. a
            `PPOAdapter` actor-critic).
        config: The `SupervisedConfig` (default: its defaults).
        seeds: One seed per run (default ``[config.seed]``); run ``i``'s network is
            ``make_network(nnx.Rngs(seeds[i]))`` and its trials are drawn from
            ``jax.random.key(seeds[i])``.
        log_fn: ``log_fn(metrics, update, run)`` (`SupervisedLogFn`), called after each
            device call for each of its updates and runs.

    Returns:
        A `SupervisedResult`: the trained networks and their curves.

    Raises:
        TypeError: Before anything is compiled: if ``task`` is not a cognitive task
            (e.g. a continuous-action environment, which has no targets), ``config`` is
            not a `SupervisedConfig`, ``seeds`` is not a list of non-negative ints or
            ``make_network`` does not return a network.
        ValueError: Before anything is compiled: no or repeated seeds, a network that
            does not take the task's observations or does not end in exactly one
            `CategoricalSampler` with one logit per action, or a factory that builds
            different structures for different seeds.

    Examples:
        >>> from nnx_ppo.envs.point_mass import PointMass
        >>> train_supervised(PointMass(), lambda rngs: None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        TypeError: train_supervised: task=PointMass cannot be trained supervised: ...
    """
    task = _check_task(task)
    config = SupervisedConfig() if config is None else config
    if not isinstance(config, SupervisedConfig):
        raise TypeError(
            f"config={type(config).__name__} must be a SupervisedConfig (PPO's configs "
            "go to train_ppo)."
        )
    seed_list = _seeds(seeds, config)
    network, params, states = _build(make_network, seed_list, task)
    stack = lambda trees: jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
    params_k, states_k = stack(params), stack(states)
    optimizer = _optimizer(config)
    opt_k = jax.vmap(optimizer.init)(params_k)
    keys = jnp.stack([jax.random.key(seed) for seed in seed_list])
    chunk = _make_update(task, network, config)

    @functools.partial(jax.jit, static_argnums=5, donate_argnums=(0, 1, 2))
    def run_chunk(params: Any, states: Any, opt: Any, keys: Any, start: Any, n: int) -> Any:
        runs = jax.vmap(lambda p, s, o, k: chunk(p, s, o, k, start, n))
        return runs(params, states, opt, keys)

    curves: dict[str, list[np.ndarray]] = {name: [] for name in CURVES}
    done = 0
    while done < config.n_updates:
        n = min(config.updates_per_call, config.n_updates - done)
        (params_k, states_k, opt_k), metrics = run_chunk(
            params_k, states_k, opt_k, keys, jnp.int32(done), n
        )
        metrics = {name: np.asarray(metrics[name]) for name in CURVES}
        for name in CURVES:
            curves[name].append(metrics[name])
        if log_fn is not None:
            for i in range(n):
                for run in range(len(seed_list)):
                    log_fn({name: float(metrics[name][run, i]) for name in CURVES},
                           done + i + 1, run)  # fmt: skip
        done += n
    k = len(seed_list)
    return SupervisedResult(
        graphdef=split_network(network)[0],
        params=params_k,
        network_state=states_k,
        seeds=tuple(seed_list),
        config=dataclasses.replace(config, seed=seed_list[0]),
        curves={
            name: np.concatenate(parts, axis=1) if parts else np.zeros((k, 0), np.float32)
            for name, parts in curves.items()
        },
    )
