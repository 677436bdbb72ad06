"""Fixed points of a network trained on the flip-flop memory task.

``python -m nnx_ppo_memory_task.fixed_points`` trains the app's ``lstm`` network on
``MemoryTask(delay=1, cue_size=C, cue_probability=p, hold=True)``: reproduce, at every
step, the last cue shown (``2 ** C`` possible values, held across the steps without a
cue). It then looks at the trained network as a dynamical system with
`nnx_ppo.networks.analysis`:

1. the states it visits on evaluation episodes (`CarryMap.rollout`);
2. the fixed points of its carry map with no cue shown (observation zero), found from
   those states (`find_fixed_points`), with their stability;
3. the trajectories in the plane of two principal components, coloured by the cue the
   network must hold, with the fixed points marked (``pca_fixed_points.png``), and one
   episode's activity (``activity.png``).

A network that solved the task holds each of the ``2 ** C`` values in an attractor:
``summary.json`` reports how many attractors it found, what the policy outputs at each
(the held value), and the score of the evaluation episodes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Train, find the fixed points, write the figures and ``summary.json``."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_memory_task.fixed_points",
        description="Train an LSTM on the flip-flop memory task and find its fixed points.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--network", default="lstm", help="the app's network (lstm, graph)")
    parser.add_argument("--cue-size", type=int, default=2, help="cue entries: 2**C values")
    parser.add_argument("--cue-probability", type=float, default=0.2)
    parser.add_argument("--hidden", type=int, default=32, help="recurrent width")
    parser.add_argument("--steps", type=int, default=1_000_000, help="training env steps")
    parser.add_argument("--episode-length", type=int, default=50)
    parser.add_argument("--starts", type=int, default=256, help="fixed-point searches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/fixed_points"))
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from nnx_ppo.algorithms import train_ppo
    from nnx_ppo.envs import MemoryTask
    from nnx_ppo.networks.analysis import CarryMap, find_fixed_points, pca
    from nnx_ppo.networks.analysis.plotting import plot_activations, plot_trajectories
    from nnx_ppo.wrappers import EpisodeWrapper
    from nnx_ppo_memory_task.cli import analysis_train_config
    from nnx_ppo_memory_task.networks import make_network

    task = MemoryTask(1, args.cue_size, args.cue_probability, hold=True)
    env = EpisodeWrapper(task, args.episode_length)
    network = make_network(
        args.network, cue_size=args.cue_size, delay=1, hidden=args.hidden, seed=args.seed
    )
    config = analysis_train_config(args.steps, args.episode_length, args.seed)
    train_ppo(env, network, config, progress=False)

    # Evaluation episodes: the cues do not depend on the actions, so the observations
    # are those of the environments stepped with any action.
    n_envs, steps = 32, args.episode_length
    state = jax.vmap(env.reset)(jax.random.split(jax.random.key(args.seed + 1), n_envs))
    observations, held = [], []
    zero = jnp.zeros((n_envs, args.cue_size))
    for _ in range(steps):
        observations.append(np.asarray(state.obs))
        state = jax.vmap(env.step)(state, zero)
        held.append(np.asarray(state.pipeline_state["held"]))  # the step's target
    obs, target = np.stack(observations), np.stack(held)  # [T, B, C]

    dynamics = CarryMap(network, args.cue_size, obs=jnp.zeros(args.cue_size))
    states = np.asarray(dynamics.rollout(jnp.asarray(obs)))  # [T, B, N]
    policy = dynamics.policy
    carry = policy.initial_carry(n_envs)
    actions = []
    for t in range(steps):
        carry, action = policy.step(carry, jnp.asarray(obs[t]))
        actions.append(np.asarray(action))
    actions_np = np.stack(actions)
    score = float(np.mean(actions_np * target) / max(np.mean(np.abs(target)), 1e-9))

    visited = states.reshape(-1, dynamics.size)
    key = jax.random.key(args.seed + 2)
    picks = jax.random.choice(key, visited.shape[0], (args.starts,), replace=False)
    noise = 0.05 * jax.random.normal(jax.random.fold_in(key, 1), (args.starts, dynamics.size))
    found = find_fixed_points(dynamics, jnp.asarray(visited)[picks] + noise)
    attractors = found.points[found.stable]
    at_rest = jnp.broadcast_to(jnp.zeros(args.cue_size), (len(attractors), args.cue_size))
    outputs = np.asarray(policy.step(dynamics.unflatten(jnp.asarray(attractors)), at_rest)[1])

    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    basis = pca(states, n_components=2)
    # Colour each trajectory by the value it must hold at the end of the episode.
    labels = (target[-1] > 0) @ (2 ** np.arange(args.cue_size))
    plot_trajectories(
        states, basis, out / "pca_fixed_points.png", fixed_points=found, labels=labels,
        title=f"{args.network}: {len(attractors)} attractors, {len(found)} fixed points",
    )  # fmt: skip
    done = np.zeros((steps, n_envs), bool)
    plot_activations(
        {"carry (c, h)": states}, done, out / "activity.png",
        signals={"cue": obs, "held cue": target, "action": actions_np},
        title=f"{args.network} on the flip-flop task: one episode",
    )  # fmt: skip
    summary = {
        "network": args.network,
        "cue_size": args.cue_size,
        "values_to_hold": 2**args.cue_size,
        "score": score,
        "fixed_points": len(found),
        "attractors": len(attractors),
        "attractor_outputs": np.round(outputs, 3).tolist(),
        "unstable_dimensions": found.unstable_dimensions.tolist(),
        "largest_eigenvalue_modulus": np.round(np.abs(found.eigenvalues[:, 0]), 4).tolist(),
        "pca_variance_ratio": np.round(basis.explained_variance_ratio, 4).tolist(),
        "command": "python -m nnx_ppo_memory_task.fixed_points "
        + " ".join(sys.argv[1:] if argv is None else argv),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
