"""The comparison figure and the results table of a run.

``results`` is the dict the CLI writes to ``results.json``::

    {"settings": {...},              # the command line
     "optimum": 18.0,                # episode_length - delay (cue_probability 1)
     "runs": {name: {"seeds": [0, 1],
                     "steps": [0, 5120, ...],           # env steps of the evaluations
                     "returns": [[...], [...]],         # per seed: eval return per step
                     "wall_time_s": [41.2, 39.8]}}}     # per seed
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_learning_curves", "results_table"]

_COLORS = {"mlp": "tab:red", "lstm": "tab:blue", "delay": "tab:green", "graph": "tab:purple"}
_LABELS = {
    "mlp": "MLP (no memory)",
    "lstm": "LSTM",
    "delay": "Delay line",
    "graph": "PopulationGraph (delayed self-loop)",
}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def plot_learning_curves(results: dict[str, Any], path: Path) -> None:
    """Plot every network's eval return against env steps on one figure.

    The line is the mean over seeds, the band spans the lowest and highest seed. Dashed
    lines mark the optimum and the best a memoryless policy can do (0).

    Args:
        results: The dict described in the module docstring.
        path: Where the PNG goes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = results["settings"]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    ax.axhline(
        results["optimum"],
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"optimum ({results['optimum']:g})",
    )
    ax.axhline(0.0, color="gray", linestyle=":", linewidth=1, label="best memoryless (0)")
    for name, run in results["runs"].items():
        per_step = list(zip(*run["returns"], strict=True))
        color = _COLORS.get(name)
        ax.plot(
            run["steps"],
            [_mean(list(r)) for r in per_step],
            marker="o",
            markersize=3,
            color=color,
            label=_LABELS.get(name, name),
        )
        if len(run["returns"]) > 1:
            ax.fill_between(
                run["steps"],
                [min(r) for r in per_step],
                [max(r) for r in per_step],
                color=color,
                alpha=0.2,
                linewidth=0,
            )
    seeds = len(next(iter(results["runs"].values()))["seeds"]) if results["runs"] else 0
    ax.set_title(
        f"MemoryTask(delay={settings['delay']}), {settings['episode_length']}-step episodes"
        + (f", {seeds} seeds" if seeds > 1 else "")
    )
    ax.set_xlabel("environment steps")
    ax.set_ylabel("eval episode return")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def results_table(results: dict[str, Any]) -> str:
    """A markdown table of the final and best eval returns per network.

    Args:
        results: The dict described in the module docstring.

    Returns:
        The table, one row per network, ending without a newline.
    """
    lines = [
        "| network | final eval return (mean over seeds) | per seed | best during training "
        "| wall time per run |",
        "|---|---|---|---|---|",
    ]
    for name, run in results["runs"].items():
        finals = [r[-1] for r in run["returns"]]
        best = max(_mean(list(r)) for r in zip(*run["returns"], strict=True))
        lines.append(
            f"| {_LABELS.get(name, name)} | {_mean(finals):.1f} "
            f"| {', '.join(f'{f:.1f}' for f in finals)} | {best:.1f} "
            f"| {_mean(run['wall_time_s']):.0f} s |"
        )
    return "\n".join(lines)
