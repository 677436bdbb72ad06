import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.types import reset_where


def _run(delay, xs, state=None):
    """Step ``delay`` eagerly over the leading time axis of ``xs``; return outputs, state."""
    state = delay.initialize_state(jax.tree.leaves(xs)[0].shape[1]) if state is None else state
    outputs = []
    for t in range(jax.tree.leaves(xs)[0].shape[0]):
        out = delay(state, jax.tree.map(lambda v, t=t: v[t], xs))
        state = out.next_state
        outputs.append(out.output)
    return outputs, state


def test_hand_derived_readout_k2():
    # Inputs 10, 11, 12, 13, 14 with k = 2 and initial_value = -1:
    # t=0 -> -1 (empty), t=1 -> -1, t=2 -> x_0 = 10, t=3 -> x_1 = 11, t=4 -> x_2 = 12.
    delay = Delay(jnp.zeros(()), 2, initial_value=-1.0)
    xs = jnp.arange(10.0, 15.0)[:, None]  # [T=5, B=1]
    outputs, state = _run(delay, xs)
    assert [float(o[0]) for o in outputs] == [-1.0, -1.0, 10.0, 11.0, 12.0]
    # The line now holds the last two inputs, oldest first.
    np.testing.assert_array_equal(state, [[13.0, 14.0]])


def test_hand_derived_readout_k1_per_env():
    # Two envs, k = 1, default initial value 0: output_t = x_{t-1}, row by row.
    delay = Delay(jnp.zeros((2,)), 1)
    xs = jnp.array([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], jnp.float32)  # [T=2, B=2, 2]
    outputs, _ = _run(delay, xs)
    np.testing.assert_array_equal(outputs[0], np.zeros((2, 2)))
    np.testing.assert_array_equal(outputs[1], [[1, 2], [3, 4]])


def test_pytree_input_with_mixed_dtypes_and_initial_tree():
    sample = {"pos": jnp.zeros((3,)), "contact": jnp.zeros((), jnp.int32)}
    delay = Delay(sample, 2, initial_value={"pos": jnp.array([1.0, 2.0, 3.0]), "contact": 5})
    state = delay.initialize_state(4)
    assert state["pos"].shape == (4, 2, 3) and state["pos"].dtype == jnp.float32
    assert state["contact"].shape == (4, 2) and state["contact"].dtype == jnp.int32
    xs = {
        "pos": jnp.arange(3 * 4 * 3, dtype=jnp.float32).reshape(3, 4, 3),
        "contact": jnp.arange(12, dtype=jnp.int32).reshape(3, 4),
    }
    outputs, _ = _run(delay, xs)
    np.testing.assert_array_equal(outputs[1]["pos"], np.tile([1.0, 2.0, 3.0], (4, 1)))
    np.testing.assert_array_equal(outputs[1]["contact"], np.full((4,), 5))
    np.testing.assert_array_equal(outputs[2]["pos"], xs["pos"][0])
    np.testing.assert_array_equal(outputs[2]["contact"], xs["contact"][0])


def test_inputs_are_cast_to_the_sample_dtype():
    delay = Delay(jnp.zeros((), jnp.float32), 1)
    state = delay.initialize_state(2)
    out = delay(state, jnp.array([1, 2], jnp.int32))
    assert out.next_state.dtype == jnp.float32 and out.output.dtype == jnp.float32
    out = delay(out.next_state, jnp.array([3, 4], jnp.int32))
    np.testing.assert_array_equal(out.output, [1.0, 2.0])


def test_jit_scan_matches_eager_and_keeps_structure(testing_modules):
    delay = Delay({"a": jnp.zeros((2,))}, 3, initial_value=0.5)
    xs = {"a": jax.random.normal(jax.random.key(0), (6, 4, 2))}
    state0 = delay.initialize_state(4)
    final, outs = testing_modules.jit_scan(delay, state0, xs)
    ys = outs.output
    eager, eager_final = _run(delay, xs)
    assert jax.tree.structure(final) == jax.tree.structure(state0)
    assert final["a"].shape == state0["a"].shape and final["a"].dtype == state0["a"].dtype
    np.testing.assert_array_equal(ys["a"], jnp.stack([o["a"] for o in eager]))
    np.testing.assert_array_equal(final["a"], eager_final["a"])
    # Reads t-3: rows 3..5 of the output are rows 0..2 of the input.
    np.testing.assert_array_equal(ys["a"][3:], xs["a"][:3])
    np.testing.assert_array_equal(ys["a"][:3], np.full((3, 4, 2), 0.5))


def test_reset_refills_only_done_envs():
    delay = Delay(jnp.zeros(()), 2, initial_value=-1.0)
    xs = jnp.array([[1.0, 2.0], [3.0, 4.0]])  # [T=2, B=2]
    _, state = _run(delay, xs)
    np.testing.assert_array_equal(state, [[1.0, 3.0], [2.0, 4.0]])
    np.testing.assert_array_equal(delay.reset_state(state), delay.initialize_state(2))
    state = reset_where(delay, jnp.array([True, False]), state)
    np.testing.assert_array_equal(state, [[-1.0, -1.0], [2.0, 4.0]])
    # Env 0 restarts its episode: it reads the initial value for two steps again.
    out = delay(state, jnp.array([9.0, 9.0]))
    np.testing.assert_array_equal(out.output, [-1.0, 2.0])


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(1, 5),
    steps=st.integers(1, 9),
    fill=st.floats(-3, 3, allow_nan=False, width=32),
)
def test_property_output_is_input_k_steps_ago(k, steps, fill):
    delay = Delay(jnp.zeros((2,)), k, initial_value=fill)
    xs = jnp.arange(steps * 3 * 2, dtype=jnp.float32).reshape(steps, 3, 2) + 100.0
    outputs, state = _run(delay, xs)
    for t, out in enumerate(outputs):
        expected = xs[t - k] if t >= k else np.full((3, 2), np.float32(fill))
        np.testing.assert_array_equal(out, expected)
    assert state.shape == (3, k, 2) and state.dtype == jnp.float32


@pytest.mark.parametrize(
    ("k", "error", "match"),
    [
        (0, ValueError, "k_steps must be >= 1, got 0"),
        (-2, ValueError, "k_steps must be >= 1, got -2"),
        (2.5, ValueError, r"whole number of steps .* got 2.5"),
        ("2", TypeError, "k_steps must be an int >= 1, got '2' of type str"),
        (True, TypeError, "of type bool"),
    ],
)
def test_bad_k_steps(k, error, match):
    with pytest.raises(error, match=match):
        Delay(jnp.zeros(3), k)


def test_bad_construction_and_inputs():
    with pytest.raises(TypeError, match="every leaf of sample_input must be an array"):
        Delay({"a": 3}, 1)
    with pytest.raises(ValueError, match="no array leaves"):
        Delay({}, 1)
    with pytest.raises(ValueError, match=r"does not broadcast to the sample_input leaf shape"):
        Delay(jnp.zeros(3), 1, initial_value=jnp.zeros(2))
    with pytest.raises(ValueError, match="initial_value must be a scalar or a pytree"):
        Delay({"a": jnp.zeros(3)}, 1, initial_value={"b": 0.0})
    delay = Delay({"a": jnp.zeros(3)}, 1)
    state = delay.initialize_state(2)
    with pytest.raises(ValueError, match="tree structure"):
        delay(state, jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"shape \(2, 4\), expected \[B, \*\(3,\)\]"):
        delay(state, {"a": jnp.zeros((2, 4))})
