import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_ppo.networks.normalizer import Normalizer, NormalizerStatistic


def test_hand_derived_chan_merge():
    # Update 1: samples {0, 2} -> n = 2, mean = 1, var = ((0-1)^2 + (2-1)^2) / 2 = 1.
    # Update 2: sample {4}. Chan: n = 3, w_a = 2/3, w_b = 1/3, d = 4 - 1 = 3,
    #   mean = 1 + (1/3) * 3 = 2,
    #   var  = (2/3) * 1 + (1/3) * 0 + (2/3) * (1/3) * 3^2 = 2/3 + 2 = 8/3,
    # which is the pooled variance ((0-2)^2 + (2-2)^2 + (4-2)^2) / 3 = 8/3.
    norm = Normalizer(())
    norm.update_statistics(jnp.array([[0.0], [2.0]]))  # [T=2, B=1]
    np.testing.assert_allclose(norm.mean[...], 1.0)
    np.testing.assert_allclose(norm.var[...], 1.0)
    norm.update_statistics(jnp.array([[4.0]]))  # [T=1, B=1]
    np.testing.assert_allclose(norm.mean[...], 2.0, rtol=1e-6)
    np.testing.assert_allclose(norm.var[...], 8.0 / 3.0, rtol=1e-6)
    assert norm.count == 3


def test_statistics_equal_numpy_over_updates_with_different_batch_sizes():
    # Three updates of [T, B, 3] with T*B = 6, 5 and 4 samples. Chan's merge is exact in
    # real arithmetic, so after each update the statistics must equal numpy's mean and
    # population variance (ddof=0) of everything seen so far (here in float64), up to
    # float32 rounding.
    rng = np.random.default_rng(0)
    chunks = [
        rng.normal(2.0, 3.0, (3, 2, 3)),
        rng.normal(-1.0, 0.5, (5, 1, 3)),
        rng.normal(10.0, 1.0, (1, 4, 3)),
    ]
    norm = Normalizer(3)
    seen = []
    for chunk in chunks:
        norm.update_statistics(jnp.asarray(chunk, jnp.float32))
        seen.append(chunk.reshape(-1, 3).astype(np.float32).astype(np.float64))
        data = np.concatenate(seen)
        np.testing.assert_allclose(norm.mean[...], data.mean(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(norm.var[...], data.var(0), rtol=1e-5, atol=1e-5)
        assert norm.count == len(data)
    assert norm.count == 6 + 5 + 4


@settings(max_examples=20, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_property_any_chunking_gives_pooled_statistics(sizes, seed):
    rng = np.random.default_rng(seed)
    chunks = [rng.normal(rng.normal() * 5, rng.uniform(0.1, 4), (t, b, 2)) for t, b in sizes]
    norm = Normalizer({"x": 2})
    for chunk in chunks:
        norm.update_statistics({"x": jnp.asarray(chunk, jnp.float32)})
    data = np.concatenate([c.reshape(-1, 2).astype(np.float32) for c in chunks]).astype(float)
    np.testing.assert_allclose(norm.mean["x"][...], data.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.var["x"][...], data.var(0), rtol=1e-4, atol=1e-5)
    assert norm.count == sum(t * b for t, b in sizes)


def test_variance_is_accurate_for_a_large_offset():
    # Mean 1e4, std 1: E[x^2] - E[x]^2 in float32 would lose everything (float32 spacing
    # at 1e8 is 8); the two-pass batch variance plus Chan's merge stays within 1e-3.
    rng = np.random.default_rng(1)
    chunks = [1e4 + rng.normal(0, 1, (8, 16, 1)) for _ in range(3)]
    norm = Normalizer(1)
    for chunk in chunks:
        norm.update_statistics(jnp.asarray(chunk, jnp.float32))
    data = np.concatenate([c.astype(np.float32).reshape(-1) for c in chunks]).astype(float)
    np.testing.assert_allclose(norm.var[...], [data.var()], rtol=1e-3)


def test_count_is_exact_past_float32_and_int32_word_limits():
    norm = Normalizer(1)
    # 2**24 + 1 is not a float32: a float32 count would stay at 2**24.
    norm.count_words[...] = jnp.array([0, 2**24], jnp.int32)
    norm.update_statistics(jnp.zeros((1, 1, 1)))
    assert norm.count == 2**24 + 1
    # Low word 2**30 - 3 plus 5 samples carries into the high word: [1, 2].
    norm.count_words[...] = jnp.array([0, 2**30 - 3], jnp.int32)
    norm.update_statistics(jnp.zeros((5, 1, 1)))
    np.testing.assert_array_equal(norm.count_words[...], [1, 2])
    assert norm.count == 2**30 + 2
    # With 2**40 samples seen, one new sample moves the mean by about d / 2**40.
    norm.count_words[...] = jnp.array([2**10, 0], jnp.int32)
    norm.mean[...] = jnp.array([1.0])
    norm.update_statistics(jnp.full((1, 1, 1), 2.0**41))
    np.testing.assert_allclose(norm.mean[...], [3.0], rtol=1e-5)  # 1 + (2^41 - 1) / 2^40
    assert norm.count == 2**40 + 1


def test_call_normalizes_with_current_statistics_and_never_writes_them():
    norm = Normalizer(2, clip=None)
    norm.mean[...] = jnp.array([1.0, -2.0])
    norm.var[...] = jnp.array([4.0, 0.25])
    before = jax.tree.map(np.asarray, nnx.state(norm))
    x = jnp.array([[3.0, -2.5], [1.0, 0.0]])
    # (3 - 1) / 2 = 1, (-2.5 + 2) / 0.5 = -1, (1 - 1) / 2 = 0, (0 + 2) / 0.5 = 4.
    expected = [[1.0, -1.0], [0.0, 4.0]]
    eager = norm((), x)
    jitted = nnx.jit(lambda n, x: n((), x))(norm, x)
    np.testing.assert_allclose(eager.output, expected)
    np.testing.assert_allclose(jitted.output, expected)
    np.testing.assert_array_equal(eager.rollout_extras, x)
    assert eager.next_state == ()
    after = jax.tree.map(np.asarray, nnx.state(norm))
    jax.tree.map(np.testing.assert_array_equal, before, after)


def test_fresh_normalizer_is_identity_and_clip_applies():
    norm = Normalizer(3, clip=2.0)
    x = jnp.array([[0.5, -5.0, 3.0]])
    np.testing.assert_allclose(norm((), x).output, [[0.5, -2.0, 2.0]])


def test_variance_floor():
    # A constant feature has var 0; the divisor is sqrt(max(0, eps)) = sqrt(1e-4) = 0.01,
    # so an input 0.02 above the mean maps to 2 instead of dividing by zero.
    norm = Normalizer(1, epsilon=1e-4)
    norm.update_statistics(jnp.full((4, 2, 1), 7.0))
    np.testing.assert_array_equal(norm.var[...], [0.0])
    out = norm((), jnp.array([[7.0], [7.02]])).output
    np.testing.assert_allclose(out, [[0.0], [2.0]], rtol=1e-3)


def test_dict_spec_passthrough_extras_and_nesting():
    norm = Normalizer({"x": 2, "nested": {"y": (1, 2)}})
    norm.mean["x"][...] = jnp.array([1.0, 1.0])
    obs = {
        "x": jnp.array([[2.0, 3.0]]),
        "nested": {"y": jnp.ones((1, 1, 2)), "keep": jnp.array([5])},
        "other": jnp.array([[9.0]]),
    }
    out = norm((), obs)
    np.testing.assert_allclose(out.output["x"], [[1.0, 2.0]])
    np.testing.assert_array_equal(out.output["other"], [[9.0]])
    np.testing.assert_array_equal(out.output["nested"]["keep"], [5])
    assert set(out.rollout_extras) == {"x", "nested"}
    assert set(out.rollout_extras["nested"]) == {"y"}
    np.testing.assert_array_equal(out.rollout_extras["x"], obs["x"])
    # Extras stacked over time feed update_statistics directly.
    stacked = jax.tree.map(lambda v: jnp.stack([v, v + 1.0]), out.rollout_extras)
    norm.update_statistics(stacked)
    np.testing.assert_allclose(norm.mean["x"][...], [2.5, 3.5])
    np.testing.assert_allclose(norm.mean["nested"]["y"][...], [[1.5, 1.5]])
    assert norm.count == 2


def test_statistics_are_not_params_and_get_no_gradient():
    norm = Normalizer(2)
    assert not jax.tree.leaves(nnx.state(norm, nnx.Param))
    stats = nnx.state(norm, NormalizerStatistic)
    assert set(stats) == {"mean", "var", "count_words"}
    assert not issubclass(NormalizerStatistic, nnx.Param)
    assert NormalizerStatistic.__doc__


def test_jit_update_matches_eager():
    data = jax.random.normal(jax.random.key(0), (4, 3, 2)) * 2.0 + 1.0
    eager, jitted = Normalizer(2), Normalizer(2)
    eager.update_statistics(data)
    nnx.jit(lambda n, d: n.update_statistics(d))(jitted, data)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
        nnx.state(eager),
        nnx.state(jitted),
    )


@pytest.mark.parametrize(
    ("spec", "kwargs", "error", "match"),
    [
        (0, {}, ValueError, "every size must be positive, got 0"),
        ((3, -1), {}, ValueError, "every size must be positive"),
        ({"x": 0}, {}, ValueError, "every size at 'x' must be positive"),
        ("x", {}, TypeError, "got 'x' of type str"),
        (2.5, {}, TypeError, "got 2.5 of type float"),
        (True, {}, TypeError, "got True"),
        ({}, {}, ValueError, "shape dict is empty"),
        ({"x": {"y": "z"}}, {}, TypeError, "at 'x/y'"),
        ({1: 3}, {}, TypeError, "keys must be strings"),
        (3, {"epsilon": 0.0}, ValueError, "epsilon must be a positive finite float"),
        (3, {"clip": -1.0}, ValueError, "clip must be a positive finite float"),
        (3, {"clip": "big"}, TypeError, "clip must be a positive float"),
    ],
)
def test_construction_errors(spec, kwargs, error, match):
    with pytest.raises(error, match=match):
        Normalizer(spec, **kwargs)


def test_input_errors_name_the_key_and_shape():
    norm = Normalizer({"x": 3})
    with pytest.raises(KeyError, match=r"no key 'x' at the top level; keys present: \['y'\]"):
        norm((), {"y": jnp.ones((2, 3))})
    with pytest.raises(TypeError, match="expected a dict at the top level"):
        norm((), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"'x' has shape \(2, 4\), expected \[B, \*shape\]"):
        norm((), {"x": jnp.ones((2, 4))})
    with pytest.raises(ValueError, match=r"expected \[T, B, \*shape\]"):
        norm.update_statistics({"x": jnp.ones((2, 4))})
    two = Normalizer({"a": 1, "b": 1})
    with pytest.raises(ValueError, match="same number of samples"):
        two.update_statistics({"a": jnp.ones((2, 2, 1)), "b": jnp.ones((3, 2, 1))})
