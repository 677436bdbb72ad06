"""Tests of nnx_ppo.networks.sampling_layers: likelihoods, squashing, modes, replay."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats
from flax import nnx

from nnx_ppo.networks.sampling_layers import (
    ActionSampler,
    CategoricalSampler,
    NormalSampler,
    NormalTanhSampler,
)

MIN_STD = 1e-3


def _params(mean: np.ndarray, pre_std: np.ndarray) -> jnp.ndarray:
    return jnp.asarray(np.concatenate([mean, pre_std], axis=-1), jnp.float32)


def _std64(pre_std: np.ndarray, min_std: float = MIN_STD) -> np.ndarray:
    return np.logaddexp(0.0, pre_std.astype(np.float64)) + min_std


def _log_sech2_64(u: np.ndarray) -> np.ndarray:
    """float64 reference of log(1 - tanh(u)^2) = -2 log cosh(u), cosh via |u| + log1p."""
    a = np.abs(u.astype(np.float64))
    return -2.0 * (a + np.log1p(np.exp(-2.0 * a)) - math.log(2.0))


def _random_inputs(seed: int, batch: int, action_size: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(batch, action_size))
    pre_std = rng.normal(size=(batch, action_size))
    raw = rng.normal(size=(batch, action_size)) * 2.0
    return mean, pre_std, raw


# -- log-likelihoods against scipy ---------------------------------------------------------


def test_normal_log_likelihood_matches_scipy() -> None:
    mean, pre_std, raw = _random_inputs(0, batch=5, action_size=3)
    sampler = NormalSampler(nnx.Rngs(0))
    out = sampler((), _params(mean, pre_std), jnp.asarray(raw, jnp.float32))
    expected = scipy.stats.norm.logpdf(raw, mean, _std64(pre_std)).sum(-1)
    np.testing.assert_allclose(out.output["log_likelihood"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.output["action"], raw, rtol=1e-6)
    assert out.output["log_likelihood"].shape == (5,)


def test_normal_tanh_log_likelihood_matches_change_of_variables() -> None:
    # log p(tanh u) = log N(u; mean, std) - log|d tanh/du| = log N(u) - log(1 - tanh(u)^2).
    mean, pre_std, raw = _random_inputs(1, batch=6, action_size=4)
    sampler = NormalTanhSampler(nnx.Rngs(0))
    out = sampler((), _params(mean, pre_std), jnp.asarray(raw, jnp.float32))
    gauss = scipy.stats.norm.logpdf(raw, mean, _std64(pre_std))
    expected = (gauss - _log_sech2_64(raw)).sum(-1)
    np.testing.assert_allclose(out.output["log_likelihood"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.output["action"], np.tanh(raw), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out.rollout_extras, np.asarray(raw, np.float32))


def test_normal_tanh_hand_derived_log_likelihood() -> None:
    # std = softplus(p) + 1e-3 = 1 for p = log(e^0.999 - 1). Raw u = (0, ln 2), mean 0:
    #   Gaussian:  2 * (-0.5 ln 2pi) - 0.5 (ln 2)^2
    #   tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6  ->  log(1 - 0.36) = ln 0.64; at 0: ln 1 = 0
    #   log-likelihood = -ln(2 pi) - 0.5 (ln 2)^2 - ln 0.64
    p = math.log(math.exp(0.999) - 1.0)
    x = jnp.array([[0.0, 0.0, p, p]])
    raw = jnp.array([[0.0, math.log(2.0)]])
    out = NormalTanhSampler(nnx.Rngs(0))((), x, raw)
    expected = -math.log(2 * math.pi) - 0.5 * math.log(2.0) ** 2 - math.log(0.64)
    np.testing.assert_allclose(out.output["log_likelihood"], [expected], rtol=1e-6)
    np.testing.assert_allclose(out.output["action"], [[0.0, 0.6]], rtol=1e-6)


@pytest.mark.parametrize("scale", [1.0, 9.0, 15.0, 20.0])
def test_tanh_log_det_is_stable_for_large_raw(scale: float) -> None:
    # mean = raw keeps the Gaussian term at -ln std - 0.5 ln 2pi, so the log-det dominates:
    # at |u| = 20, log(1 - tanh^2) = 2 (ln 2 - 20 - softplus(-40)) ~ -38.61.
    u = np.array([[scale, -scale, 0.5 * scale]])
    pre_std = np.zeros_like(u)
    x = _params(u, pre_std)
    out = NormalTanhSampler(nnx.Rngs(0))((), x, jnp.asarray(u, jnp.float32))
    ll = np.asarray(out.output["log_likelihood"])
    expected = (scipy.stats.norm.logpdf(u, u, _std64(pre_std)) - _log_sech2_64(u)).sum(-1)
    assert np.all(np.isfinite(ll))
    np.testing.assert_allclose(ll, expected, rtol=1e-6, atol=1e-6)
    # The naive float32 log(1 - tanh^2) is off by > 1% from |u| = 9 and -inf from 15 on,
    # so the tolerance above tells the stable form from it.
    with np.errstate(divide="ignore"):
        naive = np.log(1.0 - np.tanh(np.float32(scale)) ** 2, dtype=np.float32)
    reference = _log_sech2_64(np.array(scale))
    assert np.isclose(naive, reference, rtol=1e-2) == (scale < 9.0)

    def loss(x: jax.Array) -> jax.Array:
        out = NormalTanhSampler(nnx.Rngs(0), entropy_weight=1.0)((), x, jnp.asarray(u))
        return jnp.sum(out.output["log_likelihood"] + out.regularization_loss)

    assert np.all(np.isfinite(jax.grad(loss)(x)))


# -- entropy -------------------------------------------------------------------------------


def test_normal_entropy_and_regularization() -> None:
    mean, pre_std, _ = _random_inputs(2, batch=4, action_size=3)
    out = NormalSampler(nnx.Rngs(0), entropy_weight=0.1)((), _params(mean, pre_std))
    expected = scipy.stats.norm.entropy(scale=_std64(pre_std)).sum(-1)
    np.testing.assert_allclose(out.regularization_loss, -0.1 * expected, rtol=1e-5)
    np.testing.assert_allclose(out.metrics["entropy"], expected.mean(), rtol=1e-5)
    assert out.regularization_loss.shape == (4,)


def test_normal_tanh_entropy_estimate_value_and_pathwise_gradient() -> None:
    # H = sum_a [0.5 ln(2 pi e) + ln std_a + ln(1 - tanh(u_a)^2)] at the taken u.
    # With std = 1 and u = (0, ln 2): H = 2 * 0.5 ln(2 pi e) + ln 0.64.
    # Pathwise gradient: u = mean + std * eps, eps fixed, so dH/dmean_a = d/du ln sech^2 u
    # = -2 tanh(u_a) = (0, -1.2).
    p = math.log(math.exp(0.999) - 1.0)
    raw = jnp.array([[0.0, math.log(2.0)]])

    def reg(x: jax.Array) -> jax.Array:
        out = NormalTanhSampler(nnx.Rngs(0), entropy_weight=2.0)((), x, raw)
        return out.regularization_loss[0]

    x = jnp.array([[0.0, 0.0, p, p]])
    h = math.log(2 * math.pi * math.e) + math.log(0.64)
    np.testing.assert_allclose(reg(x), -2.0 * h, rtol=1e-6)
    grad = jax.grad(reg)(x)
    np.testing.assert_allclose(grad[0, :2], -2.0 * np.array([0.0, -1.2]), rtol=1e-5, atol=1e-6)


def test_entropy_weight_zero_gives_zero_regularization_but_reports_entropy() -> None:
    x = jnp.zeros((3, 4))
    out = NormalTanhSampler(nnx.Rngs(0))((), x)
    np.testing.assert_array_equal(out.regularization_loss, np.zeros(3))
    # Same seed, weight 1: the regularization is -entropy, whose mean is the metric.
    weighted = NormalTanhSampler(nnx.Rngs(0), entropy_weight=1.0)((), x)
    np.testing.assert_array_equal(weighted.rollout_extras, out.rollout_extras)
    assert out.metrics["entropy"].shape == ()
    np.testing.assert_allclose(
        out.metrics["entropy"], -weighted.regularization_loss.mean(), rtol=1e-6
    )
    assert float(out.metrics["entropy"]) != 0.0


# -- sampling, modes and replay ------------------------------------------------------------


def test_normal_samples_have_the_right_distribution() -> None:
    # 20000 draws of N(0.5, 2): sample mean within 4 standard errors (4 * 2 / sqrt(20000)).
    n = 20000
    pre = math.log(math.exp(2.0 - MIN_STD) - 1.0)  # softplus(pre) + 1e-3 = 2
    x = jnp.tile(jnp.array([[0.5, pre]]), (n, 1))
    raw = np.asarray(NormalSampler(nnx.Rngs(3))((), x).rollout_extras[:, 0])
    assert abs(raw.mean() - 0.5) < 4 * 2.0 / math.sqrt(n)
    assert abs(raw.std() - 2.0) < 0.05


def test_categorical_samples_follow_softmax() -> None:
    n = 20000
    logits = np.log(np.array([0.2, 0.5, 0.3]))
    x = jnp.tile(jnp.asarray(logits, jnp.float32), (n, 1))
    action = np.asarray(CategoricalSampler(nnx.Rngs(4))((), x).output["action"])
    freq = np.bincount(action, minlength=3) / n
    # Binomial standard error sqrt(p (1 - p) / n) <= 0.0036; allow 4 of them.
    np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.015)


def test_train_eval_switch_and_replay_ignores_the_flag() -> None:
    mean, pre_std, _ = _random_inputs(5, batch=4, action_size=2)
    x = _params(mean, pre_std)
    sampler = NormalTanhSampler(nnx.Rngs(0))
    first = sampler((), x)
    second = sampler((), x)
    assert not np.allclose(first.rollout_extras, second.rollout_extras)  # fresh draws
    assert not np.allclose(first.rollout_extras, mean, atol=1e-3)

    sampler.eval()
    assert sampler.deterministic
    det = sampler((), x)
    np.testing.assert_allclose(det.rollout_extras, mean, rtol=1e-6)
    np.testing.assert_allclose(det.output["action"], np.tanh(mean), rtol=1e-6)
    # Replay in eval mode uses the stored (sampled) action, not the mean.
    replay = sampler((), x, first.rollout_extras)
    np.testing.assert_array_equal(replay.output["action"], first.output["action"])
    np.testing.assert_array_equal(replay.output["log_likelihood"], first.output["log_likelihood"])

    sampler.train()
    assert not sampler.deterministic
    assert not np.allclose(sampler((), x).rollout_extras, mean, atol=1e-3)


def test_eval_reaches_samplers_nested_in_plain_nnx_modules() -> None:
    class Holder(nnx.Module):
        def __init__(self) -> None:
            self.inner = nnx.List([CategoricalSampler(nnx.Rngs(0))])

    holder = Holder()
    holder.eval()
    assert holder.inner[0].deterministic
    holder.train()
    assert not holder.inner[0].deterministic


def test_only_fresh_draws_advance_the_rng_stream() -> None:
    # One key per sampling call; the mode and replay draw nothing.
    sampler = NormalTanhSampler(nnx.Rngs(0))
    x = jnp.zeros((2, 6))
    count = lambda: int(sampler.rngs.count[...])
    start = count()
    out = sampler((), x)
    assert count() == start + 1
    sampler((), x, out.rollout_extras)
    sampler.eval()
    sampler((), x)
    assert count() == start + 1


def test_sample_uses_one_normal_per_action_dimension() -> None:
    # raw = mean + std * normal(key, [B, A]) with the key the stream hands out.
    sampler = NormalSampler(nnx.Rngs(0))
    key = nnx.clone(sampler.rngs)()
    pre = math.log(math.exp(1.0 - MIN_STD) - 1.0)  # std = 1
    x = jnp.array([[1.0, 2.0, pre, pre], [3.0, 4.0, pre, pre]])
    raw = sampler((), x).rollout_extras
    expected = x[:, :2] + jax.random.normal(key, (2, 2))
    np.testing.assert_allclose(raw, expected, rtol=1e-6)


def test_categorical_log_likelihood_entropy_mode_and_replay() -> None:
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(5, 4)).astype(np.float32)
    sampler = CategoricalSampler(nnx.Rngs(0), entropy_weight=0.5)
    out = sampler((), jnp.asarray(logits))
    action = np.asarray(out.output["action"])
    assert out.output["action"].dtype == jnp.int32 and action.shape == (5,)
    np.testing.assert_array_equal(out.rollout_extras, action)
    logp = scipy.special.log_softmax(logits.astype(np.float64), axis=-1)
    np.testing.assert_allclose(out.output["log_likelihood"], logp[np.arange(5), action], rtol=1e-5)
    entropy = scipy.stats.entropy(np.exp(logp), axis=-1)
    np.testing.assert_allclose(out.regularization_loss, -0.5 * entropy, rtol=1e-5)
    np.testing.assert_allclose(out.metrics["entropy"], entropy.mean(), rtol=1e-5)

    sampler.eval()
    np.testing.assert_array_equal(
        sampler((), jnp.asarray(logits)).output["action"], logits.argmax(-1)
    )
    replay = sampler((), jnp.asarray(logits), out.rollout_extras)
    np.testing.assert_array_equal(replay.output["action"], action)
    np.testing.assert_array_equal(replay.output["log_likelihood"], out.output["log_likelihood"])


def test_categorical_masked_logits_are_never_sampled_and_entropy_is_finite() -> None:
    # Two live actions with equal logits: entropy ln 2; the -inf one has p = 0.
    x = jnp.tile(jnp.array([[0.0, -jnp.inf, 0.0]]), (1000, 1))
    sampler = CategoricalSampler(nnx.Rngs(0), entropy_weight=1.0)
    out = sampler((), x)
    assert not np.any(np.asarray(out.output["action"]) == 1)
    np.testing.assert_allclose(out.regularization_loss, -math.log(2.0), rtol=1e-6)
    grad = jax.grad(lambda x: sampler((), x, out.rollout_extras).regularization_loss.sum())(x)
    assert np.all(np.isfinite(grad[:, [0, 2]]))


@pytest.mark.parametrize(
    ("sampler_cls", "width", "raw"),
    [
        (NormalTanhSampler, 4, jnp.zeros((3, 2))),
        (NormalSampler, 4, jnp.zeros((3, 2))),
        (CategoricalSampler, 4, jnp.zeros((3,), jnp.int32)),
    ],
)
def test_sampler_under_jit_matches_eager(
    sampler_cls: type[ActionSampler], width: int, raw: jax.Array
) -> None:
    sampler = sampler_cls(nnx.Rngs(1))
    graphdef, state = nnx.split(sampler)
    x = jnp.linspace(-1.0, 1.0, 3 * width).reshape(3, width)

    @jax.jit
    def run(state: nnx.State, x: jax.Array) -> tuple:
        module = nnx.merge(graphdef, state)
        out = module((), x)
        return out, nnx.state(module)

    jit_out, new_state = run(state, x)
    eager_out = nnx.merge(graphdef, state)((), x)
    # XLA fuses differently under jit: equal to float32 rounding, integers exactly.
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    jax.tree.map(close, jit_out, eager_out)
    # The stream advanced by one inside jit, so the next draw differs.
    again, _ = run(new_state, x)
    assert not np.array_equal(again.rollout_extras, jit_out.rollout_extras)
    assert jit_out.rollout_extras.shape == raw.shape
    assert jit_out.rollout_extras.dtype == raw.dtype


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"entropy_weight": -0.1}, ValueError, "entropy_weight"),
        ({"entropy_weight": float("nan")}, ValueError, "entropy_weight"),
        ({"entropy_weight": "0.1"}, TypeError, "entropy_weight"),
        ({"min_std": 0.0}, ValueError, "min_std"),
        ({"std_scale": -1.0}, ValueError, "std_scale"),
        ({"deterministic": 1}, TypeError, "deterministic"),
    ],
)
def test_bad_hyper_parameters_raise(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        NormalTanhSampler(nnx.Rngs(0), **kwargs)


def test_bad_rngs_raise() -> None:
    with pytest.raises(TypeError, match=r"rngs must be an nnx.Rngs.*nnx.Rngs\(0\)"):
        CategoricalSampler(0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"'action'.*'default'"):
        CategoricalSampler(nnx.Rngs(params=0))
    # A named stream is used when present, and a bare RngStream is accepted.
    CategoricalSampler(nnx.Rngs(action=0))
    CategoricalSampler(nnx.Rngs(0).default)


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match=r"\[B, 2A\].*\(2, 3\).*2 \* action_size"):
        NormalTanhSampler(nnx.Rngs(0))((), jnp.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"Map\("):
        NormalSampler(nnx.Rngs(0))((), {"a": jnp.zeros((2, 4))})
    with pytest.raises(ValueError, match="logits"):
        CategoricalSampler(nnx.Rngs(0))((), jnp.zeros((2, 0)))
    with pytest.raises(ValueError, match=r"rollout_extras has shape \(2, 3\).*\(2, 2\)"):
        NormalTanhSampler(nnx.Rngs(0))((), jnp.zeros((2, 4)), jnp.zeros((2, 3)))


def test_carry_is_empty_and_passes_through() -> None:
    sampler = NormalTanhSampler(nnx.Rngs(0))
    assert sampler.initialize_state(7) == ()
    assert sampler((), jnp.zeros((7, 2))).next_state == ()


# -- held exploration noise (resample_every) -----------------------------------------------


def test_held_noise_is_redrawn_every_k_steps_of_each_episode() -> None:
    from nnx_ppo.networks.types import reset_where

    k, batch = 3, 4
    sampler = NormalSampler(nnx.Rngs(0), resample_every=k, action_size=2)
    state = sampler.initialize_state(batch)
    x = jnp.zeros((batch, 4))  # mean 0, pre-std 0: raw = softplus(0) * noise
    std = math.log(2.0) + MIN_STD
    noises = []
    for t in range(7):
        out = sampler(state, x)
        np.testing.assert_allclose(out.rollout_extras, std * out.next_state["noise"], rtol=1e-6)
        noises.append(np.asarray(out.next_state["noise"]))
        state = out.next_state
        if t == 3:  # env 0's episode ends after step 3: it redraws at its next step
            state = reset_where(sampler, jnp.array([True, False, False, False]), state)
    n = np.stack(noises)  # [T, B, A]
    # Envs 1-3: new draws at steps 0, 3, 6 only.
    for t in (1, 2, 4, 5):
        np.testing.assert_array_equal(n[t, 1:], n[t - 1, 1:])
    for t in (3, 6):
        assert not np.any(n[t, 1:] == n[t - 1, 1:])
    # Env 0: a new episode from step 4 (draws at 4, then 7).
    np.testing.assert_array_equal(n[5, 0], n[4, 0])
    np.testing.assert_array_equal(n[6, 0], n[4, 0])
    assert not np.any(n[4, 0] == n[3, 0])
    np.testing.assert_array_equal(np.asarray(state["age"]), [3, 7, 7, 7])


def test_held_noise_keeps_the_gaussian_likelihood_and_replays() -> None:
    sampler = NormalTanhSampler(nnx.Rngs(1), resample_every=4, action_size=3)
    mean, pre_std, _ = _random_inputs(0, 5, 3)
    x = _params(mean, pre_std)
    white = NormalTanhSampler(nnx.Rngs(1))
    state = sampler.initialize_state(5)
    for _ in range(6):
        out = sampler(state, x)
        # The log-likelihood of the taken action is the tanh-Gaussian's ...
        ref = white((), x, out.rollout_extras)
        np.testing.assert_allclose(
            out.output["log_likelihood"], ref.output["log_likelihood"], rtol=1e-6
        )
        # ... and replaying the stored raw action reproduces it and advances the age.
        again = sampler(state, x, out.rollout_extras)
        np.testing.assert_array_equal(again.output["log_likelihood"], out.output["log_likelihood"])
        np.testing.assert_array_equal(again.next_state["age"], out.next_state["age"])
        state = out.next_state
    sampler.eval()
    out = sampler(state, x)
    np.testing.assert_allclose(out.output["action"], np.tanh(mean), rtol=1e-6)
    np.testing.assert_array_equal(out.next_state["noise"], state["noise"])


def test_held_noise_samples_are_standard_normal_across_environments() -> None:
    sampler = NormalSampler(nnx.Rngs(2), resample_every=5, action_size=1)
    state = sampler.initialize_state(20_000)
    x = jnp.zeros((20_000, 2))
    for _ in range(7):  # a draw at step 0 and one at step 5
        state = sampler(state, x).next_state
    noise = np.asarray(state["noise"])[:, 0]
    assert abs(noise.mean()) < 0.03 and abs(noise.std() - 1.0) < 0.03


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"resample_every": 0}, r"resample_every must be an int >= 1.*got 0"),
        ({"resample_every": True}, r"resample_every must be an int >= 1.*got True"),
        ({"resample_every": 2}, r"resample_every=2.*action_size=None; pass action_size=A"),
        ({"resample_every": 2, "action_size": 0}, r"action_size=0"),
    ],
)
def test_held_noise_bad_settings_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NormalTanhSampler(nnx.Rngs(0), **kwargs)


def test_held_noise_needs_the_right_action_size() -> None:
    sampler = NormalSampler(nnx.Rngs(0), resample_every=2, action_size=3)
    with pytest.raises(ValueError, match=r"noise of shape \(2, 3\); build the sampler with "):
        sampler(sampler.initialize_state(2), jnp.zeros((2, 4)))
