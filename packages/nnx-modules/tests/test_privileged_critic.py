"""Separate actor and critic observations (``actor_obs`` / ``critic_obs``): the layout,
the actor's independence from critic-only keys, the errors, and an exported policy whose
inputs are the actor's keys only (StableHLO and ONNX)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.actor_critic import ActorCriticPorts, assemble_actor_critic
from nnx_ppo.networks.export import (
    DeterministicPolicy,
    export_policy,
    load_stablehlo,
    read_manifest,
)
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.normalizer import Normalizer

SIZES = {"state": 3, "privileged_state": 4}
B = 5


def _obs(seed: int) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {
        "state": jax.random.normal(k1, (B, 3)),
        "privileged_state": jax.random.normal(k2, (B, 4)),
    }


@pytest.fixture(scope="module")
def network() -> Any:
    net = make_mlp_actor_critic(
        SIZES,
        2,
        (8,),
        (8,),
        rngs=nnx.Rngs(0),
        actor_obs="state",
        critic_obs=("state", "privileged_state"),
    )
    norm = net.layers[0]  # non-trivial statistics, so the normalizer is exercised
    data = {k: 2.0 + 3.0 * v[None] for k, v in _obs(9).items()}
    norm.update_statistics(data)
    return net


def test_layout_and_widths(network: Any) -> None:
    norm, adapter = network.layers
    assert isinstance(norm, Normalizer)
    action_mlp, value_mlp = adapter.action.layers[2], adapter.value.layers[2]
    assert action_mlp.in_features == 3 and value_mlp.in_features == 7
    out = network(network.initialize_state(B), _obs(0)).output
    assert out.actions.shape == (B, 2) and out.value_estimates.shape == (B,)


def test_actor_never_reads_the_critic_only_key(network: Any) -> None:
    network.eval()
    try:
        obs = _obs(0)
        other = {**obs, "privileged_state": obs["privileged_state"] + 5.0}
        a = network(network.initialize_state(B), obs).output
        b = network(network.initialize_state(B), other).output
    finally:
        network.train()
    np.testing.assert_array_equal(np.asarray(a.actions), np.asarray(b.actions))
    assert not np.allclose(np.asarray(a.value_estimates), np.asarray(b.value_estimates))


def test_lstm_ports_read_their_own_keys() -> None:
    net = make_lstm_actor_critic(
        SIZES, 2, 4, (8,), (8,), rngs=nnx.Rngs(1), actor_obs="state", critic_obs="privileged_state"
    )
    adapter = net.layers[-1]
    assert adapter.action.layers[2].in_features == 3  # select, flatten, LSTM
    assert adapter.value.layers[2].in_features == 4


def test_errors_name_the_key_and_the_available_ones() -> None:
    with pytest.raises(
        ValueError,
        match=r"critic_obs=\('state', 'priv'\).*\['priv'\].*\['privileged_state', 'state'\]",
    ):
        make_mlp_actor_critic(SIZES, 2, rngs=nnx.Rngs(0), critic_obs=("state", "priv"))
    with pytest.raises(ValueError, match=r"obs_size=7 is not a dict"):
        make_mlp_actor_critic(7, 2, rngs=nnx.Rngs(0), actor_obs="state")
    with pytest.raises(ValueError, match=r"shared_lstm=True.*actor_obs='state'"):
        make_lstm_actor_critic(SIZES, 2, 4, rngs=nnx.Rngs(0), shared_lstm=True, actor_obs="state")
    with pytest.raises(TypeError, match=r"actor_obs=3 must be a key"):
        make_mlp_actor_critic(SIZES, 2, rngs=nnx.Rngs(0), actor_obs=3)  # type: ignore[arg-type]

    rngs = nnx.Rngs(0)

    def ports(features: int, action_params: int) -> ActorCriticPorts:
        return ActorCriticPorts(Dense(features, action_params, rngs), Dense(features, 1, rngs))

    with pytest.raises(TypeError, match=r"add the keyword value_features"):
        assemble_actor_critic(ports, SIZES, 2, rngs=rngs, actor_obs="state")


def test_policy_takes_the_actor_keys_only(network: Any) -> None:
    policy = DeterministicPolicy(network, SIZES)
    assert policy.observation_names == ("obs/state",)
    assert policy.unused_observation_names == ("obs/privileged_state",)
    obs = _obs(2)
    _, full = policy.step({}, obs)
    _, actor_only = policy.step({}, {"state": obs["state"]})
    np.testing.assert_array_equal(np.asarray(full), np.asarray(actor_only))
    network.eval()
    try:
        want = network(network.initialize_state(B), obs).output.actions
    finally:
        network.train()
    np.testing.assert_allclose(np.asarray(full), np.asarray(want), atol=1e-6)
    with pytest.raises(ValueError, match=r"no 'obs/state'.*\['obs/state'\]"):
        policy.step({}, {"privileged_state": obs["privileged_state"]})
    # the value needs the critic's keys: then both are inputs
    with_value = DeterministicPolicy(network, SIZES, include_value=True)
    assert with_value.observation_names == ("obs/privileged_state", "obs/state")


def test_stablehlo_artefact_has_no_critic_input(network: Any, tmp_path: Path) -> None:
    pytest.importorskip("flatbuffers")
    policy = DeterministicPolicy(network, SIZES)
    out = export_policy(policy, None, tmp_path / "art", format="stablehlo")
    manifest = read_manifest(out)
    assert manifest["observation"] == ["obs/state"]
    assert [t["name"] for t in manifest["step"]["inputs"]] == ["obs/state"]
    obs = _obs(3)
    got = load_stablehlo(out).step({"obs/state": np.asarray(obs["state"])})
    _, want = policy.step({}, obs)
    np.testing.assert_allclose(got["action"], np.asarray(want), atol=1e-5)


def test_onnx_graph_has_no_critic_input(network: Any, tmp_path: Path) -> None:
    pytest.importorskip("jax2onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    policy = DeterministicPolicy(network, SIZES)
    out = export_policy(policy, None, tmp_path / "art", format="onnx")
    session = onnxruntime.InferenceSession(
        str(out / "step.onnx"), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == ["obs/state"]
    obs = _obs(4)
    (got,) = session.run(None, {"obs/state": np.asarray(obs["state"])})
    _, want = policy.step({}, obs)
    np.testing.assert_allclose(got, np.asarray(want), atol=1e-5)
