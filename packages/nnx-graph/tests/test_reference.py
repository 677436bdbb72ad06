"""PopulationGraph against a plain numpy reference on seeded random graphs.

The reference keeps the full output history of every population and evaluates the
spec's semantics literally: at step t a population is computed once all of its delay-0
sources are (found by repeated passes, not by the graph's topological sort); it sums
``obs[input_from]`` and every incoming connection's ``x @ kernel + bias``, where a
delay-k connection reads the source's output at step ``t - k`` of the current episode
(zeros before the episode start), and applies the activation once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.types import reset_where

_ACTIVATIONS = {
    "linear": (None, lambda v: v),
    "tanh": (jnp.tanh, np.tanh),
    "relu": (jax.nn.relu, lambda v: np.maximum(v, 0.0)),
    "swish": (nnx.swish, lambda v: v / (1.0 + np.exp(-v))),
}


def _random_spec(seed: int):
    """A random graph description: populations and (src, dst, delay) connections.

    Delay-0 edges follow a random permutation (so they form a DAG whose order differs
    from declaration order); delayed edges, self-loops included, have delays 1..4.
    """
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 8))
    n_inputs = int(rng.integers(1, 3))
    n_outputs = int(rng.integers(1, 3))
    pops = []
    for i in range(n):
        kind = "input" if i < n_inputs else "output" if i >= n - n_outputs else "hidden"
        pops.append(
            {
                "name": f"p{i}",
                "size": int(rng.integers(1, 6)),
                "activation": str(rng.choice(list(_ACTIVATIONS))),
                "kind": kind,
            }
        )
    rank = rng.permutation(n)  # delay-0 edges go from lower to higher rank
    edges: list[tuple[int, int, int]] = []
    for i in range(n):
        for j in range(n):
            if i != j and rank[i] < rank[j] and rng.random() < 0.3:
                edges.append((i, j, 0))
            if rng.random() < 0.2:  # delayed edge (self-loop when i == j)
                edges.append((i, j, int(rng.integers(1, 5))))
    # Every non-input population needs some input: add one delayed edge if it has none.
    for j in range(n_inputs, n):
        if not any(d == j for _, d, _ in edges):
            edges.append((int(rng.integers(0, n)), j, int(rng.integers(1, 5))))
    edges = list(dict.fromkeys(edges))  # drop duplicates, keep order
    order = rng.permutation(len(edges))  # declaration order of connections
    return pops, [edges[k] for k in order]


def _build(pops, edges, seed):
    g = PopulationGraph(nnx.Rngs(seed), record_populations=True)
    for p in pops:
        act = _ACTIVATIONS[p["activation"]][0]
        if p["kind"] == "input":
            g.add_input(p["name"], p["size"], input_from=f"obs_{p['name']}", activation=act)
        elif p["kind"] == "output":
            g.add_output(p["name"], p["size"], activation=act)
        else:
            g.add_population(p["name"], p["size"], activation=act)
    for i, j, d in edges:
        g.connect(pops[i]["name"], pops[j]["name"], delay=d)
    g.finalize()
    return g


def _reference(g, pops, edges, obs_seq, episode_start):
    """Numpy step-by-step reference; returns {population: [T, B, size]}."""
    names = [p["name"] for p in pops]
    dense = {}
    for i, j, d in edges:
        name = f"p{i}->p{j}" if d == 0 else f"p{i}->p{j}@{d}"
        linear = g.transforms[name].linear
        dense[(i, j, d)] = (
            np.asarray(linear.kernel[...], np.float64),
            np.asarray(linear.bias[...], np.float64),
        )
    T, B = len(obs_seq), episode_start.shape[1]
    hist = {n: np.zeros((T, B, p["size"])) for n, p in zip(names, pops, strict=True)}
    for b in range(B):
        start = 0
        for t in range(T):
            if episode_start[t, b]:
                start = t
            done: set[int] = set()
            while len(done) < len(pops):
                progressed = False
                for j, p in enumerate(pops):
                    deps = [i for i, jj, d in edges if jj == j and d == 0]
                    if j in done or any(i not in done for i in deps):
                        continue
                    total = np.zeros(p["size"])
                    if p["kind"] == "input":
                        total += np.asarray(obs_seq[t][f"obs_{p['name']}"][b], np.float64)
                    for (i, jj, d), (kernel, bias) in dense.items():
                        if jj != j:
                            continue
                        if t - d >= start:
                            src = hist[names[i]][t - d, b]
                        else:  # before the episode's history: zeros
                            src = np.zeros(pops[i]["size"])
                        total = total + src @ kernel + bias
                    hist[p["name"]][t, b] = _ACTIVATIONS[p["activation"]][1](total)
                    done.add(j)
                    progressed = True
                assert progressed, "the reference found a delay-0 cycle"
    return hist


@pytest.mark.parametrize("seed", range(8))
def test_random_graph_matches_numpy_reference(seed):
    pops, edges = _random_spec(seed)
    g = _build(pops, edges, seed)
    T, B = 10, 3
    rng = np.random.default_rng(1000 + seed)
    obs_seq = [
        {
            f"obs_{p['name']}": jnp.asarray(rng.normal(size=(B, p["size"])), jnp.float32)
            for p in pops
            if p["kind"] == "input"
        }
        for _ in range(T)
    ]
    # Env 1's episode restarts at step 4 and env 2's at step 7 (reset_where before them).
    episode_start = np.zeros((T, B), bool)
    episode_start[4, 1] = episode_start[7, 2] = True
    expected = _reference(g, pops, edges, obs_seq, episode_start)

    @nnx.jit
    def step(graph, state, obs, start):
        return graph(reset_where(graph, start, state), obs)

    state = g.initialize_state(B)
    for t in range(T):
        out = step(g, state, obs_seq[t], jnp.asarray(episode_start[t]))
        state = out.next_state
        for p in pops:
            np.testing.assert_allclose(
                out.metrics["populations"][p["name"]],
                expected[p["name"]][t],
                rtol=1e-4,
                atol=1e-5,
                err_msg=f"population {p['name']} at step {t} (seed {seed})",
            )
            if p["kind"] == "output":
                np.testing.assert_array_equal(
                    out.output[p["name"]], out.metrics["populations"][p["name"]]
                )
    # The buffers are exactly the populations read with a delay, sized to the longest.
    longest: dict[str, int] = {}
    for i, _, d in edges:
        if d > 0:
            longest[f"p{i}"] = max(longest.get(f"p{i}", 0), d)
    assert {k: v.shape[1] for k, v in state["buffers"].items()} == longest


def test_generator_covers_the_interesting_cases():
    # Guard that the seeds above exercise delay-0 chains, self-loops, every delay 1..4,
    # shared buffers and every activation, so the equivalence test cannot silently weaken.
    specs = [_random_spec(seed) for seed in range(8)]
    edges = [e for _, es in specs for e in es]
    assert any(d == 0 for _, _, d in edges)
    assert any(i == j for i, j, d in edges)
    assert {d for _, _, d in edges if d > 0} == {1, 2, 3, 4}
    shared = [
        es for _, es in specs if any(
            len({d for i2, _, d in es if i2 == i and d > 0}) > 1 for i, _, _ in es
        )
    ]  # fmt: skip
    assert shared
    assert {p["activation"] for pops, _ in specs for p in pops} == set(_ACTIVATIONS)
