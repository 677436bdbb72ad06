"""Tests for `Conv` and `ConvEncoder` (nnx_ppo.networks.conv).

The module properties every module must have (jit, carry, reset, extras, vmap) are
checked in test_properties.py; here: hand-derived convolutions, output sizes, the one
dtype conversion, validation messages, and a pixel policy end to end (a dict
observation with an image and a vector, an LSTM, PPOAdapter): replay, recording and
export parity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Concat, Sequential
from nnx_ppo.networks.conv import Conv, ConvEncoder
from nnx_ppo.networks.export import DeterministicPolicy, export_policy, load_stablehlo
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recording import extract_activations, with_recording
from nnx_ppo.networks.recurrent import LSTM
from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler

IMAGE = (6, 5, 2)  # H, W, C: not square, so a swapped axis shows


def _ones_conv(kernel: int, strides: int, padding: str) -> Conv:
    return Conv(
        1,
        1,
        kernel,
        rngs=nnx.Rngs(0),
        strides=strides,
        padding=padding,  # type: ignore[arg-type]
        kernel_init=nnx.initializers.ones,
    )


# ----------------------------------------------------------------------------- Conv


def test_conv_of_ones_by_hand() -> None:
    x = jnp.ones((1, 3, 3, 1))
    # VALID, 2x2 kernel of ones, stride 1: every output sums a full 2x2 window -> 4.
    valid = _ones_conv(2, 1, "VALID")((), x).output
    np.testing.assert_array_equal(valid[0, :, :, 0], [[4.0, 4.0], [4.0, 4.0]])
    # SAME, stride 2: outputs at rows/cols 0 and 2 (ceil(3 / 2) = 2). A 2-wide kernel is
    # padded after the input (XLA puts the odd padding at the end), so the window at 2
    # covers row 2 and a zero row: 2 * 2 = 4, 2 * 1 = 2, 1 * 1 = 1.
    same = _ones_conv(2, 2, "SAME")((), x).output
    np.testing.assert_array_equal(same[0, :, :, 0], [[4.0, 2.0], [2.0, 1.0]])


@pytest.mark.parametrize(
    ("kernel", "strides", "padding", "hw", "want"),
    [
        (3, 1, "SAME", (6, 5), (6, 5)),
        (3, 2, "SAME", (6, 5), (3, 3)),  # ceil(6/2), ceil(5/2)
        (3, 1, "VALID", (6, 5), (4, 3)),  # 6-3+1, 5-3+1
        ((4, 2), (2, 3), "VALID", (6, 5), (2, 2)),  # (6-4)//2+1, (5-2)//3+1
        (8, 4, "VALID", (84, 84), (20, 20)),  # Nature DQN's first layer
    ],
)
def test_conv_output_size_is_the_output_shape(
    kernel: Any, strides: Any, padding: str, hw: tuple[int, int], want: tuple[int, int]
) -> None:
    conv = Conv(2, 3, kernel, rngs=nnx.Rngs(0), strides=strides, padding=padding)  # type: ignore[arg-type]
    assert conv.output_size(*hw) == want
    assert conv((), jnp.zeros((1, *hw, 2))).output.shape == (1, *want, 3)


def test_conv_errors_name_the_argument() -> None:
    rngs = nnx.Rngs(0)
    with pytest.raises(ValueError, match=r"Conv: strides must be positive, got 0"):
        Conv(2, 3, 3, rngs=rngs, strides=0)
    with pytest.raises(ValueError, match=r"Conv: kernel_size must be positive, got \(3, -1\)"):
        Conv(2, 3, (3, -1), rngs=rngs)
    with pytest.raises(TypeError, match=r"Conv: kernel_size must be a positive int or a pair"):
        Conv(2, 3, 2.5, rngs=rngs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"padding must be 'SAME' or 'VALID', got 'FULL'"):
        Conv(2, 3, 3, rngs=rngs, padding="FULL")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Conv: activation must be a callable"):
        Conv(2, 3, 3, rngs=rngs, activation="relu")  # type: ignore[arg-type]
    conv = Conv(2, 3, 4, rngs=rngs, padding="VALID")
    with pytest.raises(ValueError, match=r"last axis must be in_features=2 channels"):
        conv((), jnp.zeros((1, 6, 6, 3)))
    with pytest.raises(ValueError, match=r"batch of NHWC images \[B, H, W, 2\], got shape"):
        conv((), jnp.zeros((6, 6, 2)))
    with pytest.raises(ValueError, match=r"kernel \(4 along the width\) is larger than the input"):
        conv((), jnp.zeros((1, 6, 3, 2)))


# ----------------------------------------------------------------------------- ConvEncoder


def test_presets_have_the_published_shapes() -> None:
    rngs = nnx.Rngs(0)
    minatar = ConvEncoder.minatar((10, 10, 4), rngs)
    # 3x3 VALID conv on 10x10: 8x8x16 = 1024 features, then dense 128.
    assert minatar.conv_output_shape == (8, 8, 16)
    assert [layer.linear.in_features for layer in minatar.dense] == [1024]
    assert minatar.out_features == 128
    nature = ConvEncoder.nature_dqn(rngs=rngs)  # Atari's 84x84x4 frame stack
    # 84 -(8/4)-> 20 -(4/2)-> 9 -(3/1)-> 7: 7x7x64 = 3136 features, then dense 512.
    assert [c.kernel_size for c in nature.convs] == [(8, 8), (4, 4), (3, 3)]
    assert [c.strides for c in nature.convs] == [(4, 4), (2, 2), (1, 1)]
    assert nature.conv_output_shape == (7, 7, 64)
    assert nature.out_features == 512 and nature.scale == pytest.approx(1 / 255)
    out = jax.eval_shape(lambda x: nature((), x).output, jnp.zeros((2, 84, 84, 4), jnp.uint8))
    assert out.shape == (2, 512) and out.dtype == jnp.float32
    # Overrides replace the preset's values.
    assert ConvEncoder.minatar((10, 10, 4), rngs, dense=None).out_features == 1024


def test_out_features_sizes_the_next_layer() -> None:
    rngs = nnx.Rngs(0)
    encoder = ConvEncoder(
        IMAGE, rngs, channels=(4, 3), kernel_sizes=[3, (2, 1)], strides=[2, 1], padding="VALID"
    )
    # (6, 5) -(3, s2)-> (2, 2) -(2x1)-> (1, 2); 1 * 2 * 3 = 6 features, no head.
    assert encoder.conv_output_shape == (1, 2, 3)
    assert encoder.out_features == 6
    head = Dense(encoder.out_features, 2, rngs=rngs)
    out = head((), encoder((), jnp.ones((4, *IMAGE))).output).output
    assert out.shape == (4, 2)


def test_one_conversion_bool_and_uint8_images() -> None:
    rngs = nnx.Rngs(0)
    encoder = ConvEncoder(IMAGE, rngs, channels=(3,), kernel_sizes=3, dense=(5,))
    key = jax.random.key(0)
    grid = jax.random.bernoulli(key, 0.3, (4, *IMAGE))
    as_float = encoder((), grid.astype(jnp.float32)).output
    np.testing.assert_array_equal(encoder((), grid).output, as_float)
    np.testing.assert_array_equal(encoder((), grid.astype(jnp.int32)).output, as_float)
    # uint8 frames with scale=1/255 are the float frames divided by 255.
    scaled = ConvEncoder(IMAGE, nnx.Rngs(0), channels=(3,), kernel_sizes=3, scale=1 / 255)
    plain = ConvEncoder(IMAGE, nnx.Rngs(0), channels=(3,), kernel_sizes=3)
    frames = jax.random.randint(key, (4, *IMAGE), 0, 256).astype(jnp.uint8)
    np.testing.assert_allclose(
        scaled((), frames).output,
        plain((), frames.astype(jnp.float32) / 255.0).output,
        rtol=1e-6,
        atol=1e-6,
    )
    # A float image keeps its dtype (no silent up- or down-cast of float inputs).
    half = encoder._image(grid.astype(jnp.bfloat16))
    assert half.dtype == jnp.bfloat16


def test_flattened_images_equal_nhwc_images() -> None:
    encoder = ConvEncoder(IMAGE, nnx.Rngs(0), channels=(3,), kernel_sizes=2, dense=(4,))
    images = jax.random.normal(jax.random.key(1), (3, *IMAGE))
    np.testing.assert_array_equal(
        encoder((), images.reshape(3, -1)).output, encoder((), images).output
    )


def test_activate_final() -> None:
    x = jax.random.normal(jax.random.key(2), (8, *IMAGE))
    relu = ConvEncoder(IMAGE, nnx.Rngs(0), channels=(3,), kernel_sizes=3, dense=(6,))
    linear = ConvEncoder(
        IMAGE, nnx.Rngs(0), channels=(3,), kernel_sizes=3, dense=(6,), activate_final=False
    )
    out_linear = linear((), x).output
    assert np.any(out_linear < 0)  # the last layer is linear
    np.testing.assert_allclose(relu((), x).output, jax.nn.relu(out_linear), rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"input_shape": (6, 5)}, TypeError, r"input_shape must be the shape of one image"),
        ({"input_shape": (6, 0, 2)}, ValueError, r"input_shape\[1\] must be a positive int"),
        ({"channels": ()}, ValueError, r"channels is empty"),
        ({"channels": 16}, TypeError, r"channels must be a sequence of positive ints"),
        ({"strides": 0}, ValueError, r"strides\[0\] must be positive, got 0"),
        ({"strides": (1, 2)}, ValueError, r"strides must be one value for every layer.*got"),
        ({"kernel_sizes": [7], "padding": "VALID"}, ValueError, r"conv layer 0 gets a 6x5"),
        ({"padding": ["SAME", "valid?"]}, ValueError, r"padding must be one value"),
        ({"padding": "same?"}, ValueError, r"padding\[0\] must be 'SAME' or 'VALID'"),
        ({"dense": 128}, TypeError, r"dense must be None or a sequence"),
        ({"dense": (0,)}, ValueError, r"dense\[0\] must be a positive int"),
        ({"scale": 0.0}, ValueError, r"scale must be finite and non-zero"),
        ({"scale": True}, TypeError, r"scale must be a number or None"),
    ],
)
def test_encoder_construction_errors(kwargs: dict[str, Any], error: type, match: str) -> None:
    args = {"input_shape": IMAGE, "channels": (4,), "kernel_sizes": 3, **kwargs}
    with pytest.raises(error, match=r"ConvEncoder: " + match):
        ConvEncoder(args.pop("input_shape"), nnx.Rngs(0), **args)


def test_encoder_input_errors_name_the_expected_shape() -> None:
    encoder = ConvEncoder(IMAGE, nnx.Rngs(0), channels=(3,), kernel_sizes=3)
    for bad in [(2, 5, 6, 2), (2, 6, 5, 3), (2, 2, 6, 5), (6, 5, 2), (2, 59)]:
        with pytest.raises(ValueError, match=r"images \[B, 6, 5, 2\].*or images flattened to"):
            encoder((), jnp.zeros(bad))


def test_normalizer_converts_bool_images_too() -> None:
    # The Normalizer casts its input to float32 as well (a bool grid normalizes like 0/1).
    norm = Normalizer(IMAGE)
    grid = jax.random.bernoulli(jax.random.key(3), 0.5, (2, 4, *IMAGE))
    norm.update_statistics(grid)
    want = Normalizer(IMAGE)
    want.update_statistics(grid.astype(jnp.float32))
    out = norm((), grid[0]).output
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, want((), grid[0].astype(jnp.float32)).output)


# ----------------------------------------------------------------------------- a pixel policy

B, T = 3, 12
OBS_SPEC = {
    "image": jax.ShapeDtypeStruct(IMAGE, jnp.uint8),
    "proprio": jax.ShapeDtypeStruct((3,), jnp.float32),
}


def _pixel_policy(categorical: bool = False) -> Sequential:
    """image -> ConvEncoder, proprio -> MLP, concatenated, an LSTM, then the heads."""
    rngs = nnx.Rngs(7)
    encoder = ConvEncoder(
        IMAGE, rngs, channels=(4, 4), kernel_sizes=3, strides=[1, 2], dense=(8,), scale=1 / 255
    )
    features = encoder.out_features + 4
    sampler = CategoricalSampler(rngs) if categorical else NormalTanhSampler(rngs)
    return Sequential(
        [
            Concat(image=encoder, proprio=MLP(3, (), 4, rngs=rngs, activate_final=True)),
            LSTM(features, 6, rngs=rngs),
            PPOAdapter(
                action=Sequential([Dense(6, 3 if categorical else 4, rngs=rngs), sampler]),
                value=Dense(6, 1, rngs=rngs),
            ),
        ]
    )


def _observations(seed: int, steps: int = T) -> dict[str, jax.Array]:
    key_i, key_p = jax.random.split(jax.random.key(seed))
    return {
        "image": jax.random.randint(key_i, (steps, B, *IMAGE), 0, 256).astype(jnp.uint8),
        "proprio": jax.random.normal(key_p, (steps, B, 3)),
    }


def _done(steps: int = T) -> jax.Array:
    # Env b ends an episode at steps t with (t + 2 b) % 5 == 4: staggered resets.
    t = np.arange(steps)[:, None]
    return jnp.asarray((t + 2 * np.arange(B)[None]) % 5 == 4)


def _rollout(collect: Any, graphdef: Any, params: Any, obs: Any, done: jax.Array) -> Any:
    """``(rollout_extras, outputs)`` of T steps from the initial carry (``collect``: the
    conftest's, the carry reset where ``done``, the sampler's RNG stream threaded)."""
    carry0 = nnx.merge(graphdef, params).initialize_state(B)
    outputs = jax.jit(collect, static_argnums=0)(graphdef, params, carry0, obs, done)[1]
    return outputs.rollout_extras, outputs.output


def test_pixel_policy_replays_its_rollout_exactly(testing_modules: Any) -> None:
    network = _pixel_policy(categorical=True)
    graphdef, params = nnx.split(network)
    obs, done = _observations(0), _done()
    extras, rolled = _rollout(testing_modules.collect, graphdef, params, obs, done)
    assert rolled.actions.shape == rolled.value_estimates.shape == (T, B)

    @jax.jit
    def replay(params: Any) -> Any:
        model = nnx.merge(graphdef, params)
        return model.replay_sequence(model.initialize_state(B), obs, extras, done)[1].output

    replayed = replay(params)
    # Likelihood ratio 1 at every step (the conv runs once over [T * B] images here).
    np.testing.assert_array_equal(replayed.actions, rolled.actions)
    np.testing.assert_allclose(
        np.exp(replayed.loglikelihoods - rolled.loglikelihoods), 1.0, rtol=1e-5
    )
    np.testing.assert_allclose(
        replayed.value_estimates, rolled.value_estimates, rtol=1e-5, atol=1e-6
    )


def test_pixel_policy_recording_has_the_encoder_features() -> None:
    network = _pixel_policy()
    graphdef, params = nnx.split(with_recording(network))
    obs = jax.tree.map(lambda x: x[0], _observations(1, steps=1))
    state = network.initialize_state(B)

    @jax.jit
    def call(params: Any) -> Any:
        return nnx.merge(graphdef, params)(state, obs)

    out = call(params)
    acts = extract_activations(out.metrics)
    # Sequential position 0 is the Concat; its "image" port is the encoder (a leaf).
    want = network.layers[0].components["image"]((), obs["image"]).output
    assert acts[0]["image"].shape == (B, 8)
    np.testing.assert_allclose(acts[0]["image"], want, rtol=1e-5, atol=1e-6)


def _reference_actions(collect: Any, network: Any, obs: Any, done: jax.Array) -> jax.Array:
    network.eval()
    graphdef, params = nnx.split(network)
    network.train()
    return _rollout(collect, graphdef, params, obs, done)[1].actions


def _run_artefact(
    helpers: Any, step: Any, reset: Any, manifest: dict, obs: Any, done: jax.Array
) -> np.ndarray:
    """Step an artefact with nothing but its manifest (``helpers``: ``testing_modules``)."""
    carry = helpers.artefact_initial_carry(manifest, reset, B)
    names = manifest["observation"]  # sorted keys: image, proprio
    actions = []
    for t in range(done.shape[0]):
        leaves = [np.asarray(obs["image"][t]), np.asarray(obs["proprio"][t])]
        out = step({**dict(zip(names, leaves, strict=True)), **carry})
        carry = helpers.artefact_carry(manifest, out)
        carry = helpers.artefact_carry(manifest, reset({**carry, "done": np.asarray(done[t])}))
        actions.append(out[manifest["action"][0]])
    return np.stack(actions)


@pytest.fixture(scope="module")
def pixel_export(
    tmp_path_factory: pytest.TempPathFactory, testing_modules: Any
) -> tuple[Any, Any, Any, Path, Path]:
    network = _pixel_policy()
    obs, done = _observations(2, steps=40), _done(40)
    want = _reference_actions(testing_modules.collect, network, obs, done)
    policy = DeterministicPolicy(network, OBS_SPEC)
    return policy, obs, done, want, tmp_path_factory.mktemp("pixel")


def test_pixel_policy_stablehlo_parity(pixel_export: tuple, testing_modules: Any) -> None:
    pytest.importorskip("flatbuffers")
    policy, obs, done, want, tmp = pixel_export
    # The artefact takes the compact uint8 image; the conversion is inside it.
    inputs = policy.signature()["step"]["inputs"]
    assert [(s.name, s.dtype) for s in inputs[:2]] == [
        (policy.observation_names[0], "uint8"),
        (policy.observation_names[1], "float32"),
    ]
    loaded = load_stablehlo(export_policy(policy, None, tmp / "hlo", format="stablehlo"))
    got = _run_artefact(testing_modules, loaded.step, loaded.reset, loaded.manifest, obs, done)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_pixel_policy_onnx_parity(pixel_export: tuple, testing_modules: Any) -> None:
    pytest.importorskip("jax2onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    from nnx_ppo.networks.export import read_manifest

    policy, obs, done, want, tmp = pixel_export
    out = export_policy(policy, None, tmp / "onnx", format="onnx")
    manifest = read_manifest(out)

    def caller(path: Path) -> Any:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda inputs: dict(zip(names, session.run(None, inputs), strict=True))

    step, reset = caller(out / "step.onnx"), caller(out / "reset.onnx")
    got = _run_artefact(testing_modules, step, reset, manifest, obs, done)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
