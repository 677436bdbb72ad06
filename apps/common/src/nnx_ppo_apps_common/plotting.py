"""The learning-curve figure the training apps write at the end of a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["plot_learning_curve"]


def plot_learning_curve(
    history: Sequence[tuple[int, Mapping[str, float]]], path: Path, title: str
) -> None:
    """Plot ``eval/episode_reward/mean`` (with a +-std band) against env steps to a PNG.

    Args:
        history: ``[(step, eval_metrics), ...]``, e.g. a ``TrainResult.eval_history``;
            a missing ``eval/episode_reward/std`` counts as 0.
        path: Where the PNG goes.
        title: The figure's title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s, _ in history]
    mean = [m["eval/episode_reward/mean"] for _, m in history]
    std = [m.get("eval/episode_reward/std", 0.0) for _, m in history]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    try:
        ax.plot(steps, mean, marker="o", color="tab:blue", label="eval return")
        ax.fill_between(
            steps,
            [m - s for m, s in zip(mean, std, strict=True)],
            [m + s for m, s in zip(mean, std, strict=True)],
            color="tab:blue",
            alpha=0.2,
            linewidth=0,
        )
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episode return")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
