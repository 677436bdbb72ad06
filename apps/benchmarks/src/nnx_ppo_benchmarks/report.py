"""Summaries, the markdown table and the bar chart of a benchmark.

``results.json`` holds ``meta`` (command, machine load, settings), ``runs`` (every
child's raw result with its ``derived`` numbers) and ``summary``:

.. code-block:: text

    summary[network][implementation][metric] = {"min", "median", "max", "mean", "n"}
    summary[network]["ratios"]["ours/brax"][metric]  = spread of repeat-wise ratios
                                                        (also ours-minibatch-gae/...)
    summary[network]["ratios"]["<impl>/env-only"]["steady_sps"] = the same vs the limit
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.metrics import METRICS, derive, json_safe, ratio_summary, spread
from nnx_ppo_benchmarks.settings import IMPLEMENTATIONS, NETWORKS, describe_env

__all__ = ["SCHEMA_VERSION", "summarize", "write_chart", "write_markdown", "write_results"]

SCHEMA_VERSION = 1
OURS = ("ours", "ours-minibatch-gae")
"""Our implementations (ratios are ours/theirs)."""
RATIO_METRICS = ("steady_sps", "compile_s", "e2e_s", "peak_rss_mb", "final_eval_reward")
_LABELS = {
    "ours": "ours (train_ppo)",
    "ours-minibatch-gae": "ours, minibatch advantages",
    "brax": "brax PPO 0.14.2",
    "nnx-ppo-0.3.0": "nnx-ppo 0.3.0",
    "env-only": "env only (limit)",
}


def _by_repeat(runs: list[dict], network: str, impl: str, metric: str) -> dict[int, float | None]:
    return {
        r["seed"]: r["derived"][metric]
        for r in runs
        if r["network"] == network and r["implementation"] == impl and r.get("status") == "ok"
    }


def summarize(results: Mapping[str, Any]) -> dict[str, Any]:
    """The ``summary`` section from ``results["runs"]`` (see the module docstring)."""
    runs = list(results["runs"])
    networks = list(dict.fromkeys(r["network"] for r in runs))
    env_only = [r for r in runs if r["implementation"] == "env-only" and r.get("status") == "ok"]
    env_sps = {r["seed"]: r["derived"]["steady_sps"] for r in env_only}
    summary: dict[str, Any] = {}
    for network in networks:
        impls = list(
            dict.fromkeys(
                r["implementation"]
                for r in runs
                if r["network"] == network and r["implementation"] != "env-only"
            )
        )
        section: dict[str, Any] = {}
        for impl in impls:
            entries = {m: spread(_by_repeat(runs, network, impl, m).values()) for m in METRICS}
            entries["diverged"] = sum(
                1
                for r in runs
                if r["network"] == network
                and r["implementation"] == impl
                and r.get("status") == "ok"
                and r["derived"].get("eval_nonfinite")
            )
            entries["failed"] = sum(
                1
                for r in runs
                if r["network"] == network
                and r["implementation"] == impl
                and r.get("status") != "ok"
            )
            section[impl] = entries
        ratios: dict[str, Any] = {}
        for mine, other in itertools.product(OURS, ("brax", "nnx-ppo-0.3.0")):
            if mine in impls and other in impls:
                ratio = {}
                for metric in RATIO_METRICS:
                    ours = _by_repeat(runs, network, mine, metric)
                    theirs = _by_repeat(runs, network, other, metric)
                    seeds = sorted(set(ours) & set(theirs))
                    ratio[metric] = ratio_summary(
                        [ours[s] for s in seeds], [theirs[s] for s in seeds]
                    )
                ratios[f"{mine}/{other}"] = ratio
        if env_sps:
            for impl in impls:
                sps = _by_repeat(runs, network, impl, "steady_sps")
                seeds = sorted(set(sps) & set(env_sps))
                ratios[f"{impl}/env-only"] = {
                    "steady_sps": ratio_summary(
                        [sps[s] for s in seeds], [env_sps[s] for s in seeds]
                    )
                }
        section["ratios"] = ratios
        summary[network] = section
    if env_only:
        summary["env-only"] = {
            "env-only": {
                m: spread(r["derived"][m] for r in env_only)
                for m in ("steady_sps", "compile_s", "peak_rss_mb")
            }
        }
    return summary


def _fmt(stats: Mapping[str, float] | None, digits: int = 0, *, scale: float = 1.0) -> str:
    if not stats:
        return "-"
    med, lo, hi = (stats[k] * scale for k in ("median", "min", "max"))
    if stats["n"] == 1:
        return f"{med:,.{digits}f}"
    return f"{med:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def _ratio(stats: Mapping[str, float] | None) -> str:
    if not stats:
        return "-"
    return f"{stats['median']:.2f} ({stats['min']:.2f}-{stats['max']:.2f})"


def markdown(results: Mapping[str, Any]) -> str:
    """The results as markdown tables (no images: the docs page includes this file)."""
    meta, summary = results["meta"], results["summary"]
    runs = results["runs"]
    versions: dict[str, str] = (
        next((r.get("versions") for r in runs if r.get("status") == "ok"), {}) or {}
    )
    device = next((r["device"] for r in runs if r.get("device")), "?")
    lines = [f"**{meta['note']}**", ""] if meta.get("note") else []
    lines += [
        f"Environment `{meta['env_name']}` ({describe_env(meta['env_name'])}), "
        f"{meta['ppo']['n_envs']} envs, rollout {meta['ppo']['rollout_length']}, "
        f"{meta['ppo']['n_minibatches']} minibatches, {meta['ppo']['n_epochs']} epochs, "
        f"budget {meta['total_steps']:,} env steps in {meta['n_chunks']} chunks, "
        f"{meta['repeats']} repeat(s). JAX {versions.get('jax', '?')}, "
        f"{meta['cpu_count']} CPU(s), device `{device}`, "
        f"load average {meta.get('load_before')} before and {meta.get('load_after')} after.",
        "",
        "Cells are median (min-max) over repeats. Steps/s is the steady-state training "
        "throughput over the progress chunks after the first in which nothing compiled "
        "(no evaluation runs during training); compile is JAX's compile time in the "
        "training call, recompilations after the first chunk included; overhead is the "
        "training time beyond the budget's steps at the steady rate; e2e is the "
        "training call plus one final evaluation "
        f"({meta['eval']['n_envs']} envs x {meta['eval']['episode_length']} steps, "
        "deterministic) for the fixed budget.",
        "",
    ]
    header = (
        "| network | implementation | steps/s | vs env-only | compile s | of which "
        "recompile | overhead s | train s | eval s | e2e s | peak RSS MB | eval return |"
    )
    lines += [header, "|" + "---|" * 12]
    for network, section in summary.items():
        if network == "env-only":
            continue
        for impl, stats in section.items():
            if impl == "ratios":
                continue
            vs_env = section["ratios"].get(f"{impl}/env-only", {}).get("steady_sps")
            failed = f" ({stats['failed']} failed)" if stats.get("failed") else ""
            reward = _fmt(stats["final_eval_reward"], 1)
            if stats.get("diverged"):
                reward = f"NaN in {stats['diverged']} run(s)" + (
                    f"; {reward}" if reward != "-" else ""
                )
            lines.append(
                f"| {network} | {_LABELS.get(impl, impl)}{failed} | {_fmt(stats['steady_sps'])} | "
                f"{_ratio(vs_env)} | {_fmt(stats['compile_s'], 1)} | "
                f"{_fmt(stats['recompile_s'], 1)} | "
                f"{_fmt(stats['overhead_s'], 1)} | {_fmt(stats['train_s'], 1)} | "
                f"{_fmt(stats['eval_s'], 1)} | {_fmt(stats['e2e_s'], 1)} | "
                f"{_fmt(stats['peak_rss_mb'])} | {reward} |"
            )
    if "env-only" in summary:
        stats = summary["env-only"]["env-only"]
        lines.append(
            f"| - | {_LABELS['env-only']} | {_fmt(stats['steady_sps'])} | 1.00 | "
            f"{_fmt(stats['compile_s'], 1)} | - | - | - | - | - | "
            f"{_fmt(stats['peak_rss_mb'])} | - |"
        )
    ratio_rows = [
        (network, name, ratio)
        for network, section in summary.items()
        if network != "env-only"
        for name, ratio in section["ratios"].items()
        if "env-only" not in name
    ]
    if ratio_rows:
        lines += [
            "",
            "Ratios, median (min-max) over repeats paired by seed; steps/s above 1 and the "
            "others below 1 favour ours:",
            "",
            "| network | ratio | steps/s | compile | e2e | peak RSS | eval return |",
            "|---|---|---|---|---|---|---|",
        ]
        for network, name, ratio in ratio_rows:
            cells = " | ".join(_ratio(ratio[m]) for m in RATIO_METRICS)
            lines.append(f"| {network} | {name} | {cells} |")
    return "\n".join(lines) + "\n"


def write_markdown(results: Mapping[str, Any], path: Path) -> None:
    """Write :func:`markdown` to ``path``."""
    path.write_text(markdown(results))


def write_chart(results: Mapping[str, Any], path: Path) -> None:
    """Bar chart: steady-state steps/s and compile time per network and implementation
    (bars at the median, whiskers from min to max)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = results["summary"]
    networks = [n for n in summary if n != "env-only"]
    impls = [
        i for i in IMPLEMENTATIONS if i != "env-only" and any(i in summary[n] for n in networks)
    ]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(impls), 1)
    for ax, metric, title in (
        (axes[0], "steady_sps", "steady-state training steps/s (higher is better)"),
        (axes[1], "compile_s", "compile time in the training call, s (lower is better)"),
    ):
        for k, impl in enumerate(impls):
            xs, heights, lows, highs = [], [], [], []
            for j, network in enumerate(networks):
                stats = summary[network].get(impl, {}).get(metric)
                if stats:
                    xs.append(j + (k - (len(impls) - 1) / 2) * width)
                    heights.append(stats["median"])
                    lows.append(stats["median"] - stats["min"])
                    highs.append(stats["max"] - stats["median"])
            ax.bar(xs, heights, width, yerr=[lows, highs], capsize=3, label=_LABELS[impl])
        if metric == "steady_sps" and "env-only" in summary:
            limit = summary["env-only"]["env-only"]["steady_sps"]
            if limit:
                ax.axhline(limit["median"], color="gray", linestyle="--", label=_LABELS["env-only"])
        ax.set_xticks(range(len(networks)))
        ax.set_xticklabels([NETWORKS[n].name if n in NETWORKS else n for n in networks])
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    meta = results["meta"]
    fig.suptitle(
        f"{meta['env_name']}, {meta['ppo']['n_envs']} envs, {meta['repeats']} repeat(s), "
        f"load {meta.get('load_before')}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(results: dict[str, Any], output_dir: Path) -> dict[str, Path]:
    """Add the summary and write ``results.json``, ``results.md`` and ``results.png``.

    Returns:
        File kind -> path.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    for run in results["runs"]:  # re-derived, so --report-only applies current definitions
        if run.get("status") == "ok":
            run["derived"] = derive(run)
    results["schema_version"] = SCHEMA_VERSION
    results["summary"] = summarize(results)
    paths = {
        "json": output_dir / "results.json",
        "markdown": output_dir / "results.md",
        "chart": output_dir / "results.png",
    }
    paths["json"].write_text(json.dumps(json_safe(results), indent=1, allow_nan=False))
    write_markdown(results, paths["markdown"])
    write_chart(results, paths["chart"])
    return paths
