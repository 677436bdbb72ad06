"""rliable's statistics: IQM, probability of improvement and the stratified bootstrap
against hand-computed values (the derivations in the comments)."""

from __future__ import annotations

import numpy as np
import pytest

from nnx_ppo.algorithms.analysis.statistics import (
    Estimate,
    interval_estimates,
    iqm,
    load_scores,
    normalize,
    probability_of_improvement,
    save_scores,
    stratified_bootstrap,
)


def test_iqm_trims_a_quarter_of_all_runs_and_tasks_pooled():
    # 3 runs x 3 tasks = 9 scores; floor(9 / 4) = 2 dropped at each end:
    # sorted 0 1 2 3 4 5 6 7 100 -> mean(2, 3, 4, 5, 6) = 4.
    scores = np.array([[0.0, 5.0, 100.0], [3.0, 1.0, 7.0], [6.0, 2.0, 4.0]])
    assert iqm(scores) == 4.0
    # Pooled, not per task: per-task IQMs (no trim at 3 runs) would average to
    # mean(3, 8/3, 37) = 14.2.
    assert iqm(scores.T) == 4.0
    # 10 runs, one task: floor(10 / 4) = 2 at each end, the middle 6 of 1..10: mean 5.5.
    assert iqm(np.arange(10.0, 0.0, -1.0)) == 5.5
    # 5 scores: floor(5 / 4) = 1: mean(2, 3, 4) = 3 whatever the outliers.
    assert iqm([-1e9, 2.0, 3.0, 4.0, 1e9]) == 3.0


def test_probability_of_improvement_counts_pairs_per_task_ties_one_half():
    # Task 0: x = (1, 2, 3) vs y = (2, 2): pairs 1>2? no, 2 vs 2 tie, 3>2 yes, twice
    # each: (0 + 0.5 + 1) * 2 / 6 = 0.5. Task 1: x = (5, 6, 7) vs y = (1, 9): each x beats
    # 1 and loses to 9: 3 / 6 = 0.5. Task 2: x = (4, 4, 4) vs y = (0, 4): 3 wins and 3
    # ties: (3 + 1.5) / 6 = 0.75. Average: (0.5 + 0.5 + 0.75) / 3 = 7 / 12.
    x = np.array([[1.0, 5.0, 4.0], [2.0, 6.0, 4.0], [3.0, 7.0, 4.0]])
    y = np.array([[2.0, 1.0, 0.0], [2.0, 9.0, 4.0]])
    assert probability_of_improvement(x, y) == pytest.approx(7 / 12)
    assert probability_of_improvement(y, x) == pytest.approx(1 - 7 / 12)  # P(X>Y)+P(Y>X)=1
    assert probability_of_improvement(x, x) == 0.5
    assert probability_of_improvement([3.0, 4.0], [1.0, 2.0]) == 1.0  # [runs]: one task
    with pytest.raises(ValueError, match="x has 3 tasks and y 2"):
        probability_of_improvement(x, y[:, :2])


def test_stratified_bootstrap_resamples_runs_within_each_task():
    # Task 0's runs score 0, 1, 2; task 1's all 100. A resample's mean is
    # (mean of 3 draws from {0, 1, 2} + 100) / 2, always in [50, 51]; the ends (three
    # 0s, three 2s) each have probability 1/27 = 3.7% > 2.5%, so the 95% percentile
    # interval is exactly (50, 51). Resampling the 6 scores pooled would reach 0 and 100.
    scores = np.array([[0.0, 100.0], [1.0, 100.0], [2.0, 100.0]])
    low, high = stratified_bootstrap(lambda s: np.mean(s), scores, n_resamples=5000)
    assert (low, high) == (50.0, 51.0)
    # One run per task: every resample is the data itself.
    assert stratified_bootstrap(iqm, [[1.0, 2.0, 3.0]], n_resamples=50) == (2.0, 2.0)
    # Two arrays are resampled independently: x's runs (1, 2) vs y's (0, 3) on one task;
    # P(X > Y) of a resample is the fraction of pairs won, ranging over {0, .25, ..., 1}.
    low, high = stratified_bootstrap(
        probability_of_improvement, [1.0, 2.0], [0.0, 3.0], n_resamples=2000, confidence=0.5
    )
    assert 0.0 <= low <= 0.5 <= high <= 1.0 and {low * 4, high * 4} <= set(range(5))
    # Deterministic for a seed; another seed draws other resamples.
    rng = np.random.default_rng(3)
    data = rng.normal(size=(6, 4))
    a = stratified_bootstrap(iqm, data, n_resamples=300, seed=1)
    assert a == stratified_bootstrap(iqm, data, n_resamples=300, seed=1)
    assert a != stratified_bootstrap(iqm, data, n_resamples=300, seed=2)
    assert a[0] < iqm(data) < a[1]


def test_interval_estimates_of_algorithms_and_of_pairs():
    x = np.array([[1.0], [2.0], [3.0], [4.0]])
    y = np.array([[0.0], [0.5], [1.0], [6.0]])
    out = interval_estimates({"x": x, "y": y}, n_resamples=500)
    assert out["x"].value == 2.5  # the middle two of four
    assert out["y"].value == 0.75
    assert out["x"].low <= 2.5 <= out["x"].high and isinstance(out["x"], Estimate)
    # A tuple entry is several arrays: rliable's {"x,y": [x, y]}.
    pair = interval_estimates({"x,y": (x, y)}, probability_of_improvement, n_resamples=500)
    # x vs y: 1 beats 0 and 0.5 and ties 1 (2.5 of 4); 2, 3 and 4 beat 0, 0.5 and 1 (3
    # of 4 each): 11.5 / 16.
    assert pair["x,y"].value == 11.5 / 16
    assert str(Estimate(0.5, 0.25, 0.75)) == "0.5 [0.25, 0.75]"


def test_normalize_and_the_score_file(tmp_path):
    scores = np.array([[5.0, 30.0], [10.0, 10.0]])
    # Task 0: (x - 0) / 10; task 1: (x - 10) / 40.
    assert normalize(scores, [0.0, 10.0], [10.0, 50.0]).tolist() == [[0.5, 0.5], [1.0, 0.0]]
    with pytest.raises(ValueError, match="must be finite and differ"):
        normalize(scores, [0.0, 10.0], [0.0, 50.0])
    path = tmp_path / "scores.npz"
    save_scores(path, {"ppo": scores, "lstm": [1.0, 2.0]})
    loaded = load_scores(path)
    assert loaded["ppo"].tolist() == scores.tolist()
    assert loaded["lstm"].shape == (2, 1)  # [runs] is one task: [runs, 1]
    assert {k: v.tolist() for k, v in dict(np.load(path)).items()} == {
        k: v.tolist() for k, v in loaded.items()
    }  # rliable's reading: dict(np.load(path))


@pytest.mark.parametrize(
    "scores,match",
    [
        (np.zeros((0, 2)), r"shape \(0, 2\)"),
        (np.zeros((2, 2, 2)), r"shape \(2, 2, 2\)"),
        ([1.0, np.nan], "NaN or infinite"),
    ],
)
def test_invalid_scores_are_refused(scores, match):
    with pytest.raises(ValueError, match=match):
        iqm(scores)


def test_invalid_bootstrap_arguments_are_refused():
    with pytest.raises(ValueError, match=r"confidence=1\.5"):
        stratified_bootstrap(iqm, [1.0], confidence=1.5)
    with pytest.raises(ValueError, match="n_resamples=0"):
        stratified_bootstrap(iqm, [1.0], n_resamples=0)
    with pytest.raises(TypeError, match="at least one scores array"):
        stratified_bootstrap(iqm)
