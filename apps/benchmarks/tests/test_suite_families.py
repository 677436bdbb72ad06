"""The control suite's stateful families and partially observed variants.

Default tests: the variants' observations on the real Playground cart-pole (the removed
entries are ``data.qvel``; the stacked history equals the library's
``ObservationHistory(MaskObservation(...))``), the plan and the refusals, the report's
rows and memory table, the command line. Training is ``extended`` (ours, in this
environment; brax PPO needs the harness's isolated venv).
"""

from __future__ import annotations

import doctest
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from nnx_ppo_benchmarks.children._common import load_env
from nnx_ppo_benchmarks.settings import NETWORKS, RunSpec
from nnx_ppo_benchmarks.suite import report, run, tasks, variants
from nnx_ppo_benchmarks.suite.cli import main as suite_main
from nnx_ppo_benchmarks.suite.report import markdown, summarize
from nnx_ppo_benchmarks.suite.run import SuiteOptions, plan_suite, refusals, task_dir
from nnx_ppo_benchmarks.suite.tasks import (
    BRAX_COMMON,
    CONTROL_TASKS,
    DEFAULT_TASKS,
    task_settings,
)
from nnx_ppo_benchmarks.suite.variants import split_variant

COMMON = dict(BRAX_COMMON, unroll_length=10, num_updates_per_batch=2)
MASKED = ("CartpoleBalance/masked", "CartpoleBalance/masked-history4")
FAMILIES = ("mlp_default", "lstm_quickstart", "graph_quickstart")
NO_RECURRENT = "brax PPO 0.14.2 has MLP policies only (no recurrent or graph policy)"


@pytest.mark.parametrize("module", [variants, tasks, run, report], ids=lambda m: m.__name__)
def test_doctests(module):
    outcome = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert outcome.failed == 0 and outcome.attempted > 0


def test_variant_names_and_their_refusals():
    assert split_variant("CartpoleBalance/masked") == ("CartpoleBalance", "masked")
    assert split_variant("brax/hopper") == ("brax/hopper", None)
    assert split_variant("WalkerWalk") == ("WalkerWalk", None)
    with pytest.raises(ValueError, match=r"unknown variant 'blind'; variants are masked, "):
        split_variant("CartpoleBalance/blind")
    # HopperHop's observation ends with touch sensors, not with the velocities.
    with pytest.raises(ValueError, match=r"the 'masked' variant exists for CartpoleBalance, "):
        split_variant("HopperHop/masked")
    assert set(MASKED) <= set(CONTROL_TASKS)
    assert all("/masked" not in t for t in DEFAULT_TASKS)
    assert SuiteOptions().tasks == DEFAULT_TASKS
    # A variant trains with its task's (Playground's) settings.
    assert task_settings(MASKED[1], n_envs=16, n_minibatches=4) == task_settings(
        "CartpoleBalance", n_envs=16, n_minibatches=4
    )
    assert task_dir(__import__("pathlib").Path("o"), MASKED[1]).name == (
        "CartpoleBalance-masked-history4"
    )


def test_masked_cartpole_hides_exactly_the_velocities_and_matches_the_library():
    from nnx_ppo.wrappers import MaskObservation, ObservationHistory

    base, masked, stacked = (load_env(t) for t in ("CartpoleBalance", *MASKED))
    # The layout: cart position, pole cos, pole sin, then qvel (cart, pole velocities).
    assert (base.observation_size, base.mj_model.nv) == (5, 2)
    assert variants.velocity_free_entries(base) == (0, 1, 2)
    assert (masked.observation_size, stacked.observation_size) == (3, 12)
    library = ObservationHistory(MaskObservation(base, keep=[0, 1, 2]), 4, flatten=True)
    envs = (stacked, library)

    @jax.jit
    def rollout(key, actions):
        states = [env.reset(key) for env in envs]

        def step(states, action):
            states = [env.step(s, action) for env, s in zip(envs, states, strict=True)]
            # The library's mask keeps the full observation in info.
            full = states[1].info["unmasked_obs"]
            return states, ([s.obs for s in states], full, states[1].data.qvel)

        _, (obs, full, qvel) = jax.lax.scan(step, states, actions)
        return [s.obs for s in states], states[1].info["unmasked_obs"], obs, full, qvel

    actions = jax.random.uniform(jax.random.key(1), (5, 1), minval=-1.0, maxval=1.0)
    first, first_full, (history, reference), full, qvel = jax.device_get(
        rollout(jax.random.key(0), actions)
    )
    np.testing.assert_array_equal(full[:, 3:], qvel)  # the removed entries are qvel
    assert np.abs(qvel).max() > 0  # ... and the actions moved the cart
    np.testing.assert_array_equal(history, reference)  # the library's wrappers agree
    np.testing.assert_array_equal(first[0], first[1])
    np.testing.assert_array_equal(first[0][:9], np.zeros(9))  # zeros before the episode
    np.testing.assert_array_equal(first[0][9:], first_full[:3])
    np.testing.assert_array_equal(history[:, 9:], full[:, :3])  # positions, newest last
    np.testing.assert_array_equal(history[1:, 6:9], history[:-1, 9:])  # then the one before


def test_quickstart_families_are_the_quickstarts_networks():
    from flax import nnx
    from nnx_ppo_benchmarks.children.ours import build_network
    from nnx_ppo_quickstart.networks import make_network

    for family, preset in (("lstm_quickstart", "lstm"), ("graph_quickstart", "graph")):
        assert NETWORKS[family].implementations == ("ours",)
        spec = RunSpec("ours", family, "CartpoleBalance/masked", seed=3)
        # Shapes only (no initialisation): the same modules with the same sizes.
        mine = nnx.state(nnx.eval_shape(lambda spec=spec: build_network(spec, 3, 1)))
        theirs = nnx.state(nnx.eval_shape(lambda p=preset: make_network(p, 3, 1, 3)))
        assert jax.tree.structure(mine) == jax.tree.structure(theirs), family
        shapes = jax.tree.map(lambda a, b: a.shape == b.shape, mine, theirs)
        assert all(jax.tree.leaves(shapes)), family


def test_plan_runs_stateful_families_for_ours_and_names_brax_refusals():
    options = SuiteOptions(
        tasks=MASKED, networks=FAMILIES, seeds=(0, 1), n_envs=16, n_minibatches=4,
        total_steps=1000, n_chunks=2,
    )  # fmt: skip
    plan = plan_suite(options, published=COMMON)
    cells = [(s.env_name, s.network, s.implementation) for s in plan]
    for task in MASKED:
        assert cells.count((task, "mlp_default", "brax")) == 2
        for family in FAMILIES:
            assert cells.count((task, family, "ours")) == 2
    assert not [c for c in cells if c[2] == "brax" and c[1] != "mlp_default"]
    assert {(s.ppo, s.total_steps) for s in plan} == {(plan[0].ppo, 1280)}  # same budget
    refused = refusals(options)
    assert [(r["env_name"], r["network"], r["implementation"]) for r in refused] == [
        (t, f, "brax") for t in MASKED for f in FAMILIES[1:]
    ]
    assert {r["error"] for r in refused} == {NO_RECURRENT}
    with pytest.raises(ValueError, match=r"network 'lstm_quickstart' cannot run with "):
        SuiteOptions(implementations=("brax",), networks=("lstm_quickstart",))
    with pytest.raises(ValueError, match=r"add ours to the implementations"):
        SuiteOptions(implementations=("brax",), networks=("graph_quickstart",))


def _run(network, impl, seed, ret, sps, task=MASKED[0]):
    return {
        "env_name": task,
        "network": network,
        "implementation": impl,
        "seed": seed,
        "status": "ok",
        "derived": {"final_eval_reward": ret, "steady_sps": sps, "compile_s": 9.0,
                    "peak_rss_mb": 800.0, "train_s": 20.0},
    }  # fmt: skip


def test_report_lists_refusals_beside_ours_and_what_memory_costs_and_buys():
    runs = [
        _run("mlp_default", "ours", 0, 400.0, 4000.0),
        _run("mlp_default", "brax", 0, 200.0, 3000.0),
        _run("mlp_default", "ours", 1, 300.0, 4000.0),
        _run("mlp_default", "brax", 1, 300.0, 3000.0),
        _run("lstm_quickstart", "ours", 0, 900.0, 1000.0),
        _run("lstm_quickstart", "ours", 1, 800.0, 2000.0),
        *refusals(SuiteOptions(tasks=MASKED[:1], networks=FAMILIES[:2])),
        _run("mlp_default", "ours", 0, 700.0, 3000.0, task=MASKED[1]),
        _run("mlp_default", "ours", 1, 700.0, 2000.0, task=MASKED[1]),
    ]
    summary = summarize(runs)
    assert [(r["network"], r["implementation"]) for r in summary["rows"]] == [
        ("mlp_default", "ours"),
        ("mlp_default", "brax"),
        ("lstm_quickstart", "ours"),
        ("lstm_quickstart", "brax"),
        ("mlp_default", "ours"),  # on the history variant
    ]
    refused = summary["rows"][3]
    assert refused["unsupported"] == NO_RECURRENT and refused["failed"] == 0
    assert [r["network"] for r in summary["ratios"]] == ["mlp_default"]
    # LSTM medians 850 over ours' MLP 350 and brax's 250; steps/s ratios 0.25 and 0.5.
    # The stacked MLP: 700 over 350 and 250; steps/s 3000/4000 and 2000/4000.
    memory, stacked = summary["memory"]  # the history variant's own MLP is no entry
    assert memory["baseline"] == stacked["baseline"] == "mlp_default"
    assert memory["return_vs_ours_mlp"] == pytest.approx(850 / 350)
    assert memory["return_vs_brax_mlp"] == pytest.approx(850 / 250)
    assert memory["steady_sps_vs_ours_mlp"] == pytest.approx(0.375)
    assert stacked["task"] == MASKED[0] and stacked["return_vs_ours_mlp"] == 2.0
    assert stacked["steady_sps_vs_ours_mlp"] == pytest.approx(0.625)
    text = markdown(summary, title="T")
    assert f"| lstm_quickstart | brax | 0 (not run: {NO_RECURRENT}) | - |" in text
    assert "| CartpoleBalance/masked | lstm_quickstart | mlp_default | 2.43 | 3.40 | 0.38 |" in text
    assert "| mlp_default on masked-history4 | mlp_default | 2.00 | 2.80 | 0.62 |" in text


def test_cli_takes_variants_and_refuses_a_family_brax_cannot_run(tmp_path, capsys):
    argv = ["--tasks", "CartpoleBalance/masked", "--implementations", "brax", "--networks",
            "lstm_quickstart", "--output-dir", str(tmp_path)]  # fmt: skip
    assert suite_main(argv) == 2
    err = capsys.readouterr().err
    assert "network 'lstm_quickstart' cannot run with implementations=brax" in err
    with pytest.raises(SystemExit):
        suite_main(["--tasks", "HopperHop/masked"])
    assert "'HopperHop/masked': use a comma-separated list of" in capsys.readouterr().err
    # --report-only trains nothing: the planned runs are "not run", brax's LSTM refused.
    argv = ["--tasks", "CartpoleBalance/masked", "--networks", "mlp_small,lstm_quickstart",
            "--seeds", "0", "--report-only", "--output-dir", str(tmp_path)]  # fmt: skip
    assert suite_main(argv) == 1
    assert f"CartpoleBalance/masked lstm_quickstart not run for brax: {NO_RECURRENT}" in (
        capsys.readouterr().err
    )
    results = json.loads((tmp_path / "results.json").read_text())
    statuses = {(r["network"], r["implementation"]): r["status"] for r in results["runs"]}
    assert statuses == {
        ("mlp_small", "ours"): "not run",
        ("mlp_small", "brax"): "not run",
        ("lstm_quickstart", "ours"): "not run",
        ("lstm_quickstart", "brax"): "unsupported",
    }


@pytest.mark.extended
def test_masked_cartpole_trains_ours_mlp_on_history_and_the_recommended_graph(tmp_path):
    argv = ["--tasks", "CartpoleBalance/masked-history4", "--networks",
            "mlp_small,graph_quickstart", "--implementations", "ours", "--seeds", "0",
            "--steps", "2560", "--chunks", "2", "--n-envs", "16", "--n-minibatches", "4",
            "--eval-envs", "4", "--eval-length", "50", "--environments", "current",
            "--output-dir", str(tmp_path)]  # fmt: skip
    assert suite_main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["spec"]["env_name"] for r in results["runs"]} == {MASKED[1]}
    assert all(r["status"] == "ok" and r["final_eval_reward"] >= 0 for r in results["runs"])
    [memory] = results["summary"]["memory"]
    assert memory["network"] == "graph_quickstart" and memory["steady_sps_vs_ours_mlp"] > 0


@pytest.mark.extended
@pytest.mark.parametrize("task", ["PendulumSwingup", "CheetahRun", "WalkerWalk"])
def test_the_other_masked_tasks_remove_exactly_qvel(task):
    base, masked = load_env(task), load_env(f"{task}/masked")
    nv = int(base.mj_model.nv)
    assert masked.observation_size == base.observation_size - nv

    @jax.jit
    def step(key, action):
        full = base.step(base.reset(key), action)
        kept = masked.step(masked.reset(key), action)
        return full.obs, kept.obs, full.data.qvel

    action = jnp.full((base.action_size,), 0.5)
    full, kept, qvel = jax.device_get(step(jax.random.key(0), action))
    np.testing.assert_array_equal(full[-nv:], qvel)
    assert np.abs(qvel).max() > 0
    np.testing.assert_array_equal(kept, full[:-nv])
