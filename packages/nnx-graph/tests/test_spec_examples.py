"""The code of spec/graph-networks.rst, verbatim, plus graphs inside a PPO network.

The two code blocks of the worked example are copied unchanged (they must run as
published); the body-part graph uses the spec's ``connect(..., reciprocal=True)`` lines
unchanged. Replay consistency: a network whose graph has stateful connections (LSTM,
Delay, VariationalBottleneck) replays a rollout with likelihood ratio exactly 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.networks.types import PPONetworkOutput, reset_where

B = 3


def test_worked_example_and_wrapping_produce_the_documented_shapes():
    # --- spec: "A worked example" (verbatim) ------------------------------------------
    # fmt: off
    # isort: off
    from flax import nnx
    from nnx_ppo.networks.graph import PopulationGraph
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.sampling_layers import NormalTanhSampler
    # isort: on

    rngs = nnx.Rngs(0)

    OBS, H, A = 8, 32, 2

    g = PopulationGraph(rngs)

    # Input population: reads obs["x"]. Same size as obs["x"].
    g.add_input("in_x", size=OBS, input_from="x")

    # Recurrent hidden population: sum-integrates input + own delayed
    # output, passes the sum through swish.
    g.add_population("hidden", size=H, activation=nnx.swish)
    g.connect("in_x", "hidden")                  # default Dense(OBS, H)
    g.connect("hidden", "hidden", delay=1)       # delayed self-loop

    # Output populations: action-params head and value head, each
    # exposed in the graph's forward output under its own name.
    g.add_output("action_params", size=2 * A)
    g.connect("hidden", "action_params")         # default Dense(H, 2A)

    g.add_output("value", size=1)
    g.connect("hidden", "value")                 # default Dense(H, 1)

    g.finalize()
    # fmt: on
    # --- end of the first block --------------------------------------------------------

    obs = {"x": jax.random.normal(jax.random.key(1), (B, OBS))}
    graph_out = g(g.initialize_state(B), obs)
    assert jax.tree.map(jnp.shape, graph_out.output) == {
        "action_params": (B, 2 * A),
        "value": (B, 1),
    }

    # --- spec: "Wrap with normalization and the adapter" (verbatim) --------------------
    # fmt: off
    from nnx_ppo.networks.utils import Filter, Map

    sampler = NormalTanhSampler(rngs, entropy_weight=1e-2)
    nets = Sequential([
        Normalizer({"x": OBS}),
        g,                                  # emits {"action_params": ..., "value": ...}
        PPOAdapter(
            # Each port sees the graph's full dict and picks what it needs.
            # `Map` dispatches per key and drops keys it doesn't consume.
            action=Map({"action_params": sampler}),
            value=Filter({"value": "value"}),
        ),
    ])
    # fmt: on
    # --- end of the second block -------------------------------------------------------

    out = nets(nets.initialize_state(B), obs)
    assert isinstance(out.output, PPONetworkOutput)
    assert jax.tree.map(jnp.shape, out.output.actions) == {"action_params": (B, A)}
    assert jax.tree.map(jnp.shape, out.output.loglikelihoods) == {"action_params": (B,)}
    assert jax.tree.map(jnp.shape, out.output.value_estimates) == {"value": (B,)}
    # tanh-squashed actions lie in (-1, 1).
    assert bool(jnp.all(jnp.abs(out.output.actions["action_params"]) < 1))


def _body_graph(**kwargs):
    from nnx_ppo.networks.graph import PopulationGraph

    g = PopulationGraph(nnx.Rngs(0), **kwargs)
    for part in ("hand_L", "arm_L", "torso", "hand_R", "arm_R"):
        g.add_input(part, size=6, input_from=part, activation=nnx.tanh)
    g.add_population("root", size=16, activation=nnx.tanh)
    g.add_output("action", size=4)
    g.add_output("value", size=1)
    # --- spec: "What you'd build next" (verbatim lines) --------------------------------
    # fmt: off
    g.connect("hand_L", "arm_L", delay=1, reciprocal=True)
    g.connect("arm_L",  "root",  delay=1, reciprocal=True)
    g.connect("torso",  "root",  delay=1, reciprocal=True)
    # fmt: on
    # --- end ---------------------------------------------------------------------------
    g.connect("hand_R", "arm_R", delay=1, reciprocal=True)
    g.connect("arm_R", "root", delay=1, reciprocal=True)
    g.connect("root", "action")
    g.connect("root", "value")
    g.finalize()
    return g


def test_body_part_graph_with_reciprocal_delays_builds_jits_and_runs():
    g = _body_graph(record_populations=True)
    assert len(g.populations) == 8
    # reciprocal=True made two connections per call, each with its own Dense.
    assert {"hand_L->arm_L@1", "arm_L->hand_L@1", "root->torso@1"} <= set(g.transforms)
    assert g.transforms["hand_L->arm_L@1"] is not g.transforms["arm_L->hand_L@1"]
    assert len(g.connections) == 12
    graphdef, params = nnx.split(g)
    parts = ("hand_L", "arm_L", "torso", "hand_R", "arm_R")
    T = 5

    @jax.jit
    def rollout(params, xs):
        def body(state, obs):
            out = nnx.merge(graphdef, params)(state, obs)
            return out.next_state, (out.output, out.metrics["populations"]["root"])

        return jax.lax.scan(body, g.initialize_state(B), xs)[1]

    xs = {p: jax.random.normal(jax.random.key(i), (T, B, 6)) for i, p in enumerate(parts)}
    (outputs, root) = rollout(params, xs)
    assert outputs["action"].shape == (T, B, 4) and outputs["value"].shape == (T, B, 1)
    assert bool(jnp.all(jnp.isfinite(outputs["action"])))
    # A change of obs["hand_L"] at step 0 reaches root through hand_L -> arm_L (delay 1)
    # and arm_L -> root (delay 1): root is unchanged at steps 0 and 1, changed at 2.
    xs2 = dict(xs, hand_L=xs["hand_L"].at[0].add(1.0))
    _, root2 = rollout(params, xs2)
    np.testing.assert_array_equal(root2[:2], root[:2])
    assert float(jnp.abs(root2[2] - root[2]).max()) > 1e-4


def _stateful_network():
    """Normalizer -> graph with LSTM / Delay / VariationalBottleneck edges -> adapter."""
    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.delay import Delay
    from nnx_ppo.networks.graph import PopulationGraph
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.recurrent import LSTM
    from nnx_ppo.networks.sampling_layers import NormalTanhSampler
    from nnx_ppo.networks.utils import Filter, Map
    from nnx_ppo.networks.variational import VariationalBottleneck

    rngs = nnx.Rngs(0)
    OBS, H, A = 5, 8, 2
    g = PopulationGraph(rngs)
    g.add_input("in_x", size=OBS, input_from="x")
    g.add_population("hidden", size=H, activation=nnx.tanh)
    g.add_population("latent", size=4)
    g.add_population("lagged", size=H)
    g.add_output("action_params", size=2 * A)
    g.add_output("value", size=1)
    g.connect("in_x", "hidden", transform=LSTM(OBS, H, rngs=rngs))
    g.connect("hidden", "hidden", delay=1)
    g.connect("hidden", "latent", transform=VariationalBottleneck(H, 4, rngs=rngs))
    g.connect("hidden", "lagged", transform=Delay(jnp.zeros(H), 2))
    g.connect("latent", "action_params")
    g.connect("lagged", "action_params", delay=1)
    g.connect("hidden", "value")
    g.finalize()
    nets = Sequential([
        Normalizer({"x": OBS}),
        g,
        PPOAdapter(
            action=Map({"action_params": NormalTanhSampler(rngs, entropy_weight=1e-2)}),
            value=Filter({"value": "value"}),
        ),
    ])  # fmt: skip
    return nets, g, OBS


def test_replay_reproduces_the_rollout_with_stateful_connections():
    nets, g, OBS = _stateful_network()
    T = 6
    xs = {"x": 3.0 * jax.random.normal(jax.random.key(2), (T, B, OBS)) + 1.0}
    # Env 0's episode ends after step 2 and env 2's after step 4.
    dones = jnp.zeros((T, B), bool).at[2, 0].set(True).at[4, 2].set(True)
    graphdef, params = nnx.split(nets)

    @jax.jit
    def run(params, state0, extras):
        def body(carry, step):
            # Merge inside the scan body: the sampler advances its RNG stream, which is
            # part of ``params`` and so travels in the scan carry.
            params, state = carry
            obs, done, extra = step
            net = nnx.merge(graphdef, params)
            out = net(state, obs, extra)
            next_state = reset_where(net, done, out.next_state)
            carry = (nnx.state(net), next_state)
            return carry, (out.output, out.rollout_extras, out.regularization_loss)

        if extras is None:  # rollout: no extras in, record what the network emits
            steps = (xs, dones)
            _, (outs, extras_out, reg) = jax.lax.scan(
                lambda c, step: body(c, (*step, None)), (params, state0), steps
            )
        else:
            _, (outs, extras_out, reg) = jax.lax.scan(body, (params, state0), (xs, dones, extras))
        return outs, extras_out, reg

    state0 = nets.initialize_state(B)
    rollout, extras, reg = run(params, state0, None)
    replay, _, reg_replay = run(params, state0, extras)
    ratio = jnp.exp(
        replay.loglikelihoods["action_params"] - rollout.loglikelihoods["action_params"]
    )
    np.testing.assert_allclose(ratio, 1.0, rtol=0, atol=1e-5)
    np.testing.assert_allclose(replay.value_estimates["value"], rollout.value_estimates["value"],
                               rtol=1e-6, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(reg_replay, reg, rtol=1e-6, atol=1e-6)
    # The graph's per-sample regularization (the bottleneck's KL) reaches the network.
    assert reg.shape == (T, B) and bool(jnp.all(reg != 0))
    # The graph's extras are keyed by connection name and stack over time.
    graph_extras = extras[1]["transforms"]
    assert set(graph_extras) == set(g.transforms)
    # update_statistics routes the stacked [T, B, ...] extras through the graph.
    nets.update_statistics(extras)
