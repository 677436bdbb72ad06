"""Properties every module of nnx-modules must have, checked on each of them.

For every module (leaf layers, samplers, containers, the adapter and the factory
networks):

- jit: a jitted step (and ``reset_state``) equals the eager one;
- carry stability: ``next_state`` (and its ``canonical_state``) keeps the tree
  structure, shapes and dtypes of the initial carry over several steps, and
  ``rollout_extras`` keeps its structure;
- reset: ``reset_state`` on a batched carry restores the initial values (noise keys are
  the exception: they are re-derived, fresh, with the same shape and dtype);
- extras: replaying with the emitted ``rollout_extras`` reproduces the step exactly,
  and containers route extras exactly like their carry;
- vmap: vmapping the module over environments (rows) equals the batched call.

:func:`test_every_module_class_is_covered` fails when a new public module class is
added without a case here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks import types as types_module
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Concat, Parallel, Sequential, Splitter
from nnx_ppo.networks.conv import Conv, ConvEncoder
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.factories import (
    make_lstm_actor_critic,
    make_mlp,
    make_mlp_actor_critic,
    make_recurrent_actor_critic,
)
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU
from nnx_ppo.networks.low_rank import LowRankRNN
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recording import ACTIVATION_KEY, Recorder, with_recording
from nnx_ppo.networks.recurrent import CTRNN, GRU, LSTM, SimpleRNN
from nnx_ppo.networks.residual import ResidualMLP
from nnx_ppo.networks.sampling_layers import (
    CategoricalSampler,
    NormalSampler,
    NormalTanhSampler,
)
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput
from nnx_ppo.networks.utils import Filter, Flattener, Map, Merge, Scale
from nnx_ppo.networks.variational import AR1VariationalBottleneck, VariationalBottleneck

B = 3
STEPS = 3
# Base classes that are not meant to be instantiated.
ABSTRACT = {
    "StatefulModule",
    "StatelessModule",
    "ActionSampler",
    "RecurrentCell",
    "LinearRecurrentCell",
}


@dataclasses.dataclass(frozen=True)
class Case:
    """A module to check: how to build it, its input, and whether it is a container."""

    id: str
    build: Callable[[], StatefulModule]
    inputs: Callable[[jax.Array], Any]  # key -> one step's input, leaves [B, ...]
    container: bool = False


def _vec(size: int) -> Callable[[jax.Array], jax.Array]:
    return lambda key: jax.random.normal(key, (B, size))


def _tree(**shapes: tuple[int, ...]) -> Callable[[jax.Array], dict[str, jax.Array]]:
    def make(key: jax.Array) -> dict[str, jax.Array]:
        keys = jax.random.split(key, len(shapes))
        return {
            name: jax.random.normal(k, (B, *shape))
            for k, (name, shape) in zip(keys, shapes.items(), strict=True)
        }

    return make


def _image(*shape: int) -> Callable[[jax.Array], jax.Array]:
    return lambda key: jax.random.normal(key, (B, *shape))


def _rngs() -> nnx.Rngs:
    return nnx.Rngs(0)


def _normalizer(spec: Any, inputs: Callable[[jax.Array], Any]) -> Normalizer:
    # Non-trivial statistics: two stacked rollouts' worth of (spec-keyed) inputs.
    norm = Normalizer(spec)
    data = [inputs(jax.random.key(100 + t)) for t in range(2)]
    if isinstance(spec, Mapping):
        data = [{k: d[k] for k in spec} for d in data]
    norm.update_statistics(jax.tree.map(lambda *xs: 3.0 * jnp.stack(xs) + 1.0, *data))
    return norm


def _adapter() -> PPOAdapter:
    r = _rngs()
    return PPOAdapter(
        action=Sequential([LSTM(4, 5, rngs=r), Dense(5, 4, rngs=r), NormalTanhSampler(r)]),
        value=Dense(4, 1, rngs=r),
    )


_DICT_OBS = _tree(x=(2,), y=(2, 2), extra=(1,))

CASES = [
    Case("Dense", lambda: Dense(4, 5, rngs=_rngs(), activation=nnx.tanh), _vec(4)),
    Case("MLP", lambda: MLP(4, (6,), 2, rngs=_rngs()), _vec(4)),
    Case(
        "Conv",
        lambda: Conv(2, 3, 2, rngs=_rngs(), strides=2, activation=nnx.relu),
        _image(5, 4, 2),
    ),
    Case(
        "ConvEncoder",
        lambda: ConvEncoder((5, 4, 2), _rngs(), channels=(3, 2), kernel_sizes=2, dense=(4,)),
        _image(5, 4, 2),
    ),
    Case("LSTM", lambda: LSTM(4, 5, rngs=_rngs()), _vec(4)),
    Case(
        "LSTM-trainable-init",
        lambda: LSTM(4, 5, rngs=_rngs(), trainable_initial_state=True),
        _vec(4),
    ),
    Case("GRU", lambda: GRU(4, 5, rngs=_rngs()), _vec(4)),
    Case("SimpleRNN", lambda: SimpleRNN(4, 5, activation="relu", rngs=_rngs()), _vec(4)),
    Case(
        "CTRNN", lambda: CTRNN(4, 5, dt=0.5, tau=[0.5, 1.0, 2.0, 4.0, 8.0], rngs=_rngs()), _vec(4)
    ),
    Case(
        "CTRNN-learned-tau",
        lambda: CTRNN(4, 5, tau=3.0, learn_tau=True, trainable_initial_state=True, rngs=_rngs()),
        _vec(4),
    ),
    Case(
        "CTRNN-noise",
        lambda: CTRNN(4, 5, dt=0.5, tau=[0.5, 1.0, 2.0, 4.0, 8.0], sigma_rec=0.2, rngs=_rngs()),
        _vec(4),
    ),
    Case(
        "LowRankRNN-random-noise",
        lambda: LowRankRNN(4, 5, rank=2, tau=2.0, g=0.5, sigma_rec=0.2, rngs=_rngs()),
        _vec(4),
    ),
    Case("LSTM-layer-norm", lambda: LSTM(4, 5, rngs=_rngs(), layer_norm=True), _vec(4)),
    Case("GRU-layer-norm", lambda: GRU(4, 5, rngs=_rngs(), layer_norm=True), _vec(4)),
    Case("SimpleRNN-residual", lambda: SimpleRNN(4, 4, residual=True, rngs=_rngs()), _vec(4)),
    Case("MinGRU", lambda: MinGRU(4, 5, rngs=_rngs(), activation="tanh"), _vec(4)),
    Case(
        "LRU",
        lambda: LRU(4, 5, rngs=_rngs(), state_features=3, trainable_initial_state=True),
        _vec(4),
    ),
    Case(
        "ResidualMLP", lambda: ResidualMLP(4, 6, rngs=_rngs(), n_blocks=2, out_features=3), _vec(4)
    ),
    Case("Delay", lambda: Delay(jnp.zeros(4), 2, initial_value=0.5), _vec(4)),
    Case(
        "Delay-tree",
        lambda: Delay({"a": jnp.zeros(2), "b": jnp.zeros((2, 2))}, 1),
        _tree(a=(2,), b=(2, 2)),
    ),
    Case("Normalizer", lambda: _normalizer(4, _vec(4)), _vec(4)),
    Case("Normalizer-dict", lambda: _normalizer({"x": 2, "y": (2, 2)}, _DICT_OBS), _DICT_OBS),
    Case("VariationalBottleneck", lambda: VariationalBottleneck(4, 3, rngs=_rngs()), _vec(4)),
    Case(
        "AR1VariationalBottleneck",
        lambda: AR1VariationalBottleneck(4, 3, rngs=_rngs(), phi=0.8),
        _vec(4),
    ),
    # nnx-ppo 0.3.0's encoder-less forms: the input is (mean, pre-std), [B, 2 * latent].
    Case("VariationalBottleneck-nnx-ppo", lambda: VariationalBottleneck(3, _rngs(), 0.1), _vec(6)),
    Case(
        "AR1VariationalBottleneck-nnx-ppo",
        lambda: AR1VariationalBottleneck(3, _rngs(), 0.1, 1e-6, 0.5),
        _vec(6),
    ),
    Case("NormalTanhSampler", lambda: NormalTanhSampler(_rngs(), entropy_weight=0.1), _vec(4)),
    Case("NormalSampler", lambda: NormalSampler(_rngs(), entropy_weight=0.1), _vec(4)),
    Case("CategoricalSampler", lambda: CategoricalSampler(_rngs(), 0.1), _vec(5)),
    Case("PPOAdapter", _adapter, _vec(4), container=True),
    Case(
        "Sequential",
        lambda: Sequential(
            [_normalizer(4, _vec(4)), LSTM(4, 5, rngs=_rngs()), Dense(5, 2, rngs=_rngs())]
        ),
        _vec(4),
        container=True,
    ),
    Case(
        "Parallel",
        lambda: Parallel(a=LSTM(4, 3, rngs=_rngs()), b=Dense(4, 2, rngs=_rngs())),
        _vec(4),
        container=True,
    ),
    Case(
        "Concat",
        lambda: Concat({"a": GRU(2, 3, rngs=_rngs()), "b": Scale(2.0)}),
        _tree(a=(2,), b=(2,)),
        container=True,
    ),
    Case("Splitter", lambda: Splitter(a=1, b=2), _vec(4)),
    Case("Filter", lambda: Filter({"p": "x", "q": ("y",)}), _DICT_OBS),
    Case(
        "Map",
        lambda: Map({"a": NormalTanhSampler(_rngs()), "b": Delay(jnp.zeros(2), 1)}),
        _tree(a=(4,), b=(2,), c=(1,)),
        container=True,
    ),
    Case(
        "Merge",
        lambda: Merge(
            left=Sequential([Dense(4, 2, rngs=_rngs()), Splitter(l=2)]),
            right=Sequential([LSTM(4, 2, rngs=_rngs()), Splitter(r=2)]),
        ),
        _vec(4),
        container=True,
    ),
    Case("Flattener", lambda: Flattener(), _tree(a=(2,), b=(2, 3))),
    Case("Scale", lambda: Scale(jnp.array([1.0, -2.0, 0.5, 3.0])), _vec(4)),
    Case(
        "make_mlp_actor_critic",
        lambda: make_mlp_actor_critic(4, 2, (8,), (8,), rngs=_rngs()),
        _vec(4),
        container=True,
    ),
    Case(
        "make_mlp_actor_critic-dict",
        lambda: make_mlp_actor_critic(
            {"x": 2, "y": (2, 2)}, 2, (8,), (8,), rngs=_rngs(), action_distribution="categorical"
        ),
        _DICT_OBS,
        container=True,
    ),
    Case(
        "make_lstm_actor_critic",
        lambda: make_lstm_actor_critic(4, 2, 5, (8,), (8,), rngs=_rngs()),
        _vec(4),
        container=True,
    ),
    Case(
        "make_lstm_actor_critic-shared",
        lambda: make_lstm_actor_critic(4, 2, 5, (), (), rngs=_rngs(), shared_lstm=True),
        _vec(4),
        container=True,
    ),
    Case(
        "make_recurrent_actor_critic-gru-layer-norm",
        lambda: make_recurrent_actor_critic(
            4, 2, 5, (), (), rngs=_rngs(), cell="gru", layer_norm=True
        ),
        _vec(4),
        container=True,
    ),
    Case(
        "make_recurrent_actor_critic-lru-shared",
        lambda: make_recurrent_actor_critic(
            4, 2, 5, (8,), (8,), rngs=_rngs(), cell="lru", shared=True
        ),
        _vec(4),
        container=True,
    ),
    Case("make_mlp", lambda: make_mlp([4, 6, 2], _rngs()), _vec(4), container=True),
    Case("Recorder", lambda: Recorder(LSTM(4, 5, rngs=_rngs())), _vec(4)),
    Case("Recorder-MLP", lambda: Recorder(MLP(4, (6,), 2, rngs=_rngs())), _vec(4)),
    Case(
        "with_recording",
        lambda: with_recording(make_lstm_actor_critic(4, 2, 5, (8,), (8,), rngs=_rngs())),
        _vec(4),
        container=True,
    ),
]
IDS = [case.id for case in CASES]


# -- helpers -------------------------------------------------------------------------------


def _xs(case: Case) -> list[Any]:
    return [case.inputs(jax.random.key(t)) for t in range(STEPS)]


def _assert_close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same tree structure, shapes and dtypes; float leaves close, others equal."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(a, e)


def _signature(tree: Any) -> tuple[Any, list[tuple[tuple[int, ...], Any]]]:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, [(np.shape(x), np.asarray(x).dtype) for x in leaves]


def _is_noise_key(path: tuple[Any, ...]) -> bool:
    return any(getattr(p, "key", None) == "key" for p in path)


def _step(module: StatefulModule, state: Any, x: Any, extras: Any = None) -> StatefulModuleOutput:
    return module(state, x, extras)


# -- the properties ------------------------------------------------------------------------


def test_every_module_class_is_covered() -> None:
    package = Path(types_module.__file__).parent
    public: set[str] = set()
    for path in sorted(package.glob("*.py")):
        module = importlib.import_module(f"nnx_ppo.networks.{path.stem}")
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if (
                inspect.isclass(obj)
                and issubclass(obj, StatefulModule)
                and obj.__module__ == module.__name__
                and name not in ABSTRACT
            ):
                public.add(name)
    covered = {type(case.build()).__name__ for case in CASES}
    assert public - covered == set(), "add a Case for these modules"
    assert len(public) >= 20  # the scan found the package's modules


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jit_matches_eager(case: Case) -> None:
    module = case.build()
    graphdef, params = nnx.split(module)
    state = module.initialize_state(B)
    x = case.inputs(jax.random.key(0))

    @jax.jit
    def step(params: Any, state: Any, x: Any) -> tuple[StatefulModuleOutput, Any]:
        model = nnx.merge(graphdef, params)
        out = model(state, x)
        return out, model.reset_state(out.next_state)

    jitted, jitted_reset = step(params, state, x)
    eager_model = nnx.merge(graphdef, params)  # same parameters and RNG stream position
    eager = eager_model(state, x)
    _assert_close(jitted, eager)
    _assert_close(jitted_reset, eager_model.reset_state(eager.next_state))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_carry_and_extras_keep_structure_shapes_and_dtypes(case: Case) -> None:
    module = case.build()
    state = module.initialize_state(B)
    initial = _signature(state)
    extras_signature = None
    for x in _xs(case):
        out = module(state, x)
        state = out.next_state
        assert _signature(state) == initial
        if extras_signature is None:
            extras_signature = _signature(out.rollout_extras)
        assert _signature(out.rollout_extras) == extras_signature
        reg = np.asarray(out.regularization_loss)
        assert reg.shape in {(), (B,)}, f"regularization_loss must be [B] or scalar: {reg.shape}"
        assert isinstance(out.metrics, dict)
        # Every leaf of the carry, output and extras is batched [B, ...].
        for leaf in jax.tree.leaves((state, out.output, out.rollout_extras)):
            assert np.shape(leaf)[:1] == (B,)
        # canonical_state (the analysed form of the carry) keeps it all too.
        assert _signature(module.canonical_state(state)) == initial


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reset_state_restores_initial_values(case: Case) -> None:
    module = case.build()
    initial = module.initialize_state(B)
    state = initial
    for x in _xs(case):
        state = module(state, x).next_state
    reset = module.reset_state(state)
    assert _signature(reset) == _signature(initial)
    flat_reset = jax.tree_util.tree_flatten_with_path(reset)[0]
    flat_initial = jax.tree.leaves(initial)
    flat_before = jax.tree.leaves(state)
    for (path, got), want, before in zip(flat_reset, flat_initial, flat_before, strict=True):
        if _is_noise_key(path):
            # Per-env noise keys are re-derived for the next episode: fresh, not reused.
            assert not np.array_equal(got, before), jax.tree_util.keystr(path)
        else:
            np.testing.assert_allclose(got, want, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_replaying_extras_reproduces_the_step(case: Case) -> None:
    module = case.build()
    state = module.initialize_state(B)
    for x in _xs(case):
        out = module(state, x)
        replay = module(state, x, out.rollout_extras)
        _assert_close(replay, out)
        if case.container:
            # Containers route extras exactly like their carry: a list of the same
            # length, or a dict with the same keys.
            if isinstance(state, Mapping):
                assert set(out.rollout_extras) == set(state)
            else:
                assert isinstance(out.rollout_extras, list | tuple)
                assert len(out.rollout_extras) == len(state)
        state = out.next_state


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vmap_over_environments_matches_the_batched_call(case: Case) -> None:
    module = case.build()
    state = module.initialize_state(B)
    x = case.inputs(jax.random.key(0))
    # Replay mode, so that samplers are deterministic; each row keeps a batch axis of 1.
    batched = module(state, x, module(state, x).rollout_extras)
    extras = batched.rollout_extras
    rows = lambda tree: jax.tree.map(lambda a: a[:, None], tree)
    unrows = lambda tree: jax.tree.map(lambda a: a[:, 0], tree)
    per_row = jax.vmap(lambda s, x, e: module(s, x, e))(rows(state), rows(x), rows(extras))
    _assert_close(unrows(per_row.output), batched.output)
    _assert_close(unrows(per_row.next_state), batched.next_state)
    _assert_close(unrows(per_row.rollout_extras), batched.rollout_extras)
    reg = np.broadcast_to(np.asarray(batched.regularization_loss), (B,))
    np.testing.assert_allclose(
        np.broadcast_to(per_row.regularization_loss.reshape(B, -1), (B, 1))[:, 0],
        reg,
        rtol=1e-5,
        atol=1e-6,
    )
    # Metrics are batch means: the mean of the per-row means is the batch's. Recorded
    # activations (nnx_ppo.networks.recording) are per sample: rows of the batch's.
    row_metrics, row_acts = _split_activations(per_row.metrics)
    metrics, acts = _split_activations(batched.metrics)
    _assert_close(jax.tree.map(lambda m: m.mean(0), row_metrics), metrics)
    _assert_close(unrows(row_acts), acts)


def _split_activations(metrics: Any) -> tuple[Any, Any]:
    """``(metrics without ACTIVATION_KEY entries, those entries)``, both nested dicts."""
    if not isinstance(metrics, Mapping):
        return metrics, {}
    rest, acts = {}, {}
    for key, value in metrics.items():
        if key == ACTIVATION_KEY:
            acts[key] = value
            continue
        rest[key], sub = _split_activations(value)
        if sub:
            acts[key] = sub
    return rest, acts
