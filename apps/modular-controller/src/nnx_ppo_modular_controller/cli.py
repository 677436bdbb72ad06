"""``nnx-ppo-modular-controller``: train the body-part controller on brax's ant.

Outputs (in ``--output-dir``): ``metrics.jsonl``, ``learning_curve.png``,
``topology.png``, ``config.json``, ``summary.json`` and ``results.md`` (the table of
evaluations). ``--draw PATH`` only draws the
topology and ``--mermaid`` only prints its mermaid source; neither trains.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nnx_ppo_apps_common.cli import arguments_record, fail, positive_int
from nnx_ppo_apps_common.compiles import CompileLog
from nnx_ppo_apps_common.plotting import plot_learning_curve
from nnx_ppo_apps_common.results import done_message, final_return, throughput, write_json
from nnx_ppo_apps_common.runs import add_run_arguments, provenance, use_compilation_cache
from nnx_ppo_apps_common.training import TrainingDefaults, add_training_arguments, train_config

if TYPE_CHECKING:
    from nnx_ppo.networks.graph import PopulationGraph

__all__ = ["main", "parse_args", "summary_table"]

PROG = "nnx-ppo-modular-controller"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    from nnx_ppo_modular_controller.envs import BACKENDS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train a PopulationGraph controller with one population per body part "
        "on brax's ant.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--draw",
        type=Path,
        metavar="PNG",
        help="draw the controller's topology to this PNG and exit",
    )
    parser.add_argument(
        "--mermaid", action="store_true", help="print the topology as a mermaid flowchart and exit"
    )
    parser.add_argument(
        "--backend",
        default="spring",
        choices=BACKENDS,
        help="brax physics backend (spring steps fastest on CPU)",
    )
    parser.add_argument("--root-size", type=positive_int, default=64)
    parser.add_argument("--joint-size", type=positive_int, default=16)
    parser.add_argument("--critic-size", type=positive_int, default=256)
    parser.add_argument(
        "--entropy", type=float, default=1e-2, help="entropy bonus weight of each joint's sampler"
    )
    parser.add_argument(
        "--reward-scaling", type=float, default=10.0, help="training rewards are multiplied by it"
    )
    add_training_arguments(
        parser,
        TrainingDefaults(steps=2_000_000, n_envs=256, eval_every=100_000),
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/modular-controller"))
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (and the progress lines printed off a terminal)",
    )
    add_run_arguments(parser)
    return parser.parse_args(argv)


def summary_table(summary: dict[str, Any]) -> str:
    """The markdown report of a run: one table row per evaluation, then the wall time.

    Args:
        summary: The dict the CLI writes to ``summary.json``.

    Returns:
        The markdown, ending without a newline.
    """
    lines = [
        "| env steps | eval return (mean +- std) | eval episode length |",
        "|---:|---:|---:|",
    ]
    for h in summary["eval_history"]:
        lines.append(
            f"| {h['step']:,} | {h['return_mean']:.1f} +- {h['return_std']:.1f} "
            f"| {h['episode_length']:.0f} |"
        )
    lines.append("")
    lines.append(
        f"{summary['steps']:,} steps in {summary['wall_time_s']:.0f} s "
        f"({summary['steps_per_second']:,.0f} steps/s including compilation and "
        f"evaluation), brax backend `{summary['backend']}`."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    # Heavy imports after argument parsing, so `--help` is instant.
    from nnx_ppo_modular_controller.controller import make_controller
    from nnx_ppo_modular_controller.drawing import body_positions, draw_topology

    try:
        network = make_controller(
            root_size=args.root_size,
            joint_size=args.joint_size,
            critic_size=args.critic_size,
            entropy_weight=args.entropy,
            seed=args.seed,
        )
    except (ValueError, TypeError) as error:
        return fail(PROG, str(error))
    graph = cast("PopulationGraph", network.layers[1])  # Normalizer, graph, adapter
    title = "Modular ant controller: one population per body part"
    if args.mermaid or args.draw:
        if args.mermaid:
            print(graph.to_mermaid())
        if args.draw:
            args.draw.parent.mkdir(parents=True, exist_ok=True)
            draw_topology(graph, args.draw, positions=body_positions(), title=title)
            print(f"Topology drawn to {args.draw}")
        return 0

    from nnx_ppo.algorithms import LogLevel, train_ppo
    from nnx_ppo_modular_controller.envs import make_envs

    try:  # the options before the environment is built
        # Also log the ant's own metrics (env/reward_forward, env/x_velocity, ...).
        config = train_config(
            args, seed=args.seed, log_level=LogLevel.DEFAULT | LogLevel.ENV_METRICS
        )
        cache = use_compilation_cache(not args.no_compile_cache)
        envs = make_envs(
            backend=args.backend,
            episode_length=args.episode_length,
            reward_scaling=args.reward_scaling,
        )
    except (ValueError, TypeError) as error:
        return fail(PROG, str(error))

    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", {"cli": arguments_record(args), "provenance": provenance()})
    draw_topology(graph, out / "topology.png", positions=body_positions(), title=title)
    print(
        f"Training the modular controller on brax ant ({args.backend}) for "
        f"{args.steps:,} steps with {args.n_envs} envs; outputs in {out}/"
    )
    start = time.perf_counter()
    compiles = CompileLog().start()  # the training's and the evaluation's programs
    result = train_ppo(
        envs.train,
        network,
        config,
        eval_env=envs.eval,
        progress=False if args.no_progress else None,  # off a terminal: plain lines
        jsonl_path=out / "metrics.jsonl",
    )
    wall = time.perf_counter() - start
    print(compiles.stop().note(cache))

    # The results before the figure, so a plotting failure loses nothing.
    history = result.eval_history
    summary = {
        "backend": args.backend,
        **throughput(result.total_steps, wall),
        "eval_history": [
            {
                "step": step,
                "return_mean": round(m["eval/episode_reward/mean"], 2),
                "return_std": round(m.get("eval/episode_reward/std", 0.0), 2),
                "episode_length": round(m.get("eval/episode_length/mean", 0.0), 1),
            }
            for step, m in history
        ],
    }
    write_json(out / "summary.json", summary)
    (out / "results.md").write_text(summary_table(summary) + "\n")
    plot_learning_curve(
        history, out / "learning_curve.png", f"Modular controller on brax ant ({args.backend})"
    )
    print(done_message(summary, final_return(history), out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
