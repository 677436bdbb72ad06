"""``nnx-ppo-quickstart``: train a PPO policy with one command.

Defaults train an MLP on brax ``inverted_pendulum`` (backend ``generalized``), which
reaches the maximum return of 1000 in well under the default step budget on 2 CPU
cores. Outputs (in ``--output-dir``, by default a new folder under
``outputs/quickstart/``): ``metrics.jsonl``, ``learning_curve.png``, ``config.json``,
``summary.json`` and ``checkpoints/``.

Options may come from a file (``--config run.toml``, or a run's ``config.json``), and
``--resume --output-dir DIR`` alone continues the run in ``DIR`` with the options it
recorded (`nnx_ppo_quickstart.run_options` says which a resume may change).

The command line itself is `nnx_ppo_quickstart.arguments`'s (`parse_args`).
``--seeds`` trains several seeds in one program (`nnx_ppo_quickstart.seeds`);
``--shard`` splits them across a scheduler's array tasks and ``--merge`` reads the
shards back (`nnx_ppo_quickstart.shards`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import (
    arguments_record,
    fail,
)
from nnx_ppo_apps_common.compiles import CompileLog
from nnx_ppo_apps_common.plotting import plot_learning_curve
from nnx_ppo_apps_common.results import done_message, throughput, write_json
from nnx_ppo_apps_common.runs import (
    provenance,
    stopped_message,
    use_compilation_cache,
)
from nnx_ppo_apps_common.training import train_config

from nnx_ppo_quickstart.arguments import (
    LOGGERS,
    PROG,
    options_text,
    parse_args,
    with_learning_rate_schedule,
)
from nnx_ppo_quickstart.randomizers import RANDOMIZATIONS, check_randomizer, randomizer
from nnx_ppo_quickstart.run_options import PER_INVOCATION
from nnx_ppo_quickstart.seeds import (
    done_text,
    eval_history,
    parse_seeds,
    run_summary,
    seed_folder,
    sweep_summary,
    write_seed_outputs,
)
from nnx_ppo_quickstart.shards import (
    finished_shards,
    merge_run,
    resolve_shard,
    sweep_name,
)

__all__ = [
    "LOGGERS",
    "RANDOMIZATIONS",
    "eval_history",
    "main",
    "options_text",
    "parse_args",
    "with_learning_rate_schedule",
]

_LOGGER_PACKAGES = {
    "tensorboard": ("tensorboardX", "nnx-ppo-train[logging]"),
    "wandb": ("wandb", "nnx-ppo-train[wandb]"),
}


def _check_loggers(loggers: list[str]) -> None:
    """Refuse a ``--logger`` whose package is not installed, with the install command."""
    import importlib.util

    for logger in dict.fromkeys(loggers):
        if logger in _LOGGER_PACKAGES:
            module, extra = _LOGGER_PACKAGES[logger]
            if importlib.util.find_spec(module) is None:
                raise ValueError(
                    f"--logger {logger} needs the {module} package, which is not installed; "
                    f"install it with: uv pip install '{extra}' (or leave --logger {logger} out)"
                )


def _log_sinks(
    loggers: list[str], out: Path, record: dict[str, Any], seeds: list[int]
) -> list[Any]:
    """The ``log_fn`` sinks of ``--logger`` besides ``metrics.jsonl`` (always written);
    with ``--seeds`` one per seed (`PerRun`), in its `seed_folder`."""
    from nnx_ppo.algorithms import PerRun, TensorBoardWriter, WandbWriter

    def sink(logger: str, folder: Path, name: str) -> Any:
        if logger == "tensorboard":
            return TensorBoardWriter(folder / "tensorboard")
        return WandbWriter(project=PROG, name=name, dir=str(folder), config=record["cli"])

    chosen = [logger for logger in dict.fromkeys(loggers) if logger in _LOGGER_PACKAGES]
    if not seeds:
        return [sink(logger, out, out.name) for logger in chosen]
    return [
        PerRun(
            lambda run, logger=logger: sink(
                logger, seed_folder(out, seeds[run]), f"{out.name}-seed_{seeds[run]}"
            )
        )
        for logger in chosen
    ]


def _per_run(sinks: list[Any]) -> Any:
    """A sweep's ``log_fn(metrics, step, run)`` sending every record to each of
    ``sinks`` (`PerRun` sinks)."""

    def log_fn(metrics: Any, step: int, run: int) -> None:
        for sink in sinks:
            sink(metrics, step, run)

    return log_fn


def _with_video(config: Any, args: argparse.Namespace, eval_env: Any) -> Any:
    """``config`` recording an evaluation video at every evaluation into
    ``<output-dir>/videos`` (``--video``).

    Raises:
        ValueError: If ``--env`` cannot render a video here (no ``render``, no OpenGL
            context, no MP4 writer), naming it and the fix.
    """
    from nnx_ppo.algorithms import VideoConfig
    from nnx_ppo.algorithms.observe.video import check_video_env

    video = VideoConfig(
        enabled=True,
        every_steps=args.eval_every,
        episode_length=args.episode_length,
        directory=str(args.output_dir / "videos"),
    )
    try:
        check_video_env(eval_env, env_name=f"--env {args.env}", video=video)
    except ValueError as error:
        raise ValueError(f"--video: {error}") from None
    return dataclasses.replace(config, video=video)


def _nothing_trained(args: argparse.Namespace, step: int) -> int:
    """A resumed run that was already at its budget: its ``summary.json`` (its own
    throughput) is kept; written only if missing, without a throughput."""
    out = args.output_dir
    print(
        f"Nothing to train: the run in {out} is at step {step:,}, its --steps budget is "
        f"{args.steps:,}; pass a larger --steps to train on. Results in {out}/"
    )
    path = out / "summary.json"
    if args.seeds:  # its summaries are those of the program that trained the seeds
        return 0
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):  # none, or a damaged one: written anew
        history = eval_history(out / "metrics.jsonl")
        # Nothing trained, nothing measured: no throughput.
        write_json(path, _summary(args, history, {"steps": step, "steps_per_second": None}))
    return 0


def _summary(
    args: argparse.Namespace,
    history: list[tuple[int, dict[str, float]]],
    measured: dict[str, Any],
    *,
    finished: bool = True,
) -> dict[str, Any]:
    """``summary.json`` of the run ``args`` describes (`run_summary`)."""
    return run_summary(args.env, args.network, history, measured, finished=finished)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    try:  # a --config or --resume problem: before anything is built or written
        args = parse_args(argv)
    except ValueError as error:
        return fail(PROG, str(error))
    if args.merge is not None:
        return _merge(args.merge)
    # Heavy imports after argument parsing, so `--help` is instant.
    from nnx_ppo.algorithms import (
        Checkpointer,
        StopOnSignal,
        SweepMismatchError,
        combine,
        train_many,
        train_ppo,
        train_shard,
    )
    from nnx_ppo.algorithms.checkpointing import latest_checkpoint
    from nnx_ppo_quickstart.envs import make_envs, parse_lag
    from nnx_ppo_quickstart.networks import make_network, parse_critic_obs

    try:  # every option before any environment is built
        config = train_config(
            args, seed=args.seed, reset_mode=args.reset, clip_range=args.clip_range
        )
        config = with_learning_rate_schedule(config, args.lr_schedule)
        parse_lag("--action-lag", args.action_lag)
        parse_lag("--obs-lag", args.obs_lag)
        _check_loggers(args.logger)
        critic_obs = parse_critic_obs(args.critic_obs)
        randomization_fn = randomizer(args.randomization, args.env)
        seeds = parse_seeds(args.seeds)
        shard = None
        if args.shard is not None or args.shards is not None:
            shard = resolve_shard(args.shard or "", args.shards, seeds)
        if not 0.0 <= args.lag_hold_prob <= 1.0:
            raise ValueError(
                f"--lag-hold-prob {args.lag_hold_prob} must be in [0, 1]: the probability "
                "that a step keeps its lags"
            )
    except (ValueError, TypeError) as error:
        return fail(PROG, str(error))
    if args.output_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.output_dir = Path("outputs/quickstart") / f"{args.env}-{args.network}-{stamp}"
    out = args.output_dir
    if not args.resume and (out / "checkpoints").exists():
        return fail(
            PROG,
            f"--output-dir {out} already holds a run; pass --resume to continue it "
            "or choose another --output-dir",
        )
    cache = use_compilation_cache(not args.no_compile_cache)
    compiles = CompileLog().start()  # every program of the run, set-up and evaluation too
    try:
        envs = make_envs(
            args.env,
            episode_length=args.episode_length,
            reward_scaling=args.reward_scaling,
            brax_backend=args.brax_backend,
            stagger=not args.no_stagger,
            action_lag=args.action_lag,
            obs_lag=args.obs_lag,
            lag_hold_prob=args.lag_hold_prob,
            action_repeat=args.action_repeat,
            obs_history=args.obs_history,
        )
        network = make_network(
            args.network,
            envs.observation_size,
            envs.action_size,
            args.seed,
            entropy_weight=args.entropy_cost,
            critic_obs=critic_obs,
        )
        if args.video:
            config = _with_video(config, args, envs.eval)
        if randomization_fn is not None:
            check_randomizer(args.randomization, randomization_fn, envs.train, args.n_envs)
    except (ValueError, TypeError) as error:
        compiles.stop()
        return fail(PROG, str(error))

    out.mkdir(parents=True, exist_ok=True)
    record = {
        "cli": arguments_record(args),  # nnx-ppo-export rebuilds the network from it
        "train_config": json.loads(json.dumps(dataclasses.asdict(config), default=str)),
        "provenance": provenance(),
    }
    folder = out if shard is None else shard.folder(out)  # where config.json goes
    if shard is not None:
        folder.mkdir(exist_ok=True)
    if not args.resume and not (folder / "sweep.json").exists():
        # A resume (a shard's: its sweep.json) rewrites it once it has succeeded.
        write_json(folder / "config.json", record)
    verb = "Resuming" if args.resume else "Training"
    what = f"seeds {args.seeds} in one program, " if seeds else ""
    if shard is not None:
        mine = ",".join(str(seeds[j]) for j in shard.runs(len(seeds)))
        what = f"shard {shard} of seeds {args.seeds} (seeds {mine}) in {folder.name}/, "
    print(
        f"{verb} {args.network} on {args.env} [{envs.source}] for {args.steps:,} steps "
        f"with {args.n_envs} envs; {what}outputs in {out}/"
    )
    print(f"Options: {options_text(args)} (preset {args.preset}; all of them in config.json)")
    sinks = _log_sinks(args.logger, out, record, seeds)
    start = time.perf_counter()
    # The with-block closes the checkpointer (waiting for its last save) even if
    # training fails. SIGTERM or Ctrl-C stops after the current call, with a checkpoint.
    with contextlib.ExitStack() as stack:
        # A shard's checkpointer and log are train_shard's, in its folder.
        checkpointer = None
        if shard is None:
            checkpointer = stack.enter_context(
                Checkpointer(
                    out / "checkpoints",
                    config=config,
                    save_every_steps=args.checkpoint_every,
                    resume=args.resume,
                )
            )
        stop = stack.enter_context(StopOnSignal())
        options: dict[str, Any] = {
            "eval_env": envs.eval,
            "progress": False if args.no_progress else None,  # None: a bar on a terminal
            "stop": stop,
            "log_fn": (_per_run(sinks) if seeds else combine(*sinks)) if sinks else None,
            "randomization_fn": randomization_fn,
        }
        if seeds:

            def factory(rngs: Any) -> Any:  # run i: the network of seed seeds[i]
                return make_network(
                    args.network, envs.observation_size, envs.action_size, rngs,
                    entropy_weight=args.entropy_cost, critic_obs=critic_obs,
                )  # fmt: skip

            if shard is not None:
                start_step = latest_checkpoint(folder / "checkpoints") or 0
                try:
                    result = train_shard(
                        envs.train, factory, config, seeds=seeds, shard=shard,
                        directory=folder, env_name=sweep_name(record["cli"], PER_INVOCATION),
                        save_every_steps=args.checkpoint_every, **options,
                    )  # fmt: skip
                except SweepMismatchError as error:
                    compiles.stop()
                    return fail(PROG, f"--output-dir {out} --shard {shard}: {error}")
            else:
                files = {"jsonl_path": out / "metrics.jsonl", "checkpoint": checkpointer}
                result = train_many(envs.train, factory, config, seeds=seeds, **options, **files)
        else:
            files = {"jsonl_path": out / "metrics.jsonl", "checkpoint": checkpointer}
            result = train_ppo(envs.train, network, config, **options, **files)
    for sink in sinks:
        sink.close()
    wall = time.perf_counter() - start
    print(compiles.stop().note(cache))
    if shard is not None:
        return _finish_shard(args, shard, seeds, result, wall, start_step, stop)
    assert checkpointer is not None
    restored = checkpointer.restored_step
    if restored is not None and result.total_steps == restored and not result.stopped:
        return _nothing_trained(args, restored)
    if args.resume:
        write_json(out / "config.json", record)
    if seeds:
        return _finish_seeds(args, seeds, result, wall, checkpointer.restored_step or 0, stop)

    # The whole run's evaluations, from the log: after --resume, result.eval_history
    # holds only those after the resume step. The summary is written before the plot,
    # so a plotting failure loses nothing.
    history = eval_history(out / "metrics.jsonl")
    measured = throughput(result.total_steps, wall, start_step=checkpointer.restored_step or 0)
    summary = _summary(args, history, measured, finished=not result.stopped)
    summary["compile"] = compiles.summary()
    if result.stopped:
        summary["stopped_by"] = stop.reason
    write_json(out / "summary.json", summary)
    if history:
        plot_learning_curve(history, out / "learning_curve.png", f"{args.network} on {args.env}")
    if result.stopped:
        print(stopped_message(PROG, stop.reason, result.total_steps, out), file=sys.stderr)
        return stop.exit_code
    print(done_message(summary, summary["final_eval_reward"], out))
    return 0


def _finish_seeds(
    args: argparse.Namespace,
    seeds: list[int],
    result: Any,
    wall: float,
    start_step: int,
    stop: Any,
) -> int:
    """``--seeds``: each seed's folder (metrics, learning curve, summary) and the run's
    summary of the seeds' final returns (`nnx_ppo_quickstart.seeds`)."""
    out = args.output_dir
    measured = throughput(result.total_steps, wall, start_step=start_step)
    finals = write_seed_outputs(
        out, out / "metrics.jsonl", seeds, env=args.env, network=args.network,
        measured=measured, finished=not result.stopped,
    )  # fmt: skip
    # Throughput of the whole program: every seed's steps.
    measured = throughput(result.total_steps * len(seeds), wall, start_step=start_step * len(seeds))
    summary = sweep_summary(
        args.env, args.network, seeds, result.total_steps, measured, finals,
        finished=not result.stopped,
    )  # fmt: skip
    if result.stopped:
        summary["stopped_by"] = stop.reason
    write_json(out / "summary.json", summary)
    if result.stopped:
        print(stopped_message(PROG, stop.reason, result.total_steps, out), file=sys.stderr)
        return stop.exit_code
    print(done_text(summary, out))
    return 0


def _finish_shard(
    args: argparse.Namespace,
    shard: Any,
    seeds: list[int],
    result: Any,
    wall: float,
    start_step: int,
    stop: Any,
) -> int:
    """``--shard``: the shard's ``summary.json`` (its throughput), then, if every shard
    has finished, the merged run (`merge_run`)."""
    out = args.output_dir
    folder = shard.folder(out)
    mine = [seeds[j] for j in shard.runs(len(seeds))]
    if result.stopped:
        print(
            f"{PROG}: shard {shard} stopped by {stop.reason or 'a stop request'} at step "
            f"{result.total_steps:,}, with a checkpoint in {folder}/; to continue, run the "
            "same command again (a requeued task does)",
            file=sys.stderr,
        )
        return stop.exit_code
    path = folder / "summary.json"
    if result.total_steps > start_step or not path.exists():  # else: kept, as it trained
        n = len(mine)
        write_json(
            path,
            {
                "shard": str(shard),
                "seeds": mine,
                "steps_per_seed": int(result.total_steps),
                **throughput(result.total_steps * n, wall, start_step=start_step * n),
                "per_seed": throughput(result.total_steps, wall, start_step=start_step),
            },
        )
    done = finished_shards(out, shard.count)
    if done < shard.count:
        print(
            f"Shard {shard} done: seeds {','.join(map(str, mine))} in {folder}/; {done} of "
            f"{shard.count} shards finished. The last shard to finish writes every seed's "
            f"folder and the summary in {out}/ (or run: {PROG} --merge {out})"
        )
        return 0
    return _merge(out)


def _merge(out: Path) -> int:
    """Merge the shards in ``out`` (`merge_run`) and print the run's result."""
    try:
        summary = merge_run(out)
    except (ValueError, OSError, KeyError) as error:
        return fail(PROG, str(error))
    print(
        f"All {summary['shards']} shards merged. "
        + done_text(summary, out, wall=" (the longest shard)")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
