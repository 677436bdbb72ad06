import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.types import reset_where
from nnx_ppo.networks.variational import (
    AR1VariationalBottleneck,
    LatentNoiseKey,
    VariationalBottleneck,
)


def _fix_posterior(module, mean, log_std):
    """Make the encoder ignore its input and emit constant ``[mean, log_std]``."""
    linear = module.encoder.linear
    linear.kernel[...] = jnp.zeros_like(linear.kernel[...])
    linear.bias[...] = jnp.concatenate([jnp.asarray(mean), jnp.asarray(log_std)]).astype(
        jnp.float32
    )


@nnx.jit
def _step(module, state, x, done):
    out = module(state, x)
    return out, reset_where(module, done, out.next_state)


def _rollout(module, state, xs, dones):
    """Step over ``xs`` [T, B, in]; reset envs where ``dones`` [T, B] is set after a step.

    Each step is jitted on its own (one compile per module and shape), which is much
    cheaper than dispatching every key operation eagerly.
    """
    outs = []
    for t in range(xs.shape[0]):
        out, state = _step(module, state, xs[t], dones[t])
        outs.append(out)
    return outs, state


def test_hand_derived_kl_to_standard_normal():
    # mu = 1, sigma = 2 (L = 1): KL = 0.5 * (mu^2 + sigma^2 - 1 - 2 log sigma)
    #                              = 0.5 * (1 + 4 - 1 - 2 ln 2) = 2 - ln 2 = 1.306853.
    vb = VariationalBottleneck(3, 1, rngs=nnx.Rngs(0), kl_weight=0.5)
    _fix_posterior(vb, [1.0], [math.log(2.0)])
    out = vb(vb.initialize_state(4), jnp.ones((4, 3)))
    np.testing.assert_allclose(out.regularization_loss, np.full(4, 0.5 * (2 - math.log(2))), 1e-6)
    np.testing.assert_allclose(out.metrics["kl"], 2 - math.log(2), rtol=1e-6)
    np.testing.assert_allclose(out.metrics["posterior_std"], 2.0, rtol=1e-6)


def test_samples_are_reparameterized_standard_normal_noise():
    # mu = 3, sigma = 0.5 for 2000 envs: z = 3 + 0.5 * eps, so z has mean 3 and std 0.5
    # (standard errors 0.011 and 0.008; the tolerances are > 4.5 of them).
    vb = VariationalBottleneck(2, 1, rngs=nnx.Rngs(0))
    _fix_posterior(vb, [3.0], [math.log(0.5)])
    state = vb.initialize_state(2000)
    first = vb(state, jnp.zeros((2000, 2)))
    second = vb(first.next_state, jnp.zeros((2000, 2)))
    for out in (first, second):
        z = np.asarray(out.output[:, 0])
        assert abs(z.mean() - 3.0) < 0.05 and abs(z.std() - 0.5) < 0.04
    # Every env has its own key, and the keys advance every step.
    assert len({tuple(k) for k in np.asarray(first.next_state["key"])}) == 2000
    assert not (np.asarray(first.next_state["key"]) == np.asarray(state["key"])).all(1).any()
    assert np.corrcoef(first.output[:, 0], second.output[:, 0])[0, 1] < 0.1


def test_eval_returns_the_mean_and_train_samples_again():
    vb = VariationalBottleneck(2, 2, rngs=nnx.Rngs(0))
    _fix_posterior(vb, [1.0, -1.0], [0.0, 0.0])
    state = vb.initialize_state(3)
    vb.eval()
    np.testing.assert_array_equal(vb(state, jnp.ones((3, 2))).output, np.tile([1.0, -1.0], (3, 1)))
    vb.train()
    assert not np.allclose(vb(state, jnp.ones((3, 2))).output, np.tile([1.0, -1.0], (3, 1)))


MODULES = [
    pytest.param(lambda: VariationalBottleneck(3, 2, rngs=nnx.Rngs(0)), id="vb"),
    pytest.param(lambda: AR1VariationalBottleneck(3, 2, rngs=nnx.Rngs(0), phi=0.8), id="ar1"),
]


@pytest.mark.parametrize("make", MODULES)
def test_replay_reproduces_rollout_noise_with_resets_and_env_slices(make):
    module = make()
    xs = jax.random.normal(jax.random.key(1), (6, 4, 3))
    dones = jnp.zeros((6, 4), bool).at[1, 0].set(True).at[3, 2].set(True).at[3, 0].set(True)
    state0 = module.initialize_state(4)
    rollout, _ = _rollout(module, state0, xs, dones)
    replay, _ = _rollout(module, state0, xs, dones)
    for a, b in zip(rollout, replay, strict=True):
        np.testing.assert_array_equal(a.output, b.output)
        np.testing.assert_array_equal(a.regularization_loss, b.regularization_loss)
    # A minibatch of envs [1, 2] replays from its slice of the stored carry.
    idx = jnp.array([1, 2])
    sliced, _ = _rollout(module, jax.tree.map(lambda v: v[idx], state0), xs[:, idx], dones[:, idx])
    for a, b in zip(rollout, sliced, strict=True):
        np.testing.assert_array_equal(a.output[idx], b.output)


@pytest.mark.parametrize("make", MODULES)
def test_jit_scan_matches_eager_and_keeps_structure(make, testing_modules):
    module = make()
    xs = jax.random.normal(jax.random.key(2), (3, 2, 3))
    state0 = module.initialize_state(2)
    final, outs = testing_modules.jit_scan(module, state0, xs)
    zs, regs = outs.output, outs.regularization_loss
    assert jax.tree.structure(final) == jax.tree.structure(state0)
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state0), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
    eager, state = [], state0
    for x in xs:  # truly eager: no jit at all
        eager.append(module(state, x))
        state = eager[-1].next_state
    np.testing.assert_allclose(zs, jnp.stack([o.output for o in eager]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(regs, jnp.stack([o.regularization_loss for o in eager]), 1e-5)
    assert regs.shape == (3, 2)


@pytest.mark.parametrize("make", MODULES)
def test_reset_gives_initial_prior_state_and_fresh_deterministic_keys(make):
    module = make()
    state0 = module.initialize_state(3)
    # initialize_state is deterministic and gives every env its own key.
    jax.tree.map(np.testing.assert_array_equal, state0, module.initialize_state(3))
    assert len({tuple(k) for k in np.asarray(state0["key"])}) == 3
    state = module(state0, jnp.ones((3, 3))).next_state
    reset = module.reset_state(state)
    jax.tree.map(np.testing.assert_array_equal, reset, module.reset_state(state))
    for name in set(state0) - {"key"}:
        np.testing.assert_array_equal(reset[name], state0[name])
    assert jax.tree.structure(reset) == jax.tree.structure(state0)
    for a, b in zip(jax.tree.leaves(reset), jax.tree.leaves(state0), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
    # The keys are new: neither the running ones nor the first episode's.
    new, old, first = (np.asarray(s["key"]) for s in (reset, state, state0))
    assert not (new == old).all(axis=1).any() and not (new == first).all(axis=1).any()


def test_different_seeds_give_different_noise_keys():
    a = VariationalBottleneck(3, 2, rngs=nnx.Rngs(0)).initialize_state(2)["key"]
    b = VariationalBottleneck(3, 2, rngs=nnx.Rngs(1)).initialize_state(2)["key"]
    c = VariationalBottleneck(3, 2, rngs=nnx.Rngs(params=0, noise=5)).initialize_state(2)["key"]
    d = VariationalBottleneck(3, 2, rngs=nnx.Rngs(params=0)).initialize_state(2)["key"]
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    assert d.shape == a.shape and d.dtype == jnp.uint32


def test_ar1_hand_derived_kl_over_two_steps():
    # Eval mode so z = mu = 1 (sigma = 0.5), phi = 0.6, prior std sqrt(1 - 0.36) = 0.8.
    # Step 1 (episode start, prior N(0, 1)):
    #   KL = 0.5 * (0.25 + 1 - 1 - 2 ln 0.5) = 0.5 * (0.25 + 1.386294) = 0.818147.
    # Step 2 (prior N(0.6 * 1, 0.8)): var ratio 0.25 / 0.64 = 0.390625,
    #   ((1 - 0.6) / 0.8)^2 = 0.25, KL = 0.5 * (0.390625 + 0.25 - 1 - ln 0.390625)
    #   = 0.5 * (-0.359375 + 0.920007) = 0.290316.
    ar1 = AR1VariationalBottleneck(2, 1, rngs=nnx.Rngs(0), phi=0.6, kl_weight=1.0)
    _fix_posterior(ar1, [1.0], [math.log(0.5)])
    ar1.eval()
    state = ar1.initialize_state(2)
    first = ar1(state, jnp.ones((2, 2)))
    second = ar1(first.next_state, jnp.ones((2, 2)))
    np.testing.assert_allclose(first.regularization_loss, [0.818147] * 2, rtol=1e-5)
    np.testing.assert_allclose(second.regularization_loss, [0.290316] * 2, rtol=1e-5)
    np.testing.assert_array_equal(first.next_state["z"], [[1.0], [1.0]])
    assert first.next_state["started"].all() and not state["started"].any()


def test_ar1_with_phi_zero_is_the_plain_bottleneck():
    vb = VariationalBottleneck(3, 2, rngs=nnx.Rngs(7), kl_weight=0.1)
    ar1 = AR1VariationalBottleneck(3, 2, rngs=nnx.Rngs(7), phi=0.0, kl_weight=0.1)
    xs = jax.random.normal(jax.random.key(3), (3, 2, 3))
    s_vb, s_ar = vb.initialize_state(2), ar1.initialize_state(2)
    for x in xs:
        a, b = vb(s_vb, x), ar1(s_ar, x)
        np.testing.assert_allclose(a.output, b.output, rtol=1e-6)
        np.testing.assert_allclose(a.regularization_loss, b.regularization_loss, rtol=1e-5)
        s_vb, s_ar = a.next_state, b.next_state


def test_gradients_reach_the_encoder_not_the_key():
    vb = VariationalBottleneck(3, 2, rngs=nnx.Rngs(0))
    state = vb.initialize_state(5)

    def loss(vb):
        out = vb(state, jnp.ones((5, 3)))
        return jnp.sum(out.output**2) + jnp.sum(out.regularization_loss)

    grads = nnx.grad(loss)(vb)
    assert set(grads) == {"encoder"}
    assert float(jnp.abs(grads["encoder"]["linear"]["kernel"][...]).sum()) > 0
    assert "noise_key" not in nnx.state(vb, nnx.Param)
    assert set(nnx.state(vb, LatentNoiseKey)) == {"noise_key"}
    assert LatentNoiseKey.__doc__


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda r: VariationalBottleneck(0, 2, rngs=r), ValueError, "in_features"),
        (lambda r: VariationalBottleneck(3, 0, rngs=r), ValueError, "latent_features"),
        (lambda r: VariationalBottleneck(3, 2, rngs=r, kl_weight=-1.0), ValueError, "kl_weight"),
        (lambda r: VariationalBottleneck(3, 2, rngs=r, kl_weight="x"), TypeError, "kl_weight"),
        (lambda r: AR1VariationalBottleneck(3, 2, rngs=r, phi=1.0), ValueError, "between -1"),
        (lambda r: AR1VariationalBottleneck(3, 2, rngs=r, phi=-1.5), ValueError, "phi"),
        (lambda r: AR1VariationalBottleneck(3, 2, rngs=r, phi="0.9"), TypeError, "phi"),
    ],
)
def test_construction_errors(build, error, match):
    with pytest.raises(error, match=match):
        build(nnx.Rngs(0))


def test_call_errors():
    ar1 = AR1VariationalBottleneck(3, 2, rngs=nnx.Rngs(0))
    state = ar1.initialize_state(2)
    with pytest.raises(ValueError, match=r"keys \['key', 'started', 'z'\], got \['key'\]"):
        ar1({"key": state["key"]}, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"in_features=3, got an input of shape \(2, 4\)"):
        ar1(state, jnp.ones((2, 4)))
