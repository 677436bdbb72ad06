"""The PPO loss terms: hand-derived values, gradients and the per-key pairing."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_ppo.algorithms.core.losses import (
    critic_loss,
    distillation_loss,
    explained_variance,
    normalize_advantages,
    policy_loss,
    ppo_loss,
)

# Three samples with ratios 1.5, 0.5 and 1, advantages 1, 1 and -2, epsilon = 0.2:
#   sample 0: min(1.5 * 1, clip(1.5) * 1 = 1.2) = 1.2   (clipped, no gradient)
#   sample 1: min(0.5 * 1, clip(0.5) * 1 = 0.8) = 0.5   (unclipped, d/dlogpi = 0.5)
#   sample 2: min(1 * -2, 1 * -2)              = -2     (unclipped, d/dlogpi = -2)
# loss = -(1.2 + 0.5 - 2) / 3 = 0.1
OLD = jnp.zeros(3)
NEW = jnp.log(jnp.array([1.5, 0.5, 1.0]))
ADV = jnp.array([1.0, 1.0, -2.0])


def test_clipped_surrogate_by_hand():
    loss, metrics = policy_loss(NEW, OLD, ADV, clip_range=0.2)
    assert float(loss) == pytest.approx(0.1, abs=1e-6)
    # |ratio - 1| > 0.2 for the first two samples.
    assert float(metrics["actor/clip_fraction"]) == pytest.approx(2 / 3)
    # KL estimator: mean((r - 1) - log r) = ((0.5 - log 1.5) + (-0.5 - log 0.5) + 0) / 3.
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 3
    assert float(metrics["actor/approx_kl"]) == pytest.approx(kl, rel=1e-5)
    assert float(metrics["actor/ratio_max_deviation"]) == pytest.approx(0.5, rel=1e-6)


def test_clipped_surrogate_gradient_vanishes_where_clipped():
    grad = jax.grad(lambda ll: policy_loss(ll, OLD, ADV, clip_range=0.2)[0])(NEW)
    # d loss / d logpi_i = -ratio_i * A_i / 3 where unclipped, 0 where clipped.
    np.testing.assert_allclose(grad, [0.0, -0.5 / 3, 2.0 / 3], rtol=1e-6)
    # The old log-likelihoods get no gradient.
    old_grad = jax.grad(lambda old: policy_loss(NEW, old, ADV, clip_range=0.2)[0])(OLD)
    np.testing.assert_array_equal(old_grad, jnp.zeros(3))


def test_ratio_one_gives_no_clipping_and_no_kl():
    loss, metrics = policy_loss(NEW, NEW, normalize_advantages(ADV), clip_range=0.2)
    assert float(metrics["actor/clip_fraction"]) == 0.0
    assert float(metrics["actor/approx_kl"]) == 0.0
    assert float(metrics["actor/ratio_max_deviation"]) == 0.0
    # With ratio 1 the loss is -mean(normalised advantages) = 0.
    assert float(loss) == pytest.approx(0.0, abs=1e-6)


def test_critic_loss_by_hand():
    values, targets = jnp.array([1.0, 2.0]), jnp.array([2.0, 2.0])
    # 0.5 * mean([1, 0]) = 0.25
    loss, _ = critic_loss(values, values, targets)
    assert float(loss) == pytest.approx(0.25)
    # Clipped: old = [0, 2], c = 0.5: the first value may move only to 0.5, whose error
    # (0.5 - 2)^2 = 2.25 beats the unclipped 1; 0.5 * mean([2.25, 0]) = 0.5625.
    loss, _ = critic_loss(values, jnp.array([0.0, 2.0]), targets, value_clip_range=0.5)
    assert float(loss) == pytest.approx(0.5625)
    # Heads are summed: two identical heads cost twice as much.
    loss2, _ = critic_loss(
        {"a": values, "b": values}, {"a": values, "b": values}, {"a": targets, "b": targets}
    )
    assert float(loss2) == pytest.approx(0.5)


def test_explained_variance():
    targets = jnp.array([1.0, 2.0, 3.0, 4.0])
    assert float(explained_variance(targets, targets)) == pytest.approx(1.0)
    assert float(explained_variance(jnp.full(4, 2.5), targets)) == pytest.approx(0.0)
    # Var(targets - 0) / Var(targets) = 1 as well, so predicting zeros explains 0.
    assert float(explained_variance(jnp.zeros(4), targets)) == pytest.approx(0.0)
    assert float(explained_variance(jnp.zeros(4), jnp.ones(4))) == 0.0


def test_normalize_advantages():
    adv = normalize_advantages(jnp.array([[1.0, 2.0], [3.0, 6.0]]))
    assert float(adv.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(adv.std()) == pytest.approx(1.0, rel=1e-5)


def _dict_batch():
    rng = np.random.default_rng(0)
    leaf = lambda: jnp.asarray(rng.normal(size=(4, 2)), jnp.float32)
    tree = lambda: {"a": leaf(), "b": leaf()}
    return dict(
        log_likelihoods=tree(),
        values=tree(),
        regularization=leaf(),
        old_log_likelihoods=tree(),
        old_values=tree(),
        advantages=tree(),
        value_targets=tree(),
    )


def test_ppo_loss_adds_its_parts():
    batch = _dict_batch()
    loss, metrics = ppo_loss(**batch, clip_range=0.2, critic_loss_weight=0.7)
    expected = (
        metrics["loss/policy"] + 0.7 * metrics["loss/critic"] + batch["regularization"].mean()
    )
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)
    assert float(metrics["loss/regularization"]) == pytest.approx(
        float(batch["regularization"].mean()), rel=1e-6
    )
    # A scalar regularization broadcasts.
    scalar = dict(batch, regularization=jnp.array(2.0))
    _, metrics = ppo_loss(**scalar, clip_range=0.2, critic_loss_weight=0.7)
    assert float(metrics["loss/regularization"]) == 2.0


def test_combined_and_per_key_pairing():
    batch = _dict_batch()
    kwargs = dict(clip_range=0.2, critic_loss_weight=0.5)
    _, combined = ppo_loss(**batch, advantage_mode="combined", **kwargs)
    _, per_key = ppo_loss(**batch, advantage_mode="per_key", **kwargs)

    # combined: one surrogate on summed log-likelihoods and summed advantages.
    adv = normalize_advantages(batch["advantages"]["a"] + batch["advantages"]["b"])
    new = batch["log_likelihoods"]["a"] + batch["log_likelihoods"]["b"]
    old = batch["old_log_likelihoods"]["a"] + batch["old_log_likelihoods"]["b"]
    expected, _ = policy_loss(new, old, adv, clip_range=0.2)
    assert float(combined["loss/policy"]) == pytest.approx(float(expected), rel=1e-6)

    # per_key: the sum of per-key surrogates, each with its own normalised advantage.
    expected = sum(
        policy_loss(
            batch["log_likelihoods"][k],
            batch["old_log_likelihoods"][k],
            normalize_advantages(batch["advantages"][k]),
            clip_range=0.2,
        )[0]
        for k in ("a", "b")
    )
    assert float(per_key["loss/policy"]) == pytest.approx(float(expected), rel=1e-6)
    assert float(per_key["loss/policy"]) != pytest.approx(float(combined["loss/policy"]))


def test_per_key_needs_matching_action_and_reward_keys():
    batch = _dict_batch()
    batch["log_likelihoods"] = batch["log_likelihoods"]["a"]
    batch["old_log_likelihoods"] = batch["old_log_likelihoods"]["a"]
    with pytest.raises(ValueError, match="advantage_mode='per_key'"):
        ppo_loss(**batch, clip_range=0.2, critic_loss_weight=0.5, advantage_mode="per_key")
    # The combined mode pairs one action with several reward keys without complaint.
    ppo_loss(**batch, clip_range=0.2, critic_loss_weight=0.5, advantage_mode="combined")


def test_unnormalized_advantages_are_used_as_given():
    ll = jnp.zeros(3)
    loss, _ = ppo_loss(
        ll,
        jnp.zeros(3),
        jnp.zeros(()),
        ll,
        jnp.zeros(3),
        jnp.array([1.0, 2.0, 3.0]),
        jnp.zeros(3),
        clip_range=0.2,
        critic_loss_weight=0.0,
        normalize=False,
    )
    # ratio 1: loss = -mean(A) = -2.
    assert float(loss) == pytest.approx(-2.0)


# --------------------------------------------------------------------------- distillation


def test_distillation_loss_hand_derived():
    # Action leaves "a" and "b" are summed per sample: [[-1 + 0, -3 - 2]] = [[-1, -5]],
    # so nll = -mean = 3. Regularization mean (0.5 + 1.5) / 2 = 1, weighted 0.5.
    # Value heads: 0.5 * mean([1, 4]) = 1.25 and 0.5 * mean([0, 1]) = 0.25, sum 1.5,
    # weighted 2 -> 3. Total 3 + 0.5 + 3 = 6.5.
    log_likelihoods = {"a": jnp.array([[-1.0, -3.0]]), "b": jnp.array([[0.0, -2.0]])}
    values = {"x": jnp.array([[1.0, 2.0]]), "y": jnp.array([[1.0, 1.0]])}
    teacher_values = {"x": jnp.zeros((1, 2)), "y": jnp.array([[1.0, 0.0]])}
    loss, metrics = distillation_loss(
        log_likelihoods,
        jnp.array([[0.5, 1.5]]),
        values,
        teacher_values,
        value_loss_weight=2.0,
        regularization_weight=0.5,
    )
    assert float(loss) == pytest.approx(6.5)
    assert float(metrics["loss/action_nll"]) == pytest.approx(3.0)
    assert float(metrics["loss/regularization"]) == pytest.approx(1.0)
    assert float(metrics["loss/value"]) == pytest.approx(1.5)
    assert float(metrics["loss/total"]) == pytest.approx(6.5)
    # Without value distillation the value arguments are ignored: 3 + 1 * 1.
    loss, metrics = distillation_loss(log_likelihoods, jnp.array([[0.5, 1.5]]))
    assert float(loss) == pytest.approx(4.0)
    assert set(metrics) == {"loss/total", "loss/action_nll", "loss/regularization"}


def test_distillation_loss_gradient_does_not_reach_the_teacher_values():
    def loss_of(teacher_value):
        loss, _ = distillation_loss(
            jnp.zeros((1, 1)),
            jnp.zeros((1, 1)),
            jnp.ones((1, 1)),
            teacher_value,
            value_loss_weight=1.0,
        )
        return loss

    assert float(jax.grad(loss_of)(jnp.zeros((1, 1)))[0, 0]) == 0.0


def test_distillation_loss_needs_values_for_value_distillation():
    with pytest.raises(ValueError, match="needs values and teacher_values"):
        distillation_loss(jnp.zeros((1, 1)), jnp.zeros((1, 1)), value_loss_weight=1.0)
    with pytest.raises(ValueError, match="value tree"):
        distillation_loss(
            jnp.zeros((1, 1)),
            jnp.zeros((1, 1)),
            {"a": jnp.zeros((1, 1))},
            jnp.zeros((1, 1)),
            value_loss_weight=1.0,
        )
