"""Tests of nnx_ppo.networks.containers: routing, spec examples, errors, jit.

``Counter`` and ``StatsRecorder`` come from conftest.py (``testing_modules`` fixture);
their behaviour is documented there and used for the hand derivations below.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_ppo.networks.containers import Concat, Parallel, Sequential, Splitter
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, reset_where
from nnx_ppo.networks.utils import Map, Merge


@pytest.fixture
def tm(testing_modules):
    return testing_modules


def counts(state):
    return np.asarray(state["count"]).tolist()


# --------------------------------------------------------------------------------------
# Sequential
# --------------------------------------------------------------------------------------


def test_sequential_routes_state_extras_losses_metrics(tm):
    stack = Sequential([tm.Counter(start=0, reg_weight=1.0), tm.Counter(start=10, reg_weight=0.5)])
    state = stack.initialize_state(2)
    assert [counts(s) for s in state] == [[0, 0], [10, 10]]
    state[0] = {"count": jnp.array([0, 5], jnp.int32)}  # env 1 is 5 steps ahead
    x = jnp.zeros((2, 1))

    out = stack(state, x)
    # layer 0: x + [0, 5] = [0, 5]; layer 1: + 10 -> [10, 15].
    np.testing.assert_array_equal(out.output, [[10.0], [15.0]])
    assert isinstance(out.next_state, list)
    assert [counts(s) for s in out.next_state] == [[1, 6], [11, 11]]
    # per sample: 1.0 * [0, 5] + 0.5 * [10, 10] = [5, 10]
    np.testing.assert_array_equal(out.regularization_loss, [5.0, 10.0])
    # integer position keys; mean counts 2.5 and 10
    assert jax.tree.map(float, out.metrics) == {0: {"count": 2.5}, 1: {"count": 10.0}}
    # extras mirror the state: one entry per layer, each the count that layer used
    assert [np.asarray(e).tolist() for e in out.rollout_extras] == [[0, 5], [10, 10]]

    out2 = stack(out.next_state, x)
    # layer 0: [1, 6]; layer 1: + 11 -> [12, 17]; reg 1*[1, 6] + 0.5*11 = [6.5, 11.5]
    np.testing.assert_array_equal(out2.output, [[12.0], [17.0]])
    np.testing.assert_array_equal(out2.regularization_loss, [6.5, 11.5])

    # replay: the stored extras, not the carry, drive the output, and each layer gets
    # its own entry: 0 + [3, 4] + [20, 30] = [23, 34]; the carry still advances.
    replay = stack(state, x, [jnp.array([3, 4]), jnp.array([20, 30])])
    np.testing.assert_array_equal(replay.output, [[23.0], [34.0]])
    assert [counts(s) for s in replay.next_state] == [[1, 6], [11, 11]]


def test_sequential_metrics_skip_layers_without_metrics(tm):
    stack = Sequential([tm.StatsRecorder(), tm.Counter(start=3)])
    out = stack(stack.initialize_state(1), jnp.ones((1, 2)))
    assert list(out.metrics) == [1]
    assert float(out.metrics[1]["count"]) == 3.0


def test_sequential_stateless_empty_state_and_tuple_state(tm):
    stack = Sequential([tm.StatsRecorder(), tm.StatsRecorder()])
    assert stack.initialize_state(3) == [(), ()]
    x = jnp.ones((3, 2))
    out = stack((), x)
    assert out.next_state == ()  # `()` in, `()` out: the structure is stable
    np.testing.assert_array_equal(out.output, 4.0 * x)  # 2 * 2 * x
    counter = Sequential([tm.Counter(), tm.Counter(start=1)])
    tup = tuple(counter.initialize_state(3))
    out = counter(tup, x)
    assert isinstance(out.next_state, tuple)
    assert isinstance(counter.reset_state(out.next_state), tuple)


def test_sequential_reset_state_restores_initial_values(tm):
    stack = Sequential([tm.Counter(start=2), tm.StatsRecorder(), tm.Counter(start=7)])
    state0 = stack.initialize_state(3)
    state = state0
    for _ in range(4):
        state = stack(state, jnp.zeros((3, 1))).next_state
    tm.assert_trees_equal(stack.reset_state(state), state0)
    # reset only env 1: counts after 4 steps are 6 and 11, env 1 back to 2 and 7
    partial = reset_where(stack, jnp.array([False, True, False]), state)
    assert counts(partial[0]) == [6, 2, 6]
    assert counts(partial[2]) == [11, 7, 11]
    assert partial[1] == ()


def test_sequential_spec_example(tm):
    encoder = tm.Counter(start=1)
    body = Dense(1, 3, rngs=nnx.Rngs(0))
    head = tm.Counter(start=4)
    batch_size = 4
    obs = jnp.arange(4.0).reshape(4, 1)

    stack = Sequential([encoder, body, head])
    state = stack.initialize_state(batch_size)
    out = stack(state, obs)
    # out.next_state == [encoder.next_state, body.next_state, head.next_state]

    e = encoder(state[0], obs)
    b = body(state[1], e.output)
    h = head(state[2], b.output)
    tm.assert_trees_equal(out.next_state, [e.next_state, b.next_state, h.next_state])
    tm.assert_trees_equal(out.output, h.output)


# --------------------------------------------------------------------------------------
# Parallel, Concat (Map and Merge share their routing; see test_utils.py)
# --------------------------------------------------------------------------------------


def test_parallel_routes_state_extras_losses_metrics(tm):
    branches = Parallel(a=tm.Counter(start=0, reg_weight=2.0), b=tm.Counter(start=10))
    state = branches.initialize_state(2)
    assert {k: counts(v) for k, v in state.items()} == {"a": [0, 0], "b": [10, 10]}
    x = jnp.array([[1.0], [2.0]])
    out = branches(state, x)
    # same input to both: a = x + 0, b = x + 10
    np.testing.assert_array_equal(out.output["a"], [[1.0], [2.0]])
    np.testing.assert_array_equal(out.output["b"], [[11.0], [12.0]])
    assert {k: counts(v) for k, v in out.next_state.items()} == {"a": [1, 1], "b": [11, 11]}
    # 2.0 * 0 + 1.0 * 10 = 10 per sample
    np.testing.assert_array_equal(out.regularization_loss, [10.0, 10.0])
    assert jax.tree.map(float, out.metrics) == {"a": {"count": 0.0}, "b": {"count": 10.0}}
    assert {k: np.asarray(v).tolist() for k, v in out.rollout_extras.items()} == {
        "a": [0, 0],
        "b": [10, 10],
    }
    # replay routes each child's extras by name: a uses 3, b uses 20
    replay = branches(state, x, {"b": jnp.array([20, 20]), "a": jnp.array([3, 3])})
    np.testing.assert_array_equal(replay.output["a"], [[4.0], [5.0]])
    np.testing.assert_array_equal(replay.output["b"], [[21.0], [22.0]])


def test_parallel_spec_example():
    rngs = nnx.Rngs(0)
    actor = Dense(3, 4, rngs=rngs)
    critic = Dense(3, 1, rngs=rngs)
    obs = jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)

    # Same input fed to every component.
    branches = Parallel(action_params=actor, value=critic)
    out = branches((), obs)
    # out.output == {"action_params": <actor_out>, "value": <critic_out>}

    assert set(out.output) == {"action_params", "value"}
    np.testing.assert_allclose(out.output["action_params"], actor((), obs).output)
    np.testing.assert_allclose(out.output["value"], critic((), obs).output)
    assert out.next_state == ()
    assert branches.initialize_state(2) == {"action_params": (), "value": ()}
    # the dict state from initialize_state works as well as ()
    out2 = branches(branches.initialize_state(2), obs)
    assert out2.next_state == {"action_params": (), "value": ()}


def test_parallel_positional_form_spec_examples():
    rngs = nnx.Rngs(0)
    H = 5
    keys = ["hand_L", "arm-R", "0"]
    heads = Parallel({k: Dense(H, 1, rngs=rngs) for k in keys})
    POPULATIONS = ["root", "torso"]
    head = Dense(H, 2, rngs=rngs)
    shared = Parallel({pop: head for pop in POPULATIONS})

    trunk = jnp.ones((3, H))
    out = heads((), trunk)
    assert list(out.output) == keys
    assert all(v.shape == (3, 1) for v in out.output.values())
    out = shared((), trunk)
    np.testing.assert_array_equal(out.output["root"], out.output["torso"])
    # the parameters are tracked by NNX (3 heads x (kernel, bias))
    assert len(jax.tree.leaves(nnx.state(heads, nnx.Param))) == 6


def test_concat_dispatches_and_concatenates_in_insertion_order(tm):
    # keys deliberately not in sorted order: z's output comes first.
    cat = Concat(z=tm.Counter(start=5), a=tm.StatsRecorder())
    x = {"a": jnp.array([[1.0, 2.0]]), "z": jnp.array([[0.0]]), "ignored": jnp.ones((1, 9))}
    out = cat(cat.initialize_state(1), x)
    # z: 0 + 5 = 5; a: 2 * [1, 2] = [2, 4]
    np.testing.assert_array_equal(out.output, [[5.0, 2.0, 4.0]])
    assert counts(out.next_state["z"]) == [6]
    assert out.next_state["a"] == ()
    np.testing.assert_array_equal(out.rollout_extras["a"], x["a"])
    assert list(out.metrics) == ["z"]


def test_concat_spec_example():
    rngs = nnx.Rngs(1)
    B, P, G, H_proprio, H_goal = 4, 6, 3, 8, 2
    proprio_encoder = Dense(P, H_proprio, rngs=rngs)
    goal_encoder = Dense(G, H_goal, rngs=rngs)

    # Per-stream encoders -> single concatenated feature vector.
    encoders = Concat(proprio=proprio_encoder, goal=goal_encoder)
    state = encoders.initialize_state(B)
    out = encoders(state, {"proprio": jnp.ones((B, P)), "goal": jnp.ones((B, G))})
    # out.output : (B, H_proprio + H_goal)

    assert out.output.shape == (B, H_proprio + H_goal)
    np.testing.assert_allclose(
        out.output[:, :H_proprio], proprio_encoder((), jnp.ones((B, P))).output
    )


# --------------------------------------------------------------------------------------
# Splitter
# --------------------------------------------------------------------------------------


def test_splitter_spec_example():
    action_size, B = 3, 2
    x = jnp.arange(B * (2 * action_size + 1), dtype=jnp.float32).reshape(B, -1)

    s = Splitter(action_params=2 * action_size, value=1)
    out = s((), x)  # x : (B, 2A + 1)
    # out.output == {"action_params": (B, 2A), "value": (B, 1)}

    assert out.output["action_params"].shape == (B, 2 * action_size)
    assert out.output["value"].shape == (B, 1)
    # row 0 is 0..6: action_params 0..5, value 6
    np.testing.assert_array_equal(out.output["value"], [[6.0], [13.0]])
    assert out.next_state == () and out.rollout_extras == ()

    # a single keyword relabels the first N features as a dict; the rest is ignored
    relabel = Splitter(action_params=2)((), x).output
    np.testing.assert_array_equal(relabel["action_params"], x[:, :2])


def test_splitter_slices_in_keyword_order():
    x = jnp.arange(5.0)[None]
    out = Splitter(z=1, a=3)((), x).output
    np.testing.assert_array_equal(out["z"], [[0.0]])
    np.testing.assert_array_equal(out["a"], [[1.0, 2.0, 3.0]])
    out = Splitter({"left-hand": 2, "0": 2})((), x).output
    np.testing.assert_array_equal(out["0"], [[2.0, 3.0]])


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    extra=st.integers(0, 3),
)
def test_splitter_property_slices_tile_the_prefix(sizes, extra):
    width = sum(sizes) + extra
    x = np.arange(2 * width, dtype=np.float32).reshape(2, width)
    splitter = Splitter({f"s{i}": n for i, n in enumerate(sizes)})
    out = splitter((), x).output
    assert list(out) == [f"s{i}" for i in range(len(sizes))]
    np.testing.assert_array_equal(np.concatenate(list(out.values()), axis=-1), x[:, : sum(sizes)])
    with pytest.raises(ValueError, match=f"sum to {sum(sizes)}.*only {sum(sizes) - 1} features"):
        splitter((), x[:, : sum(sizes) - 1])


def test_splitter_overflow_is_an_error_not_truncation():
    s = Splitter(action_params=4, value=1)
    with pytest.raises(
        ValueError,
        match=r"\{'action_params': 4, 'value': 1\} sum to 5, but the input's last axis "
        r"has only 4 features \(input shape \(2, 4\)\)",
    ):
        s((), jnp.ones((2, 4)))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((), {}, ValueError, "at least one named size"),
        (({"a": 1},), {"b": 2}, TypeError, "not both"),
        ((), {"a": 0}, ValueError, "a=0 must be a positive"),
        ((), {"a": 2, "b": -1}, ValueError, "b=-1 must be a positive"),
        ((), {"a": 1.5}, TypeError, "a=1.5 must be an int"),
        ((), {"a": True}, TypeError, "a=True must be an int"),
        (([2, 1],), {}, TypeError, "must be a dict"),
        (({1: 2},), {}, TypeError, "names must be strings"),
    ],
)
def test_splitter_construction_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        Splitter(*args, **kwargs)


def test_splitter_accepts_numpy_integer_sizes():
    assert Splitter(a=np.int64(2)).sizes == {"a": 2}


# --------------------------------------------------------------------------------------
# Construction and call-time errors of Sequential / Parallel / Concat
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Parallel, Concat])
def test_named_container_construction_errors(cls, tm):
    with pytest.raises(ValueError, match=f"{cls.__name__} needs at least one child"):
        cls()
    with pytest.raises(ValueError, match="at least one child"):
        cls({})
    with pytest.raises(TypeError, match="not both"):
        cls({"a": tm.Counter()}, b=tm.Counter())
    with pytest.raises(TypeError, match="must be a dict mapping child names"):
        cls([tm.Counter()])
    with pytest.raises(TypeError, match="child names must be strings, got 0"):
        cls({0: tm.Counter()})
    with pytest.raises(TypeError, match=r"child 'value' is a Linear, not a StatefulModule"):
        cls(action=tm.Counter(), value=nnx.Linear(2, 1, rngs=nnx.Rngs(0)))
    with pytest.raises(TypeError, match=r"child 'f' is a function"):
        cls(f=lambda x: x)


def test_sequential_construction_errors(tm):
    with pytest.raises(ValueError, match="at least one layer"):
        Sequential([])
    with pytest.raises(TypeError, match=r"layers\[1\] is a Linear, not a StatefulModule"):
        Sequential([tm.Counter(), nnx.Linear(2, 2, rngs=nnx.Rngs(0))])
    with pytest.raises(TypeError, match="takes a list of layers, got a dict"):
        Sequential({"a": tm.Counter()})
    with pytest.raises(TypeError, match="takes a list of layers, got a Counter"):
        Sequential(tm.Counter())


def test_mismatched_state_structure_names_the_expected_children(tm):
    x = jnp.zeros((2, 1))
    par = Parallel(a=tm.Counter(), b=tm.Counter())
    good = par.initialize_state(2)
    with pytest.raises(ValueError, match=r"children \['a', 'b'\].*got a dict with keys \['a'\]"):
        par({"a": good["a"]}, x)
    with pytest.raises(ValueError, match=r"children \['a', 'b'\], so its state must be a dict"):
        par([good["a"], good["b"]], x)
    with pytest.raises(ValueError, match=r"rollout_extras must be a dict.*keys \['a', 'c'\]"):
        par(good, x, {"a": jnp.zeros(2, jnp.int32), "c": jnp.zeros(2, jnp.int32)})
    with pytest.raises(ValueError, match=r"children \['a', 'b'\]"):
        par.reset_state({"b": good["b"]})
    with pytest.raises(ValueError, match=r"children \['a', 'b'\]"):
        par.update_statistics({"a": ()})

    seq = Sequential([tm.Counter(), tm.Counter()])
    with pytest.raises(ValueError, match=r"2 layers, so its state must be a list of 2.*length 1"):
        seq([{"count": jnp.zeros(2, jnp.int32)}], x)
    with pytest.raises(ValueError, match=r"2 layers.*got a dict with keys \['a', 'b'\]"):
        seq(good, x)
    with pytest.raises(ValueError, match="rollout_extras must be a list of 2"):
        seq.update_statistics([jnp.zeros((3, 2))])


def test_concat_call_errors(tm):
    cat = Concat(proprio=tm.StatsRecorder(), goal=tm.StatsRecorder())
    with pytest.raises(
        KeyError, match=r"child 'goal' reads input key 'goal'.*keys \['proprio', 'extra'\]"
    ):
        cat((), {"proprio": jnp.ones((2, 3)), "extra": jnp.ones((2, 1))})
    with pytest.raises(TypeError, match=r"dispatches a dict input.*got an array of shape \(2, 3\)"):
        cat((), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"agree on every axis but the last.*\(2, 3\).*\(4, 1\)"):
        cat((), {"proprio": jnp.ones((2, 3)), "goal": jnp.ones((4, 1))})
    dict_out = Concat(s=Splitter(a=1))
    with pytest.raises(TypeError, match=r"child 's' returned a dict.*Flattener"):
        dict_out((), {"s": jnp.ones((2, 3))})


# --------------------------------------------------------------------------------------
# update_statistics: the "silently fails" trap
# --------------------------------------------------------------------------------------


class ForgetfulPair(StatefulModule):
    """A custom container written without an update_statistics override (the trap)."""

    def __init__(self, a, b):
        self.a = a
        self.b = b

    def __call__(self, state, x, rollout_extras=None):
        ea = None if rollout_extras is None else rollout_extras["a"]
        eb = None if rollout_extras is None else rollout_extras["b"]
        out_a = self.a(state["a"], x, ea)
        out_b = self.b(state["b"], out_a.output, eb)
        return StatefulModuleOutput(
            next_state={"a": out_a.next_state, "b": out_b.next_state},
            output=out_b.output,
            regularization_loss=out_a.regularization_loss + out_b.regularization_loss,
            metrics={"a": out_a.metrics, "b": out_b.metrics},
            rollout_extras={"a": out_a.rollout_extras, "b": out_b.rollout_extras},
        )

    def initialize_state(self, batch_size):
        return {"a": self.a.initialize_state(batch_size), "b": self.b.initialize_state(batch_size)}


class CarefulPair(ForgetfulPair):
    """The same container following rule 4 of the spec."""

    def update_statistics(self, rollout_extras):
        self.a.update_statistics(rollout_extras["a"])
        self.b.update_statistics(rollout_extras["b"])


def _x(t):
    return jnp.full((2, 1), t + 1.0)


# Each builder returns (network, the nested StatsRecorder, input at step t). The
# recorder always sees x_t = (t + 1) * ones((2, 1)).
STAT_CASES = {
    "sequential": lambda tm, r: (Sequential([r, tm.Counter()]), _x),
    "parallel": lambda tm, r: (Parallel(stats=r, count=tm.Counter()), _x),
    "concat": lambda tm, r: (
        Concat(stats=r, count=tm.Counter()),
        lambda t: {"stats": _x(t), "count": _x(t)},
    ),
    "map": lambda tm, r: (
        Map(stats=r, count=tm.Counter()),
        lambda t: {"stats": _x(t), "count": _x(t)},
    ),
    "merge": lambda tm, r: (
        Merge(
            stats=Sequential([r, Splitter(s=1)]),
            count=Sequential([tm.Counter(), Splitter(c=1)]),
        ),
        _x,
    ),
    "nested": lambda tm, r: (
        Sequential([tm.Counter(), Parallel(inner=Sequential([Splitter(v=1), Map(v=r)]))]),
        lambda t: _x(t) - t,  # the Counter adds t back: the recorder sees (t + 1)
    ),
    "careful_custom": lambda tm, r: (CarefulPair(r, tm.Counter()), _x),
}


@pytest.mark.parametrize("case", list(STAT_CASES))
def test_update_statistics_reaches_nested_stats_modules(case, tm):
    recorder = tm.StatsRecorder()
    net, x_at = STAT_CASES[case](tm, recorder)
    _, extras = tm.rollout(net, net.initialize_state(2), [x_at(t) for t in range(3)])
    assert int(recorder.calls[...]) == 0  # __call__ never touches statistics
    net.update_statistics(extras)
    # T = 3 steps x B = 2 envs of values 1, 2, 3: total = 2 * (1 + 2 + 3) = 12
    assert int(recorder.calls[...]) == 1
    assert float(recorder.total[...]) == 12.0
    assert int(recorder.samples[...]) == 6


def test_forgetful_custom_container_is_detectable(tm):
    recorder = tm.StatsRecorder()
    net = ForgetfulPair(recorder, tm.Counter())
    _, extras = tm.rollout(net, net.initialize_state(2), [_x(t) for t in range(3)])
    net.update_statistics(extras)  # the base-class no-op: nothing reaches the recorder
    assert int(recorder.calls[...]) == 0
    assert float(recorder.total[...]) == 0.0


@pytest.mark.parametrize("case", list(STAT_CASES))
def test_replay_with_stored_extras_reproduces_the_rollout(case, tm):
    net, x_at = STAT_CASES[case](tm, tm.StatsRecorder())
    state0 = net.initialize_state(2)
    outs, extras = tm.rollout(net, state0, [x_at(t) for t in range(3)])
    state = state0
    for t in range(3):
        step_extras = jax.tree.map(lambda e, t=t: e[t], extras)
        replay = net(state, x_at(t), step_extras)
        tm.assert_trees_equal(replay.output, outs[t].output)
        tm.assert_trees_equal(replay.next_state, outs[t].next_state)
        tm.assert_trees_equal(replay.regularization_loss, outs[t].regularization_loss)
        # the structure of state and extras is stable across steps
        assert jax.tree.structure(replay.next_state) == jax.tree.structure(state0)
        state = replay.next_state


def test_custom_container_spec_snippets(tm):
    # Rule 1 verbatim: fixed children as attributes, variable ones in nnx.Dict.
    class TwoChild(StatefulModule):
        def __init__(self, a, b):
            self.a = a
            self.b = b

    class MyMap(StatefulModule):
        def __init__(self, modules: dict[str, StatefulModule]):
            self.components = nnx.Dict(modules)  # NNX-tracked

    rngs = nnx.Rngs(0)
    two = TwoChild(Dense(2, 2, rngs=rngs), Dense(2, 2, rngs=rngs))
    my_map = MyMap({"x": Dense(2, 3, rngs=rngs), "y": Dense(2, 3, rngs=rngs)})
    assert len(jax.tree.leaves(nnx.state(two, nnx.Param))) == 4
    assert len(jax.tree.leaves(nnx.state(my_map, nnx.Param))) == 4
    # and the shipped containers track their children's parameters the same way
    seq = Sequential([Dense(2, 2, rngs=rngs), Dense(2, 2, rngs=rngs)])
    assert len(jax.tree.leaves(nnx.state(seq, nnx.Param))) == 4
    assert isinstance(seq.layers, nnx.List)
    assert isinstance(Concat(a=tm.Counter()).components, nnx.Dict)


# --------------------------------------------------------------------------------------
# jit vs eager
# --------------------------------------------------------------------------------------


def _network(tm):
    rngs = nnx.Rngs(3)
    return Sequential(
        [
            # insertion order z, a differs from sorted order: Concat must keep it under jit
            Concat(z=tm.Counter(start=1, reg_weight=0.5), a=Dense(2, 3, rngs=rngs)),
            Splitter(first=2, rest=2),  # 5 features in, the last one ignored
            Map(first=tm.Counter(start=5), rest=tm.StatsRecorder()),
            Concat(first=tm.Counter(start=0), rest=tm.StatsRecorder()),
            Parallel(both=Merge(f=Splitter(f=1), r=Splitter(r=1))),
        ]
    )


def test_jit_matches_eager_and_does_not_retrace(tm):
    net = _network(tm)
    traces = []

    @nnx.jit
    def step(net, state, x):
        traces.append(None)
        out = net(state, x)
        replay = net(state, x, out.rollout_extras)
        return out, replay

    x_at = [
        {"z": jnp.full((3, 2), float(t)), "a": jnp.arange(6.0).reshape(3, 2) - t} for t in range(3)
    ]
    state_eager = state_jit = net.initialize_state(3)
    for x in x_at:
        eager = net(state_eager, x)
        jitted, replay = step(net, state_jit, x)
        for field in ("output", "next_state", "regularization_loss", "metrics", "rollout_extras"):
            tm.assert_trees_equal(getattr(jitted, field), getattr(eager, field))
        tm.assert_trees_equal(replay.output, jitted.output)
        state_eager, state_jit = eager.next_state, jitted.next_state
    assert len(traces) == 1
    # a spot check of the eager numbers at t = 2: z = 2 + count 3 = 5, so Splitter's
    # "first" is [5, 5] (z comes first), the Map's Counter (count 7) adds 7 -> 12, the
    # second Concat's Counter (count 2) adds 2 -> 14, and "f" is its first feature.
    np.testing.assert_array_equal(eager.output["both"]["f"], np.full((3, 1), 14.0))
