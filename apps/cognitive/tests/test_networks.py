"""The realistic networks of the app: the noisy E/I graph and the low-rank RNN on every
task, and their command-line options (``--network lowrank``, ``--sigma-rec``,
``--rank``).

The cell and graph contracts under noise (exact replay, noise-free export and analysis)
are tested in nnx-modules and nnx-graph; here, that the app builds what it says.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_cognitive.cli import main, make_network_factory, parse_args
from nnx_ppo_cognitive.networks import make_ei_actor_critic, make_low_rank_actor_critic
from nnx_ppo_cognitive.tasks import TASKS

from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.low_rank import LowRankRNN

DT = 100.0


def test_noisy_ei_and_low_rank_networks_act_on_the_tasks() -> None:
    # One eager step of each network on a batch of a task's observations: the carry
    # holds the noise keys, and every action is one of the task's. The networks see a
    # task only through its observation and action sizes (test_cli.py drives every
    # task with the E/I graph); one task here.
    batch = 4
    for name in ("context",):
        env = TASKS[name].make(dt=DT)
        obs = jax.random.uniform(jax.random.key(0), (batch, env.observation_size))
        for make in (make_ei_actor_critic, make_low_rank_actor_critic):
            size = {"n_units": 10} if make is make_ei_actor_critic else {"hidden": 10}
            net = make(
                env.observation_size, env.action_size, rngs=nnx.Rngs(0), dt_ms=DT,
                sigma_rec=0.15, **size,
            )  # fmt: skip
            state = net.initialize_state(batch)
            actions = np.asarray(net(state, obs).output.actions)
            assert actions.shape == (batch,), name
            assert ((actions >= 0) & (actions < env.action_size)).all(), name
            keys = [p for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
            assert any("key" in jax.tree_util.keystr(p) for p in keys), name


def test_the_options_reach_the_networks() -> None:
    env = TASKS["pdm"].make(dt=DT)
    argv = ["--dt", str(DT), "--hidden", "12", "--sigma-rec", "0.15"]
    args = parse_args([*argv, "--network", "lowrank", "--rank", "3", "--tau", "200"])
    cell = make_network_factory(args, env)(nnx.Rngs(0)).layers[0].action.layers[0]
    assert isinstance(cell, LowRankRNN)
    assert (cell.rank, cell.sigma_rec, cell.dt, float(cell.tau[0])) == (3, 0.15, DT, 200.0)
    args = parse_args([*argv, "--network", "ei"])
    graph = make_network_factory(args, env)(nnx.Rngs(0)).layers[0].action.layers[1]
    assert isinstance(graph, PopulationGraph)
    noise = {p.name: p.sigma_rec for p in graph.populations}
    assert noise == {"obs": 0.0, "e": 0.15, "i": 0.15, "logits": 0.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sigma-rec", "0.1"], "--sigma-rec 0.1 needs leaky units"),
        (["--network", "ei", "--sigma-rec", "-1"], "argument --sigma-rec: -1.0 must be"),
        (["--network", "lowrank", "--rank", "8", "--hidden", "4"], "--rank 8 is above"),
        (["--network", "lowrank", "--dt", "200"], "--dt 200 is above --tau 100"),
    ],
)
def test_bad_options_are_usage_errors(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
