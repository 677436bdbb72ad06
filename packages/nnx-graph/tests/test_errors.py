"""Every build-time and use-time mistake raises an error naming the culprit and the fix."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph, SignedDense
from nnx_ppo.networks.types import StatelessModule


class _Widen(StatelessModule):
    """A transform whose output is twice as wide as its input."""

    def forward(self, x):
        return jnp.concatenate([x, x], axis=-1)


class _Broken(StatelessModule):
    def forward(self, x):
        raise RuntimeError("boom inside the transform")


def _graph(**kwargs) -> PopulationGraph:
    g = PopulationGraph(nnx.Rngs(0), **kwargs)
    g.add_input("a", size=3, input_from="x")
    g.add_population("b", size=4)
    g.add_output("c", size=2)
    return g


def _finalized() -> PopulationGraph:
    g = _graph()
    g.connect("a", "b")
    g.connect("b", "c")
    g.finalize()
    return g


# ------------------------------------------------------------------ constructor


def test_rngs_must_be_an_nnx_rngs():
    with pytest.raises(TypeError, match=r"rngs must be an nnx.Rngs.*PopulationGraph\(nnx"):
        PopulationGraph(0)  # type: ignore[arg-type]


def test_record_populations_must_be_a_bool():
    with pytest.raises(TypeError, match="record_populations must be a bool"):
        PopulationGraph(nnx.Rngs(0), record_populations="yes")  # type: ignore[arg-type]


# --------------------------------------------------------------- populations


def test_duplicate_population_name():
    g = _graph()
    with pytest.raises(ValueError, match=r"add_population\('b'\).*'b' already exists.*unique"):
        g.add_population("b", size=4)
    with pytest.raises(ValueError, match=r"add_output\('a'\).*'a' already exists"):
        g.add_output("a", size=1)


def test_duplicate_output_key():
    g = _graph()
    # "c" is already the output key of population "c" (output_to defaults to the name).
    with pytest.raises(ValueError, match=r"output key 'c' is already used by population 'c'"):
        g.add_output("d", size=1, output_to="c")


@pytest.mark.parametrize("size", [0, -3])
def test_non_positive_size(size):
    with pytest.raises(ValueError, match=rf"add_population\('h'\): size must be .*{size}"):
        PopulationGraph(nnx.Rngs(0)).add_population("h", size=size)


@pytest.mark.parametrize("size", [2.0, "4", True])
def test_non_int_size(size):
    with pytest.raises(TypeError, match="size must be a positive int"):
        PopulationGraph(nnx.Rngs(0)).add_population("h", size=size)


@pytest.mark.parametrize("name", ["", " h", "a->b", "h@1", "two words", 'q"'])
def test_invalid_population_name(name):
    with pytest.raises(ValueError, match="invalid population name"):
        PopulationGraph(nnx.Rngs(0)).add_population(name, size=1)


def test_non_str_population_name():
    with pytest.raises(TypeError, match="name must be a str"):
        PopulationGraph(nnx.Rngs(0)).add_population(3, size=1)  # type: ignore[arg-type]


def test_activation_must_be_callable():
    with pytest.raises(TypeError, match=r"add_population\('h'\): activation must be a callable"):
        PopulationGraph(nnx.Rngs(0)).add_population("h", size=1, activation="relu")


def test_input_from_and_output_to_must_be_strings():
    g = PopulationGraph(nnx.Rngs(0))
    with pytest.raises(TypeError, match="input_from must be a non-empty str"):
        g.add_input("a", size=1, input_from=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="output_to must be a non-empty str"):
        g.add_output("o", size=1, output_to="")


# ------------------------------------------------------- time constants and signs


@pytest.mark.parametrize("dt", [0, -0.1, float("inf"), float("nan")])
def test_dt_must_be_positive_and_finite(dt):
    with pytest.raises(ValueError, match=r"dt must be a positive number .*got .*dt=0.02"):
        PopulationGraph(nnx.Rngs(0), dt=dt)


@pytest.mark.parametrize("dt", ["0.1", True, None])
def test_dt_must_be_a_number(dt):
    with pytest.raises(TypeError, match="dt must be a positive number"):
        PopulationGraph(nnx.Rngs(0), dt=dt)  # type: ignore[arg-type]


def test_tau_shorter_than_dt_names_the_leak_factor_and_the_fix():
    g = PopulationGraph(nnx.Rngs(0), dt=0.1)
    with pytest.raises(
        ValueError,
        match=r"add_population\('h'\): tau=0.05 is shorter than the graph's step dt=0.1, so "
        r"the leak factor dt/tau = 2 is outside \(0, 1\].*Use tau >= 0.1",
    ):
        g.add_population("h", size=2, tau=0.05)
    assert g.populations == ()  # nothing declared by the failed call


@pytest.mark.parametrize("tau", [0, -1.0, float("inf"), float("nan")])
def test_tau_must_be_positive_and_finite(tau):
    with pytest.raises(ValueError, match=r"add_output\('y'\): tau must be a positive, finite"):
        PopulationGraph(nnx.Rngs(0)).add_output("y", size=1, tau=tau)


@pytest.mark.parametrize("tau", ["5", True, jnp.ones(3)])
def test_tau_must_be_a_number(tau):
    with pytest.raises(TypeError, match=r"add_input\('a'\): tau must be a positive number or None"):
        PopulationGraph(nnx.Rngs(0)).add_input("a", size=1, input_from="x", tau=tau)


def test_learn_tau_needs_a_bool_and_a_tau_above_dt():
    g = PopulationGraph(nnx.Rngs(0), dt=0.5)
    with pytest.raises(TypeError, match="learn_tau must be a bool, got 1"):
        g.add_population("h", size=2, tau=2.0, learn_tau=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"learn_tau=True needs the initial time constant.*tau=5"):
        g.add_population("h", size=2, learn_tau=True)
    with pytest.raises(ValueError, match=r"learn_tau=True needs tau > dt.*e\.g\. tau=1"):
        g.add_population("h", size=2, tau=0.5, learn_tau=True)
    assert len(nnx.state(g, nnx.Param)) == 0  # no parameter left behind


@pytest.mark.parametrize("sign", ["excite", "Excitatory", 1, -1.0])
def test_unknown_sign(sign):
    with pytest.raises(ValueError, match=r"sign must be 'excitatory' or 'inhibitory' \(or None\)"):
        PopulationGraph(nnx.Rngs(0)).add_population("h", size=2, sign=sign)


def test_custom_transform_out_of_a_signed_population():
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("a", size=3, input_from="x", sign="inhibitory")
    g.add_output("b", size=2)
    with pytest.raises(
        ValueError,
        match=r"connect\('a', 'b', delay=0\): population 'a' is inhibitory .* but the "
        r"transform is a Dense, whose weights the graph cannot constrain.*"
        r"SignedDense\(in_features, out_features, sign='inhibitory', rngs=rngs\)",
    ):
        g.connect("a", "b", transform=Dense(3, 2, rngs=nnx.Rngs(1)))
    wrong = SignedDense(3, 2, sign="excitatory", rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match="transform is a SignedDense with sign='excitatory'"):
        g.connect("a", "b", transform=wrong)
    right = SignedDense(3, 2, sign="inhibitory", rngs=nnx.Rngs(1))
    g.connect("a", "b", transform=right)
    g.finalize()
    assert g.transforms["a->b"] is right


def test_signed_dense_arguments():
    with pytest.raises(ValueError, match=r"sign must be 'excitatory' or 'inhibitory', got None"):
        SignedDense(2, 3, sign=None, rngs=nnx.Rngs(0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="SignedDense: out_features must be a positive int, got 0"):
        SignedDense(2, 0, sign="excitatory", rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="SignedDense: in_features must be a positive int"):
        SignedDense(2.0, 3, sign="excitatory", rngs=nnx.Rngs(0))  # type: ignore[arg-type]
    layer = SignedDense(2, 3, sign="excitatory", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="last axis must have size in_features=2"):
        layer.forward(jnp.ones((1, 3)))


# ---------------------------------------------------------------- connections


def test_unknown_source_and_destination():
    g = _graph()
    with pytest.raises(
        ValueError, match=r"unknown src population 'z' \(declared: 'a', 'b', 'c'\).*add_"
    ):
        g.connect("z", "b")
    with pytest.raises(ValueError, match="unknown dst population 'q'"):
        g.connect("a", "q")


@pytest.mark.parametrize("delay", [-1, -4])
def test_negative_delay(delay):
    with pytest.raises(ValueError, match=rf"delay must be a non-negative int, got {delay}"):
        _graph().connect("a", "b", delay=delay)


@pytest.mark.parametrize("delay", [1.0, 0.5, "1", True])
def test_non_integer_delay(delay):
    with pytest.raises(TypeError, match="delay must be a non-negative int"):
        _graph().connect("a", "b", delay=delay)


def test_delay_zero_self_loop():
    with pytest.raises(ValueError, match=r"delay=0 self-loop.*connect\('b', 'b', delay=1\)"):
        _graph().connect("b", "b")


def test_custom_transform_with_reciprocal():
    with pytest.raises(ValueError, match="cannot be combined with reciprocal=True"):
        _graph().connect("a", "b", transform=Dense(3, 4, rngs=nnx.Rngs(1)), delay=1,
                         reciprocal=True)  # fmt: skip


def test_reciprocal_with_delay_zero_or_self_loop():
    with pytest.raises(ValueError, match=r"reciprocal=True with delay=0 .*'a' -> 'b' -> 'a'"):
        _graph().connect("a", "b", reciprocal=True)
    with pytest.raises(ValueError, match="self-loop is its own reverse"):
        _graph().connect("b", "b", delay=1, reciprocal=True)


def test_reciprocal_must_be_a_bool():
    with pytest.raises(TypeError, match="reciprocal must be a bool"):
        _graph().connect("a", "b", delay=1, reciprocal=1)  # type: ignore[arg-type]


def test_transform_must_be_a_stateful_module():
    with pytest.raises(TypeError, match=r"transform must be a StatefulModule.*got Linear"):
        _graph().connect("a", "b", transform=nnx.Linear(3, 4, rngs=nnx.Rngs(0)))  # type: ignore[arg-type]


def test_duplicate_connection():
    g = _graph()
    g.connect("a", "b", delay=2)
    with pytest.raises(ValueError, match=r"connection 'a->b@2' .* already exists"):
        g.connect("a", "b", delay=2)
    # A reciprocal pair whose reverse already exists is rejected as a whole.
    g.connect("b", "a", delay=1)
    with pytest.raises(ValueError, match=r"connection 'b->a@1' .* already exists"):
        g.connect("a", "b", delay=1, reciprocal=True)
    assert [c.name for c in g.connections] == ["a->b@2", "b->a@1"]


# ------------------------------------------------------------------- finalize


def test_delay_zero_cycle_lists_only_the_cycle_and_suggests_a_delay():
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("inp", size=2, input_from="x")
    for name in ("p", "q", "r", "tail"):
        g.add_population(name, size=2)
    g.add_output("out", size=1)
    g.connect("inp", "p")
    g.connect("p", "q")
    g.connect("q", "r")
    g.connect("r", "p")  # closes the cycle p -> q -> r -> p
    g.connect("r", "tail")  # downstream of the cycle: must not be listed
    g.connect("tail", "out")
    with pytest.raises(ValueError, match="cycle") as info:
        g.finalize()
    message = str(info.value)
    assert "'p' -> 'q' -> 'r' -> 'p'" in message
    assert "'inp'" not in message and "'tail'" not in message and "'out'" not in message
    assert "connect('r', 'p', delay=1)" in message
    assert not g.is_finalized


def test_no_populations_and_no_outputs():
    with pytest.raises(ValueError, match="no populations"):
        PopulationGraph(nnx.Rngs(0)).finalize()
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("a", size=1, input_from="x")
    with pytest.raises(ValueError, match=r"no output population.*add_output"):
        g.finalize()


def test_population_without_any_input():
    g = _graph()
    g.connect("a", "c")
    with pytest.raises(ValueError, match=r"population 'b' has no incoming connection.*connect"):
        g.finalize()


def test_transform_output_size_mismatch_at_finalize():
    g = _graph()
    g.connect("a", "b", transform=Dense(3, 5, rngs=nnx.Rngs(1)))
    g.connect("b", "c")
    with pytest.raises(
        ValueError, match=r"'a->b' must map \[B, 3\] \('a'\) to \[B, 4\] \('b'\).*Dense\(3, 5\)"
    ):
        g.finalize()


def test_custom_transform_output_size_mismatch_at_finalize():
    g = _graph()
    g.connect("a", "b", transform=_Widen())  # [B, 3] -> [B, 6], but b has size 4
    g.connect("b", "c")
    with pytest.raises(ValueError, match=r"'a->b' must map .* _Widen with output \[B, 6\]"):
        g.finalize()


def test_transform_failing_at_finalize_names_the_connection():
    g = _graph()
    g.connect("a", "b", transform=_Broken())
    g.connect("b", "c")
    with pytest.raises(ValueError, match=r"transform of connection 'a->b' \(_Broken\) failed"):
        g.finalize()


def test_failed_finalize_leaves_the_graph_editable():
    g = _graph()
    g.connect("a", "b")
    with pytest.raises(ValueError, match="'c' has no incoming"):
        g.finalize()
    g.connect("b", "c")
    g.finalize()
    assert g.is_finalized


# ------------------------------------------------------------ lifecycle errors


@pytest.mark.parametrize(
    "call",
    [
        lambda g: g.add_population("new", size=1),
        lambda g: g.add_input("new", size=1, input_from="y"),
        lambda g: g.add_output("new", size=1),
        lambda g: g.connect("a", "c", delay=1),
        lambda g: g.finalize(),
    ],
    ids=["add_population", "add_input", "add_output", "connect", "finalize"],
)
def test_build_calls_after_finalize(call):
    g = _finalized()
    with pytest.raises(RuntimeError, match=r"already finalized.*new PopulationGraph"):
        call(g)


@pytest.mark.parametrize(
    "call",
    [
        lambda g: g.initialize_state(2),
        lambda g: g.reset_state({}),
        lambda g: g({}, {"x": jnp.zeros((2, 3))}),
        lambda g: g.update_statistics({}),
        lambda g: g.execution_order,
    ],
    ids=["initialize_state", "reset_state", "__call__", "update_statistics", "order"],
)
def test_use_before_finalize(call):
    g = _graph()
    g.connect("a", "b")
    g.connect("b", "c")
    with pytest.raises(RuntimeError, match=r"not finalized yet.*g.finalize\(\)"):
        call(g)


# ---------------------------------------------------------------- call errors


def test_obs_input_of_the_wrong_size():
    g = _finalized()
    state = g.initialize_state(2)
    with pytest.raises(ValueError, match=r"obs\['x'\] has shape \(2, 5\).*'a' has size 3.*size=5"):
        g(state, {"x": jnp.zeros((2, 5))})


def test_obs_missing_key_or_not_a_dict():
    g = _finalized()
    state = g.initialize_state(2)
    with pytest.raises(ValueError, match=r"reads obs\['x'\].*keys \['y'\]"):
        g(state, {"y": jnp.zeros((2, 3))})
    with pytest.raises(TypeError, match="observation must be a dict"):
        g(state, jnp.zeros((2, 3)))
