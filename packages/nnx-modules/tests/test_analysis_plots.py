"""nnx_ppo.networks.analysis.plotting: the flow-field, Lyapunov-spectrum and
canonical-correlation figures hold the numbers they were given (Agg backend)."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from nnx_ppo.networks.analysis import (
    CCA,
    PCA,
    LyapunovSpectrum,
    find_fixed_points,
    flow_field,
)

# A saddle of F(h) = J (h - h*) + h* in 3-D, J = diag(2, 0.5, 0.5) in a rotated frame
# whose first two axes are the plane's: h* = (1, -1, 0.5), the unstable direction is
# the plane's first axis, so its line through h* is horizontal on the plane.
ROTATION = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))[0].T  # rows: axes
POINT = np.array([1.0, -1.0, 0.5])
JACOBIAN = ROTATION.T @ np.diag([2.0, 0.5, 0.5]) @ ROTATION


def test_the_plots_draw_their_numbers(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.quiver import Quiver

    from nnx_ppo.networks.analysis.plotting import (
        plot_canonical_correlations,
        plot_flow_field,
        plot_lyapunov_spectrum,
    )

    jac, point = jnp.asarray(JACOBIAN), jnp.asarray(POINT)
    fn = lambda h: jac @ (h - point) + point
    basis = PCA(np.zeros(3), ROTATION, np.array([1.0, 1.0, 1.0]), np.ones(3) / 3)
    field = flow_field(fn, basis, bounds=((-2, 2), (-3, 1)), resolution=5)
    found = find_fixed_points(fn, jnp.zeros((2, 3)), steps=0)
    assert found.unstable_dimensions.tolist() == [1]
    on_plane = ROTATION[:2] @ POINT  # the saddle's plane coordinates

    fig = plot_flow_field(field, fixed_points=found, kind="quiver", title="saddle")
    ax = fig.axes[0]
    arrows = [c for c in ax.collections if isinstance(c, Quiver)]
    assert len(arrows) == 1
    np.testing.assert_allclose(arrows[0].U, field.velocity[..., 0].ravel())
    np.testing.assert_allclose(arrows[0].V, field.velocity[..., 1].ravel())
    crosses = [c for c in ax.collections if c.get_label() == "unstable"]
    np.testing.assert_allclose(crosses[0].get_offsets(), [on_plane], atol=1e-5)
    (line,) = [ln for ln in ax.lines if ln.get_color() == "r"]  # the unstable direction
    np.testing.assert_allclose(line.get_ydata(), [on_plane[1]] * 2, atol=1e-5)
    np.testing.assert_allclose(np.ptp(line.get_xdata()), 0.4, atol=1e-5)  # width / 10
    assert ax.get_title() == "saddle" and ax.get_xlabel() == "PC 1 (33% of variance)"
    plt.close(fig)
    fig = plot_flow_field(field, trajectories=np.zeros((4, 2, 3)), path=tmp_path / "flow.png")
    assert any(isinstance(c, LineCollection) for c in fig.axes[0].collections)  # streamlines
    assert len(fig.axes[0].lines) == 2 and (tmp_path / "flow.png").stat().st_size > 5000

    spectrum = LyapunovSpectrum(np.array([[0.1, -0.5], [0.0, -0.7]]), np.zeros((3, 2, 2)), 3)
    fig = plot_lyapunov_spectrum(spectrum, dt=0.01)
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [0.0, -70.0])  # per unit of time
    assert ax.get_ylabel() == "Lyapunov exponent (per 0.01)"
    plt.close(fig)

    fit = CCA(np.array([1.0, 0.5]), np.eye(2), np.eye(2), np.zeros(2), np.zeros(2), 2, 2)
    fig, ax = plt.subplots()
    assert plot_canonical_correlations({"a vs b": fit}, ax=ax) is fig
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.0, 0.5])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a vs b (0.75)"]
    plt.close(fig)
    with pytest.raises(ValueError, match=r'kind=.arrows. must be "stream" or "quiver"'):
        plot_flow_field(field, kind="arrows")
    with pytest.raises(ValueError, match="results is empty"):
        plot_canonical_correlations({})
