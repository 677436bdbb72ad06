"""Tests of nnx_ppo.networks.utils: Filter, Map, Merge, Flattener, Scale.

``Counter`` and ``StatsRecorder`` come from conftest.py (``testing_modules`` fixture).
Statistics routing of Map and Merge is covered with the containers in
test_containers.py (``test_update_statistics_reaches_nested_stats_modules``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_ppo.networks.containers import Sequential, Splitter
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.utils import Filter, Flattener, Map, Merge, Scale, ScaleFactor


@pytest.fixture
def tm(testing_modules):
    return testing_modules


def _trunk_output(B=2):
    # What the spec's graph emits: named action params and values.
    return {
        "action_a": jnp.full((B, 4), 1.0),
        "action_b": jnp.full((B, 2), 2.0),
        "value_a": jnp.full((B, 1), 3.0),
        "value_b": jnp.full((B, 1), 4.0),
    }


# --------------------------------------------------------------------------------------
# Filter
# --------------------------------------------------------------------------------------


def test_filter_spec_examples_rename_and_select():
    x = _trunk_output()
    out = Filter({"a": "action_a", "b": "action_b"})((), x)  # rename
    assert set(out.output) == {"a", "b"}
    np.testing.assert_array_equal(out.output["a"], x["action_a"])
    np.testing.assert_array_equal(out.output["b"], x["action_b"])
    assert out.next_state == () and out.rollout_extras == ()
    values = Filter({"a": "value_a", "b": "value_b"})((), x).output
    assert {k: float(v[0, 0]) for k, v in values.items()} == {"a": 3.0, "b": 4.0}
    graph_out = {"action_params": jnp.ones((2, 4)), "value": jnp.zeros((2, 1))}
    assert list(Filter({"value": "value"})((), graph_out).output) == ["value"]


def test_filter_nested_tuple_indexed_and_single_paths():
    x = {
        "obs": {"proprio": jnp.ones((2, 3)), "a/b": jnp.zeros((2, 1))},
        "seq": [jnp.full((2, 1), 7.0), jnp.full((2, 1), 8.0)],
    }
    out = Filter({"p": "obs/proprio", "slash": ("obs", "a/b"), "last": ("seq", -1)})((), x)
    np.testing.assert_array_equal(out.output["p"], x["obs"]["proprio"])
    np.testing.assert_array_equal(out.output["slash"], x["obs"]["a/b"])
    np.testing.assert_array_equal(out.output["last"], [[8.0], [8.0]])
    # a single path returns the entry itself, not a dict
    np.testing.assert_array_equal(Filter("obs/proprio")((), x).output, x["obs"]["proprio"])
    assert set(Filter("obs")((), x).output) == {"proprio", "a/b"}


def test_filter_callable():
    f = Filter(lambda x: {"sum": x["a"] + x["b"]})
    out = f((), {"a": jnp.array([[1.0]]), "b": jnp.array([[2.0]])})
    np.testing.assert_array_equal(out.output["sum"], [[3.0]])


def test_filter_dict_entries_may_be_callables_mixed_with_paths():
    # nnx-ppo 0.3.0's form: a callable entry gets the whole input.
    x = {"a": jnp.array([[1.0], [2.0]]), "b": jnp.array([[10.0], [20.0]]), "c": jnp.ones((2, 1))}
    f = Filter({"sum": lambda x: x["a"] + x["b"], "a": "a", "twice_b": lambda x: 2 * x["b"]})
    out = f((), x)
    assert list(out.output) == ["sum", "a", "twice_b"]  # spec order; "b" and "c" dropped
    np.testing.assert_array_equal(out.output["sum"], [[11.0], [22.0]])
    np.testing.assert_array_equal(out.output["a"], x["a"])
    np.testing.assert_array_equal(out.output["twice_b"], [[20.0], [40.0]])
    # nested tuple paths mix with callables too (their test_mixed_specs)
    obs = {"arm": {"proprio": jnp.ones((2, 4))}, "head": jnp.full((2, 3), 5.0)}
    mixed = Filter({"p": ("arm", "proprio"), "z": "head", "calc": lambda o: o["head"] * 2})
    out = mixed((), obs).output
    np.testing.assert_array_equal(out["p"], obs["arm"]["proprio"])
    np.testing.assert_array_equal(out["calc"], np.full((2, 3), 10.0))
    # stateless, jit-able, and the sequence replay equals the per-step call
    assert f.initialize_state(2) == ()
    jitted = jax.jit(lambda x: f((), x).output)(x)
    np.testing.assert_array_equal(jitted["sum"], [[11.0], [22.0]])
    xs = jax.tree.map(lambda v: jnp.stack([v, -v]), x)  # [T=2, B=2, 1]
    _, replay = f.replay_sequence((), xs, (), jnp.zeros((2, 2), bool))
    np.testing.assert_array_equal(replay.output["sum"], [[[11.0], [22.0]], [[-11.0], [-22.0]]])


def test_filter_bare_callable_spec_gets_the_whole_input():
    f = Filter(lambda x: x["a"] * x["b"])
    out = f((), {"a": jnp.full((2, 1), 3.0), "b": jnp.full((2, 1), 4.0)})
    np.testing.assert_array_equal(out.output, np.full((2, 1), 12.0))


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"a": "a", "m": Splitter(a=1)}, r"output 'm' is a Splitter module"),
        ({"a": 1}, r"output 'a': path 1 must be a str.*or a callable"),
        ({"a": ["x", "y"]}, r"output 'a': path \['x', 'y'\] must be a str.*got list"),
        ({"a": None}, r"output 'a': path None must be a str"),
    ],
)
def test_filter_entries_that_are_neither_paths_nor_functions_are_rejected(spec, match):
    with pytest.raises(TypeError, match=match):
        Filter(spec)


def test_filter_missing_key_names_the_key_and_the_keys_present():
    x = _trunk_output()
    with pytest.raises(
        KeyError,
        match=r"'action_c' not found at <input>; keys present: \['action_a', 'action_b', "
        r"'value_a', 'value_b'\]",
    ):
        Filter({"c": "action_c"})((), x)
    with pytest.raises(KeyError, match=r"'obs/vel'.*'vel' not found at obs; keys present: \['p'\]"):
        Filter("obs/vel")((), {"obs": {"p": jnp.ones((1, 1))}})
    with pytest.raises(KeyError, match=r"cannot look up 'x' in an array of shape \(2, 4\)"):
        Filter("action_a/x")((), x)
    with pytest.raises(KeyError, match="index 2 out of range"):
        Filter(("seq", 2))((), {"seq": [jnp.ones(1), jnp.ones(1)]})


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        (["a", "b"], TypeError, r"Filter spec must be a dict.*got list"),
        (3, TypeError, "Filter spec must be a dict"),
        (None, TypeError, "Filter spec must be a dict"),
        ({}, ValueError, "empty dict"),
        ({"a": 1}, TypeError, r"output 'a': path 1 must be a str"),
        ({1: "a"}, TypeError, "output keys must be strings"),
        ("", ValueError, "empty"),
        ("obs//x", ValueError, "empty segment"),
        ((), ValueError, r"path \(\) is empty"),
        (("a", 1.0), TypeError, "contains 1.0"),
        (Splitter(a=1), TypeError, "Splitter module as spec"),
    ],
)
def test_filter_bad_spec(spec, error, match):
    with pytest.raises(error, match=match):
        Filter(spec)


# --------------------------------------------------------------------------------------
# Map
# --------------------------------------------------------------------------------------


def test_map_dispatches_per_key_and_drops_unconsumed_keys(tm):
    m = Map({"a": tm.Counter(start=1), "b": tm.StatsRecorder()})
    x = {"a": jnp.zeros((2, 1)), "b": jnp.array([[1.0], [2.0]]), "value": jnp.ones((2, 1))}
    state = m.initialize_state(2)
    out = m(state, x)
    # a: 0 + count 1 = 1; b: 2 * x["b"]; "value" is dropped
    assert list(out.output) == ["a", "b"]
    np.testing.assert_array_equal(out.output["a"], [[1.0], [1.0]])
    np.testing.assert_array_equal(out.output["b"], [[2.0], [4.0]])
    assert counts_of(out.next_state["a"]) == [2, 2]
    assert out.next_state["b"] == ()
    # extras per key: a's count, b's raw input
    np.testing.assert_array_equal(out.rollout_extras["a"], [1, 1])
    np.testing.assert_array_equal(out.rollout_extras["b"], x["b"])
    np.testing.assert_array_equal(out.regularization_loss, [1.0, 1.0])
    assert list(out.metrics) == ["a"]
    # replay: each key's extras go to that key's child
    replay = m(state, x, {"a": jnp.array([5, 6]), "b": jnp.array([[10.0], [20.0]])})
    np.testing.assert_array_equal(replay.output["a"], [[5.0], [6.0]])
    np.testing.assert_array_equal(replay.output["b"], [[20.0], [40.0]])


def counts_of(state):
    return np.asarray(state["count"]).tolist()


def test_map_missing_key_names_the_key_and_the_keys_present(tm):
    m = Map({"action_params": tm.StatsRecorder(), "value": tm.StatsRecorder()})
    with pytest.raises(
        KeyError, match=r"child 'value' reads input key 'value'.*keys \['action_params', 'v'\]"
    ):
        m((), {"action_params": jnp.ones((2, 4)), "v": jnp.ones((2, 1))})
    with pytest.raises(TypeError, match="dispatches a dict input"):
        m((), jnp.ones((2, 4)))


def test_map_construction_errors(tm):
    with pytest.raises(ValueError, match="Map needs at least one child"):
        Map({})
    with pytest.raises(TypeError, match="not both"):
        Map({"a": tm.Counter()}, b=tm.Counter())
    with pytest.raises(TypeError, match=r"child 'b' is a str, not a StatefulModule"):
        Map({"a": tm.Counter(), "b": "value"})


def test_adapter_style_filter_then_map_composition(tm):
    # The ppo-adapter spec's multi-head action port, with stand-in "samplers".
    sampler_a, sampler_b = tm.StatsRecorder(), tm.Counter(start=1)
    action = Sequential(
        [
            Filter({"a": "action_a", "b": "action_b"}),  # rename
            Map({"a": sampler_a, "b": sampler_b}),  # per-key dispatch
        ]
    )
    out = action(action.initialize_state(2), _trunk_output())
    # a: 2 * 1.0; b: 2.0 + count 1
    np.testing.assert_array_equal(out.output["a"], jnp.full((2, 4), 2.0))
    np.testing.assert_array_equal(out.output["b"], jnp.full((2, 2), 3.0))
    assert out.rollout_extras[0] == ()  # Filter is stateless
    assert set(out.rollout_extras[1]) == {"a", "b"}


# --------------------------------------------------------------------------------------
# Merge
# --------------------------------------------------------------------------------------


def test_merge_feeds_the_same_input_and_merges_dicts(tm):
    m = Merge(
        heads=Splitter(mean=2, std=2),
        counted=Sequential([tm.Counter(start=3, reg_weight=2.0), Splitter(count=1)]),
    )
    x = jnp.arange(8.0).reshape(2, 4)
    state = m.initialize_state(2)
    out = m(state, x)
    assert list(out.output) == ["mean", "std", "count"]
    np.testing.assert_array_equal(out.output["std"], x[:, 2:])
    # x + 3, first feature: [0 + 3, 4 + 3]
    np.testing.assert_array_equal(out.output["count"], [[3.0], [7.0]])
    # carry, extras, metrics keyed by child name (not by output key)
    assert set(out.next_state) == {"heads", "counted"}
    assert counts_of(out.next_state["counted"][0]) == [4, 4]
    assert set(out.rollout_extras) == {"heads", "counted"}
    assert list(out.metrics) == ["counted"]
    np.testing.assert_array_equal(out.regularization_loss, [6.0, 6.0])  # 2.0 * 3


def test_merge_key_clash_names_the_key_and_both_children():
    m = Merge(left=Splitter(mean=1, a=1), right=Splitter(b=1, mean=1))
    with pytest.raises(
        ValueError,
        match=r"key 'mean' is emitted by both child 'left' \(Splitter\) and child 'right' "
        r"\(Splitter\)",
    ):
        m((), jnp.ones((2, 3)))


def test_merge_rejects_non_dict_child_output(tm):
    m = Merge(ok=Splitter(a=1), bad=tm.StatsRecorder())
    with pytest.raises(TypeError, match=r"child 'bad' returned an array of shape \(2, 3\)"):
        m((), jnp.ones((2, 3)))


# --------------------------------------------------------------------------------------
# Flattener
# --------------------------------------------------------------------------------------


def test_flattener_sorted_key_order_and_preserved_levels():
    x = {
        "b": jnp.full((2, 1), 9.0),
        "a": {"y": jnp.full((2, 3), 2.0), "x": jnp.arange(4.0).reshape(2, 2, 1)},
    }
    flat = Flattener()((), x).output
    # sorted: a/x (2 features: [0, 1] and [2, 3]), a/y (3), b (1)
    assert flat.shape == (2, 6)
    np.testing.assert_array_equal(flat[0], [0.0, 1.0, 2.0, 2.0, 2.0, 9.0])
    np.testing.assert_array_equal(flat[1], [2.0, 3.0, 2.0, 2.0, 2.0, 9.0])
    one = Flattener(preserve_levels=1)((), x).output
    assert set(one) == {"a", "b"}
    np.testing.assert_array_equal(one["a"], flat[:, :5])
    np.testing.assert_array_equal(one["b"], flat[:, 5:])
    two = Flattener(preserve_levels=2)((), x).output
    # level 2 keeps a's children; b is an array within the kept levels: [B, 1]
    assert two["a"]["x"].shape == (2, 2) and two["a"]["y"].shape == (2, 3)
    assert two["b"].shape == (2, 1)


def test_flattener_same_output_for_any_insertion_order():
    a, b = jnp.zeros((1, 2)), jnp.ones((1, 1))
    np.testing.assert_array_equal(
        Flattener()((), {"a": a, "b": b}).output, Flattener()((), {"b": b, "a": a}).output
    )


@settings(max_examples=20, deadline=None)
@given(
    shapes=st.dictionaries(
        st.sampled_from(["p", "q", "r", "s"]),
        st.lists(st.integers(1, 3), min_size=0, max_size=2),
        min_size=1,
    )
)
def test_flattener_property_matches_numpy_concatenation(shapes):
    B = 2
    rng = np.random.default_rng(0)
    x = {k: rng.normal(size=(B, *s)).astype(np.float32) for k, s in shapes.items()}
    flat = Flattener()((), x).output
    expected = np.concatenate([x[k].reshape(B, -1) for k in sorted(x)], axis=-1)
    assert flat.shape == (B, sum(int(np.prod(s)) for s in shapes.values()))
    np.testing.assert_array_equal(flat, expected)


def test_flattener_errors():
    with pytest.raises(ValueError, match="preserve_levels=-1 is negative"):
        Flattener(preserve_levels=-1)
    with pytest.raises(TypeError, match="preserve_levels must be an int"):
        Flattener(preserve_levels=True)
    with pytest.raises(ValueError, match=r"leaf \['s'\] is a scalar"):
        Flattener()((), {"s": jnp.array(1.0)})
    with pytest.raises(
        ValueError, match=r"leaf \['b'\] has batch size 3 but earlier leaves have 2"
    ):
        Flattener()((), {"a": jnp.ones((2, 1)), "b": jnp.ones((3, 1))})
    with pytest.raises(ValueError, match="no array leaves"):
        Flattener()((), {"a": ()})


# --------------------------------------------------------------------------------------
# Scale
# --------------------------------------------------------------------------------------


def test_scale_constant_per_feature_and_pytree():
    x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(Scale(0.5)((), x).output, [[0.5, 1.0], [1.5, 2.0]])
    np.testing.assert_array_equal(Scale([1.0, -1.0])((), x).output, [[1.0, -2.0], [3.0, -4.0]])
    tree = Scale(3)((), {"a": x, "b": jnp.ones((2, 1))}).output
    np.testing.assert_array_equal(tree["b"], [[3.0], [3.0]])
    assert tree["a"].dtype == jnp.float32


def test_scale_factor_is_not_a_trainable_param():
    rngs = nnx.Rngs(0)
    net = Sequential([Dense(2, 2, rngs=rngs), Scale(jnp.array([2.0, 3.0]))])
    assert len(jax.tree.leaves(nnx.state(net, nnx.Param))) == 2  # Dense kernel + bias
    factors = jax.tree.leaves(nnx.state(net, ScaleFactor))
    assert len(factors) == 1
    np.testing.assert_array_equal(factors[0], [2.0, 3.0])


def test_scale_errors():
    with pytest.raises(ValueError, match="non-finite"):
        Scale(float("nan"))
    with pytest.raises(ValueError, match="non-finite"):
        Scale([1.0, np.inf])
    with pytest.raises(TypeError, match="must be a number"):
        Scale("2")
    with pytest.raises(TypeError, match="must be a number"):
        Scale({"a": 1.0})
    with pytest.raises(
        ValueError, match=r"factor of shape \(3,\) does not broadcast onto an input leaf of shape"
    ):
        Scale([1.0, 2.0, 3.0])((), jnp.ones((2, 2)))
    with pytest.raises(ValueError, match=r"factor of shape \(2, 2\) does not broadcast"):
        Scale(np.ones((2, 2)))((), jnp.ones((2,)))


def test_utils_under_jit_match_eager(tm):
    net = Sequential(
        [
            Merge(
                raw=Sequential([Filter(lambda x: x), Filter({"obs": "obs/x"})]),
                scaled=Sequential([Filter("obs/x"), Scale([1.0, 10.0]), Splitter(scaled=2)]),
            ),
            Map(obs=tm.Counter(start=2), scaled=tm.StatsRecorder()),
            Flattener(),
        ]
    )
    x = {"obs": {"x": jnp.array([[1.0, 2.0], [3.0, 4.0]])}}
    state = net.initialize_state(2)
    eager = net(state, x)
    jitted = nnx.jit(lambda net, state, x: net(state, x))(net, state, x)
    for field in ("output", "next_state", "regularization_loss", "metrics", "rollout_extras"):
        tm.assert_trees_equal(getattr(jitted, field), getattr(eager, field))
    # sorted keys: obs = x + 2 -> [3, 4], then scaled = 2 * [1, 20] = [2, 40]
    np.testing.assert_array_equal(eager.output[0], [3.0, 4.0, 2.0, 40.0])
