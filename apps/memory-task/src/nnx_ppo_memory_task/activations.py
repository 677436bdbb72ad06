"""Look inside a trained memory-task LSTM: its activations over one episode, as a PNG.

``python -m nnx_ppo_memory_task.activations`` trains the app's ``lstm`` network on
``MemoryTask(delay)`` (the app's PPO settings), records one deterministic episode with
`nnx_ppo.algorithms.observe.activations.record_activations_rollout` and draws, for one
environment: the cue and the action (with the target, the cue of ``delay`` steps ago),
then one heatmap (units x time) per recorded layer of the actor, with the library's
`nnx_ppo.networks.analysis.plotting.plot_activations`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

__all__ = ["main"]


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

    from nnx_ppo.algorithms import record_activations_rollout, train_ppo
    from nnx_ppo.envs import MemoryTask
    from nnx_ppo.networks.analysis.plotting import plot_activations
    from nnx_ppo.networks.recording import flatten_activations
    from nnx_ppo.wrappers import EpisodeWrapper
    from nnx_ppo_memory_task.cli import analysis_train_config
    from nnx_ppo_memory_task.networks import make_network

    env = EpisodeWrapper(MemoryTask(args.delay), args.episode_length)
    network = make_network("lstm", delay=args.delay, hidden=args.hidden, seed=args.seed)
    config = analysis_train_config(args.steps, 20, args.seed)
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
