"""Training speed on MinAtar: our conv policy (`train_ppo`) against a purejaxrl-style PPO
written here in plain JAX, same game, network shape and settings, in one process.

Examples::

    uv run python -m nnx_ppo_benchmarks.published.minatar_speed            # 64 envs, 20 its
    uv run python -m nnx_ppo_benchmarks.published.minatar_speed --iterations 4 --n-envs 8

The baseline is the single-file style of purejaxrl: the whole iteration (a ``lax.scan``
rollout of ``gymnax``'s auto-resetting ``step`` over vmapped envs, GAE, ``n_epochs`` of
``n_minibatches`` minibatches of transitions shuffled over envs and time, Adam with
gradient clipping) is one jitted function of a pytree state, the network two plain
functions (actor and critic, each a 3x3 VALID conv with 16 channels, ReLU, dense 128,
ReLU and a dense head: `ConvEncoder.minatar`'s shape). Ours is `train_ppo` with
`minatar.make_config`'s translation (evaluation off), timed between the ``log_fn`` calls
that follow each one-iteration device call. Both skip their first, compiling, call; the
figure is env steps per second over the following ``--iterations`` iterations. The two
alternate (ours, baseline, ours, baseline, ...) for ``--rounds`` rounds, so a change in
the machine's load affects both; report the ratio, not the absolute rates.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["baseline_steps_per_s", "build_parser", "main", "ours_steps_per_s"]


def _conv_params(key: Any, image_shape: Sequence[int], out: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    h, w, c = image_shape
    k1, k2, k3 = jax.random.split(key, 3)
    flat = (h - 2) * (w - 2) * 16

    def dense(k: Any, n_in: int, n_out: int) -> dict[str, Any]:
        return {
            "w": jax.random.normal(k, (n_in, n_out)) / math.sqrt(n_in),
            "b": jnp.zeros((n_out,)),
        }

    return {
        "conv": {"w": jax.random.normal(k1, (3, 3, c, 16)) / math.sqrt(9 * c), "b": jnp.zeros(16)},
        "hidden": dense(k2, flat, 128),
        "head": dense(k3, 128, out),
    }


def _conv_apply(params: dict[str, Any], obs: Any) -> Any:
    """``obs [batch, h, w, c]`` -> ``[batch, out]``."""
    import jax

    x = jax.lax.conv_general_dilated(
        obs, params["conv"]["w"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    x = jax.nn.relu(x + params["conv"]["b"]).reshape(obs.shape[0], -1)
    x = jax.nn.relu(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return x @ params["head"]["w"] + params["head"]["b"]


def make_baseline(game: str, n_envs: int, rollout: int, n_minibatches: int, n_epochs: int):
    """``(init(key) -> state, iteration(state) -> (state, metrics))``: a purejaxrl-style
    PPO iteration with gymnax-blines' settings (`minatar` module docstring), jitted."""
    import gymnax
    import jax
    import jax.numpy as jnp
    import optax

    env, params = gymnax.make(game)
    image_shape = env.observation_space(params).shape
    n_actions = env.action_space(params).n
    optimizer = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(5e-4, eps=1e-5))
    gamma, lam, clip, ent, vf = 0.999, 0.95, 0.2, 0.01, 0.5

    def policy(net: dict[str, Any], obs: Any) -> tuple[Any, Any]:
        obs = obs.astype(jnp.float32)
        return _conv_apply(net["actor"], obs), _conv_apply(net["critic"], obs)[:, 0]

    def init(key: Any) -> dict[str, Any]:
        ka, kc, kr, key = jax.random.split(key, 4)
        net = {
            "actor": _conv_params(ka, image_shape, n_actions),
            "critic": _conv_params(kc, image_shape, 1),
        }
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(kr, n_envs), params
        )
        return {
            "net": net,
            "opt": optimizer.init(net),
            "obs": obs,
            "env": env_state,
            "key": key,
        }

    def rollout_step(carry: tuple, _: Any) -> tuple:
        net, obs, env_state, key = carry
        key, k_act, k_env = jax.random.split(key, 3)
        logits, value = policy(net, obs)
        action = jax.random.categorical(k_act, logits)
        logp = jax.nn.log_softmax(logits)[jnp.arange(n_envs), action]
        next_obs, env_state, reward, terminated, truncated, _ = jax.vmap(
            env.step, in_axes=(0, 0, 0, None)
        )(jax.random.split(k_env, n_envs), env_state, action, params)
        done = terminated | truncated  # cut at every done, as gymnax-blines
        step = (obs, action, logp, value, reward, done.astype(jnp.float32))
        return (net, next_obs, env_state, key), step

    def loss_fn(net: dict[str, Any], batch: tuple) -> Any:
        obs, action, old_logp, old_value, advantage, target = batch
        logits, value = policy(net, obs)
        log_probs = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(log_probs, action[:, None], axis=1)[:, 0]
        ratio = jnp.exp(logp - old_logp)
        adv = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        actor = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
        clipped = old_value + jnp.clip(value - old_value, -clip, clip)
        critic = 0.5 * jnp.maximum((value - target) ** 2, (clipped - target) ** 2).mean()
        entropy = -(jnp.exp(log_probs) * log_probs).sum(-1).mean()
        return actor + vf * critic - ent * entropy

    @jax.jit
    def iteration(state: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        net = state["net"]
        traj: Any
        advantages: Any
        losses: Any
        (_, obs, env_state, key), traj = jax.lax.scan(
            rollout_step, (net, state["obs"], state["env"], state["key"]), None, rollout
        )
        t_obs, t_action, t_logp, t_value, t_reward, t_done = traj
        _, last_value = policy(net, obs)

        def gae(carry: tuple, step: tuple) -> tuple:
            advantage, next_value = carry
            value, reward, done = step
            delta = reward + gamma * next_value * (1 - done) - value
            advantage = delta + gamma * lam * (1 - done) * advantage
            return (advantage, value), advantage

        _, advantages = jax.lax.scan(
            gae,
            (jnp.zeros(n_envs), last_value),
            (t_value, t_reward, t_done),
            reverse=True,
        )
        data = (t_obs, t_action, t_logp, t_value, advantages, advantages + t_value)
        data = jax.tree.map(lambda x: x.reshape(rollout * n_envs, *x.shape[2:]), data)
        size = rollout * n_envs // n_minibatches

        def epoch(carry: tuple, _: Any) -> tuple:
            net, opt, key = carry
            key, k_perm = jax.random.split(key)
            order = jax.random.permutation(k_perm, rollout * n_envs)
            batches = jax.tree.map(
                lambda x: x[order].reshape(n_minibatches, size, *x.shape[1:]), data
            )

            def update(carry: tuple, batch: tuple) -> tuple:
                net, opt = carry
                loss, grads = jax.value_and_grad(loss_fn)(net, batch)
                updates, opt = optimizer.update(grads, opt, net)
                return (optax.apply_updates(net, updates), opt), loss

            epoch_losses: Any
            (net, opt), epoch_losses = jax.lax.scan(update, (net, opt), batches)
            return (net, opt, key), epoch_losses

        (net, opt, key), losses = jax.lax.scan(epoch, (net, state["opt"], key), None, n_epochs)
        new = {"net": net, "opt": opt, "obs": obs, "env": env_state, "key": key}
        return new, {"loss": losses.mean(), "reward": t_reward.sum() / n_envs}

    return init, iteration


def baseline_steps_per_s(
    game: str, n_envs: int, rollout: int, iterations: int, *, seed: int = 0
) -> dict[str, float]:
    """Env steps per second of the baseline over ``iterations`` iterations after its
    compiling one, and its last loss (a finite number)."""
    import jax

    init, iteration = make_baseline(game, n_envs, rollout, n_minibatches=8, n_epochs=4)
    state = init(jax.random.PRNGKey(seed))
    state, metrics = jax.block_until_ready(iteration(state))  # compiles
    start = time.perf_counter()
    for _ in range(iterations):
        state, metrics = iteration(state)
    jax.block_until_ready(metrics)
    wall = time.perf_counter() - start
    return {"steps_per_s": iterations * n_envs * rollout / wall, "loss": float(metrics["loss"])}


def ours_steps_per_s(
    game: str, n_envs: int, rollout: int, iterations: int, *, seed: int = 0
) -> dict[str, float]:
    """Env steps per second of `train_ppo` (conv policy, `minatar.make_config`'s
    settings with ``n_envs`` and ``rollout``) over ``iterations`` one-iteration calls
    after the compiling first call, timed at its ``log_fn`` calls."""
    import dataclasses

    from flax import nnx

    from nnx_ppo.algorithms import train_ppo
    from nnx_ppo.envs import GymnaxEnv
    from nnx_ppo_benchmarks.published.minatar import make_config, make_network

    env = GymnaxEnv.make(game)
    image_shape = tuple(env.env.observation_space(env.params).shape)
    config = make_config(1, int(env.params.max_steps_in_episode), smoke=False)
    ppo = dataclasses.replace(
        config.ppo,
        n_envs=n_envs,
        rollout_length=rollout,
        total_steps=(iterations + 1) * n_envs * rollout,
        iterations_per_call=1,
    )
    config = dataclasses.replace(
        config, ppo=ppo, eval=dataclasses.replace(config.eval, enabled=False), seed=seed
    )
    stamps: list[tuple[float, int]] = []
    network = make_network("conv", image_shape, env.action_size)(nnx.Rngs(seed))  # type: ignore[arg-type]
    train_ppo(
        env,
        network,
        config,
        progress=False,
        log_fn=lambda metrics, step: stamps.append((time.perf_counter(), int(step))),
    )
    (t0, s0), (t1, s1) = stamps[0], stamps[-1]
    return {"steps_per_s": (s1 - s0) / (t1 - t0)}


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.published.minatar_speed",
        description="Env steps per second: our conv policy against a purejaxrl-style "
        "PPO on the same MinAtar game, alternating in one process.",
    )
    p.add_argument("--game", default="Breakout-MinAtar", help="(default: %(default)s)")
    p.add_argument("--n-envs", type=int, default=64, help="envs (default: %(default)s)")
    p.add_argument(
        "--rollout-length", type=int, default=128, help="steps per env (default: %(default)s)"
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=20,
        help="timed iterations after compilation (default: %(default)s)",
    )
    p.add_argument("--rounds", type=int, default=2, help="alternations (default: %(default)s)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one JSON line per measurement and a summary line."""
    args = build_parser().parse_args(argv)
    for name in ("n_envs", "rollout_length", "iterations", "rounds"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}={getattr(args, name)}: give >= 1")
    if args.n_envs * args.rollout_length % 8:
        raise SystemExit(
            f"--n-envs={args.n_envs} x --rollout-length={args.rollout_length}: their product "
            "must be a multiple of 8 (the 8 minibatches)"
        )
    sizes = (args.game, args.n_envs, args.rollout_length, args.iterations)
    ours, base = [], []
    for r in range(args.rounds):
        ours.append(ours_steps_per_s(*sizes, seed=r)["steps_per_s"])
        result = baseline_steps_per_s(*sizes, seed=r)
        if not math.isfinite(result["loss"]):
            raise RuntimeError(f"baseline loss is {result['loss']}: the baseline is broken")
        base.append(result["steps_per_s"])
        print(json.dumps({"round": r, "ours": ours[-1], "baseline": base[-1]}), flush=True)
    summary = {
        "game": args.game,
        "n_envs": args.n_envs,
        "rollout_length": args.rollout_length,
        "iterations": args.iterations,
        "ours_steps_per_s": sorted(ours)[len(ours) // 2],
        "baseline_steps_per_s": sorted(base)[len(base) // 2],
        "ratio_ours_over_baseline": [o / b for o, b in zip(ours, base, strict=True)],
        "load_average": list(os.getloadavg()),
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
