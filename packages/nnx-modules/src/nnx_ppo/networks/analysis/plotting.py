"""Plots of recorded activity and of the analyses (the ``plot`` extra: matplotlib).

`plot_activations` draws one environment's recorded layers over an episode as
heatmaps (units x time), with optional signal traces above them; `plot_trajectories`
draws state trajectories in the plane of two principal components, with fixed points
marked by stability. Both write a PNG with matplotlib's non-interactive backend.

`plot_flow_field` (a `FlowField` with fixed points and their unstable directions),
`plot_lyapunov_spectrum` and `plot_canonical_correlations` draw on a given axes or a
new figure, return the figure, and write a PNG when given a path.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nnx_ppo.networks.analysis.fixed_points import FixedPoints
from nnx_ppo.networks.analysis.flow import FlowField
from nnx_ppo.networks.analysis.lyapunov import LyapunovSpectrum
from nnx_ppo.networks.analysis.pca import PCA
from nnx_ppo.networks.analysis.similarity import CCA

__all__ = [
    "plot_activations",
    "plot_canonical_correlations",
    "plot_flow_field",
    "plot_lyapunov_spectrum",
    "plot_trajectories",
]


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


def _axes(ax: Any, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """``(figure, axes)``: the given axes' figure, or a new figure with one axes."""
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax


def _finish(fig: Any, path: Path | None) -> Any:
    if path is not None:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        _pyplot().close(fig)
    return fig


def plot_flow_field(
    field: FlowField,
    *,
    fixed_points: FixedPoints | None = None,
    trajectories: Any = None,
    kind: str = "stream",
    eigenvector_length: float | None = None,
    ax: Any = None,
    path: Path | None = None,
    title: str = "",
) -> Any:
    """Draw a `FlowField`: streamlines or arrows coloured by speed, fixed points by
    stability, their unstable directions, and optional trajectories.

    Fixed points are projected onto the plane (`FlowField.project`): attractors as
    black dots, unstable points as red crosses. Through each unstable point a red line
    follows every real eigenvector whose eigenvalue lies outside the unit circle (the
    direction its linearisation expands, projected onto the plane).

    Args:
        field: From `flow_field`.
        fixed_points: From `find_fixed_points` on the same map.
        trajectories: ``[T, B, N]`` states to draw as grey lines (e.g.
            `CarryMap.rollout`).
        kind: ``"stream"`` (``streamplot``) or ``"quiver"`` (one arrow per grid point).
        eigenvector_length: Length of the unstable-direction lines in plane units
            (default a tenth of the plane's width).
        ax: A matplotlib axes to draw on (default a new figure).
        path: Write a PNG there (and close the figure).
        title: The axes title.

    Returns:
        The matplotlib figure.

    Raises:
        ValueError: If ``kind`` is not one of the two, or ``trajectories`` is not
            ``[T, B, N]``.
    """
    if kind not in ("stream", "quiver"):
        raise ValueError(f'plot_flow_field: kind={kind!r} must be "stream" or "quiver".')
    fig, ax = _axes(ax, (5.5, 4.8))
    u, v = field.velocity[..., 0], field.velocity[..., 1]
    in_plane = np.hypot(u, v)
    if kind == "stream":
        ax.streamplot(field.x, field.y, u, v, color=in_plane, cmap="Greys", density=1.0)
    else:
        ax.quiver(field.x, field.y, u, v, in_plane, cmap="Greys", angles="xy")
    if trajectories is not None:
        states = np.asarray(trajectories, np.float64)
        if states.ndim != 3:
            raise ValueError(
                f"plot_flow_field: trajectories must be [T, B, N], got shape {states.shape}."
            )
        z = field.project(states)
        for b in range(z.shape[1]):
            ax.plot(z[:, b, 0], z[:, b, 1], "-", color="tab:blue", lw=0.8, alpha=0.6)
    if fixed_points is not None and len(fixed_points):
        p = field.project(fixed_points.points)
        stable = fixed_points.stable
        ax.scatter(p[stable, 0], p[stable, 1], s=60, c="k", label="attractor", zorder=3)
        ax.scatter(
            p[~stable, 0], p[~stable, 1], s=60, c="r", marker="x", label="unstable", zorder=3
        )
        length = eigenvector_length or 0.1 * float(field.x[-1] - field.x[0])
        plane = field.basis.components[list(field.components)]  # [2, N]
        values, vectors = fixed_points.eigenvalues, fixed_points.eigenvectors
        for m in np.flatnonzero(~stable):
            for e in np.flatnonzero((np.abs(values[m]) > 1) & (np.abs(values[m].imag) < 1e-9)):
                direction = plane @ vectors[m, :, e].real
                norm = float(np.linalg.norm(direction))
                if norm > 1e-9:
                    tip = 0.5 * length * direction / norm
                    ax.plot(*np.stack([p[m] - tip, p[m] + tip]).T, "-", color="r", lw=1.5)
        ax.legend(fontsize=8, loc="best")
    ax.set_xlim(field.x[0], field.x[-1])
    ax.set_ylim(field.y[0], field.y[-1])
    ratio = field.basis.explained_variance_ratio
    i, j = field.components
    ax.set_xlabel(f"PC {i + 1} ({100 * ratio[i]:.0f}% of variance)")
    ax.set_ylabel(f"PC {j + 1} ({100 * ratio[j]:.0f}% of variance)")
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, path)


def plot_lyapunov_spectrum(
    spectrum: LyapunovSpectrum,
    *,
    dt: float = 1.0,
    ax: Any = None,
    path: Path | None = None,
    title: str = "",
) -> Any:
    """Draw the exponents of a `LyapunovSpectrum` by index, with the zero line.

    Args:
        spectrum: From `lyapunov_exponents` (a batch is drawn one line per trajectory).
        dt: The step's duration: exponents are drawn per unit of time
            (``exponent / dt``; e.g. ``dt=0.01`` for 10 ms steps gives 1/s).
        ax: A matplotlib axes to draw on (default a new figure).
        path: Write a PNG there (and close the figure).
        title: The axes title.

    Returns:
        The matplotlib figure.
    """
    fig, ax = _axes(ax, (5.0, 3.6))
    exponents = np.atleast_2d(spectrum.exponents) / dt
    index = np.arange(1, exponents.shape[1] + 1)
    for row in exponents:
        ax.plot(index, row, "o-", ms=3, lw=1)
    ax.axhline(0.0, color="k", lw=0.8, ls="--")
    ax.set_xlabel("exponent index")
    ax.set_ylabel("Lyapunov exponent" + (" (per step)" if dt == 1.0 else f" (per {dt:g})"))
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, path)


def plot_canonical_correlations(
    results: Mapping[str, CCA],
    *,
    ax: Any = None,
    path: Path | None = None,
    title: str = "",
) -> Any:
    """Draw the canonical correlations of one or more `CCA` results, one line each.

    Args:
        results: ``{label: CCA}`` (e.g. ``{"seed 1 vs seed 2": cca(a, b), ...}``); the
            legend shows each label with its mean correlation.
        ax: A matplotlib axes to draw on (default a new figure).
        path: Write a PNG there (and close the figure).
        title: The axes title.

    Returns:
        The matplotlib figure.

    Raises:
        ValueError: If ``results`` is empty.
    """
    if not results:
        raise ValueError("plot_canonical_correlations: results is empty; pass {label: cca(...)}.")
    fig, ax = _axes(ax, (5.0, 3.6))
    for label, result in results.items():
        index = np.arange(1, len(result.correlations) + 1)
        ax.plot(index, result.correlations, "o-", ms=3, lw=1, label=f"{label} ({result.mean:.2f})")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("canonical component")
    ax.set_ylabel("canonical correlation")
    ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, path)
