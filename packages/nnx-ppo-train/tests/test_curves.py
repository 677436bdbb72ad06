"""Learning-curve statistics (hand-derived bootstrap cases) and the plot."""

from __future__ import annotations

import numpy as np
import pytest

from nnx_ppo.algorithms.analysis.curves import (
    area_under_curve,
    bootstrap_interval,
    curves_of,
    median_band,
    summarize,
    summary_table,
)


def test_bootstrap_interval_of_the_median_of_three_runs():
    # Runs [1, 2, 3]; a resample is 3 draws with replacement. Its median is 1 when at
    # least two draws are 1: P = 3 * (1/3)^2 * (2/3) + (1/3)^3 = 7/27 = 0.259; 3 with
    # the same probability; 2 otherwise (13/27 = 0.481). So the 2.5% and 97.5%
    # quantiles are 1 and 3, and the 30% and 70% quantiles (a 40% interval) are both 2
    # (P(median <= 1) = 0.259 < 0.30, P(median <= 2) = 0.741 > 0.70; 10,000 resamples
    # estimate these to +-0.005).
    low, high = bootstrap_interval([1.0, 2.0, 3.0])
    assert (float(low), float(high)) == (1.0, 3.0)
    low, high = bootstrap_interval([1.0, 2.0, 3.0], confidence=0.4)
    assert (float(low), float(high)) == (2.0, 2.0)
    # The mean of [0, 10]: 0 (P 1/4), 5 (1/2), 10 (1/4): 95% -> [0, 10], 40% -> [5, 5].
    low, high = bootstrap_interval([0.0, 10.0], statistic=np.mean)
    assert (float(low), float(high)) == (0.0, 10.0)
    low, high = bootstrap_interval([0.0, 10.0], statistic=np.mean, confidence=0.4)
    assert (float(low), float(high)) == (5.0, 5.0)
    # Deterministic for a seed; one run has a zero-width interval.
    values = np.random.default_rng(1).normal(size=(7, 3))
    np.testing.assert_array_equal(
        bootstrap_interval(values, seed=4), bootstrap_interval(values, seed=4)
    )
    assert bootstrap_interval([2.5]) == (2.5, 2.5)


def test_median_band_area_and_summary():
    steps = np.array([0, 10, 30])
    values = np.array([[0.0, 2.0, 2.0], [1.0, 1.0, 4.0], [0.0, 0.0, 0.0]])
    median, low, high = median_band(values)
    np.testing.assert_array_equal(median, [0.0, 1.0, 2.0])
    assert np.all(low <= median) and np.all(median <= high)
    np.testing.assert_array_equal(low, values.min(axis=0))  # 3 runs: min and max
    np.testing.assert_array_equal(high, values.max(axis=0))
    # Trapezoids / 30 steps: run 0 (1 * 10 + 2 * 20) / 30, run 1 (10 + 50) / 30, run 2 0.
    np.testing.assert_allclose(area_under_curve(steps, values), [50 / 30, 2.0, 0.0])
    summary = summarize(steps, values)
    assert summary.runs == 3
    assert (summary.final.median, summary.final.low, summary.final.high) == (2.0, 0.0, 4.0)
    assert summary.auc.median == pytest.approx(50 / 30)
    table = summary_table({"a": (steps, values), "b": (steps, values[:2])}).splitlines()
    assert table[0].startswith("| method | runs | final return: median [95% CI]")
    assert table[2] == "| a | 3 | 2 [0, 4] | 1.667 [0, 2] |"
    assert table[3].startswith("| b | 2 | 3 [2, 4] |")


def test_bad_values_are_named():
    with pytest.raises(ValueError, match=r"shape \(0,\): it needs a leading run axis"):
        bootstrap_interval([])
    with pytest.raises(ValueError, match="NaN or infinite"):
        median_band([[1.0, np.nan]])
    with pytest.raises(ValueError, match=r"confidence=1\.5 must be in"):
        bootstrap_interval([1.0], confidence=1.5)
    with pytest.raises(ValueError, match="strictly increasing"):
        area_under_curve([0, 0], [[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"must be \[S\] and \[K, S\]"):
        area_under_curve([0, 1, 2], [[1.0, 2.0]])


def test_curves_of_histories():
    histories = [
        [(0, {"eval/episode_reward/mean": 1.0}), (10, {"eval/episode_reward/mean": 2.0})],
        [(0, {"eval/episode_reward/mean": 3.0}), (10, {"eval/episode_reward/mean": 5.0})],
    ]
    steps, values = curves_of(histories)
    np.testing.assert_array_equal(steps, [0, 10])
    np.testing.assert_array_equal(values, [[1.0, 2.0], [3.0, 5.0]])
    np.testing.assert_array_equal(curves_of(histories, runs=[1])[1], [[3.0, 5.0]])
    with pytest.raises(ValueError, match="run 1 was evaluated at steps"):
        curves_of([histories[0], histories[1][:1]])
    with pytest.raises(ValueError, match="have no 'loss'"):
        curves_of(histories, "loss")


def test_plot_learning_curves(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from nnx_ppo.algorithms.analysis.plotting import plot_learning_curves

    steps = np.array([0, 10, 20])
    values = np.array([[0.0, 1.0, 2.0], [0.0, 2.0, 4.0], [1.0, 3.0, 3.0]])
    ax = plot_learning_curves({"a": (steps, values)}, path=tmp_path / "c.png", title="t")
    (line,) = ax.get_lines()
    np.testing.assert_array_equal(line.get_ydata(), [0.0, 2.0, 3.0])  # the median
    assert line.get_label() == "a (median of 3)"
    assert len(ax.collections) == 1  # the band
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="groups is empty"):
        plot_learning_curves({})
