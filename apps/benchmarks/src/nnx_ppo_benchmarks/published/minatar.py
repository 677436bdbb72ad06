"""MinAtar (pixels) with gymnax-blines' PPO settings: our conv or MLP policy, 5 seeds in
one `train_many` program, against gymnax-blines' published PPO returns.

Examples::

    # Breakout with the conv policy at the published budget (1e7 steps; an accelerator)
    uv run python -m nnx_ppo_benchmarks.published.minatar --game Breakout-MinAtar \\
        --network conv --output-dir apps/benchmarks/results/published/minatar

    # the published network (Categorical-MLP, 2 x 256 ReLU)
    uv run python -m nnx_ppo_benchmarks.published.minatar --network mlp \\
        --output-dir apps/benchmarks/results/published/minatar

    # seconds on a CPU: tiny sizes, one seed
    uv run python -m nnx_ppo_benchmarks.published.minatar --smoke --seeds 0 \\
        --output-dir /tmp/minatar

    # re-render report.md and curves.png from the cells
    uv run python -m nnx_ppo_benchmarks.published.minatar --report-only \\
        --output-dir apps/benchmarks/results/published/minatar

Each (game, network) writes ``cells/<game>__<network>.json`` (``summary``: the median of
the final returns over seeds with its 95% percentile-bootstrap interval, the published
figure, the wall time; ``runs``: per seed the final stochastic and deterministic returns
and the evaluation curve); ``report.md`` and ``curves.png`` cover every cell in the
output directory. The environment is gymnax's MinAtar through the public `GymnaxEnv`
adapter (the nnx-ppo-train ``gymnax`` extra).

Published reference (gymnax-blines, ``agents/<game>/ppo.yaml``; its README's table at
1e7 steps): Breakout-MinAtar 28, Asterix-MinAtar 15, Freeway-MinAtar 58,
SpaceInvaders-MinAtar 131.

Translation of gymnax-blines' ``ppo.yaml`` (``train_config``) and ``utils/ppo.py``:

============================================  ==============================================
gymnax-blines                                 here
============================================  ==============================================
num_train_steps 1e7                           total_steps 1e7 rounded UP to whole iterations
                                              of 64 x 128 = 8192 env steps (1221 iterations,
                                              10,002,432 steps). Theirs: one update every 129
                                              steps per env (the 129th transition only
                                              bootstraps), about 1211 updates of 128 steps.
num_train_envs 64, n_steps 128                n_envs 64, rollout_length 128
n_minibatch 8                                 n_minibatches 8, NOT one-to-one: theirs are
                                              1024 transitions shuffled over envs and time;
                                              ours are 8 whole env sequences (8 x 128 = 1024
                                              transitions): our trainer replays whole
                                              sequences (as recurrent policies need).
epoch_ppo 4                                   n_epochs 4
lr_begin = lr_end = 5e-4, lr_warmup 0.05      learning_rate 5e-4 constant (begin == end:
                                              their warm-up is a no-op)
Adam eps 1e-5                                 adam_eps 1e-5 (cells recorded before
                                              PPOConfig had it ran optax's 1e-8; the report
                                              says which eps each row used)
max_grad_norm 0.5                             max_grad_norm 0.5
gamma 0.999, gae_lambda 0.95                  discounting_factor 0.999, gae_lambda 0.95
clip_eps 0.2 (policy and value clipping)      clip_range 0.2, value_clip_range 0.2
entropy_coeff 0.01                            CategoricalSampler(entropy_weight=0.01)
critic_coeff 0.5, value loss                  critic_loss_weight 0.5 (our critic loss is
0.5 * max(sq, sq_clipped).mean()              also 0.5 * mean(max(...)))
advantages normalised per minibatch           normalize_advantages True
gymnax auto-reset; GAE cut at every done,     GymnaxEnv with gymnax's own time limit;
no bootstrap at the time limit                bootstrap_on_truncation False; reset_mode
                                              "fresh"
"Categorical-MLP": separate actor and         ``--network mlp``: PPOAdapter of two
critic, 2 x 256 ReLU, flattened obs           MLP(400, (256, 256), .), ReLU. Their init
                                              (lecun-normal kernels, a small-scale last
                                              layer) is NOT mapped: nnx.Linear's default.
(no conv in their PPO config)                 ``--network conv``: per port a
                                              ConvEncoder.minatar (3x3 VALID conv, 16
                                              channels, ReLU, dense 128, ReLU: the MinAtar
                                              paper's torso) and a Dense head, separate
                                              actor and critic. Not a published network.
evaluation: 164 episodes, stochastic          EvalConfig(n_envs=164, deterministic=False,
policy, full episodes, mean return            max_episode_length=max_steps_in_episode)
                                              during training; the final figure is the same
                                              on fresh episodes (a greedy one is stored too)
observation: float 0/1 grid [10, 10, C]       GymnaxEnv's float32 vector; ConvEncoder
                                              reshapes it to [10, 10, C] (row-major)
============================================  ==============================================
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.common import (
    Panel,
    git_state,
    load_average,
    median_ci,
    parse_seeds,
    write_cell_report,
)
from nnx_ppo_benchmarks.seeds import final_return, train_seeds

__all__ = ["GAMES", "NETWORKS", "PUBLISHED", "build_parser", "main", "write_report"]

PUBLISHED: dict[str, float] = {
    "Breakout-MinAtar": 28.0,
    "Asterix-MinAtar": 15.0,
    "Freeway-MinAtar": 58.0,
    "SpaceInvaders-MinAtar": 131.0,
}
"""gymnax-blines' PPO return at 1e7 steps (its README's table), by gymnax game name."""

GAMES: tuple[str, ...] = tuple(PUBLISHED)
"""The MinAtar games gymnax-blines published a PPO figure for."""

NETWORKS: tuple[str, ...] = ("conv", "mlp")
"""``conv``: ConvEncoder.minatar torsos; ``mlp``: the published Categorical-MLP."""

PUBLISHED_STEPS = 10_000_000
"""gymnax-blines' ``num_train_steps``."""

_SOURCE = "gymnax-blines PPO, README table at 1e7 steps"

ADAM_EPS = 1e-5
"""gymnax-blines' Adam ``eps`` (``optax.adam(eps=1e-5)`` in its ``utils/ppo.py``)."""

_UNRECORDED_EPS = 1e-8
"""The eps of cells recorded before the summary stored it (optax's default)."""


def make_network(kind: str, image_shape: tuple[int, int, int], n_actions: int) -> Callable:
    """``make_network(rngs)`` for `train_many`: separate actor and critic, each a conv
    torso and a dense head (``"conv"``) or the published 2 x 256 ReLU MLP (``"mlp"``)."""
    import math

    from flax import nnx

    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.conv import ConvEncoder
    from nnx_ppo.networks.feedforward import MLP, Dense
    from nnx_ppo.networks.sampling_layers import CategoricalSampler

    if kind not in NETWORKS:
        raise ValueError(f"network={kind!r}: use one of {', '.join(NETWORKS)}")
    flat = math.prod(image_shape)

    def build(rngs: nnx.Rngs) -> PPOAdapter:
        def port(out: int) -> list[Any]:
            if kind == "mlp":
                return [MLP(flat, (256, 256), out, rngs=rngs, activation=nnx.relu)]
            encoder = ConvEncoder.minatar(image_shape, rngs)
            return [encoder, Dense(encoder.out_features, out, rngs=rngs)]

        return PPOAdapter(
            action=Sequential([*port(n_actions), CategoricalSampler(rngs, entropy_weight=0.01)]),
            value=Sequential(port(1)),
        )

    return build


def make_config(
    total_steps: int, episode_length: int, *, smoke: bool, adam_eps: float = ADAM_EPS
) -> Any:
    """The translated `TrainConfig` (module docstring); ``smoke`` shrinks every size;
    ``adam_eps`` other than the published `ADAM_EPS` is for ablations."""
    from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig

    n_envs, rollout = (8, 16) if smoke else (64, 128)
    per_iteration = n_envs * rollout
    iterations = max(1, -(-total_steps // per_iteration))
    every = max(1, iterations // (2 if smoke else 10))
    per_call = max(d for d in range(1, every + 1) if iterations % d == 0)
    ppo = PPOConfig(
        n_envs=n_envs,
        rollout_length=rollout,
        total_steps=iterations * per_iteration,
        n_epochs=4,
        n_minibatches=4 if smoke else 8,
        learning_rate=5e-4,
        gae_lambda=0.95,
        discounting_factor=0.999,
        clip_range=0.2,
        value_clip_range=0.2,
        critic_loss_weight=0.5,
        normalize_advantages=True,
        max_grad_norm=0.5,
        adam_eps=adam_eps,
        bootstrap_on_truncation=False,
        reset_mode="fresh",
        iterations_per_call=per_call,
    )
    evals = EvalConfig(
        every_steps=every * per_iteration,
        n_envs=16 if smoke else 164,
        max_episode_length=50 if smoke else episode_length,
        deterministic=False,
    )
    return TrainConfig(ppo=ppo, eval=evals)


def run_cell(
    game: str,
    network: str,
    seeds: Sequence[int],
    *,
    steps: int,
    episodes: int,
    smoke: bool,
    adam_eps: float = ADAM_EPS,
) -> dict[str, Any]:
    """Train ``seeds`` of one (game, network) in one `train_many` and evaluate each
    final policy on ``episodes`` fresh episodes; returns the cell's JSON object."""
    import jax
    import numpy as np
    from flax import nnx

    from nnx_ppo.envs import GymnaxEnv

    env = GymnaxEnv.make(game)  # gymnax's own time limit, as gymnax-blines
    image_shape = tuple(env.env.observation_space(env.params).shape)
    episode_length = int(env.params.max_steps_in_episode)
    config = make_config(steps, episode_length, smoke=smoke, adam_eps=adam_eps)
    max_len = config.eval.max_episode_length
    meta = {"load_before": load_average(), "git": git_state()}
    build = make_network(network, image_shape, env.action_size)
    result, wall = train_seeds(env, build, config, seeds)
    runs = []
    for i, seed in enumerate(result.seeds):
        policy = result.network(i)
        final = {
            mode: float(
                final_return(
                    env,
                    policy,
                    seed,
                    n_envs=episodes,
                    max_episode_length=max_len,
                    deterministic=mode == "deterministic",
                )
            )
            for mode in ("stochastic", "deterministic")
        }
        params = jax.tree.leaves(nnx.state(policy, nnx.Param))
        runs.append(
            {
                "seed": int(seed),
                "final_stochastic": final["stochastic"],
                "final_deterministic": final["deterministic"],
                "curve": [[s, m["eval/episode_reward/mean"]] for s, m in result.eval_histories[i]],
                "finite_params": all(bool(np.all(np.isfinite(np.asarray(x)))) for x in params),
            }
        )
    finals = [r["final_stochastic"] for r in runs]
    low, median, high = median_ci(finals)
    summary = {
        "game": game,
        "network": network,
        "total_steps": int(result.total_steps),
        "seeds": len(runs),
        "median": median,
        "interval95": [low, high],
        "published": PUBLISHED[game],
        "adam_eps": adam_eps,
        "wall_s": wall,
        "steps_per_s": int(result.total_steps) * len(runs) / wall,
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
        "smoke": smoke,
        **meta,
        "load_after": load_average(),
    }
    return {"summary": summary, "runs": runs}


# Report -----------------------------------------------------------------------------------


def load_cells(out: Path) -> list[dict[str, Any]]:
    """The cells in ``out/cells``, in the order of `GAMES` then `NETWORKS`."""
    cells = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    known = [c for c in cells if c["summary"]["game"] in GAMES]
    return sorted(
        known,
        key=lambda c: (
            GAMES.index(c["summary"]["game"]),
            NETWORKS.index(c["summary"]["network"]),
            -cell_eps(c),
        ),
    )


def cell_eps(cell: dict[str, Any]) -> float:
    """The Adam ``eps`` a cell was trained with."""
    return float(cell["summary"].get("adam_eps", _UNRECORDED_EPS))


def cell_name(game: str, network: str, adam_eps: float) -> str:
    """``<game>__<network>.json`` for the published translation, with ``__eps<value>``
    for an ablation's eps."""
    suffix = "" if adam_eps == ADAM_EPS else f"__eps{adam_eps:g}"
    return f"{game}__{network}{suffix}.json"


def _row(cell: dict[str, Any]) -> str:
    from nnx_ppo.algorithms.analysis.statistics import iqm, stratified_bootstrap

    s = cell["summary"]
    finals = [r["final_stochastic"] for r in cell["runs"]]
    low, median, high = median_ci(finals)
    iqm_low, iqm_high = stratified_bootstrap(iqm, finals, n_resamples=2000)
    per_seed = ", ".join(f"{v:.1f}" for v in finals)
    published = s["published"]
    return (
        f"| {s['game']} | {s['network']} | {cell_eps(cell):g} | {s['total_steps']:,} | "
        f"{median:.1f} [{low:.1f}, {high:.1f}] | {published:g} | {median / published:.2f} | "
        f"{iqm(finals):.1f} [{iqm_low:.1f}, {iqm_high:.1f}] | {per_seed} | "
        f"{s['wall_s']:.0f} s |"
    )


def _panels(cells: list[dict[str, Any]]) -> list[Panel]:
    """One panel per game: each cell's curves against the published return."""
    panels = []
    for game in dict.fromkeys(c["summary"]["game"] for c in cells):
        curves = []
        for cell in (c for c in cells if c["summary"]["game"] == game):
            runs = cell["runs"]
            eps = cell_eps(cell)
            label = f"ours, {cell['summary']['network']}, eps {eps:g} ({len(runs)} seeds)"
            curves.append((label, [r["curve"] for r in runs]))
        reference = (PUBLISHED[game], "--", "gymnax-blines PPO")
        panels.append(Panel(game, curves, [reference]))
    return panels


def write_report(out: Path) -> Path:
    """Write ``out/report.md`` (and ``out/curves.png`` if a cell finished) from the
    cells in ``out/cells``; returns the report's path."""
    cells = load_cells(out)
    body = [
        f"Published: {_SOURCE}. Ours: final stochastic return on fresh episodes, "
        "median over seeds [95% percentile-bootstrap interval]; ratio = our median / "
        "published; IQM [95% stratified-bootstrap interval] "
        "(`nnx_ppo.algorithms.analysis.statistics`).",
        "",
        "| game | network | Adam eps | steps | ours, median [95% CI] | published | "
        "ratio | IQM [95% CI] | per-seed final | wall time |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(_row(c) for c in cells),
        "",
    ]
    title = "MinAtar (pixels) against gymnax-blines' PPO"
    return write_cell_report(out, title, body, _panels(cells), legend="upper left")


# Command ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.published.minatar",
        description="MinAtar with gymnax-blines' PPO settings: our conv or MLP policy, "
        "several seeds in one train_many, against the published PPO return.",
    )
    p.add_argument(
        "--game", default=GAMES[0], choices=GAMES, help="gymnax game (default: %(default)s)"
    )
    p.add_argument(
        "--network", default="conv", choices=NETWORKS, help="policy (default: %(default)s)"
    )
    p.add_argument(
        "--steps",
        type=float,
        default=float(PUBLISHED_STEPS),
        help="env steps per seed, rounded up to whole iterations (default: 1e7, the "
        "published budget)",
    )
    p.add_argument(
        "--seeds",
        type=parse_seeds,
        default=(0, 1, 2, 3, 4),
        help="training seeds (default: 0,1,2,3,4)",
    )
    p.add_argument(
        "--final-episodes",
        type=int,
        default=164,
        help="fresh episodes of each final evaluation (default: %(default)s)",
    )
    p.add_argument(
        "--adam-eps",
        type=float,
        default=ADAM_EPS,
        help="Adam's eps (default: %(default)g, the published setting; another value is "
        "an ablation, stored as its own cell)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, 4096 steps: a CPU check (default: off)",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        default=Path("outputs/minatar"),
        help="cells/, report.md and curves.png go here (default: %(default)s)",
    )
    p.add_argument(
        "--report-only", action="store_true", help="re-render from the cells (default: off)"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Train the requested cell (unless ``--report-only``), then write the report.
    Returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.steps < 1:
        raise SystemExit(f"--steps={args.steps:g}: give a positive number of env steps")
    if not args.adam_eps > 0:
        raise SystemExit(f"--adam-eps={args.adam_eps:g}: give a positive number (e.g. 1e-5)")
    if args.final_episodes < 1:
        raise SystemExit(f"--final-episodes={args.final_episodes}: give at least 1 episode")
    out: Path = args.output_dir
    (out / "cells").mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        steps = 4096 if args.smoke else int(args.steps)
        print(f"{args.game} / {args.network}: seeds {list(args.seeds)}, {steps} steps ...")
        cell = run_cell(
            args.game,
            args.network,
            args.seeds,
            steps=steps,
            episodes=args.final_episodes,
            smoke=args.smoke,
            adam_eps=args.adam_eps,
        )
        path = out / "cells" / cell_name(args.game, args.network, args.adam_eps)
        path.write_text(json.dumps(cell, indent=1) + "\n")
        s = cell["summary"]
        low, high = s["interval95"]
        print(
            f"  median {s['median']:.2f} [{low:.2f}, {high:.2f}] (published "
            f"{s['published']:g}); {s['wall_s']:.0f} s, {s['steps_per_s']:,.0f} env steps/s"
        )
    report = write_report(out)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
