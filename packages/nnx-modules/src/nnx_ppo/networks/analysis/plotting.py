"""Plots of recorded activity (the ``plot`` extra: matplotlib).

`plot_activations` draws one environment's recorded layers over an episode as
heatmaps (units x time), with optional signal traces above them; `plot_trajectories`
draws state trajectories in the plane of two principal components, with fixed points
marked by stability. Both write a PNG with matplotlib's non-interactive backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nnx_ppo.networks.analysis.fixed_points import FixedPoints
from nnx_ppo.networks.analysis.pca import PCA

__all__ = ["plot_activations", "plot_trajectories"]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "nnx_ppo.networks.analysis.plotting needs matplotlib, which the 'plot' extra "
            'of nnx-modules installs: pip install "nnx-modules[plot]".'
        ) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_activations(
    activations: Mapping[str, Any],
    dones: Any,
    path: Path,
    *,
    env_index: int = 0,
    signals: Mapping[str, Any] | None = None,
    title: str = "",
) -> None:
    """Draw one environment's recorded activations over an episode and save a PNG.

    Args:
        activations: Flat ``{path: [T, B, ...]}`` activations
            (`nnx_ppo.networks.recording.flatten_activations` of what
            ``record_activations_rollout`` returned), in the order to draw them. Each
            becomes a heatmap of its units (trailing axes flattened) over time.
        dones: ``[T, B]`` bool: steps after the episode ended, drawn blank.
        path: Where to write the PNG (its folder must exist).
        env_index: Which environment (column ``b``) to draw.
        signals: Optional ``{label: [T, B, K]}`` traces drawn as lines in a first panel
            (e.g. the cue, the target and the action).
        title: The figure title.

    Raises:
        ValueError: If there is nothing to draw, ``env_index`` is out of range, or an
            array does not have ``dones``' ``[T, B]`` leading axes.
    """
    plt = _pyplot()

    dones = np.asarray(dones, bool)
    if dones.ndim != 2:
        raise ValueError(f"dones must be [T, B], got shape {dones.shape}")
    steps, n_envs = dones.shape
    if not 0 <= env_index < n_envs:
        raise ValueError(f"env_index={env_index} is out of range for {n_envs} environments")
    if not activations:
        raise ValueError("activations is empty: record a network with with_recording first")
    live = ~dones[:, env_index]

    def column(name: str, value: Any) -> np.ndarray:
        array = np.asarray(value, np.float32)
        if array.shape[:2] != (steps, n_envs):
            raise ValueError(
                f"{name!r} has shape {array.shape}; expected leading axes [T, B] = "
                f"[{steps}, {n_envs}] like dones"
            )
        units = array[:, env_index].reshape(steps, -1)
        return np.where(live[:, None], units, np.nan)

    panels = [(name, column(name, value)) for name, value in activations.items()]
    n_rows = len(panels) + (1 if signals else 0)
    heights = ([1.2] if signals else []) + [max(0.6, min(2.4, p.shape[1] / 12)) for _, p in panels]
    fig, axes = plt.subplots(
        n_rows,
        1,
        figsize=(9, 1.2 + 1.3 * sum(heights)),
        sharex=True,
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    rows = list(axes[:, 0])
    t = np.arange(steps)
    if signals:
        ax = rows.pop(0)
        for label, value in signals.items():
            ax.step(t, column(label, value)[:, 0], where="mid", label=label)
        ax.legend(loc="upper right", fontsize=7, ncol=len(signals))
        ax.set_ylabel("signal", fontsize=8)
    for ax, (name, units) in zip(rows, panels, strict=True):
        bound = float(np.nanmax(np.abs(units))) if np.isfinite(units).any() else 1.0
        image = ax.imshow(
            units.T,
            aspect="auto",
            interpolation="nearest",
            cmap="RdBu_r",
            vmin=-bound,
            vmax=bound,
            extent=(-0.5, steps - 0.5, units.shape[1] - 0.5, -0.5),
        )
        ax.set_ylabel(f"{name}\n({units.shape[1]} units)", fontsize=8)
        fig.colorbar(image, ax=ax, pad=0.01, fraction=0.03)
    rows[-1].set_xlabel("step")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_trajectories(
    states: Any,
    basis: PCA,
    path: Path,
    *,
    fixed_points: FixedPoints | None = None,
    dones: Any = None,
    labels: Any = None,
    title: str = "",
) -> None:
    """Draw state trajectories in the plane of the first two principal components.

    Args:
        states: ``[T, B, N]`` states (e.g. `CarryMap.rollout`), one line per
            environment.
        basis: A `PCA` fitted on such states (two components or more).
        path: Where to write the PNG (its folder must exist).
        fixed_points: Marked as filled dots (attractors) or crosses (unstable).
        dones: ``[T, B]`` bool; steps after an episode ended are not drawn.
        labels: ``[B]`` values to colour the trajectories by (e.g. each episode's cue).
        title: The figure title.

    Raises:
        ValueError: If ``states`` is not ``[T, B, N]`` or ``basis`` has fewer than 2
            components.
    """
    states = np.asarray(states, np.float64)
    if states.ndim != 3:
        raise ValueError(f"states must be [T, B, N], got shape {states.shape}")
    if basis.components.shape[0] < 2:
        raise ValueError("basis must have at least 2 components (pca(..., n_components=2))")
    plt = _pyplot()
    z = basis.transform(states)[..., :2]
    if dones is not None:
        ended = np.cumsum(np.asarray(dones, bool), axis=0) > 0
        ended = np.concatenate([np.zeros_like(ended[:1]), ended[:-1]])  # keep the last step
        z = np.where(ended[..., None], np.nan, z)
    fig, ax = plt.subplots(figsize=(5.5, 4.8))
    cmap = plt.get_cmap("viridis")
    values = None if labels is None else np.asarray(labels, np.float64)
    span = (values.min(), values.max()) if values is not None else (0.0, 1.0)
    for b in range(z.shape[1]):
        share = (
            0.5
            if values is None or span[1] == span[0]
            else (values[b] - span[0]) / (span[1] - span[0])
        )
        ax.plot(z[:, b, 0], z[:, b, 1], "-", color=cmap(share), lw=0.8, alpha=0.7)
        ax.plot(z[0, b, 0], z[0, b, 1], ".", color=cmap(share), ms=4)
    if fixed_points is not None and len(fixed_points):
        p = basis.transform(fixed_points.points)[:, :2]
        stable = fixed_points.stable
        ax.scatter(p[stable, 0], p[stable, 1], s=60, c="k", label="attractor", zorder=3)
        ax.scatter(
            p[~stable, 0], p[~stable, 1], s=60, c="r", marker="x", label="unstable", zorder=3
        )
        ax.legend(fontsize=8, loc="best")
    ratio = basis.explained_variance_ratio
    ax.set_xlabel(f"PC 1 ({100 * ratio[0]:.0f}% of variance)")
    ax.set_ylabel(f"PC 2 ({100 * ratio[1]:.0f}% of variance)")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
