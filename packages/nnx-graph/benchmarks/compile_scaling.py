"""How PopulationGraph's compile time and step time scale with the number of populations.

Builds a body-part-like graph of N populations arranged as a binary tree (every
population reads the observation; child -> parent with delay 0, parent -> child with
delay 1, a delayed self-loop on every population, and action / value read-outs from the
root), then prints, for each N:

- the time to declare and ``finalize()`` the graph,
- the time to trace and compile one jitted step (persistent compilation cache off),
- the time per step of a compiled ``lax.scan`` rollout.

Compile time should grow roughly linearly in N (the step is straight-line code with a
fixed amount of work per connection). This is a benchmark, not a test::

    uv run python packages/nnx-graph/benchmarks/compile_scaling.py
    uv run python packages/nnx-graph/benchmarks/compile_scaling.py --sizes 4 16 64 128
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.graph import PopulationGraph


def build_graph(n: int, *, size: int, action_size: int) -> PopulationGraph:
    """A binary-tree body graph of ``n`` populations (each reading ``obs["x"]``, ``[B,
    size]``) plus action and value read-outs from the root ``p0``."""
    g = PopulationGraph(nnx.Rngs(0))
    for i in range(n):
        g.add_input(f"p{i}", size=size, input_from="x", activation=nnx.tanh)
    g.add_output("action", size=2 * action_size)
    g.add_output("value", size=1)
    for i in range(n):
        g.connect(f"p{i}", f"p{i}", delay=1)
        if i:
            parent = f"p{(i - 1) // 2}"
            g.connect(f"p{i}", parent)  # delay 0: children run before parents
            g.connect(parent, f"p{i}", delay=1)
    g.connect("p0", "action")
    g.connect("p0", "value")
    g.finalize()
    return g


def measure(n: int, *, batch: int, steps: int, size: int, action_size: int) -> dict[str, float]:
    t0 = time.perf_counter()
    g = build_graph(n, size=size, action_size=action_size)
    t_build = time.perf_counter() - t0
    graphdef, params = nnx.split(g)
    state = g.initialize_state(batch)
    obs = {"x": jnp.ones((batch, size))}

    def step(params, state, obs):
        out = nnx.merge(graphdef, params)(state, obs)
        return out.next_state, out.output

    t0 = time.perf_counter()
    compiled_step = jax.jit(step).lower(params, state, obs).compile()
    t_compile = time.perf_counter() - t0

    def rollout(params, state, xs):
        return jax.lax.scan(lambda s, o: step(params, s, o), state, xs)

    xs = {"x": jax.random.normal(jax.random.key(0), (steps, batch, size))}
    compiled_rollout = jax.jit(rollout).lower(params, state, xs).compile()
    jax.block_until_ready(compiled_rollout(params, state, xs))  # warm-up
    jax.block_until_ready(compiled_step(params, state, obs))
    t0 = time.perf_counter()
    jax.block_until_ready(compiled_rollout(params, state, xs))
    t_step = (time.perf_counter() - t0) / steps
    return {
        "connections": len(g.connections),
        "build_s": t_build,
        "compile_s": t_compile,
        "step_us": 1e6 * t_step,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--batch", type=int, default=256, help="environments B")
    parser.add_argument("--steps", type=int, default=200, help="scan length for step time")
    parser.add_argument("--size", type=int, default=32, help="units per population")
    parser.add_argument("--action-size", type=int, default=4)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)

    # Warm-up: backend initialisation and first-use costs are not the graph's.
    measure(2, batch=args.batch, steps=2, size=args.size, action_size=args.action_size)
    print(f"backend={jax.default_backend()} B={args.batch} size={args.size} steps={args.steps}")
    print(f"{'N':>5} {'conns':>6} {'build s':>8} {'compile s':>10} {'compile/N ms':>13} "
          f"{'step us':>9}")  # fmt: skip
    for n in args.sizes:
        r = measure(
            n, batch=args.batch, steps=args.steps, size=args.size, action_size=args.action_size
        )
        print(
            f"{n:>5} {r['connections']:>6} {r['build_s']:>8.3f} {r['compile_s']:>10.3f} "
            f"{1e3 * r['compile_s'] / n:>13.1f} {r['step_us']:>9.1f}"
        )


if __name__ == "__main__":
    main()
