"""The suite's ablations: brax PPO's choices, one at a time, on ours
(``results/suite/cpu/README.md`` for ``CartpoleBalance``, ``results/suite/cpu-tasks/README.md``
for ``ReacherHard`` and ``brax/hopper``).

Each arm trains K seeds of ours in one ``train_many`` program at the suite's settings
(Playground's brax-PPO settings of ``--task``, default ``CartpoleBalance``, 256 envs,
8 minibatches, 307,200 env steps in 4 chunks, the ``mlp_small`` network of the harness's
``ours`` child, or another of its families with ``--network``), then
evaluates every run as that child does (128 envs x 1000 steps, deterministic, key
``seed + 10_000``), and appends one JSON line per arm to ``--out``. The ``base`` arm with
``--network lstm_quickstart`` or ``graph_quickstart`` is how the stateful families ran K
seeds in one program (``results/suite/masked/README.md``).

Arms (join several with ``+``; ``base`` changes nothing):

- ``mb_gae``: advantages and targets recomputed in every minibatch from the replay's
  values (``advantage_estimation="minibatch"``, the harness's ``ours-minibatch-gae``);
- ``brax_adv``: brax's policy advantage ``r_t + gamma (1 - term_t) vs_{t+1} - V_t``
  (``vs`` the lambda-return targets, which are ours too) instead of GAE(lambda);
- ``norm_first``: the observation normalizer takes in the rollout *before* the gradient
  phase, as brax does (the replay then sees newer statistics than the rollout did);
- ``lecun_uniform``: every kernel starts ``lecun_uniform`` (brax's), via the factory's
  ``initializer_scale=1.0``, instead of our LeCun normal.

``mb_gae`` is a config option (`PPOConfig`); ``brax_adv`` and ``norm_first`` are a
variant of PPO, `ppo_variant`: `ppo_algorithm`'s record whose iteration is
`make_training_iteration` with ``advantage_fn=brax_advantages`` and
``statistics_first=True``, which ``train_many(..., algorithm=...)`` trains;
``lecun_uniform`` is another network.

Run from the repository root with the harness's isolated venv of ours::

    PYTHONPATH=apps/benchmarks/src ~/.cache/nnx-ppo-bench/venvs/ours-jax0.9.2-py311/bin/python \\
        -m nnx_ppo_benchmarks.studies.ablations base,mb_gae,brax_adv,norm_first,\\
lecun_uniform,lecun_uniform+mb_gae+brax_adv+norm_first --seeds 0,1,2,3,4,5,6,7,8,9 \\
        --out apps/benchmarks/results/suite/cpu/ablations.jsonl

and with ``--task TASK --out apps/benchmarks/results/suite/cpu-tasks/TASK-ablations.jsonl``
for the other tasks (the arms each ran are in ``results/suite/cpu-tasks/README.md``).

Settings other than the task's (``results/suite/masked/README.md``: the stateful
families' settings): ``--set FIELD=VALUE`` replaces a `PPOConfig` field for every run (e.g.
``--set n_epochs=4``); ``--grid FIELD=V1,V2,...`` (repeatable) trains every combination
of the values times every seed in the same ``train_many`` program, through its
``overrides`` (sweepable fields only: ``learning_rate``, ``max_grad_norm``,
``clip_range``, ...; a sweep cannot mix ``None`` with numbers, so "no clipping" in a
``max_grad_norm`` grid is a norm of ``1e9``), and writes one JSON line per combination.
Values are JSON (``none`` is ``None``). ``--stagger`` starts every training episode at a
random step in the first half of the episode (`nnx_ppo.wrappers.EpisodeWrapper`'s
``stagger``, what the quickstart does by default; the harness's ``RunSpec.stagger``, as
``nnx-ppo-suite --stagger``), instead of at step 0 as brax does; evaluation still plays
whole episodes from step 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from nnx_ppo.algorithms.trainer.skeleton import Algorithm, Prepared

__all__ = ["ARMS", "arm_algorithm", "brax_advantages", "main", "ppo_variant", "run_arm"]

ARMS = ("mb_gae", "brax_adv", "norm_first", "lecun_uniform")


def brax_advantages(
    rewards: Any,
    values: Any,
    bootstrap_value: Any,
    terminations: Any,
    truncations: Any,
    *,
    discounting_factor: float,
    gae_lambda: float,
    final_values: Any = None,
) -> tuple[Any, Any]:
    """`nnx_ppo.algorithms.ppo.advantages.gae`'s signature with brax 0.14.2's advantages.

    The targets are ours (``vs = V + GAE(lambda)``, the same as brax's); the advantage is
    ``(r_t + gamma (1 - term_t) vs_{t+1} - V_t) (1 - trunc_t)`` with ``vs_T`` the
    bootstrap value, i.e. ``delta_t + gamma A_{t+1}`` where GAE has
    ``delta_t + gamma lambda A_{t+1}``. Single reward leaf, no ``final_values``.
    """
    from nnx_ppo.algorithms.ppo.advantages import gae

    if final_values is not None:
        raise ValueError("brax_advantages: the suite runs bootstrap_on_truncation=False")
    _, targets = gae(
        rewards,
        values,
        bootstrap_value,
        terminations,
        truncations,
        discounting_factor=discounting_factor,
        gae_lambda=gae_lambda,
    )
    trunc = jnp.asarray(truncations).astype(values.dtype)
    term = jnp.asarray(terminations).astype(values.dtype) * (1 - trunc)
    next_targets = jnp.concatenate([targets[1:], bootstrap_value[None]], axis=0)
    advantages = (rewards + discounting_factor * (1 - term) * next_targets - values) * (1 - trunc)
    return jax.lax.stop_gradient(advantages), targets


def ppo_variant(**iteration_options: Any) -> Algorithm:
    """`ppo_algorithm`'s `Algorithm` record with its iteration built by
    `make_training_iteration` with ``iteration_options`` (``advantage_fn``,
    ``statistics_first``): a variant of PPO for ``train_many(..., algorithm=...)``."""
    from nnx_ppo.algorithms.ppo.iteration import make_training_iteration
    from nnx_ppo.algorithms.ppo.train import ppo_algorithm

    ppo = ppo_algorithm()

    def prepare(env: Any, config: Any, mesh: Any) -> Prepared:
        def iteration(graphdef: Any, run: Any, own: Any, mesh: Any) -> Any:
            return make_training_iteration(
                env, graphdef, own.optimizer, run, mesh=mesh, learning_rate=own.learning_rate,
                **iteration_options,
            )  # fmt: skip

        return dataclasses.replace(ppo.prepare(env, config, mesh), iteration=iteration)

    return dataclasses.replace(ppo, prepare=prepare)


def arm_algorithm(parts: set[str]) -> Algorithm | None:
    """The algorithm an arm's parts train: `ppo_variant` with brax's advantages
    (``brax_adv``) and the statistics updated before the gradient phase
    (``norm_first``), or ``None`` (PPO) with neither.

    >>> arm_algorithm({"mb_gae"}) is None, arm_algorithm({"norm_first"}).name
    (True, 'train_ppo')
    """
    options: dict[str, Any] = {}
    if "brax_adv" in parts:
        options["advantage_fn"] = brax_advantages
    if "norm_first" in parts:
        options["statistics_first"] = True
    return ppo_variant(**options) if options else None


def parse_value(text: str) -> Any:
    """A ``--set`` / ``--grid`` value: JSON, with ``none`` for ``None``.

    >>> parse_value("3e-4"), parse_value("none"), parse_value("4")
    (0.0003, None, 4)
    """
    return None if text.lower() == "none" else json.loads(text)


def parse_assignment(text: str, option: str) -> tuple[str, str]:
    """``FIELD=VALUE`` of ``--set`` / ``--grid``, or a ValueError naming the option."""
    field, sep, value = text.partition("=")
    if not sep or not field or not value:
        raise ValueError(f"{option} {text!r}: write FIELD=VALUE (e.g. {option} n_epochs=4)")
    return field, value


def run_arm(
    arm: str,
    seeds: list[int],
    steps: int,
    task: str = "CartpoleBalance",
    network: str = "mlp_small",
    fixed: dict[str, Any] | None = None,
    grid_values: dict[str, list[Any]] | None = None,
    stagger: bool = False,
) -> list[dict[str, Any]]:
    """Train and evaluate one arm; returns one JSON record per ``grid_values``
    combination (one record without a grid)."""
    from flax import nnx

    from nnx_ppo.algorithms.sweeps.many import grid, train_many
    from nnx_ppo.networks.factories import make_mlp_actor_critic
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config
    from nnx_ppo_benchmarks.seeds import final_return
    from nnx_ppo_benchmarks.settings import RunSpec, chunk_plan
    from nnx_ppo_benchmarks.suite.tasks import task_settings

    parts = set(arm.split("+")) - {"base"}
    if parts - set(ARMS):
        raise ValueError(f"unknown arm(s) {sorted(parts - set(ARMS))}; choose from {ARMS}")

    ppo = task_settings(task, n_envs=256, n_minibatches=8)
    _, total = chunk_plan(steps, 4, ppo.steps_per_iteration)
    spec = RunSpec(
        implementation="ours-minibatch-gae" if "mb_gae" in parts else "ours",
        network=network,
        env_name=task,
        seed=seeds[0],
        total_steps=total,
        n_chunks=4,
        ppo=ppo,
        stagger=ppo.episode_length // 2 if stagger else 0,
    )
    if "lecun_uniform" in parts and spec.family.kind != "mlp":
        raise ValueError(f"lecun_uniform rebuilds an MLP; --network {network} is not one")
    env, eval_env = make_envs(spec)
    config = dataclasses.replace(make_train_config(spec), log_every_calls=10**6)
    fixed = dict(fixed or {})
    if fixed:
        config = dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, **fixed))
    overrides = grid(**(grid_values or {}), seeds=seeds)  # seeds vary fastest
    run_seeds = overrides.pop("seeds")
    n_points = len(run_seeds) // len(seeds)
    family = spec.family

    def factory(rngs: nnx.Rngs) -> nnx.Module:
        if "lecun_uniform" not in parts:
            return build_network(spec, env.observation_size, env.action_size, rngs=rngs)
        return make_mlp_actor_critic(
            env.observation_size,
            env.action_size,
            family.policy_hidden,
            family.value_hidden,
            rngs=rngs,
            activation=nnx.swish,
            normalize_obs=ppo.normalize_observations,
            entropy_weight=ppo.entropy_cost,
            min_std=ppo.min_std,
            initializer_scale=1.0,
        )

    start = time.time()
    result = train_many(
        env, factory, config, seeds=run_seeds, overrides=overrides or None, progress=False,
        algorithm=arm_algorithm(parts),
    )  # fmt: skip
    train_s = time.time() - start
    returns = []
    for run, seed in enumerate(run_seeds):
        final = final_return(
            eval_env, result.network(run), seed, n_envs=128, max_episode_length=1000
        )
        returns.append(float(final))
    records = []
    for point in range(n_points):
        record = {
            "task": task,
            "arm": arm,
            "network": network,
            "seeds": seeds,
            "total_steps": result.total_steps,
            "returns": returns[point * len(seeds) : (point + 1) * len(seeds)],
            "train_s": round(train_s, 1),
        }
        first = point * len(seeds)
        settings = {**fixed, **{name: values[first] for name, values in overrides.items()}}
        if spec.stagger:
            settings["stagger"] = spec.stagger
        if settings:
            record["settings"] = settings
            record["runs_in_program"] = len(run_seeds)
        records.append(record)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.ablations",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("arms", help="comma-separated arms, each ARM[+ARM...]")
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9")
    parser.add_argument("--steps", type=int, default=307_200)
    parser.add_argument("--task", default="CartpoleBalance", help="a control-suite task")
    parser.add_argument("--network", default="mlp_small", help="a harness network family")
    parser.add_argument("--set", action="append", default=[], help="FIELD=VALUE, every run")
    parser.add_argument("--grid", action="append", default=[], help="FIELD=V1,V2,... swept")
    parser.add_argument("--stagger", action="store_true", help="staggered training episodes")
    parser.add_argument("--out", required=True, help="JSON lines, one per arm (appended)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    fixed = {
        field: parse_value(value)
        for field, value in (parse_assignment(text, "--set") for text in args.set)
    }
    grid_values = {}
    for text in args.grid:
        field, values = parse_assignment(text, "--grid")
        grid_values[field] = [parse_value(v) for v in values.split(",")]
    for arm in args.arms.split(","):
        for record in run_arm(
            arm, seeds, args.steps, args.task, args.network, fixed, grid_values, args.stagger
        ):
            print(json.dumps(record), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
