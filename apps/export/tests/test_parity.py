"""Acceptance: exported policies reproduce the network on real rollouts.

For each network, 200 steps of a real rollout (the package's environments and brax
``inverted_pendulum``; 3 environments, episodes truncated after 70 steps and restarted,
so every carry is reset twice mid-rollout) are recorded with the network in ``eval()``
mode; one case is a quickstart-like run's environment (a privileged critic's dict
observation, latency, a 3-step observation history), recorded as it is wrapped. Each
artefact is then stepped on the recorded observations with nothing but its
``policy.json``: initial carry ``reset(zeros, done=True)``, its own carry fed back,
``reset`` where the episode ended. Actions must agree to 1e-5 (float32) at every step.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_export.rollouts import Rollout, record_rollout, reference_arrays

from nnx_ppo.envs import DictObsEnv, MemoryTask, PointMass
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Concat, Sequential, Splitter
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.export import export_policy, load_stablehlo, read_manifest
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import GRU
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Filter, Map
from nnx_ppo.wrappers import Latency, ObservationHistory, Wrapper, wrap_for_training

ATOL = 1e-5


def _pendulum() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax import envs

        return envs.get_environment("inverted_pendulum", backend="generalized")


def _fit_normalizer(network: Any, sizes: Any) -> Any:
    """Non-trivial statistics (mean 0.5, std 2), so folding them in is checked."""
    spec = sizes if isinstance(sizes, dict) else {"": sizes}
    data = {k: 0.5 + 2.0 * jax.random.normal(jax.random.key(9), (8, 4, v)) for k, v in spec.items()}
    network.layers[0].update_statistics(data if isinstance(sizes, dict) else data[""])
    return network


def _mlp(env: Any) -> Any:
    net = make_mlp_actor_critic(
        env.observation_size, env.action_size, (32, 32), (32,), rngs=nnx.Rngs(0)
    )
    return _fit_normalizer(net, env.observation_size)


def _lstm(env: Any) -> Any:
    net = make_lstm_actor_critic(
        env.observation_size, env.action_size, 16, (16,), (16,), rngs=nnx.Rngs(1)
    )
    return _fit_normalizer(net, env.observation_size)


def _gru(env: Any) -> Any:
    rngs, n, a = nnx.Rngs(2), env.observation_size, env.action_size
    net = Sequential(
        [
            Normalizer(n),
            GRU(n, 16, rngs=rngs),
            PPOAdapter(
                action=Sequential([Dense(16, 2 * a, rngs=rngs), NormalTanhSampler(rngs)]),
                value=Dense(16, 1, rngs=rngs),
            ),
        ]
    )
    return _fit_normalizer(net, n)


def _delay(env: Any) -> Any:
    rngs, n, a = nnx.Rngs(3), env.observation_size, env.action_size
    net = Sequential(
        [
            Normalizer(n),
            Delay(jnp.zeros((n,)), k_steps=2, initial_value=0.25),
            PPOAdapter(
                action=Sequential([MLP(n, [16], 2 * a, rngs=rngs), NormalTanhSampler(rngs)]),
                value=Dense(n, 1, rngs=rngs),
            ),
        ]
    )
    return _fit_normalizer(net, n)


def _dict(env: Any) -> Any:
    rngs = nnx.Rngs(4)
    sizes = {k: v[0] for k, v in env.observation_size.items()}  # {"goal": 2, "proprio": 3}
    net = Sequential(
        [
            Normalizer(sizes),
            Concat(
                proprio=Dense(3, 16, rngs=rngs, activation=nnx.swish),
                goal=Dense(2, 16, rngs=rngs, activation=nnx.swish),
            ),
            PPOAdapter(
                action=Sequential(
                    [
                        MLP(32, [16], 2 * 2 + 2 * 1, rngs=rngs),
                        Splitter(arm=4, gripper=2),
                        Map(arm=NormalTanhSampler(rngs), gripper=NormalTanhSampler(rngs)),
                    ]
                ),
                value=MLP(32, [16], 1, rngs=rngs),
            ),
        ]
    )
    return _fit_normalizer(net, sizes)


def _graph_ring(env: Any) -> Any:
    """Three populations in a ring with delays 1, 2 and 1, read out from two of them."""
    rngs, n, a = nnx.Rngs(5), env.observation_size, env.action_size
    g = PopulationGraph(rngs)
    g.add_input("obs", size=n, input_from="obs")
    for name in ("p0", "p1", "p2"):
        g.add_population(name, size=12, activation=nnx.tanh)
    g.connect("obs", "p0")
    g.connect("p0", "p1", delay=1)
    g.connect("p1", "p2", delay=2)
    g.connect("p2", "p0", delay=1)
    g.add_output("action_params", size=2 * a)
    g.connect("p2", "action_params")
    g.connect("p0", "action_params")
    g.add_output("value", size=1)
    g.connect("p1", "value")
    g.finalize()
    net = Sequential(
        [
            Normalizer(n),
            Filter(lambda x: {"obs": x}),
            g,
            PPOAdapter(
                action=Sequential([Filter("action_params"), NormalTanhSampler(rngs)]),
                value=Filter("value"),
            ),
        ]
    )
    return _fit_normalizer(net, n)


class _Privileged(Wrapper):
    """A dict observation: the wrapped one as ``"state"`` (the actor's) and a scaled copy
    as ``"privileged_state"`` (a privileged critic's)."""

    @property
    def observation_size(self) -> Any:
        return {"state": self.env.observation_size, "privileged_state": 2}

    def _split(self, state: Any) -> Any:
        return state.replace(obs={"state": state.obs, "privileged_state": 3 * state.obs[:2]})

    def reset(self, rng: Any) -> Any:
        return self._split(self.env.reset(rng))

    def step(self, state: Any, action: Any) -> Any:
        return self._split(self.env.step(state.replace(obs=state.obs["state"]), action))


def _quickstart_like_env() -> Any:
    """Wrapped as a quickstart run with ``--obs-lag 1 --action-lag 0:1 --obs-history 3``
    wraps its evaluation env: latency, 70-step episodes, the last 3 observations."""
    base = Latency(_Privileged(PointMass()), obs_lag=1, action_lag=(0, 1))
    episodes = wrap_for_training(base, episode_length=70, stagger=False)
    return ObservationHistory(episodes, 3, flatten=True)


def _lstm_privileged(env: Any) -> Any:
    # The actor reads the stacked "state", the critic also "privileged_state".
    return make_lstm_actor_critic(
        env.observation_size, env.action_size, 16, (16,), (16,), rngs=nnx.Rngs(6),
        actor_obs=("state",), critic_obs=("privileged_state", "state"),
    )  # fmt: skip


CASES = {
    "mlp_normalizer-inverted_pendulum": (_mlp, _pendulum),
    "lstm-memory_task": (_lstm, lambda: MemoryTask(delay=3)),
    "gru-point_mass": (_gru, PointMass),
    "delay-point_mass": (_delay, PointMass),
    "dict-dict_obs_env": (_dict, DictObsEnv),
    "graph_ring-inverted_pendulum": (_graph_ring, _pendulum),
    "lstm_privileged-history_latency": (_lstm_privileged, _quickstart_like_env),
}
PRE_WRAPPED = {"lstm_privileged-history_latency"}  # the env limits its episodes itself


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, Any, Any, Rollout]:
    make_network, make_env = CASES[request.param]
    env = make_env()
    network = make_network(env)
    limit = None if request.param in PRE_WRAPPED else 70
    rollout = record_rollout(env, network, n_envs=3, n_steps=200, episode_length=limit)
    # Every environment's episode ends mid-rollout (truncation at 70 steps, or earlier
    # when the pendulum falls), so every carry is reset between recorded steps.
    assert (rollout.done[:-1].sum(axis=0) >= 2).all(), rollout.done.sum(axis=0)
    return request.param, network, env.observation_size, rollout


def _compare(name: str, manifest: dict, outputs: list[dict], rollout: Rollout) -> None:
    want = jax.tree.leaves(rollout.actions)
    for t, out in enumerate(outputs):
        for action_name, ref in zip(manifest["action"], want, strict=True):
            np.testing.assert_allclose(
                out[action_name],
                ref[t],
                atol=ATOL,
                rtol=0,
                err_msg=f"{name}: {action_name} step {t}",
            )


def _run(manifest: dict, call_step: Any, call_reset: Any, rollout: Rollout) -> list[dict]:
    """Step an artefact on the recorded observations; the step outputs of every step."""
    # By tensor name: a privileged critic's key is in the rollout, not a policy input.
    recorded = reference_arrays(rollout, manifest["observation"], manifest["action"])
    n_steps, batch = rollout.done.shape
    carry: dict[str, Any] = {}
    if manifest["reset"] is not None:
        zeros = {
            t["name"]: np.zeros((batch, *t["shape"][1:]), t["dtype"])
            for t in manifest["reset"]["inputs"]
            if t["name"] != "done"
        }
        out = call_reset({**zeros, "done": np.ones((batch,), bool)})
        carry = {c["input"]: out[c["output"]] for c in manifest["carry"]}
    outputs = []
    for t in range(n_steps):
        obs = {name: recorded[name][t] for name in manifest["observation"]}
        out = call_step({**obs, **carry})
        outputs.append({k: np.asarray(v) for k, v in out.items()})
        carry = {c["input"]: out[c["output"]] for c in manifest["carry"]}
        if manifest["reset"] is not None:
            reset = call_reset({**carry, "done": rollout.done[t]})
            carry = {c["input"]: reset[c["output"]] for c in manifest["carry"]}
    return outputs


def test_stablehlo_parity(case: tuple, tmp_path: Path) -> None:
    name, network, obs_spec, rollout = case
    out = export_policy(network, obs_spec, tmp_path / "art", format="stablehlo")
    loaded = load_stablehlo(out)
    if name in PRE_WRAPPED:  # the actor's stacked key only; the critic's is no input
        assert loaded.manifest["observation"] == ["obs/state"]
        stacked = rollout.observations["state"]
        assert stacked.shape[-1] == 3 * 2 and (stacked[0, :, :4] == 0).all()
    outputs = _run(loaded.manifest, loaded.step, loaded.reset, rollout)
    _compare(name, loaded.manifest, outputs, rollout)


def test_onnx_parity(case: tuple, tmp_path: Path) -> None:
    pytest.importorskip("jax2onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    name, network, obs_spec, rollout = case
    out = export_policy(network, obs_spec, tmp_path / "art", format="onnx")
    manifest = read_manifest(out)

    def caller(file: str) -> Any:
        session = onnxruntime.InferenceSession(str(out / file), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda inputs: dict(zip(names, session.run(None, inputs), strict=True))

    step = caller("step.onnx")
    reset = caller("reset.onnx") if manifest["reset"] else None
    outputs = _run(manifest, step, reset, rollout)
    _compare(name, manifest, outputs, rollout)
