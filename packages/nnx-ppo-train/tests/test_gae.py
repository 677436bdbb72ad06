"""GAE with separate termination and truncation: hand-derived numbers and a reference."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_ppo.algorithms.ppo import advantages as gae_module
from nnx_ppo.algorithms.ppo.advantages import combine_advantages, gae

# One env, T = 4, gamma = 0.9, lambda = 0.5, so gamma * lambda = 0.45.
REWARDS = np.array([1.0, 2.0, 3.0, 4.0])
VALUES = np.array([0.5, 1.0, 1.5, 2.0])
BOOTSTRAP = 3.0
GAMMA, LAMBDA = 0.9, 0.5


def _run(terminations, truncations, final_values=None):
    column = lambda x: jnp.asarray(x, jnp.float32)[:, None]
    adv, targets = gae(
        column(REWARDS),
        column(VALUES),
        jnp.array([BOOTSTRAP]),
        column(terminations),
        column(truncations),
        discounting_factor=GAMMA,
        gae_lambda=LAMBDA,
        final_values=None if final_values is None else column(final_values),
    )
    return np.asarray(adv[:, 0]), np.asarray(targets[:, 0])


def test_termination_cuts_the_future():
    # The episode terminates at t=1; t=2,3 belong to the next one, bootstrapped by 3.
    #   t=3: delta = 4 + 0.9*3   - 2   = 4.7                A = 4.7
    #   t=2: delta = 3 + 0.9*2   - 1.5 = 3.3                A = 3.3 + 0.45*4.7 = 5.415
    #   t=1: delta = 2 + 0.9*0   - 1   = 1 (terminated)     A = 1
    #   t=0: delta = 1 + 0.9*1   - 0.5 = 1.4                A = 1.4 + 0.45*1 = 1.85
    adv, targets = _run([0, 1, 0, 0], [0, 0, 0, 0])
    np.testing.assert_allclose(adv, [1.85, 1.0, 5.415, 4.7], rtol=1e-6)
    np.testing.assert_allclose(targets, adv + VALUES, rtol=1e-6)


def test_truncation_bootstraps_from_the_true_final_observation():
    # Truncated at t=1; the true final observation is worth 10 (values[2] = 1.5 is
    # the reset observation of the next episode and must not be used).
    #   t=1: delta = 2 + 0.9*10 - 1 = 10                    A = 10
    #   t=0: delta = 1.4                                    A = 1.4 + 0.45*10 = 5.9
    #   t=2, t=3 as above.
    adv, _ = _run([0, 0, 0, 0], [0, 1, 0, 0], final_values=[0, 10, 0, 0])
    np.testing.assert_allclose(adv, [5.9, 10.0, 5.415, 4.7], rtol=1e-6)


def test_truncation_without_bootstrap_masks_the_step_like_brax():
    # Without final values the TD error at t=1 is zeroed: A_1 = 0, target_1 = V_1 = 1,
    # and nothing flows back to t=0: A_0 = 1.4.
    adv, targets = _run([0, 0, 0, 0], [0, 1, 0, 0])
    np.testing.assert_allclose(adv, [1.4, 0.0, 5.415, 4.7], rtol=1e-6)
    assert targets[1] == pytest.approx(1.0)


def test_final_values_are_ignored_where_nothing_was_truncated():
    plain, _ = _run([0, 1, 0, 0], [0, 0, 0, 0])
    noisy, _ = _run([0, 1, 0, 0], [0, 0, 0, 0], final_values=[7, 8, 9, 10])
    np.testing.assert_array_equal(plain, noisy)


def _reference(rewards, values, bootstrap, term, trunc, final, gamma, lam):
    """A_t as the sum over the rest of the episode of (gamma*lambda)^k * delta_{t+k}."""
    T, B = rewards.shape
    next_values = np.concatenate([values[1:], bootstrap[None]])
    delta = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            if trunc[t, b]:
                if final is None:
                    continue  # masked step: delta stays 0
                nxt = final[t, b]
            elif term[t, b]:
                nxt = 0.0
            else:
                nxt = next_values[t, b]
            delta[t, b] = rewards[t, b] + gamma * nxt - values[t, b]
    adv = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            weight = 1.0
            for k in range(t, T):
                adv[t, b] += weight * delta[k, b]
                if term[k, b] or trunc[k, b]:
                    break  # the episode ended at k
                weight *= gamma * lam
    return adv


# gae jitted with gamma and lambda traced (as a sweep traces them), and a few shapes: one
# compile per shape and truncation mode (at most 12), not one per drawn example.
_jitted_gae = jax.jit(
    lambda *arrays, gamma, lam, final: gae(
        *arrays, discounting_factor=gamma, gae_lambda=lam, final_values=final
    )
)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    T=st.sampled_from([1, 2, 7]),
    B=st.sampled_from([1, 3]),
    gamma=st.floats(0.0, 1.0),
    lam=st.floats(0.0, 1.0),
    bootstrap_on_truncation=st.booleans(),
)
def test_matches_a_naive_python_loop(data, T, B, gamma, lam, bootstrap_on_truncation):
    floats = hnp.arrays(np.float64, (T, B), elements=st.floats(-5, 5))
    flags = hnp.arrays(np.bool_, (T, B))
    rewards, values, final = data.draw(floats), data.draw(floats), data.draw(floats)
    bootstrap = data.draw(hnp.arrays(np.float64, (B,), elements=st.floats(-5, 5)))
    term, trunc = data.draw(flags), data.draw(flags)
    term = term & ~trunc  # the trainer never sets both; truncation wins if it did
    final = final if bootstrap_on_truncation else None

    adv, targets = _jitted_gae(
        jnp.asarray(rewards, jnp.float32),
        jnp.asarray(values, jnp.float32),
        jnp.asarray(bootstrap, jnp.float32),
        jnp.asarray(term),
        jnp.asarray(trunc),
        gamma=gamma,
        lam=lam,
        final=None if final is None else jnp.asarray(final, jnp.float32),
    )
    expected = _reference(rewards, values, bootstrap, term, trunc, final, gamma, lam)
    np.testing.assert_allclose(adv, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(targets, expected + values, rtol=1e-4, atol=1e-4)


def test_dict_rewards_get_per_key_advantages():
    rng = np.random.default_rng(0)
    T, B = 5, 3
    term = jnp.asarray(rng.random((T, B)) < 0.2)
    trunc = jnp.asarray(rng.random((T, B)) < 0.2) & ~term
    leaf = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
    rewards = {"a": leaf(T, B), "b": leaf(T, B)}
    values = {"a": leaf(T, B), "b": leaf(T, B)}
    boot = {"a": leaf(B), "b": leaf(B)}
    final = {"a": leaf(T, B), "b": leaf(T, B)}
    kwargs = dict(discounting_factor=0.9, gae_lambda=0.8)

    adv, targets = gae(rewards, values, boot, term, trunc, final_values=final, **kwargs)
    for key in ("a", "b"):
        alone, alone_targets = gae(
            rewards[key], values[key], boot[key], term, trunc, final_values=final[key], **kwargs
        )
        np.testing.assert_array_equal(adv[key], alone)
        np.testing.assert_array_equal(targets[key], alone_targets)

    # GAE is linear in rewards and values, so the combined advantage equals the
    # advantage of the summed reward with the summed value.
    summed, _ = gae(
        rewards["a"] + rewards["b"],
        values["a"] + values["b"],
        boot["a"] + boot["b"],
        term,
        trunc,
        final_values=final["a"] + final["b"],
        **kwargs,
    )
    np.testing.assert_allclose(combine_advantages(adv), summed, rtol=1e-5, atol=1e-5)


def test_value_tree_must_match_reward_tree():
    rewards = {"a": jnp.zeros((2, 1)), "b": jnp.zeros((2, 1))}
    with pytest.raises(ValueError, match="values has tree structure"):
        gae(
            rewards,
            jnp.zeros((2, 1)),
            jnp.zeros(1),
            jnp.zeros((2, 1)),
            jnp.zeros((2, 1)),
            discounting_factor=0.9,
            gae_lambda=0.9,
        )


def test_docstring_examples_run(docstring_examples):
    docstring_examples(gae_module)
