"""Tests of the modular-controller app (run by `nox -s apps`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_apps_common.results import readme_results
from nnx_ppo_modular_controller.body import ANT, LEGS, layout_from_model
from nnx_ppo_modular_controller.cli import main, summary_table
from nnx_ppo_modular_controller.controller import make_controller, make_graph
from nnx_ppo_modular_controller.wrappers import (
    FLAT_OBS_KEY,
    BodyPartObservationWrapper,
    DictActionWrapper,
)

from nnx_ppo.envs import Env, State

APP = Path(__file__).resolve().parents[1]
JOINTS = [f"{kind}_{leg}" for leg in LEGS for kind in ("hip", "ankle")]


class _Recorder(Env):
    """Flat env: obs = arange(size) + 100 * steps; records the flat obs and action it
    receives in step."""

    def __init__(self, obs_size=27, action_size=8):
        self.obs_size, self._action_size = obs_size, action_size
        self.seen = []

    @property
    def action_size(self):
        return self._action_size

    def _obs(self, t):
        return jnp.arange(self.obs_size, dtype=jnp.float32) + 100.0 * t

    def reset(self, rng):
        return State(
            obs=self._obs(0), reward=jnp.zeros(()), done=jnp.zeros(()), info={"t": jnp.zeros(())}
        )

    def step(self, state, action):
        self.seen.append((state.obs, action))
        t = state.info["t"] + 1
        return state.replace(obs=self._obs(t), info={**state.info, "t": t})


# ------------------------------------------------------------------------------ layout


def test_ant_layout_is_what_the_brax_model_says():
    brax_envs = pytest.importorskip("brax.envs")
    env = brax_envs.get_environment("ant", backend="spring")
    assert env.observation_size == ANT.observation_size == 27
    assert layout_from_model(env.sys.mj_model) == ANT
    # The motors are not in joint order: the first action entry drives hip_4.
    assert ANT.actuators[:3] == ("hip_4", "ankle_4", "hip_1")


def test_ant_layout_partitions_the_observation():
    indices = sorted(i for idx in ANT.observation.values() for i in idx)
    assert indices == list(range(27))
    assert sorted(ANT.actuators) == sorted(JOINTS)


# ---------------------------------------------------------------------------- wrappers


def test_observation_wrapper_splits_by_index_and_steps_the_flat_env():
    inner = _Recorder()
    env = BodyPartObservationWrapper(inner, ANT.observation)
    state = env.reset(jax.random.key(0))
    # obs[i] == i at reset, so each part holds exactly its indices.
    assert state.obs["torso"].tolist() == [0, 1, 2, 3, 4, 13, 14, 15, 16, 17, 18]
    assert state.obs["hip_4"].tolist() == [11, 25]
    assert state.obs["ankle_1"].tolist() == [6, 20]
    state = env.step(state, jnp.zeros(8))
    # The wrapped env got its own flat observation back, and the next split is of
    # obs = arange(27) + 100.
    np.testing.assert_array_equal(inner.seen[0][0], jnp.arange(27.0))
    assert state.obs["hip_2"].tolist() == [107, 121]
    np.testing.assert_array_equal(state.info[FLAT_OBS_KEY], jnp.arange(27.0) + 100)
    assert env.observation_size["torso"] == (11,)


def test_observation_wrapper_jits_and_vmaps():
    env = BodyPartObservationWrapper(_Recorder(), ANT.observation)
    states = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), 3))
    states = jax.jit(jax.vmap(env.step))(states, jnp.zeros((3, 8)))
    assert states.obs["torso"].shape == (3, 11)
    assert float(states.obs["hip_1"][2, 0]) == 105.0


def test_action_wrapper_concatenates_in_actuator_order():
    inner = _Recorder()
    env = DictActionWrapper(inner, dict.fromkeys(ANT.actuators, 1))
    # Give joint j the value (its position in JOINTS) / 10.
    action = {j: jnp.array([i / 10]) for i, j in enumerate(JOINTS)}
    env.step(env.reset(jax.random.key(0)), action)
    # Actuator order hip_4, ankle_4, hip_1, ankle_1, ... = JOINTS positions 6, 7, 0, 1, ...
    np.testing.assert_allclose(inner.seen[0][1], [0.6, 0.7, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    assert env.action_size == dict.fromkeys(ANT.actuators, 1)


@pytest.mark.parametrize(
    ("indices", "match"),
    [
        ({"a": [0, 1], "b": [1]}, "index 1 is listed under both 'a' and 'b'"),
        ({"a": [27]}, "index 27, outside the observation of size 27"),
        ({"a": []}, "part 'a' has no indices"),
        ({"a": [0.5]}, "indices must be ints"),
    ],
)
def test_observation_wrapper_rejects_bad_indices(indices, match):
    with pytest.raises(ValueError, match=match):
        BodyPartObservationWrapper(_Recorder(), indices)


def test_action_wrapper_rejects_sizes_that_miss_an_actuator():
    with pytest.raises(ValueError, match="add up to 7, but the environment's action_size is 8"):
        DictActionWrapper(_Recorder(), dict.fromkeys(ANT.actuators[:7], 1))
    env = DictActionWrapper(_Recorder(), dict.fromkeys(ANT.actuators, 1))
    with pytest.raises(ValueError, match="must be a dict with keys"):
        env.flatten({"hip_1": jnp.zeros(1)})


# -------------------------------------------------------------------------- controller


def test_graph_topology_is_one_population_per_body_part():
    g = make_graph(rngs=nnx.Rngs(0))
    hidden = {p.name for p in g.populations if p.input_from is None and p.output_to is None}
    assert hidden == {"root", *JOINTS, "critic_1", "critic_2"}
    delayed = {(c.src, c.dst) for c in g.connections if c.delay > 0}
    expected = set()
    for leg in LEGS:
        for a, b in (("root", f"hip_{leg}"), (f"hip_{leg}", f"ankle_{leg}")):
            expected |= {(a, b), (b, a)}
    assert delayed == expected  # reciprocal, delay 1, along the body tree only
    assert all(c.delay == 1 for c in g.connections if c.delay > 0)
    # The critic chain reads only observations and itself: no parameter is shared
    # between actor and critic.
    critic = {"critic_1", "critic_2", "value"}
    for c in g.connections:
        if c.dst in critic:
            assert c.src in critic or c.src.endswith("_obs"), c.name
        if c.src in critic:
            assert c.dst in critic, c.name


def test_messages_from_the_torso_reach_hips_after_one_step_and_ankles_after_two():
    # Change only obs["torso"] at t = 0. root(0) reads it in the same step; hips read
    # root through delay 1, so hip(1) differs; ankles read hips through delay 1, so
    # ankle(2) differs. hip(2) reads root(1) and ankle(1), which saw only equal inputs
    # (torso obs of t = 1, hips and ankles of t = 0), so hip(2) is equal again: the
    # change travels out along the leg one population per step. The critic reads the
    # observation directly (t = 0).
    g = make_graph(root_size=8, joint_size=4, critic_size=8, rngs=nnx.Rngs(0))

    def run(torso0):
        state, outs = g.initialize_state(1), []
        for t in range(3):
            obs = {p: jnp.full((1, len(idx)), 0.3) for p, idx in ANT.observation.items()}
            if t == 0:
                obs["torso"] = jnp.full((1, 11), torso0)
            out = g(state, obs)
            state = out.next_state
            outs.append(out.output)
        return outs

    a, b = run(0.3), run(-2.0)
    differs = {
        key: [not np.allclose(a[t][key], b[t][key]) for t in range(3)]
        for key in ("hip_1", "ankle_1", "hip_4", "ankle_4", "value")
    }
    assert differs["hip_1"] == differs["hip_4"] == [False, True, False]
    assert differs["ankle_1"] == differs["ankle_4"] == [False, False, True]
    assert differs["value"][0]


def test_controller_outputs_one_torque_per_joint():
    net = make_controller(root_size=8, joint_size=4, critic_size=8)
    obs = {p: jnp.zeros((5, len(idx))) for p, idx in ANT.observation.items()}
    out = net(net.initialize_state(5), obs).output
    assert set(out.actions) == set(JOINTS)
    assert all(a.shape == (5, 1) and bool(jnp.all(jnp.abs(a) < 1)) for a in out.actions.values())
    assert out.value_estimates.shape == (5,)


def test_bad_sizes_name_the_argument():
    with pytest.raises(ValueError, match="critic_size=0 must be an int >= 1"):
        make_graph(critic_size=0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="no observation for"):
        make_graph(ANT.__class__({"torso": (0,)}, (), {}), rngs=nnx.Rngs(0))


# ------------------------------------------------------------------------- CLI, README


def test_readme_diagram_is_the_current_topology(capsys):
    readme = (APP / "README.md").read_text()
    blocks = re.findall(r"```mermaid\n(.*?)\n```", readme, re.S)
    assert len(blocks) == 1, "README must hold exactly one mermaid diagram"
    assert blocks[0] == make_graph(rngs=nnx.Rngs(0)).to_mermaid()
    assert main(["--mermaid"]) == 0
    assert capsys.readouterr().out.strip() == blocks[0]


def test_draw_writes_the_topology_png(tmp_path):
    import matplotlib.image

    path = tmp_path / "sub" / "topology.png"
    assert main(["--draw", str(path)]) == 0
    drawn = matplotlib.image.imread(path)
    committed = matplotlib.image.imread(APP / "docs" / "topology.png")
    assert drawn.shape == committed.shape == (990, 990, 4)
    assert drawn.std() > 0.05  # not a blank canvas


def test_readme_reports_the_committed_run():
    summary = json.loads((APP / "docs" / "summary.json").read_text())
    assert readme_results((APP / "README.md").read_text()) == summary_table(summary)
    assert (APP / "docs" / "learning_curve.png").stat().st_size > 0


def test_unknown_backend_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--backend", "physx"])
    assert exc.value.code == 2
    assert "invalid choice: 'physx'" in capsys.readouterr().err


# brax's spring pipeline reads mjx Data.contact, which newer mujoco deprecates.
@pytest.mark.filterwarnings("ignore:Accessing `contact` directly:DeprecationWarning")
def test_tiny_training_run(tmp_path, capsys):
    pytest.importorskip("brax")
    out = tmp_path / "run"
    argv = ["--steps", "64", "--n-envs", "4", "--rollout-length", "8", "--n-minibatches", "2",
            "--n-epochs", "1", "--episode-length", "20", "--eval-envs", "2",
            "--eval-every", "32", "--root-size", "8", "--joint-size", "4", "--critic-size", "8",
            "--no-progress", "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 64 and summary["backend"] == "spring"
    history = summary["eval_history"]
    assert [h["step"] for h in history] == [0, 32, 64]
    for h in history:
        # Ant rewards per step: forward velocity + 1 - 0.5 * |a|^2 with |a|^2 <= 8.
        assert 1 <= h["episode_length"] <= 20 and math.isfinite(h["return_mean"])
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss/total" in r for r in records)
    for name in ("learning_curve.png", "topology.png", "config.json"):
        assert (out / name).stat().st_size > 0, name
    assert "final eval return" in capsys.readouterr().out


def test_docstring_examples_run():
    import doctest

    from nnx_ppo_modular_controller import wrappers

    assert doctest.testmod(wrappers, raise_on_error=True).attempted > 0
