"""Export of a PPO network around a graph with leaky and sign-constrained populations.

`DeterministicPolicy` and the StableHLO artefact (``nnx_ppo.networks.export`` in
nnx-modules) step on the same observations as the network in ``eval()`` mode with
``reset_where``, feeding back their own carry (the leaky activity among it) and
resetting it where episodes end; the actions must agree.
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
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.export import DeterministicPolicy, export_policy, load_stablehlo
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import reset_where
from nnx_ppo.networks.utils import Filter, Map

B, T = 3, 12
SPEC = {"obs": 3}


def _done(t: int) -> np.ndarray:
    """Staggered episode ends: env b ends an episode when (t + 2 b) % 5 == 4."""
    return np.array([(t + 2 * b) % 5 == 4 for b in range(B)])


@pytest.fixture(scope="module")
def rollout() -> tuple[Any, list[Any], list[Any]]:
    rngs = nnx.Rngs(0)
    g = PopulationGraph(rngs, dt=0.1)
    g.add_input("obs", size=3, input_from="obs", sign="excitatory")
    g.add_population("e", size=6, activation=nnx.relu, tau=0.3, learn_tau=True, sign="excitatory")
    g.add_population("i", size=4, activation=nnx.relu, tau=0.2, sign="inhibitory")
    g.add_output("action_params", size=4)
    g.add_output("value", size=1)
    g.connect("obs", "e")
    g.connect("e", "i")
    g.connect("i", "e", delay=1)
    g.connect("e", "action_params")
    g.connect("i", "action_params")
    g.connect("e", "value")
    g.finalize()
    network = Sequential(
        [
            Normalizer(SPEC),
            g,
            PPOAdapter(
                action=Map({"action_params": NormalTanhSampler(rngs)}),
                value=Filter("value"),
            ),
        ]
    )
    network.eval()

    @jax.jit
    def step(carry: Any, obs: Any, done: jax.Array) -> Any:
        out = network(carry, obs)
        return reset_where(network, done, out.next_state), out.output.actions

    keys = jax.random.split(jax.random.key(1), T)
    observations = [{"obs": 2.0 * jax.random.normal(k, (B, 3))} for k in keys]
    carry, actions = network.initialize_state(B), []
    for t, obs in enumerate(observations):
        carry, action = step(carry, obs, jnp.asarray(_done(t)))
        actions.append(action)
    return network, observations, actions


def _close(got: list[Any], want: list[Any]) -> None:
    for t, (a, b) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5, rtol=0, err_msg=f"step {t}")


def test_deterministic_policy_reproduces_the_network(rollout):
    network, observations, want = rollout
    policy = DeterministicPolicy(network, SPEC)
    # The leaky activity travels in the exported carry, next to the delay buffer.
    assert {"carry/1/activity/e", "carry/1/activity/i", "carry/1/buffers/i"} <= set(
        policy.carry_names
    )
    step, reset = jax.jit(policy.step), jax.jit(policy.reset)
    carry, got = policy.initial_carry(B), []
    for t, obs in enumerate(observations):
        carry, action = step(carry, obs)
        carry = reset(carry, jnp.asarray(_done(t)))
        got.append(action)
    _close(got, want)
    assert float(np.abs(np.stack([a["action_params"] for a in want])).max()) > 0.1


def test_stablehlo_artefact_reproduces_the_network(rollout, tmp_path: Path):
    pytest.importorskip("flatbuffers")  # jax.export's serializer
    network, observations, want = rollout
    loaded = load_stablehlo(export_policy(network, SPEC, tmp_path / "art", format="stablehlo"))
    manifest = loaded.manifest
    # Start as a runtime would, from the manifest alone: reset(zeros, done=True).
    zeros = {
        t["name"]: np.zeros((B, *t["shape"][1:]), t["dtype"])
        for t in manifest["reset"]["inputs"]
        if t["name"] != "done"
    }
    out = loaded.reset({**zeros, "done": np.ones((B,), bool)})
    carry = {c["input"]: out[c["output"]] for c in manifest["carry"]}
    got = []
    for t, obs in enumerate(observations):
        out = loaded.step({"obs/obs": np.asarray(obs["obs"]), **carry})
        carry = {c["input"]: out[c["output"]] for c in manifest["carry"]}
        out_reset = loaded.reset({**carry, "done": _done(t)})
        carry = {c["input"]: out_reset[c["output"]] for c in manifest["carry"]}
        got.append({"action_params": out[manifest["action"][0]]})
    _close(got, want)
