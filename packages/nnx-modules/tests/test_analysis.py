"""nnx_ppo.networks.analysis: fixed points of hand-built maps with known answers, the
carry map of real networks (LSTM, GRU, CTRNN, Delay), PCA, condition averages and the
plots."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.analysis import CarryMap, condition_average, find_fixed_points, pca
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.export import DeterministicPolicy
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU
from nnx_ppo.networks.low_rank import LowRankRNN
from nnx_ppo.networks.recurrent import CTRNN, GRU, LSTM, SimpleRNN
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

# --------------------------------------------------------------------------- fixed points


def _grid(n: int, dims: int, scale: float = 2.0) -> jax.Array:
    return jax.random.uniform(jax.random.key(0), (n, dims), minval=-scale, maxval=scale)


def test_a_linear_map_has_one_fixed_point_with_the_matrix_eigenvalues() -> None:
    # F(h) = A h + b: the only fixed point solves (I - A) h = b, and dF/dh = A.
    # A is upper triangular, so its eigenvalues are its diagonal: 0.8, -0.5, 0.3.
    a = jnp.array([[0.8, 0.4, 0.0], [0.0, -0.5, 0.2], [0.0, 0.0, 0.3]])
    b = jnp.array([1.0, -2.0, 0.5])
    found = find_fixed_points(lambda h: a @ h + b, _grid(16, 3))
    expected = np.linalg.solve(np.eye(3) - np.asarray(a), np.asarray(b))
    assert len(found) == 1 and found.counts.tolist() == [16]
    np.testing.assert_allclose(found.points[0], expected, atol=1e-5)
    np.testing.assert_allclose(np.sort(found.eigenvalues[0].real), [-0.5, 0.3, 0.8], atol=1e-6)
    np.testing.assert_allclose(found.jacobians[0], a, atol=1e-6)
    assert found.stable.tolist() == [True] and found.speeds[0] < 1e-10


def test_an_unstable_linear_fixed_point_is_found_and_marked() -> None:
    # A = diag(1.5, 0.5): h* = b / (1 - diag(A)) = [-2, 2]; one direction expands.
    a, b = jnp.diag(jnp.array([1.5, 0.5])), jnp.array([1.0, 1.0])
    found = find_fixed_points(lambda h: a @ h + b, _grid(8, 2))
    assert len(found) == 1
    np.testing.assert_allclose(found.points[0], [-2.0, 2.0], atol=1e-5)
    assert found.stable.tolist() == [False] and found.unstable_dimensions.tolist() == [1]


def test_a_two_attractor_tanh_rnn() -> None:
    # F(h) = tanh(W h), W = diag(2, 0.5). Unit 2 decays to 0 (|0.5 tanh'| < 1); unit 1
    # has h = tanh(2 h): h = 0 (slope 2, unstable) and h = +-h*, h* = 0.957504 (the
    # root of h - tanh(2h), below). At +-h* the Jacobian is diag(2 (1 - h*^2), 0.5) =
    # diag(0.16642, 0.5): two attractors; at 0 it is diag(2, 0.5): a saddle.
    h_star = 1.0
    for _ in range(100):  # Newton on h - tanh(2h)
        h_star -= (h_star - np.tanh(2 * h_star)) / (1 - 2 / np.cosh(2 * h_star) ** 2)
    assert abs(h_star - 0.957504) < 1e-6
    w = jnp.diag(jnp.array([2.0, 0.5]))
    found = find_fixed_points(lambda h: jnp.tanh(w @ h), _grid(64, 2))
    order = np.argsort(found.points[:, 0])
    points, eig = found.points[order], np.abs(found.eigenvalues[order])
    np.testing.assert_allclose(points, [[-h_star, 0], [0, 0], [h_star, 0]], atol=1e-4)
    np.testing.assert_allclose(eig[0], [0.5, 2 * (1 - h_star**2)], atol=1e-4)
    np.testing.assert_allclose(eig[1], [2.0, 0.5], atol=1e-4)
    assert found.stable[order].tolist() == [True, False, True]
    assert found.unstable_dimensions[order].tolist() == [0, 1, 0]
    assert found.counts.sum() == 64  # every start ended at one of the three


def test_slow_points_need_a_larger_max_speed() -> None:
    # F(h) = h + 0.01: no fixed point; every state moves with q = 2 * 0.01^2 / 2 = 1e-4.
    def drift(h: jax.Array) -> jax.Array:
        return h + 0.01

    assert len(find_fixed_points(drift, _grid(4, 2), steps=10)) == 0
    slow = find_fixed_points(drift, _grid(4, 2), steps=0, max_speed=2e-4, merge_distance=1e-6)
    assert len(slow) == 4
    np.testing.assert_allclose(slow.speeds, 1e-4, rtol=1e-3)


@pytest.mark.parametrize(
    ("starts", "options", "match"),
    [
        (np.zeros(3), {}, r"starts must be \[K, N\]"),
        (np.zeros((2, 2)), {"steps": -1}, "steps=-1 must be an int >= 0"),
        (np.zeros((2, 2)), {"learning_rate": 0.0}, "learning_rate=0.0 must be a number > 0"),
        (np.zeros((2, 2)), {"max_speed": "small"}, "max_speed='small'"),
    ],
)
def test_bad_arguments(starts: np.ndarray, options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        find_fixed_points(lambda h: h, starts, **options)


# --------------------------------------------------------------------------- the carry map


@pytest.fixture(scope="module")
def lstm_map() -> CarryMap:
    net = make_lstm_actor_critic(3, 1, lstm_size=4, rngs=nnx.Rngs(0))
    return CarryMap(net, 3, obs=jnp.array([0.5, -1.0, 2.0]))


def test_the_carry_map_is_the_policy_step(lstm_map: CarryMap) -> None:
    policy = lstm_map.policy
    assert lstm_map.names == policy.carry_names and lstm_map.size == 8
    assert lstm_map.slices == {"carry/1/action/0/c": slice(0, 4), "carry/1/action/0/h": slice(4, 8)}
    states = jax.random.normal(jax.random.key(1), (5, 8))
    carry = lstm_map.unflatten(states)
    np.testing.assert_array_equal(lstm_map.flatten(carry), states)  # a round trip
    next_carry, _ = policy.step(carry, jnp.broadcast_to(jnp.array([0.5, -1.0, 2.0]), (5, 3)))
    np.testing.assert_allclose(lstm_map(states), lstm_map.flatten(next_carry), atol=1e-6)
    np.testing.assert_allclose(lstm_map(states[0]), lstm_map(states)[0], atol=1e-6)
    # The Jacobian is the derivative of the map (a finite difference along unit 2).
    h, eps = states[0], 1e-2
    column = (lstm_map(h.at[2].add(eps)) - lstm_map(h.at[2].add(-eps))) / (2 * eps)
    np.testing.assert_allclose(lstm_map.jacobian(h)[:, 2], column, atol=2e-3)
    np.testing.assert_array_equal(lstm_map.initial_state(), np.zeros(8))


def test_a_rollout_visits_the_states_of_stepping(lstm_map: CarryMap) -> None:
    obs = jax.random.normal(jax.random.key(2), (6, 2, 3))
    states = lstm_map.rollout(obs)
    assert states.shape == (6, 2, 8)
    carry = lstm_map.policy.initial_carry(2)
    for t in range(6):
        carry, _ = lstm_map.policy.step(carry, obs[t])
        np.testing.assert_allclose(states[t], lstm_map.flatten(carry), atol=1e-6)


def test_fixed_points_of_a_network_are_fixed(lstm_map: CarryMap) -> None:
    found = find_fixed_points(lstm_map, jax.random.normal(jax.random.key(3), (8, 8)))
    assert len(found) >= 1
    for point in found.points:
        np.testing.assert_allclose(lstm_map(point), point, atol=1e-4)


def test_the_carry_map_refuses_what_it_cannot_analyse() -> None:
    mlp = make_mlp_actor_critic(3, 1, (4,), (4,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="has no carry"):
        CarryMap(mlp, 3, obs=jnp.zeros(3))
    lstm = make_lstm_actor_critic(3, 1, lstm_size=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"obs has a leaf of shape \(1, 3\)"):
        CarryMap(lstm, 3, obs=jnp.zeros((1, 3)))
    with pytest.raises(ValueError, match="a state has 8 units"):
        CarryMap(lstm, 3, obs=jnp.zeros(3))(jnp.zeros(4))
    assert isinstance(DeterministicPolicy(lstm, 3), DeterministicPolicy)


def _actor_critic(core: StatefulModule, width: int) -> PPOAdapter:
    rngs = nnx.Rngs(1)
    return PPOAdapter(
        action=Sequential([core, Dense(width, 2, rngs=rngs), NormalTanhSampler(rngs)]),
        value=Dense(3, 1, rngs=rngs),
    )


def _mingru_fixed_point(cell: MinGRU, obs: np.ndarray) -> tuple[dict, np.ndarray]:
    # h = (1 - z) h + z h~ has the one fixed point h* = h~ = obs W_h + b_h, and the
    # Jacobian diag(1 - z) with z = sigmoid(obs W_z + b_z).
    pre = obs @ np.asarray(cell.input_proj.kernel[...]) + np.asarray(cell.input_proj.bias[...])
    z, candidate = np.split(pre, 2)
    return {"h": candidate}, 1.0 / (1.0 + np.exp(z))


def _lru_fixed_point(cell: LRU, obs: np.ndarray) -> tuple[dict, np.ndarray]:
    # h = lambda h + gamma (obs B) has the one fixed point h* = gamma (obs B) / (1 - lambda);
    # as a real map of (Re h, Im h) its eigenvalues are lambda and conj(lambda).
    lam = np.asarray(cell.eigenvalues, complex)
    drive = obs @ (np.asarray(cell.B_re[...]) + 1j * np.asarray(cell.B_im[...]))
    h = np.exp(np.asarray(cell.gamma_log[...])) * drive / (1.0 - lam)
    return {"h_re": h.real, "h_im": h.imag}, np.repeat(np.abs(lam), 2)


@pytest.mark.parametrize(
    ("build", "size", "width", "expected"),
    [
        (lambda: GRU(3, 4, rngs=nnx.Rngs(0)), 4, 4, None),
        (lambda: CTRNN(3, 4, dt=1.0, tau=[1.0, 2.0, 4.0, 8.0], rngs=nnx.Rngs(0)), 4, 4, None),
        (lambda: Delay(jnp.zeros(3), 2, initial_value=0.5), 6, 3, None),  # [B, 2, 3] line
        (lambda: LSTM(3, 4, rngs=nnx.Rngs(0), layer_norm=True), 8, 4, None),
        (lambda: GRU(3, 4, rngs=nnx.Rngs(0), layer_norm=True), 4, 4, None),
        (lambda: SimpleRNN(3, 3, rngs=nnx.Rngs(0), residual=True), 3, 3, None),
        (lambda: MinGRU(3, 4, rngs=nnx.Rngs(0)), 4, 4, _mingru_fixed_point),
        (lambda: LRU(3, 2, nnx.Rngs(0), state_features=3, r_max=0.9), 6, 2, _lru_fixed_point),
        # Noisy: the map is the noise-free step and the key is not in the state (size 4).
        (
            lambda: LowRankRNN(
                3, 4, rank=1, tau=[1.0, 2.0, 4.0, 8.0], g=0.5, sigma_rec=0.3, rngs=nnx.Rngs(0)
            ),
            4,
            4,
            None,
        ),
    ],
    ids=[
        "GRU",
        "CTRNN",
        "Delay",
        "LSTM-layer-norm",
        "GRU-layer-norm",
        "SimpleRNN-residual",
        "MinGRU",
        "LRU",
        "LowRankRNN-noisy",
    ],
)
def test_the_carry_map_of_other_families_is_the_policy_step(
    build, size: int, width: int, expected
) -> None:
    core = build()
    obs = jnp.array([0.5, -1.0, 2.0])
    F = CarryMap(_actor_critic(core, width), 3, obs=obs)
    assert F.size == size and F.held == {}
    carry = F.policy.initial_carry(2)
    for t in range(3):  # a visited carry
        carry, _ = F.policy.step(carry, jax.random.normal(jax.random.key(t), (2, 3)))
    stepped, _ = F.policy.step(carry, jnp.broadcast_to(obs, (2, 3)))
    np.testing.assert_allclose(F(F.flatten(carry)), F.flatten(stepped), atol=1e-6)
    if isinstance(core, Delay):
        # The Delay line's state is its last two inputs, oldest first; the map shifts
        # it and appends the observation: one fixed point, every slot equal to obs.
        np.testing.assert_array_equal(F.initial_state(), np.full(6, 0.5))
        np.testing.assert_allclose(F(F.flatten(carry))[:, 3:], np.broadcast_to(obs, (2, 3)))
    # Start from the visited carry relaxed under the fixed observation (the LayerNorm
    # LSTM's slowest mode decays at 0.94 a step, too slowly for 100 Adam steps).
    start = F.flatten(carry)
    for _ in range(50):
        start = F(start)
    found = find_fixed_points(F, start, steps=100, newton_steps=5)
    assert len(found) >= 1
    np.testing.assert_allclose(F(found.points[0]), found.points[0], atol=1e-4)
    if isinstance(core, Delay):
        np.testing.assert_allclose(found.points[0], np.tile(obs, 2), atol=1e-4)
        assert found.stable.tolist() == [True]  # a shift register is nilpotent: |lambda| = 0
    if expected is not None:
        # A linear recurrence for a fixed input has exactly one fixed point, known.
        entries, moduli = expected(core, np.asarray(obs, np.float64))
        point = F.flatten({n: entries[n.rsplit("/", 1)[1]][None] for n in F.names})[0]
        assert len(found) == 1 and found.stable.tolist() == [True]
        np.testing.assert_allclose(found.points[0], point, atol=1e-4)
        np.testing.assert_allclose(
            np.sort(np.abs(found.eigenvalues[0])), np.sort(moduli), rtol=1e-4, atol=1e-5
        )


class _Clock(StatefulModule):
    """h' = 0.5 h + x + t with an integer step counter t that the output depends on."""

    def initialize_state(self, batch_size: int) -> dict[str, jax.Array]:
        return {"h": jnp.zeros((batch_size, 3)), "t": jnp.zeros((batch_size,), jnp.int32)}

    def __call__(self, state, x, rollout_extras=None) -> StatefulModuleOutput:
        h = 0.5 * state["h"] + x + state["t"][:, None].astype(jnp.float32)
        return StatefulModuleOutput(
            next_state={"h": h, "t": state["t"] + 1},
            output=h,
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=(),
        )


def test_an_integer_carry_without_canonical_state_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"\['carry/action/0/t'\] change.*implement canonical_state"
    ):
        CarryMap(_actor_critic(_Clock(), 3), 3, obs=jnp.zeros(3))


# --------------------------------------------------------------------------- PCA


def test_pca_of_activity_on_a_plane() -> None:
    # 200 samples of a 2-D plane spanned by e1 + e2 and e3 in 5-D, variances 4 and 1:
    # two components with ratios 0.8 and 0.2, spanning that plane.
    rng = np.random.default_rng(0)
    coords = rng.normal(size=(200, 2))
    coords -= coords.mean(0)
    # Whitened (sample covariance exactly I), then scaled: covariance exactly diag(4, 1).
    coords = coords @ np.linalg.inv(np.linalg.cholesky(np.cov(coords.T))).T * [2.0, 1.0]
    basis = np.array([[1, 1, 0, 0, 0], [0, 0, 1, 0, 0]]) / np.array([[np.sqrt(2)], [1.0]])
    activity = (coords @ basis + 3.0).reshape(20, 10, 5)  # [T, B, N]
    ended = np.full((1, 10, 5), np.nan)  # steps after episodes ended: left out
    fit = pca(np.concatenate([activity, ended]))
    assert fit.components.shape == (5, 5)
    np.testing.assert_allclose(fit.explained_variance_ratio[:2], [0.8, 0.2], atol=1e-9)
    np.testing.assert_allclose(fit.explained_variance_ratio[2:], 0.0, atol=1e-12)
    np.testing.assert_allclose(fit.components @ fit.components.T, np.eye(5), atol=1e-10)
    np.testing.assert_allclose(np.abs(fit.components[:2] @ basis.T), np.eye(2), atol=1e-9)
    two = pca(activity, n_components=2)
    z = two.transform(activity[0])
    assert z.shape == (10, 2)
    np.testing.assert_allclose(two.inverse_transform(z), activity[0], atol=1e-9)
    with pytest.raises(ValueError, match=r"n_components=6 must be in \[1, 5\]"):
        pca(activity, n_components=6)
    with pytest.raises(ValueError, match="at least 2 needed"):
        pca(np.ones((1, 3)))


# --------------------------------------------------------------------------- conditions


def test_condition_average_by_hand() -> None:
    # T = 3 steps, B = 4 trials, N = 2 units; activity[t, b] = [10 b + t, -(10 b + t)].
    # Conditions (labels): trials 0 and 2 -> 0.2, trial 1 -> -0.1, trial 3 -> 0.2.
    # Trial 2 ends after step 0 and trial 1 after step 1 (valid false afterwards).
    #   -0.1 (trial 1):       t0 10, t1 11, t2 none (NaN, count 0)
    #    0.2 (trials 0, 2, 3): t0 (0 + 20 + 30) / 3 = 50 / 3, t1 (1 + 31) / 2 = 16,
    #                          t2 (2 + 32) / 2 = 17
    t, b = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
    unit = (10 * b + t).astype(float)
    activity = np.stack([unit, -unit], axis=-1)
    valid = np.ones((3, 4), bool)
    valid[1:, 2] = False
    valid[2:, 1] = False
    activity[~valid] = np.nan  # steps after a trial ended do not leak into the mean
    avg = condition_average(activity, [0.2, -0.1, 0.2, 0.2], valid)
    assert len(avg) == 2 and avg.labels.tolist() == [-0.1, 0.2]
    assert avg.mean.shape == (2, 3, 2) and avg.count.tolist() == [[1, 1, 0], [3, 2, 2]]
    np.testing.assert_allclose(avg.mean[0, :2, 0], [10.0, 11.0])
    assert np.isnan(avg.mean[0, 2]).all()
    np.testing.assert_allclose(avg.mean[1, :, 0], [50 / 3, 16.0, 17.0])
    np.testing.assert_allclose(avg.mean[..., 1], -avg.mean[..., 0])
    # Without valid, every step counts; integer labels work alike.
    full = condition_average(np.nan_to_num(activity), [1, 0, 1, 1])
    assert full.labels.tolist() == [0, 1] and full.count.tolist() == [[1, 1, 1], [3, 3, 3]]


@pytest.mark.parametrize(
    ("activity", "labels", "valid", "match"),
    [
        (np.zeros((3, 4)), np.zeros(4), None, r"activity must be \[T, B, N\]"),
        (np.zeros((3, 4, 2)), np.zeros(3), None, r"labels must be \[B\] = \[4\]"),
        (np.zeros((3, 4, 2)), np.zeros(4), np.ones((4, 3)), r"valid must be \[T, B\] = \[3, 4\]"),
    ],
)
def test_condition_average_checks_shapes(activity, labels, valid, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        condition_average(activity, labels, valid)


# --------------------------------------------------------------------------- plots


def test_plots_write_pngs(tmp_path: Path, lstm_map: CarryMap) -> None:
    pytest.importorskip("matplotlib")
    from nnx_ppo.networks.analysis.plotting import plot_activations, plot_trajectories

    states = np.asarray(lstm_map.rollout(jax.random.normal(jax.random.key(4), (12, 3, 3))))
    dones = np.zeros((12, 3), bool)
    dones[8:, 1] = True
    found = find_fixed_points(lstm_map, states.reshape(-1, 8)[::6])
    plot_trajectories(
        states, pca(states, 2), tmp_path / "pca.png", fixed_points=found, dones=dones,
        labels=[0.0, 1.0, 2.0], title="LSTM states",
    )  # fmt: skip
    plot_activations({"lstm": states}, dones, tmp_path / "heat.png", env_index=1)
    assert (tmp_path / "pca.png").stat().st_size > 5000
    assert (tmp_path / "heat.png").stat().st_size > 5000
    with pytest.raises(ValueError, match=r"states must be \[T, B, N\]"):
        plot_trajectories(states[0], pca(states, 2), tmp_path / "x.png")
    with pytest.raises(ValueError, match="at least 2 components"):
        plot_trajectories(states, pca(states, 1), tmp_path / "x.png")
