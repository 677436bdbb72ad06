"""The adaptive-KL learning rate: the rule on hand-derived KL sequences, inside the
gradient phase, in a training run (logged, checkpointed, resumed exactly), and its
config validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.phases import gradient_phase, split_minibatches
from nnx_ppo.algorithms.core.schedules import (
    AdaptiveKL,
    adapt_learning_rate,
    learning_rate_state,
    linear_decay,
    with_learning_rate,
)
from nnx_ppo.algorithms.ppo.iteration import make_optimizer
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.algorithms.types import TrainState
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

RULE = AdaptiveKL(desired_kl=0.01)  # factor 1.5, bounds [1e-5, 1e-2]

# desired_kl = 0.01: lower the rate above 0.02, raise it strictly between 0 and 0.005.
#   kl      rule                          lr
#   0.0     unchanged (kl is not > 0)     1e-3
#   0.03    > 0.02: / 1.5                 6.6667e-4
#   0.03    > 0.02: / 1.5                 4.4444e-4
#   0.004   in (0, 0.005): * 1.5          6.6667e-4
#   0.01    in [0.005, 0.02]: unchanged   6.6667e-4
#   0.02    not > 0.02: unchanged         6.6667e-4
#   0.005   not < 0.005: unchanged        6.6667e-4
#   0.001   * 1.5                         1e-3
KLS = [0.0, 0.03, 0.03, 0.004, 0.01, 0.02, 0.005, 0.001]
RATES = [1e-3, 1e-3 / 1.5, 1e-3 / 1.5**2, 1e-3 / 1.5, 1e-3 / 1.5, 1e-3 / 1.5, 1e-3 / 1.5, 1e-3]


def _sequence(start: float, kls: list[float], rule: AdaptiveKL = RULE) -> list[float]:
    rates, rate = [], jnp.float32(start)
    for kl in kls:
        rate = adapt_learning_rate(rate, jnp.float32(kl), rule)
        rates.append(float(rate))
    return rates


def test_the_rule_on_a_hand_derived_kl_sequence():
    np.testing.assert_allclose(_sequence(1e-3, KLS), RATES, rtol=1e-6)


def test_the_rule_stops_at_its_bounds():
    # 9e-3 * 1.5 = 1.35e-2 is capped at 1e-2, and stays there.
    np.testing.assert_allclose(_sequence(9e-3, [0.001, 0.001]), [1e-2, 1e-2], rtol=1e-6)
    # 1.2e-5 / 1.5 = 8e-6 is floored at 1e-5.
    np.testing.assert_allclose(_sequence(1.2e-5, [1.0, 1.0]), [1e-5, 1e-5], rtol=1e-6)
    # Another factor and target: 0.1 desired, factor 2; 0.25 > 0.2 halves, 0.04 doubles.
    rule = AdaptiveKL(desired_kl=0.1, factor=2.0, min_learning_rate=1e-4, max_learning_rate=1.0)
    np.testing.assert_allclose(_sequence(0.1, [0.25, 0.04, 0.1], rule), [0.05, 0.1, 0.1])


def _ppo(**kwargs) -> PPOConfig:
    base = dict(n_envs=8, rollout_length=4, n_minibatches=8, n_epochs=1, total_steps=32)
    return PPOConfig(**{**base, **kwargs})


@pytest.mark.parametrize(("max_grad_norm", "first_kl"), [
    (None, 0.0), (1.0, 0.0), (None, 1e-9), (None, -1e-9), (None, 0.03),
])  # fmt: skip
def test_the_gradient_phase_adapts_the_rate_before_each_step(max_grad_norm, first_kl):
    """Eight minibatches of one environment each, whose loss reports the KL of its
    environment: the permutation the phase draws is applied to the KL values first, so
    that the minibatches come in the order of ``KLS``. Each step uses the rate the rule
    just produced: with a gradient of 1 for the scalar parameter, Adam's first step is
    ``-lr`` and each later one ``-lr`` too (``m / sqrt(v) = 1`` after bias correction),
    so the parameter ends at ``-sum(RATES)``. The iteration's first step keeps the rate
    whatever its KL (in a run it is rounding noise of either sign, +-1e-9, whose sign
    would otherwise decide; 0.03 would lower it)."""
    config = _ppo(desired_kl=0.01, learning_rate=1e-3, max_grad_norm=max_grad_norm)
    optimizer = make_optimizer(config)
    params = {"w": jnp.zeros(())}
    key = jax.random.PRNGKey(3)
    # Where split_minibatches puts environment b: minibatch i holds env perm[i].
    order, _ = split_minibatches(
        jax.random.split(key, 1)[0], 8, 8, jnp.arange(8.0)[None], jnp.zeros(8)
    )
    perm = np.asarray(order[:, 0, 0]).astype(int)
    kls = np.zeros(8, np.float32)
    kls[perm] = [first_kl, *KLS[1:]]

    def loss(p, _network_state, minibatch):
        (kl,), _ = minibatch
        return p["w"], {"actor/approx_kl": jnp.mean(kl), "loss/total": p["w"]}

    state = TrainState(
        params=params, network_state={}, opt_state=optimizer.init(params), env_state=None,
        reset_state=None, carry=None, episodes=None, rng=key,
        iteration=jnp.zeros((), jnp.int32), non_finite=None,
    )  # fmt: skip
    (params, opt_state), metrics = gradient_phase(
        loss, optimizer, state, {}, (jnp.asarray(kls)[None],), jnp.zeros(8), key, config
    )
    np.testing.assert_allclose(float(metrics["train/learning_rate"]), RATES[-1], rtol=1e-6)
    rate = learning_rate_state(opt_state).hyperparams["learning_rate"]
    np.testing.assert_allclose(float(rate), RATES[-1], rtol=1e-6)
    np.testing.assert_allclose(float(params["w"]), -sum(RATES), rtol=1e-4)


def test_without_desired_kl_the_optimizer_state_is_plain_adam():
    plain, adaptive = make_optimizer(_ppo()), make_optimizer(_ppo(desired_kl=0.01))
    params = {"w": jnp.zeros(3)}
    assert isinstance(plain.init(params)[0], optax.ScaleByAdamState)
    with pytest.raises(TypeError, match="no injected learning_rate"):
        learning_rate_state(plain.init(params))
    state = with_learning_rate(adaptive.init(params), jnp.float32(5e-4))
    assert float(learning_rate_state(state).hyperparams["learning_rate"]) == pytest.approx(5e-4)


@pytest.mark.parametrize(("weight_decay", "adam_eps", "expected"), [
    (0.0, 1e-8, -1e-3 * 1e-6 / (1e-6 + 1e-8)),
    (0.0, 1e-5, -1e-3 / 11),
    (1e-2, 1e-5, -1e-3 / 11),  # AdamW: decay times the zero parameter adds nothing
])  # fmt: skip
def test_adam_eps_is_the_denominators_floor(weight_decay, adam_eps, expected):
    # Adam's first step: m_hat = g, v_hat = g^2, so the update is -lr * g / (|g| + eps);
    # with g = 1e-6 and eps = 1e-5 that is -lr * 1e-6 / 1.1e-5 = -lr / 11.
    config = _ppo(learning_rate=1e-3, weight_decay=weight_decay, adam_eps=adam_eps)
    optimizer = make_optimizer(config)
    params = {"w": jnp.zeros(2)}
    grads = {"w": jnp.full(2, 1e-6)}
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    np.testing.assert_allclose(updates["w"], expected, rtol=1e-5)


# --------------------------------------------------------------------------- runs

LOG = LogLevel.LOSSES | LogLevel.ACTOR
ENV = EpisodeWrapper(PointMass(), episode_length=8)


def _config(**ppo) -> TrainConfig:
    settings = dict(
        n_envs=8, rollout_length=4, n_minibatches=2, n_epochs=4, total_steps=32 * 8,
        learning_rate=3e-3, desired_kl=1e-4, log_level=LOG,
    )  # fmt: skip
    return TrainConfig(ppo=PPOConfig(**{**settings, **ppo}), eval=EvalConfig(enabled=False))


def _net() -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))


def _rate(state: TrainState) -> float:
    return float(learning_rate_state(state.opt_state).hyperparams["learning_rate"])


def test_a_run_logs_the_adapted_rate_and_a_fixed_one():
    records: list[tuple[int, float]] = []
    result = train_ppo(
        ENV, _net(), _config(), progress=False,
        log_fn=lambda m, s: records.append((s, m["train/learning_rate"])),
    )  # fmt: skip
    rates = [r for _, r in records]
    # desired_kl=1e-4 is far below what lr=3e-3 produces: the rate falls.
    assert rates[-1] < 3e-3 and len(set(rates)) > 1
    assert rates[-1] == pytest.approx(_rate(result.state), rel=1e-6)
    fixed: list[float] = []
    train_ppo(
        ENV, _net(), _config(desired_kl=None), progress=False,
        log_fn=lambda m, s: fixed.append(m["train/learning_rate"]),
    )  # fmt: skip
    assert fixed == [pytest.approx(3e-3)] * len(fixed)


def test_a_schedule_logs_its_rate_at_the_last_step_of_the_iteration():
    # linear_decay: 8 iterations x 8 updates, from 3e-3 to 0 at the 64th update.
    config = _config(desired_kl=None)
    schedule = linear_decay(config)
    for count in (0, 32, 64):
        assert float(schedule(count)) == pytest.approx(3e-3 * (1 - count / 64))
    rates: list[float] = []
    train_ppo(
        ENV, _net(), _config(desired_kl=None, learning_rate=schedule), progress=False,
        log_fn=lambda m, s: rates.append(m["train/learning_rate"]),
    )  # fmt: skip
    # 8 updates per iteration: iteration k's last update has count 8k + 7.
    expected = [3e-3 * (1 - (8 * k + 7) / 64) for k in range(8)]
    np.testing.assert_allclose(rates, expected, rtol=1e-5)


def test_linear_decay_refuses_a_schedule_and_a_negative_final_rate():
    config = _config(desired_kl=None)
    with pytest.raises(TypeError, match="already a schedule"):
        linear_decay(_config(desired_kl=None, learning_rate=optax.constant_schedule(1e-3)))
    with pytest.raises(ValueError, match=r"final=-0\.1"):
        linear_decay(config.ppo, final=-0.1)
    assert float(linear_decay(config, final=1e-4)(64)) == pytest.approx(1e-4)


class _Stop(Exception):
    pass


@pytest.mark.heavy
def test_a_resumed_run_continues_with_the_adapted_rate_bitwise(tmp_path):
    config = _config()
    reference = train_ppo(ENV, _net(), config, progress=False)

    def stop(metrics, step):
        if step >= 128:
            raise _Stop

    with Checkpointer(tmp_path / "run", save_every_steps=64) as ckpt, pytest.raises(_Stop):
        train_ppo(ENV, _net(), config, progress=False, log_fn=stop, checkpoint=ckpt)
    with Checkpointer(tmp_path / "run", save_every_steps=64) as ckpt:
        assert ckpt.latest_step == 128
        restored = ckpt.restore(reference.state)
        assert restored is not None and _rate(restored) != 3e-3
        resumed = train_ppo(ENV, _net(), config, progress=False, checkpoint=ckpt)
    assert _rate(resumed.state) == _rate(reference.state)
    for a, b in zip(
        jax.tree.leaves(reference.state.params), jax.tree.leaves(resumed.state.params), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"desired_kl": 0.0}, r"desired_kl=0.0 must be > 0"),
        ({"desired_kl": -0.01}, r"desired_kl=-0.01 must be > 0"),
        ({"desired_kl": 0.01, "learning_rate_factor": 1.0}, r"learning_rate_factor=1.0 must be >"),
        ({"min_learning_rate": 0.0}, r"min_learning_rate=0.0 must be > 0"),
        (
            {"desired_kl": 0.01, "min_learning_rate": 1e-2, "max_learning_rate": 1e-5},
            r"min_learning_rate=0.01 is above max_learning_rate=1e-05",
        ),
        ({"desired_kl": 0.01, "learning_rate": 0.1}, r"learning_rate=0.1 is outside"),
        (
            {"desired_kl": 0.01, "learning_rate": optax.constant_schedule(1e-3)},
            r"learning_rate must be a number",
        ),
    ],
)
def test_bad_adaptive_kl_settings_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _ppo(**kwargs)
