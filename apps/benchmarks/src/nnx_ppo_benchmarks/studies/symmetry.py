"""Mirror symmetry against none (issue 66): the symmetry error of trained policies and
their returns, for an MLP and a recurrent policy.

For each network and arm, K seeds train in one ``train_many`` program at the suite's
settings (Playground's brax-PPO settings of ``--task``, 256 envs, 8 minibatches,
``--steps`` env steps; ``pointmass`` is our tiny `PointMass` at tiny settings, for a
smoke run on a CPU), then every run is evaluated as the suite's ``ours`` child does
(128 envs x 1000 steps, deterministic, key ``seed + 10_000``) and its symmetry error
``mean |a(M s) - M a(s)|`` of the deterministic policy is measured on the states that
policy visits (`symmetry_error` over 32 envs x 500 steps of the evaluation env, key
``seed + 20_000``). One JSON line per (network, arm) goes to ``--out``:
the returns and errors per seed, their medians, and the train time.

Arms (``base``: no symmetry): ``augment`` (the mirrored sequences in every minibatch),
``loss`` (the mirror loss, weight ``--mirror-loss-weight``), ``augment+loss``. The
task's mirror is ``SYMMETRIES[task]``: the cart-pole mirrored in x (cart position, sin
of the pole angle and both velocities flip, cos does not; the force flips); the point
mass mirrored in x.

Run from the repository root with the harness's venv of ours (a TPU: the lead's
measurement, 5 seeds)::

    PYTHONPATH=apps/benchmarks/src python -m nnx_ppo_benchmarks.studies.symmetry \\
        --task CartpoleBalance --networks mlp_small,lstm --arms base,augment+loss \\
        --seeds 0,1,2,3,4 --steps 1000000 --out symmetry.jsonl

and at tiny size on a CPU: ``--task pointmass --steps 4000 --seeds 0,1``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["ARMS", "SYMMETRIES", "arm_symmetry", "main", "run_arm", "visited_error"]

ARMS = ("augment", "loss")
CARTPOLE = {"observation": (-1, 1, -1, -1, -1), "action": (-1,)}  # x, cos, sin, v, omega
SYMMETRIES: dict[str, dict[str, tuple[int, ...]]] = {
    "CartpoleBalance": CARTPOLE,
    "CartpoleSwingup": CARTPOLE,
    "pointmass": {"observation": (-1, 1), "action": (-1, 1)},
}


def arm_symmetry(arm: str, task: str, mirror_loss_weight: float) -> Any:
    """The `Symmetry` an arm trains with (``None`` for ``base``).

    >>> arm_symmetry("augment+loss", "pointmass", 0.5).mirror_loss_weight
    0.5
    >>> arm_symmetry("base", "pointmass", 0.5) is None
    True
    """
    from nnx_ppo.algorithms.symmetry import Symmetry

    parts = set(arm.split("+")) - {"base"}
    if parts - set(ARMS):
        raise ValueError(f"unknown arm(s) {sorted(parts - set(ARMS))}; choose from {ARMS}")
    if task not in SYMMETRIES:
        raise ValueError(f"--task {task!r} has no declared mirror; choose from {list(SYMMETRIES)}")
    if not parts:
        return None
    weight = mirror_loss_weight if "loss" in parts else 0.0
    return Symmetry.from_signs(
        **SYMMETRIES[task], augment="augment" in parts, mirror_loss_weight=weight
    )


def visited_error(
    env: Any, network: Any, symmetry: Any, seed: int, n_envs: int, steps: int
) -> float:
    """`symmetry_error` of ``network``'s deterministic policy on the states it visits:
    ``n_envs`` episodes of ``env`` for ``steps`` steps from keys of ``seed + 20_000``."""
    import jax

    from nnx_ppo.algorithms.core.mirroring import symmetry_error
    from nnx_ppo.algorithms.core.rollout import eval_copy, reset_envs, unroll_env

    policy = eval_copy(network)
    first = reset_envs(env, jax.random.PRNGKey(seed + 20_000), n_envs)
    carry = policy.initialize_state(n_envs)
    _, _, rollout = unroll_env(env, policy, first, carry, steps, reset_state=first)
    return symmetry_error(network, symmetry, rollout.transitions.obs, rollout.transitions.done)


def _setup(task: str, network: str, steps: int, seed: int) -> tuple[Any, Any, Any, Any, int]:
    """``(env, eval_env, config, factory, episode_length)`` of one cell."""
    from flax import nnx

    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
    from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
    from nnx_ppo_benchmarks.settings import NETWORKS

    family = NETWORKS[network]
    if family.kind not in ("mlp", "lstm"):
        raise ValueError(f"--networks {network!r}: this study trains MLP and LSTM families")
    if task == "pointmass":
        from nnx_ppo.envs import PointMass
        from nnx_ppo.wrappers import EpisodeWrapper

        env = EpisodeWrapper(PointMass(), episode_length=50)
        ppo = PPOConfig(n_envs=16, rollout_length=10, n_minibatches=2, n_epochs=4,
                        total_steps=steps, learning_rate=1e-3)  # fmt: skip
        config = TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False), seed=seed)

        def factory(rngs: nnx.Rngs) -> nnx.Module:
            if family.kind == "mlp":
                return make_mlp_actor_critic(2, 2, family.policy_hidden, family.value_hidden,
                                             rngs=rngs)  # fmt: skip
            return make_lstm_actor_critic(2, 2, family.lstm_size, family.policy_hidden,
                                          family.value_hidden, rngs=rngs)  # fmt: skip

        return env, env, config, factory, 50
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config
    from nnx_ppo_benchmarks.settings import RunSpec, chunk_plan
    from nnx_ppo_benchmarks.suite.tasks import task_settings

    settings = task_settings(task, n_envs=256, n_minibatches=8)
    _, total = chunk_plan(steps, 4, settings.steps_per_iteration)
    spec = RunSpec(implementation="ours", network=network, env_name=task, seed=seed,
                   total_steps=total, n_chunks=4, ppo=settings)  # fmt: skip
    env, eval_env = make_envs(spec)
    config = dataclasses.replace(make_train_config(spec), log_every_calls=10**6)

    def harness_factory(rngs: nnx.Rngs) -> nnx.Module:
        return build_network(spec, env.observation_size, env.action_size, rngs=rngs)

    return env, eval_env, config, harness_factory, settings.episode_length


def run_arm(
    arm: str,
    task: str,
    network: str,
    seeds: list[int],
    steps: int,
    mirror_loss_weight: float = 1.0,
) -> dict[str, Any]:
    """Train and evaluate one (network, arm) cell: its JSON record."""
    from nnx_ppo.algorithms.sweeps.many import train_many
    from nnx_ppo.algorithms.symmetry import Symmetry
    from nnx_ppo_benchmarks.seeds import final_return

    symmetry = arm_symmetry(arm, task, mirror_loss_weight)
    env, eval_env, config, factory, episode_length = _setup(task, network, steps, seeds[0])
    config = dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, symmetry=symmetry))
    start = time.time()
    result = train_many(env, factory, config, seeds=seeds, progress=False)
    train_s = time.time() - start
    measure = Symmetry.from_signs(**SYMMETRIES[task])  # the error of every arm, base too
    returns, errors = [], []
    for run, seed in enumerate(seeds):
        trained = result.network(run)
        returns.append(float(final_return(eval_env, trained, seed, n_envs=128,
                                          max_episode_length=max(episode_length, 1))))  # fmt: skip
        errors.append(visited_error(eval_env, trained, measure, seed, 32, 500))
    return {
        "task": task,
        "network": network,
        "arm": arm,
        "mirror_loss_weight": mirror_loss_weight if "loss" in arm else 0.0,
        "seeds": seeds,
        "total_steps": result.total_steps,
        "returns": returns,
        "symmetry_errors": errors,
        "median_return": statistics.median(returns),
        "median_symmetry_error": statistics.median(errors),
        "train_s": round(train_s, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.symmetry",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("--task", default="CartpoleBalance", help=f"one of {list(SYMMETRIES)}")
    parser.add_argument("--networks", default="mlp_small,lstm", help="harness families")
    parser.add_argument("--arms", default="base,augment+loss", help="comma-separated arms")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--mirror-loss-weight", type=float, default=1.0)
    parser.add_argument("--out", required=True, help="JSON lines, one per cell (appended)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    for network in args.networks.split(","):
        base_error = None
        for arm in args.arms.split(","):
            record = run_arm(arm, args.task, network, seeds, args.steps, args.mirror_loss_weight)
            if arm == "base":
                base_error = record["median_symmetry_error"]
            elif base_error is not None:  # the acceptance's ratio: >= 10 wanted
                record["error_ratio_to_base"] = base_error / max(
                    record["median_symmetry_error"], 1e-12
                )
            print(json.dumps(record), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
