"""Look inside a trained memory-task LSTM: its activations over one episode, as a PNG.

``python -m nnx_ppo_memory_task.activations`` trains the app's ``lstm`` network on
``MemoryTask(delay)`` (the app's PPO settings), records one deterministic episode with
`nnx_ppo.algorithms.rollout.record_activations_rollout` and draws, for one
environment: the cue and the action (with the target, the cue of ``delay`` steps ago),
then one heatmap (units x time) per recorded layer of the actor. `plot_activations`
draws any recorded episode, of any network.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "plot_activations"]


def plot_activations(
    activations: Mapping[str, Any],
    dones: Any,
    path: Path,
    *,
    env_index: int = 0,
    signals: Mapping[str, Any] | None = None,
    title: str = "",
) -> None:
    """Draw one environment's recorded activations over an episode and save a PNG.

    Args:
        activations: Flat ``{path: [T, B, ...]}`` activations
            (`nnx_ppo.networks.recording.flatten_activations` of what
            ``record_activations_rollout`` returned), in the order to draw them. Each
            becomes a heatmap of its units (trailing axes flattened) over time.
        dones: ``[T, B]`` bool: steps after the episode ended, drawn blank.
        path: Where to write the PNG (its folder must exist).
        env_index: Which environment (column ``b``) to draw.
        signals: Optional ``{label: [T, B, K]}`` traces drawn as lines in a first panel
            (e.g. the cue, the target and the action).
        title: The figure title.

    Raises:
        ValueError: If there is nothing to draw, ``env_index`` is out of range, or an
            array does not have ``dones``' ``[T, B]`` leading axes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dones = np.asarray(dones, bool)
    if dones.ndim != 2:
        raise ValueError(f"dones must be [T, B], got shape {dones.shape}")
    steps, n_envs = dones.shape
    if not 0 <= env_index < n_envs:
        raise ValueError(f"env_index={env_index} is out of range for {n_envs} environments")
    if not activations:
        raise ValueError("activations is empty: record a network with with_recording first")
    live = ~dones[:, env_index]

    def column(name: str, value: Any) -> np.ndarray:
        array = np.asarray(value, np.float32)
        if array.shape[:2] != (steps, n_envs):
            raise ValueError(
                f"{name!r} has shape {array.shape}; expected leading axes [T, B] = "
                f"[{steps}, {n_envs}] like dones"
            )
        units = array[:, env_index].reshape(steps, -1)
        return np.where(live[:, None], units, np.nan)

    panels = [(name, column(name, value)) for name, value in activations.items()]
    n_rows = len(panels) + (1 if signals else 0)
    heights = ([1.2] if signals else []) + [max(0.6, min(2.4, p.shape[1] / 12)) for _, p in panels]
    fig, axes = plt.subplots(
        n_rows,
        1,
        figsize=(9, 1.2 + 1.3 * sum(heights)),
        sharex=True,
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    rows = list(axes[:, 0])
    t = np.arange(steps)
    if signals:
        ax = rows.pop(0)
        for label, value in signals.items():
            ax.step(t, column(label, value)[:, 0], where="mid", label=label)
        ax.legend(loc="upper right", fontsize=7, ncol=len(signals))
        ax.set_ylabel("signal", fontsize=8)
    for ax, (name, units) in zip(rows, panels, strict=True):
        bound = float(np.nanmax(np.abs(units))) if np.isfinite(units).any() else 1.0
        image = ax.imshow(
            units.T,
            aspect="auto",
            interpolation="nearest",
            cmap="RdBu_r",
            vmin=-bound,
            vmax=bound,
            extent=(-0.5, steps - 0.5, units.shape[1] - 0.5, -0.5),
        )
        ax.set_ylabel(f"{name}\n({units.shape[1]} units)", fontsize=8)
        fig.colorbar(image, ax=ax, pad=0.01, fraction=0.03)
    rows[-1].set_xlabel("step")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Train the app's LSTM on MemoryTask and plot its activations over one episode."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_memory_task.activations",
        description="Train the memory-task LSTM and draw its activations over an episode.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--delay", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=16, help="LSTM width")
    parser.add_argument("--steps", type=int, default=50_000, help="training env steps")
    parser.add_argument("--episode-length", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=Path("memory_task_activations.png"))
    args = parser.parse_args(argv)

    import jax

    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
    from nnx_ppo.algorithms.ppo import train_ppo
    from nnx_ppo.algorithms.rollout import record_activations_rollout
    from nnx_ppo.envs import MemoryTask
    from nnx_ppo.networks.recording import flatten_activations
    from nnx_ppo.wrappers import EpisodeWrapper
    from nnx_ppo_memory_task.networks import make_network

    env = EpisodeWrapper(MemoryTask(args.delay), args.episode_length)
    network = make_network("lstm", delay=args.delay, hidden=args.hidden, seed=args.seed)
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=64,
            rollout_length=20,
            n_minibatches=4,
            learning_rate=3e-3,
            discounting_factor=0.5,
            total_steps=args.steps,
        ),
        eval=EvalConfig(enabled=False),
        seed=args.seed,
    )
    train_ppo(env, network, config, progress=False)

    n_envs, key = 4, jax.random.key(args.seed + 1)
    acts, dones = record_activations_rollout(env, network, n_envs, args.episode_length, key)
    actor = acts[0]["action"]  # make_lstm_actor_critic: Sequential([PPOAdapter(...)])
    # The cue sequence does not depend on the actions: replay the environments with the
    # recorded actions to read the observations the network saw.
    actions = np.asarray(actor[2]["action"])
    states = jax.vmap(env.reset)(jax.random.split(key, n_envs))
    cues = []
    for t in range(args.episode_length):
        cues.append(np.asarray(states.obs))
        states = jax.vmap(env.step)(states, actions[t])
    cue = np.stack(cues)
    target = np.concatenate([np.zeros_like(cue[: args.delay]), cue[: -args.delay]])
    layers = {
        "LSTM h": actor[0],
        "actor hidden": actor[1][0],
        "mean, pre-std": actor[1][1],
    }
    plot_activations(
        {name: value for name, value in flatten_activations(layers).items()},
        dones,
        args.output,
        signals={"cue": cue, f"target (cue t-{args.delay})": target, "action": actions},
        title=f"Trained LSTM on MemoryTask(delay={args.delay}): one episode",
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
