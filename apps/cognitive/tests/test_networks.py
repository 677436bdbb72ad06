"""The realistic networks of the app: the noisy E/I graph and the low-rank RNN, built
from their command-line options (``--network lowrank``, ``--sigma-rec``, ``--rank``).

The cell and graph contracts under noise (exact replay, noise-free export and analysis)
are tested in nnx-modules and nnx-graph; here, that the app builds what it says.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_cognitive.cli import main, make_network_factory, parse_args
from nnx_ppo_cognitive.tasks import TASKS

from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.low_rank import LowRankRNN

DT = 100.0


def _acts(net, env) -> None:
    """One step on a batch of observations: every action is one of the task's (the
    networks see a task only through its sizes; test_cli.py drives every task)."""
    obs = jax.random.uniform(jax.random.key(0), (4, env.observation_size))
    actions = np.asarray(net(net.initialize_state(4), obs).output.actions)
    assert actions.shape == (4,) and ((actions >= 0) & (actions < env.action_size)).all()


def test_the_options_build_noisy_networks_that_act() -> None:
    env = TASKS["context"].make(dt=DT)
    argv = ["--dt", str(DT), "--hidden", "10", "--sigma-rec", "0.15"]
    args = parse_args([*argv, "--network", "lowrank", "--rank", "3", "--tau", "200"])
    net = make_network_factory(args, env)(nnx.Rngs(0))
    cell = net.layers[0].action.layers[0]
    assert isinstance(cell, LowRankRNN)
    assert (cell.rank, cell.sigma_rec, cell.dt, float(cell.tau[0])) == (3, 0.15, DT, 200.0)
    assert set(cell.initialize_state(2)) == {"h", "key"}
    _acts(net, env)
    args = parse_args([*argv, "--network", "ei"])
    net = make_network_factory(args, env)(nnx.Rngs(0))
    graph = net.layers[0].action.layers[1]
    assert isinstance(graph, PopulationGraph)
    noise = {p.name: p.sigma_rec for p in graph.populations}
    assert noise == {"obs": 0.0, "e": 0.15, "i": 0.15, "logits": 0.0}
    assert "noise_key" in graph.initialize_state(2)
    _acts(net, env)


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
