"""Loss replay reproduces the rollout: the property PPO's likelihood ratio relies on.

A rollout of ``T`` steps (``rollout_extras=None``) with random done masks resetting the
carry is replayed from the stored initial carry with the stored extras and the same
resets: every log-likelihood must come back to float precision, for all environments
and for a minibatch slice of them. The network holds every kind of state the library
has: normalizer statistics (extras), LSTM carries at two levels, a delay line, per-env
noise keys (variational bottleneck) and a sampler that draws from its own RNG stream.
The sequence replay is also checked with linear-recurrence cells (`LRU`, `MinGRU`) in
place of the LSTMs, whose replay is an associative scan rather than a sequential one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import LSTM
from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler
from nnx_ppo.networks.types import reset_where
from nnx_ppo.networks.variational import VariationalBottleneck

T, B, OBS, H, L, A, N = 8, 5, 3, 6, 4, 2, 3
MINIBATCH = np.array([1, 4])


def _network(categorical: bool, resample_every: int = 1, linear: bool = False) -> Sequential:
    """The network; ``linear`` puts an `LRU` trunk and a `MinGRU` in the action port in
    place of the two LSTMs."""
    rngs = nnx.Rngs(0)
    if categorical:
        head, n_params = CategoricalSampler(rngs, entropy_weight=1e-2), N
    else:
        head = NormalTanhSampler(
            rngs, entropy_weight=1e-2, resample_every=resample_every, action_size=A
        )
        n_params = 2 * A
    trunk, memory = (
        (LRU(OBS, H, rngs, state_features=4, r_min=0.5), MinGRU(L, H, rngs, activation="tanh"))
        if linear
        else (LSTM(OBS, H, rngs=rngs), LSTM(L, H, rngs=rngs))
    )
    net = Sequential(
        [
            Normalizer(OBS),
            trunk,
            Delay(jnp.zeros(H), 2),
            VariationalBottleneck(H, L, rngs=rngs, kl_weight=1e-2),
            PPOAdapter(
                action=Sequential([memory, MLP(H, (8,), n_params, rngs=rngs), head]),
                value=MLP(L, (8,), 1, rngs=rngs),
            ),
        ]
    )
    # Non-trivial normalizer statistics (mean ~2, std ~3), set before the rollout.
    data = 2.0 + 3.0 * jax.random.normal(jax.random.key(1), (4, B, OBS))
    net.layers[0].update_statistics(data)
    return net


def _data(seed: int) -> tuple[jax.Array, jax.Array]:
    k_obs, k_done = jax.random.split(jax.random.key(seed))
    obs = jax.random.normal(k_obs, (T, B, OBS))
    done = jax.random.bernoulli(k_done, 0.25, (T, B))
    return obs, done


@pytest.fixture
def rollout(testing_modules: Any) -> Any:
    """Jitted ``(graphdef, params, carry0, obs, done) -> (params, extras, log-likelihoods,
    actions)``: T steps collected with the module state (the sampler's RNG stream)
    threaded through."""
    collect = jax.jit(testing_modules.collect, static_argnums=0)

    def run(graphdef: Any, params: Any, carry0: Any, obs: jax.Array, done: jax.Array) -> Any:
        params, outputs = collect(graphdef, params, carry0, obs, done)
        out = outputs.output
        return params, outputs.rollout_extras, out.loglikelihoods, out.actions

    return run


def _replay(
    graphdef: Any, params: Any, carry0: Any, obs: jax.Array, done: jax.Array, extras: Any
) -> tuple[jax.Array, Any]:
    """Recompute the log-likelihoods from the stored carry and extras, resetting on done."""
    model = nnx.merge(graphdef, params)

    def step(carry: Any, inputs: Any) -> Any:
        obs_t, done_t, extras_t = inputs
        out = model(carry, obs_t, extras_t)
        return reset_where(model, done_t, out.next_state), (
            out.output.loglikelihoods,
            out.output.actions,
        )

    _, (loglik, actions) = jax.lax.scan(step, carry0, (obs, done, extras))
    return loglik, actions


@pytest.mark.parametrize("categorical", [False, True], ids=["normal_tanh", "categorical"])
def test_replay_reproduces_rollout_log_likelihoods(categorical: bool, rollout: Any) -> None:
    net = _network(categorical)
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs, done = _data(seed=2)
    assert 0 < int(done.sum()) < T * B  # some, not all, episodes end

    replay = jax.jit(_replay, static_argnums=0)
    new_params, extras, loglik, actions = rollout(graphdef, params, carry0, obs, done)
    assert loglik.shape == (T, B)
    assert np.all(np.isfinite(loglik))

    # Replay over every environment, from the stored initial carry (the parameters are
    # those of the rollout: the stream count is irrelevant to replay).
    replayed, replayed_actions = replay(graphdef, params, carry0, obs, done, extras)
    np.testing.assert_allclose(replayed, loglik, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(replayed_actions, actions)
    replayed_later, _ = replay(graphdef, new_params, carry0, obs, done, extras)
    np.testing.assert_allclose(replayed_later, loglik, rtol=1e-6, atol=1e-6)

    # A minibatch of whole environment sequences: slice the batch axis of everything.
    take = lambda tree, axis: jax.tree.map(lambda x: jnp.take(x, MINIBATCH, axis=axis), tree)
    mini, _ = replay(
        graphdef, params, take(carry0, 0), take(obs, 1), take(done, 1), take(extras, 1)
    )
    np.testing.assert_allclose(mini, loglik[:, MINIBATCH], rtol=1e-6, atol=1e-6)

    # The comparison can fail: forgetting the resets changes the replayed likelihoods
    # after the first done (memory, delay line and noise keys all carry over) ...
    no_resets, _ = replay(graphdef, params, carry0, obs, jnp.zeros_like(done), extras)
    first_done = int(np.argmax(np.asarray(done).any(axis=1)))
    assert first_done + 1 < T
    assert not np.allclose(no_resets[first_done + 1 :], loglik[first_done + 1 :], atol=1e-4)
    np.testing.assert_allclose(
        no_resets[: first_done + 1], loglik[: first_done + 1], rtol=1e-6, atol=1e-6
    )
    # ... and a second rollout (fresh sampler draws) takes different actions.
    _, _, _, actions2 = rollout(graphdef, new_params, carry0, obs, done)
    assert not np.array_equal(actions2, actions)


def test_replayed_log_likelihood_is_differentiable_and_ratio_is_one(rollout: Any) -> None:
    # The PPO ratio exp(replayed - stored) is exactly 1 before any update and its
    # gradient with respect to the parameters is finite and non-zero.
    net = _network(categorical=False)
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs, done = _data(seed=3)
    _, extras, loglik, _ = rollout(graphdef, params, carry0, obs, done)
    trainable, rest = nnx.split_state(params, nnx.Param, ...)

    def ratio_sum(trainable: Any) -> jax.Array:
        merged = nnx.merge_state(trainable, rest)
        replayed, _ = _replay(graphdef, merged, carry0, obs, done, extras)
        return jnp.sum(jnp.exp(replayed - loglik))

    value, grads = jax.jit(jax.value_and_grad(ratio_sum))(trainable)
    np.testing.assert_allclose(value, T * B, rtol=1e-5)
    leaves = jax.tree.leaves(grads)
    assert all(np.all(np.isfinite(g)) for g in leaves)
    assert any(np.any(g != 0) for g in leaves)


# --------------------------------------------------------------------------- sequence replay


def _stepwise(model: Any, carry0: Any, obs: jax.Array, done: jax.Array, extras: Any) -> Any:
    """The reference: one call per step, resetting the carry where done."""

    def step(carry: Any, inputs: Any) -> Any:
        obs_t, done_t, extras_t = inputs
        out = model(carry, obs_t, extras_t)
        reg = jnp.broadcast_to(jnp.asarray(out.regularization_loss), done_t.shape)
        record = (out.output.loglikelihoods, out.output.value_estimates, reg, out.metrics)
        return reset_where(model, done_t, out.next_state), record

    return jax.lax.scan(step, carry0, (obs, done, extras))


def _sequence_and_stepwise(net: Any, params: Any, carry0: Any, obs, done, extras) -> Any:
    """Both replays of ``net`` with ``params``, their outputs and parameter gradients."""
    graphdef, _ = nnx.split(net)
    trainable, rest = nnx.split_state(params, nnx.Param, ...)

    def replays(trainable: Any) -> Any:
        model = nnx.merge(graphdef, nnx.merge_state(trainable, rest))
        final, out = model.replay_sequence(carry0, obs, extras, done)
        reg = jnp.broadcast_to(jnp.asarray(out.regularization_loss), done.shape)
        seq = (final, out.output.loglikelihoods, out.output.value_estimates, reg, out.metrics)
        return seq, _stepwise(model, carry0, obs, done, extras)

    def losses(trainable: Any) -> Any:
        (_, ll, v, reg, _), (_, (ll2, v2, reg2, _)) = replays(trainable)
        weights = jnp.linspace(0.5, 1.5, ll.size).reshape(ll.shape)  # all steps matter
        return (
            jnp.sum(weights * (ll + v * v + reg)),
            jnp.sum(weights * (ll2 + v2 * v2 + reg2)),
        )

    (seq, (final, ref)), grads = (
        jax.jit(replays)(trainable),
        jax.jit(
            lambda t: (
                jax.grad(lambda p: losses(p)[0])(t),
                jax.grad(lambda p: losses(p)[1])(t),
            )
        )(trainable),
    )
    return seq, (final, ref), grads


@pytest.mark.parametrize(
    ("categorical", "resample_every", "linear"),
    [
        (False, 1, False),
        (True, 1, False),
        (False, 3, False),
        pytest.param(False, 1, True, marks=pytest.mark.heavy),  # cells: test_recurrent.py
    ],
    ids=["normal_tanh", "categorical", "normal_tanh_held_noise", "linear_recurrences"],
)
def test_replay_sequence_equals_the_step_by_step_replay(
    categorical: bool, resample_every: int, linear: bool, rollout: Any
) -> None:
    # Every kind of state at once (see the module docstring): replaying the whole
    # sequence layer by layer (stateless layers batched over T * B, only modules with a
    # carry scanned, LSTMs projecting their inputs for all steps at once, LRU and MinGRU
    # composed by an associative scan) gives the step-by-step replay's log-likelihoods,
    # values, regularization, final carry, metrics and parameter gradients. A sampler
    # holding its noise has a carry too.
    net = _network(categorical, resample_every, linear)
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs, done = _data(seed=4)
    _, extras, _, _ = rollout(graphdef, params, carry0, obs, done)
    seq, (final, ref), (grads, ref_grads) = _sequence_and_stepwise(
        net, params, carry0, obs, done, extras
    )
    seq_final, ll, v, reg, metrics = seq
    ref_ll, ref_v, ref_reg, ref_metrics = ref
    assert ll.shape == v.shape == reg.shape == (T, B)
    for got, want in ((ll, ref_ll), (v, ref_v), (reg, ref_reg), (seq_final, final)):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)
    # Per-call metrics of batched layers are repeated over time: equal means.
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.mean(a), np.mean(b), rtol=1e-5, atol=1e-6),
        metrics,
        ref_metrics,
    )
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), grads, ref_grads
    )
    assert any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads))


def test_replay_sequence_scans_only_the_modules_with_a_carry(rollout: Any) -> None:
    from nnx_ppo.networks.containers import Concat, Parallel, Splitter
    from nnx_ppo.networks.recurrent import GRU

    rngs = nnx.Rngs(0)
    net = Sequential(
        [
            Normalizer(OBS),
            Splitter(a=1, b=2),
            Concat(a=LSTM(1, H, rngs=rngs), b=MLP(2, (8,), H, rngs=rngs)),
            PPOAdapter(
                action=Sequential([MLP(2 * H, (8,), 2 * A, rngs=rngs), NormalTanhSampler(rngs)]),
                value=Sequential(
                    [Parallel(g=GRU(2 * H, H, rngs=rngs)), Concat(g=MLP(H, (8,), 1, rngs=rngs))]
                ),
            ),
        ]
    )
    net.layers[0].update_statistics(2.0 + 3.0 * jax.random.normal(jax.random.key(1), (4, B, OBS)))
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs, done = _data(seed=5)
    model = nnx.merge(graphdef, params)
    _, extras, _, _ = rollout(graphdef, params, carry0, obs, done)
    seq, (final, ref), (grads, ref_grads) = _sequence_and_stepwise(
        net, params, carry0, obs, done, extras
    )
    for got, want in ((seq[1], ref[0]), (seq[2], ref[1]), (seq[0], final)):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), grads, ref_grads
    )
    # Two scans (the LSTM and the GRU cell) with one product each (the recurrent one);
    # the MLPs' 6 products and the cells' input projections run outside them.
    jaxpr = jax.make_jaxpr(lambda c: model.replay_sequence(c, obs, extras, done))(carry0)
    counts = _count_primitives(jaxpr.jaxpr)
    assert counts[("scan", False)] == 2
    assert counts[("dot_general", True)] == 2
    assert counts[("dot_general", False)] == 6 + 2


def _count_primitives(jaxpr: Any, in_scan: bool = False) -> Counter:
    """``{(primitive name, inside a scan): count}`` over ``jaxpr`` and its sub-jaxprs."""
    counts: Counter = Counter()
    for eqn in jaxpr.eqns:
        counts[(eqn.primitive.name, in_scan)] += 1
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    counts += _count_primitives(inner, in_scan or eqn.primitive.name == "scan")
    return counts


def test_a_container_that_changes_its_call_is_replayed_step_by_step() -> None:
    # A subclass that changes how the children are called keeps its own semantics: the
    # sequence replay falls back to scanning the container's __call__.
    class Doubled(Sequential):
        def __call__(self, state, x, rollout_extras=None):
            return super().__call__(state, 2.0 * x, rollout_extras)

    rngs = nnx.Rngs(0)
    net = Doubled([LSTM(OBS, H, rngs=rngs)])
    obs, done = _data(seed=6)
    carry0 = net.initialize_state(B)
    final, out = net.replay_sequence(carry0, obs, [()], done)
    carry, outputs = carry0, []
    for t in range(T):
        step = net(carry, obs[t], [()])
        outputs.append(step.output)
        carry = reset_where(net, done[t], step.next_state)
    np.testing.assert_allclose(out.output, jnp.stack(outputs), rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), final, carry)
