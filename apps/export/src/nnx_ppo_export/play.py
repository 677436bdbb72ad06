"""``nnx-ppo-play``: watch a trained policy from a run folder.

::

    nnx-ppo-play RUN_DIR [--step N] [--episodes 5] [--seed 0] [--video out.mp4]
                 [--activations out.npz]

``RUN_DIR`` is the ``--output-dir`` of an ``nnx-ppo-quickstart`` run: the network is
rebuilt from its ``config.json`` and loaded from the latest readable checkpoint
(``--step`` for another), exactly as ``nnx-ppo-export`` does (`nnx_ppo_export.rebuild`).
The deterministic policy (``eval()`` mode: the samplers' mean action) plays
``--episodes`` episodes in parallel on the run's evaluation environment (the nominal
model, whole episodes of the run's ``--episode-length``), reset from
``jax.random.split(PRNGKey(seed), episodes)``: the same rollout as
`nnx_ppo.algorithms.observe.evaluation.evaluate` with that key, so the mean printed equals its
``eval/episode_reward/mean``. ``--video`` renders one episode (reset from
``split(PRNGKey(seed), 1)``) to MP4 (MuJoCo's
OpenGL backend is chosen with `choose_mujoco_gl` before brax or Playground is imported;
without one it fails at once and names the backends it tried; Playground's per-frame
progress bar is switched off, so the output is this command's lines only).
``--activations`` saves every module's activations over the episodes
(`nnx_ppo.algorithms.observe.activations.record_activations_rollout`). ``--randomized`` is
refused, naming the run, before anything is built: a quickstart run trains and
evaluates on its environment's nominal model, so it has no randomization to play with.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import HelpFormatter, fail, non_negative_int, positive_int
from nnx_ppo_apps_common.compiles import CompileLog
from nnx_ppo_apps_common.runs import add_run_arguments, use_compilation_cache

__all__ = ["main", "parse_args", "play_episodes"]

PROG = "nnx-ppo-play"
GL_CANDIDATES = ("egl", "osmesa")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Play a trained policy of an nnx-ppo-quickstart run: returns, video, "
        "activations.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR",
        help="the --output-dir of an nnx-ppo-quickstart run, or its checkpoints/ folder; "
        "for a --seeds run the folder of one seed, RUN/seed_<s>",
    )
    parser.add_argument(
        "--step", type=non_negative_int, default=None, help="checkpoint step (default: latest)"
    )
    parser.add_argument(
        "--episodes", type=positive_int, default=5, help="episodes to play, in parallel"
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the episodes' resets"
    )
    parser.add_argument(
        "--randomized",
        action="store_true",
        help="play on randomized physics models: only for runs trained with domain "
        "randomization, which nnx-ppo-quickstart runs are not (refused for them)",
    )
    parser.add_argument(
        "--video", type=Path, default=None, help="write one episode as MP4 (default: no video)"
    )
    parser.add_argument(
        "--activations",
        type=Path,
        default=None,
        help="save every module's activations over the episodes as .npz (default: not saved)",
    )
    add_run_arguments(parser)
    return parser.parse_args(argv)


def play_episodes(env: Any, network: Any, key: Any, n_episodes: int, max_steps: int) -> Any:
    """Per-episode returns and lengths of the deterministic policy, ``([N], [N])``.

    ``network`` is not changed (an ``eval()`` copy is stepped). The rollout is
    `evaluate`'s (`episode_returns`): ``n_episodes`` environments reset from ``jax.random.split(key,
    n_episodes)``, ``max_steps`` steps, rewards counted up to and including the step
    that first sets ``done``.
    """
    import jax

    from nnx_ppo.algorithms.core.rollout import eval_copy, split_network, sum_leaves
    from nnx_ppo.algorithms.observe.evaluation import episode_returns

    graphdef, params, network_state = split_network(eval_copy(network))

    @jax.jit
    def run(params: Any, network_state: Any, key: Any) -> tuple[Any, Any]:
        returns, length = episode_returns(
            env, graphdef, params, network_state, key,
            n_envs=n_episodes, max_episode_length=max_steps,
        )  # fmt: skip
        return sum_leaves(returns), length

    return jax.device_get(run(params, network_state, key))


def _choose_gl() -> str | None:
    """The MuJoCo GL backend for ``--video`` (before brax or Playground is imported)."""
    from nnx_ppo.algorithms.observe.video import choose_mujoco_gl

    return choose_mujoco_gl(GL_CANDIDATES)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    if args.randomized:  # before anything is built: only the run's config.json is read
        return fail(PROG, _randomized_refusal(args.run_dir))
    if args.video is not None:  # first: MuJoCo fixes its GL backend when imported
        try:
            backend = _choose_gl()
        except RuntimeError as error:
            return fail(PROG, f"--video: {error}")
        if backend is None:
            return fail(
                PROG,
                "--video: no OpenGL backend for MuJoCo's renderer works on this machine "
                f"(no display; tried MUJOCO_GL={', '.join(GL_CANDIDATES)}). Install EGL (a "
                "GPU driver) or OSMesa (apt-get install libosmesa6), set MUJOCO_GL to a "
                "backend that works, or run with a display; or leave out --video",
            )
        print(f"Rendering with MUJOCO_GL={backend}")
    # Heavy imports after argument parsing, so `--help` is instant.
    import jax
    import numpy as np

    from nnx_ppo_export.rebuild import rebuild

    cache = use_compilation_cache(not args.no_compile_cache)
    compiles = CompileLog().start()

    try:
        rebuilt = rebuild(args.run_dir, step=args.step)
    except (FileNotFoundError, ValueError, TypeError) as error:
        return fail(PROG, str(error))
    env, network = rebuilt.envs.eval, rebuilt.network
    max_steps = int(rebuilt.source["episode_length"])
    key = jax.random.PRNGKey(args.seed)
    video_config = None
    if args.video is not None:  # check the renderer and the encoder before the rollout
        from nnx_ppo.algorithms import VideoConfig
        from nnx_ppo.algorithms.observe.video import check_video_env

        video_config = VideoConfig(
            enabled=True, episode_length=max_steps, directory=str(args.video.parent)
        )
        try:
            with _no_progress_bars():  # it renders a frame, with Playground's bar
                check_video_env(env, env_name=str(rebuilt.source["env"]), video=video_config)
        except ValueError as error:
            return fail(PROG, f"--video: {error}")

    print(f"Playing {rebuilt.description}")
    returns, lengths = play_episodes(env, network, key, args.episodes, max_steps)
    for i, (ret, length) in enumerate(zip(returns, lengths, strict=True), start=1):
        print(f"  episode {i}: return {float(ret):.6g} ({int(length)} steps)")
    print(f"Mean return over {args.episodes} episodes: {float(np.mean(returns)):.6g}")

    if video_config is not None:
        _write_video(env, network, key, video_config, args.video)
        print(f"Video of one episode: {args.video}")
    if args.activations is not None:
        _write_activations(env, network, key, args.episodes, max_steps, args.activations)
        print(f"Activations [T={max_steps}, B={args.episodes}, ...]: {args.activations}")
    print(compiles.stop().note(cache))
    return 0


def _randomized_refusal(run_dir: Path) -> str:
    """Why ``--randomized`` cannot apply to ``run_dir``, naming the run and the fix.

    Only the run's ``config.json`` is read. A quickstart run has no domain-randomization
    option: it trained and evaluates on the environment's nominal model, and its
    checkpoint holds no randomization function to draw models from.
    """
    from nnx_ppo_export.rebuild import find_checkpoints

    try:
        _, run = find_checkpoints(run_dir)
    except FileNotFoundError as error:
        return f"--randomized: {error}"
    if run is None:
        return (
            f"--randomized: {run_dir} holds no config.json of an nnx-ppo-quickstart run, the "
            "only runs nnx-ppo-play plays; pass a quickstart run folder, without --randomized"
        )
    cli = json.loads((run / "config.json").read_text()).get("cli", {})
    env = cli.get("env", "its environment") if isinstance(cli, dict) else "its environment"
    return (
        f"--randomized: run {run_dir} was trained and is evaluated on {env}'s nominal model "
        "(nnx-ppo-quickstart has no domain-randomization option), so it has no randomized "
        "models to play on. Leave out --randomized to play it on the nominal model; to "
        "measure a policy on randomized models, train it with train_ppo(..., "
        "randomization_fn=...) and evaluate with EvalConfig(randomized=True) (see the "
        "'Domain randomization' how-to)"
    )


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Switch off tqdm progress bars inside the block (Playground's ``render`` draws one
    per call, on stderr, between this command's lines: for the check frame and for the
    video).

    Every tqdm bar (``tqdm.tqdm``, ``tqdm.auto``, ...) is built by
    ``tqdm.std.tqdm.__init__``; inside the block it is called with ``disable=True``, the
    switch tqdm itself offers, whatever the caller imported. Restored on exit.
    """
    try:
        from tqdm import std
    except ImportError:  # no tqdm installed: nothing can draw a bar
        yield
        return
    saved = vars(std.tqdm)["__init__"]  # restored as it was defined
    init = std.tqdm.__init__

    def quiet_init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        init(self, *args, **kwargs)

    setattr(std.tqdm, "__init__", quiet_init)  # noqa: B010 (mypy: no method assignment)
    try:
        yield
    finally:
        setattr(std.tqdm, "__init__", saved)  # noqa: B010


def _write_video(env: Any, network: Any, key: Any, video: Any, path: Path) -> None:
    from nnx_ppo.algorithms.core.rollout import eval_copy, split_network
    from nnx_ppo.algorithms.observe.video import make_video_recorder

    graphdef, params, network_state = split_network(eval_copy(network))
    record = make_video_recorder(env, graphdef, video)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as folder:
        with _no_progress_bars():
            written = record(params, network_state, key, 0, directory=folder)
        shutil.move(written, path)


def _write_activations(
    env: Any, network: Any, key: Any, n_episodes: int, max_steps: int, path: Path
) -> None:
    import numpy as np

    from nnx_ppo.algorithms import record_activations_rollout
    from nnx_ppo.networks.recording import flatten_activations

    activations, dones = record_activations_rollout(env, network, n_episodes, max_steps, key)
    arrays = {
        f"activations/{k}": np.asarray(v) for k, v in flatten_activations(activations).items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(os.fspath(path), done=np.asarray(dones), **arrays)


if __name__ == "__main__":
    raise SystemExit(main())
