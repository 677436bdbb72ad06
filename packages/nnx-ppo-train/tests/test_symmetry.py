"""Mirror symmetry (`PPOConfig.symmetry`): the record, its checks before compiling, the
mirrored carries of a recurrent rollout against the network run step by step on the
mirrored observations, and the symmetry error of hand-built policies.

The ratio-is-one check of the mirrored half is `test_iteration.py`'s (one
parametrization), the bitwise resume of a symmetric sweep `test_trainer_contract.py`'s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import dict_obs_network
from flax import nnx

from nnx_ppo.algorithms.config import (
    PPOConfig,
    TrainConfig,
    config_from_dict,
    config_to_dict,
)
from nnx_ppo.algorithms.core.mirroring import (
    MirrorStep,
    augmented,
    check_symmetry,
    mirror_loss,
    sampler_slots,
    symmetry_error,
)
from nnx_ppo.algorithms.core.phases import cut_sequences
from nnx_ppo.algorithms.core.rollout import (
    initial_episode_stats,
    ppo_output,
    replay,
    reset_envs,
    split_network,
    unroll,
)
from nnx_ppo.algorithms.ppo import iteration as iteration_module
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.algorithms.symmetry import Mirror, Symmetry
from nnx_ppo.envs import PointMass
from nnx_ppo.envs.dict_obs_env import DictObsEnv
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.sampling_layers import NormalSampler, NormalTanhSampler
from nnx_ppo.networks.types import reset_where
from nnx_ppo.wrappers import EpisodeWrapper

FLIP_X = Mirror.from_signs(-1, 1)  # PointMass mirrored in x: (x, y) -> (-x, y), likewise the action
SYMMETRY = Symmetry(observation=FLIP_X, action=FLIP_X)


# --------------------------------------------------------------------------- the record


def test_a_mirror_permutes_and_flips_the_last_axis_and_maps_categories():
    mirror = Mirror.swap(3, [(0, 2)], negate=[1])
    assert mirror == Mirror(permutation=(2, 1, 0), signs=(1, -1, 1))
    x = jnp.array([[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(mirror(x), [[3.0, -2.0, 1.0]])
    np.testing.assert_array_equal(mirror(mirror(x)), x)  # an involution
    # A discrete action is a category index: left (0) and right (2) swap, 1 stays.
    np.testing.assert_array_equal(Mirror(permutation=(2, 1, 0))(jnp.array([0, 1, 2])), [2, 1, 0])
    assert Mirror()(x) is not None and Mirror().size is None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"permutation": (1, 2, 0)}, ValueError, "not an involution"),
        ({"permutation": (1, 0), "signs": (1, -1)}, ValueError, "not an involution"),
        ({"permutation": (0, 0)}, ValueError, "not a permutation of range"),
        ({"signs": (1, 2)}, ValueError, "only 1 and -1"),
        ({"permutation": (1, 0), "signs": (1, 1, 1)}, ValueError, "same length"),
        ({"signs": (0.5, 1)}, TypeError, "must hold ints"),
    ],
)
def test_a_mirror_that_is_not_an_involution_is_refused_by_name(kwargs, error, message):
    with pytest.raises(error, match=message):
        Mirror(**kwargs)


def test_a_symmetry_round_trips_through_the_configs_json():
    symmetry = Symmetry(
        observation={"pos": FLIP_X, "goal": Mirror.swap(2, [(0, 1)])},
        action=FLIP_X,
        ratio="mirrored",
        mirror_loss_weight=0.25,
    )
    config = TrainConfig(ppo=PPOConfig(n_envs=8, n_minibatches=2, symmetry=symmetry))
    data = config_to_dict(config)
    assert data["ppo"]["symmetry"]["observation"]["pos"] == {"permutation": None, "signs": [-1, 1]}
    assert config_from_dict(data) == config
    assert hash(config.ppo.symmetry) == hash(config_from_dict(data).ppo.symmetry)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: PPOConfig(symmetry=FLIP_X), TypeError, "must be a Symmetry or None"),
        (
            lambda: PPOConfig(symmetry=SYMMETRY, advantage_estimation="minibatch"),
            ValueError,
            "symmetry=.* advantage_estimation='minibatch'",
        ),
        (
            lambda: Symmetry(observation=FLIP_X, action=FLIP_X, augment=False),
            ValueError,
            "does nothing",
        ),
        (
            lambda: Symmetry(observation=FLIP_X, action=FLIP_X, mirror_loss_weight=-1.0),
            ValueError,
            "mirror_loss_weight=-1.0 must be finite and >= 0",
        ),
        (lambda: Symmetry(observation=(-1, 1), action=FLIP_X), TypeError, "must be a Mirror"),
        (
            lambda: Symmetry(observation=FLIP_X, action=FLIP_X, ratio="old"),
            ValueError,
            "ratio='old' is not 'behavior'",
        ),
    ],
)
def test_a_symmetry_that_cannot_work_is_refused_when_built(build, error, message):
    with pytest.raises(error, match=message):
        build()


# --------------------------------------------------------------------------- checks


def _mlp(action_size: int = 2) -> nnx.Module:
    return make_mlp_actor_critic(2, action_size, (8,), (8,), rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    ("env", "symmetry", "message"),
    [
        (
            PointMass(),
            Symmetry(observation=Mirror.from_signs(-1, 1, 1), action=FLIP_X),
            r"Symmetry.observation=Mirror\(.*\) mirrors a last axis of 3 entries, but the "
            r"observation is float32\[2, 2\]",
        ),
        (
            PointMass(),
            Symmetry(observation={"pos": FLIP_X}, action=FLIP_X),
            r"gives mirrors for the keys \['pos'\], but the observation has an array",
        ),
        (
            DictObsEnv(),
            Symmetry(observation={"pos": FLIP_X}, action=FLIP_X),
            r"keys \['pos'\], but the observation has \['goal', 'proprio'\]",
        ),
        (
            PointMass(),
            Symmetry(observation=FLIP_X, action=Mirror.from_signs(-1)),
            r"Symmetry.action=.* 1 entries, but the action is float32\[2, 2\]",
        ),
    ],
)
def test_mirrors_that_do_not_fit_the_env_and_network_are_named(env, symmetry, message):
    network = _mlp() if isinstance(env, PointMass) else dict_obs_network(nnx.Rngs(0))
    with pytest.raises(ValueError, match=message):
        check_symmetry(env, network, symmetry)


def test_a_mirror_loss_on_a_sampler_with_a_carry_is_refused():
    # Held exploration noise makes the sampler stateful: the sequence replay scans it,
    # and the mirror loss cannot read its distribution there.
    rngs = nnx.Rngs(0)
    sampler = NormalTanhSampler(rngs, resample_every=2, action_size=2)
    net = PPOAdapter(
        action=Sequential([Dense(2, 4, rngs=rngs), sampler]), value=Dense(2, 1, rngs=rngs)
    )
    check_symmetry(PointMass(), net, SYMMETRY)  # augmentation alone is fine
    loss = Symmetry(observation=FLIP_X, action=FLIP_X, mirror_loss_weight=1.0)
    with pytest.raises(ValueError, match=r"NormalTanhSampler of the action at <root> has a carry"):
        check_symmetry(PointMass(), net, loss)


def test_train_ppo_refuses_a_mirror_that_does_not_fit_before_compiling(monkeypatch):
    # make_training_iteration is never reached: the check runs at set-up.
    monkeypatch.setattr(iteration_module, "make_training_iteration", None)
    symmetry = Symmetry(observation=Mirror.from_signs(-1, 1, 1), action=FLIP_X)
    config = PPOConfig(n_envs=4, rollout_length=4, n_minibatches=2, symmetry=symmetry)
    with pytest.raises(ValueError, match="mirrors a last axis of 3 entries"):
        train_ppo(EpisodeWrapper(PointMass(), episode_length=4), _mlp(), config, progress=False)


# --------------------------------------------------------------------------- exactness


def test_a_mirrored_recurrent_sequence_replays_as_the_network_runs_on_the_mirror():
    # An LSTM (with its observation normalizer) on PointMass with 3-step episodes over an
    # 8-step rollout (carry resets), after 4 warm-up steps (non-zero initial carries).
    # The reference runs the network step by step on the mirrored observations from
    # the initial carry, resetting where the rollout did, and scores the mirrored
    # actions M(raw action taken). The rollout's mirrored record and carries, and the
    # trainer's replay of its 2-step mirrored sequences from the stored carries, must
    # equal it to float32 rounding.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    net = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(0))
    graphdef, params, network_state = split_network(net)
    n, steps, length = 4, 8, 2
    first = reset_envs(env, jax.random.PRNGKey(0), n)
    mirror = MirrorStep(graphdef, SYMMETRY, carry_every=length)

    def rollout(env_state, carry, mirror_carry, t):
        return unroll(
            env, graphdef, params, network_state, env_state, carry, initial_episode_stats(n),
            jax.random.PRNGKey(1), first, length=t, bootstrap_on_truncation=False,
            carry_every=length, mirror=mirror, mirror_carry=mirror_carry,
        )  # fmt: skip

    zero = net.initialize_state(n)
    _, env_state, carry, _, _, warm = jax.jit(rollout, static_argnums=3)(first, zero, zero, 4)
    m_start = warm.mirror.final_carry
    *_, result = jax.jit(rollout, static_argnums=3)(env_state, carry, m_start, steps)
    tr, m = result.transitions, result.mirror

    slots = sampler_slots(graphdef, params, network_state, zero, first.obs)
    model = nnx.merge(graphdef, params, network_state)
    ref_carry, carries, log_likelihoods = m_start, [], []
    for t in range(steps):
        carries.append(ref_carry)
        obs_m = SYMMETRY.mirror_observation(tr.obs[t])
        acting = jax.tree.leaves(model(ref_carry, obs_m).rollout_extras)
        stored = jax.tree.leaves(jax.tree.map(lambda x, t=t: x[t], m.rollout_extras))
        real_raw = jax.tree.leaves(jax.tree.map(lambda x, t=t: x[t], tr.rollout_extras))[slots[0]]
        for i, (a, s) in enumerate(zip(acting, stored, strict=True)):
            if i == slots[0]:  # the mirrored action, exactly
                np.testing.assert_array_equal(s, SYMMETRY.mirror_action(real_raw))
            else:  # what the network emits on the mirrored observation (its raw input)
                np.testing.assert_allclose(s, a, atol=1e-6)
        extras = jax.tree.map(lambda x, t=t: x[t], m.rollout_extras)
        out = model(ref_carry, obs_m, extras)
        log_likelihoods.append(ppo_output(out).loglikelihoods)
        ref_carry = reset_where(model, tr.done[t], out.next_state)
    assert bool(jnp.any(tr.done))
    assert any(bool(jnp.any(leaf != 0)) for leaf in jax.tree.leaves(m_start))
    np.testing.assert_allclose(m.log_likelihood, jnp.stack(log_likelihoods), atol=1e-5)
    for k in range(steps // length):  # the carries the mirrored sequences start from
        for a, b in zip(
            jax.tree.leaves(jax.tree.map(lambda c, k=k: c[k], m.chunk_carries)),
            jax.tree.leaves(carries[k * length]),
            strict=True,
        ):
            np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(  # the mirrored carry the next rollout starts from
        jax.tree.leaves(m.final_carry)[0], jax.tree.leaves(ref_carry)[0], atol=1e-6
    )

    # The trainer's replay: 2-step sequences, real and mirrored in one minibatch.
    labels, (starts, m_starts) = cut_sequences(
        length, (tr, m.labels), (result.chunk_carries, m.chunk_carries)
    )
    both, both_carry = augmented(SYMMETRY, labels[0], starts, labels[1], m_starts)
    out = jax.jit(lambda p, s, c, x: replay(graphdef, p, s, c, x))(
        params, network_state, both_carry, both
    )
    b = labels[0].done.shape[1]
    cut_reference, _ = cut_sequences(length, jnp.stack(log_likelihoods), None)
    np.testing.assert_allclose(out.log_likelihood[:, b:], cut_reference, atol=1e-5)
    np.testing.assert_allclose(out.log_likelihood[:, :b], labels[0].log_likelihood, atol=1e-5)


# --------------------------------------------------------------------------- error


def _linear_policy(mean_kernel: np.ndarray) -> nnx.Module:
    """A hand-built policy: mean action ``W s`` (``W = mean_kernel``, ``[A, n]``, no
    bias), a constant std, a zero critic."""
    rngs = nnx.Rngs(0)
    head = Dense(2, 4, rngs=rngs)
    kernel = np.zeros((2, 4), np.float32)
    kernel[:, :2] = mean_kernel.T  # the mean; the pre-std columns stay 0
    head.linear.kernel[...] = jnp.asarray(kernel)
    head.linear.bias[...] = jnp.zeros(4)
    value = Dense(2, 1, rngs=rngs)
    return PPOAdapter(action=Sequential([head, NormalSampler(rngs)]), value=value)


def test_the_symmetry_error_is_zero_for_a_symmetric_policy_and_known_otherwise():
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3, 2)), jnp.float32)  # [T, B, 2]
    # W = diag(2, -3) commutes with the x flip: a(Ms) = M a(s), error 0.
    assert symmetry_error(_linear_policy(np.diag([2.0, -3.0])), SYMMETRY, obs) == 0.0
    # W = [[1, 1], [0, 1]]: a(s) = (x + y, y), a(Ms) = (-x + y, y), M a(s) = (-x - y, y),
    # so a(Ms) - M a(s) = (2y, 0) and the error is mean |2y|.
    error = symmetry_error(_linear_policy(np.array([[1.0, 1.0], [0.0, 1.0]])), SYMMETRY, obs)
    np.testing.assert_allclose(error, float(jnp.mean(jnp.abs(2 * obs[..., 1]))), rtol=1e-6)


def test_the_mirror_loss_is_the_squared_mirror_error_of_the_mean_and_moves_it():
    # The policies above on a 5-step PointMass rollout with the mirrored record: the
    # asymmetric one has u(Ms) - M u(s) = (2y, 0) (u the Gaussian's mean, the
    # sampler's raw mode), so the loss is mean 4 y^2, and its gradient is not zero
    # (a sampler's mode is a fixed value: the loss reads the distribution's); the
    # symmetric one has loss 0.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    first = reset_envs(env, jax.random.PRNGKey(0), 4)
    for kernel, symmetric in ((np.array([[1.0, 1.0], [0.0, 1.0]]), False), (np.eye(2), True)):
        net = _linear_policy(kernel)
        graphdef, params, network_state = split_network(net)
        carry = net.initialize_state(4)
        *_, rollout = unroll(
            env, graphdef, params, network_state, first, carry, initial_episode_stats(4),
            jax.random.PRNGKey(1), first, length=5, bootstrap_on_truncation=False,
            mirror=MirrorStep(graphdef, SYMMETRY, None), mirror_carry=carry,
        )  # fmt: skip
        mirror = rollout.mirror

        def loss(p, rollout=rollout, mirror=mirror, graphdef=graphdef, state=network_state):
            return mirror_loss(
                graphdef, p, state, SYMMETRY, rollout.transitions, rollout.initial_carry,
                mirror.labels, mirror.initial_carry,
            )  # fmt: skip

        value, grads = jax.value_and_grad(loss)(params)
        norm = sum(float(jnp.sum(g**2)) for g in jax.tree.leaves(grads))
        if symmetric:
            assert float(value) == 0.0 and norm == 0.0
        else:
            y = rollout.transitions.obs[..., 1]
            np.testing.assert_allclose(value, jnp.mean(4 * y**2), rtol=1e-6)
            assert norm > 1e-2
