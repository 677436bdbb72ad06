"""Numbers and figures from finished runs, with no trainer in them: learning curves and
their summaries, rliable's statistics (IQM, probability of improvement, stratified
bootstrap intervals), psychometric fits, trial results and the scores of tasks with
criteria of their own (post-decision wager, interval timing), and plots (matplotlib, the
``logging`` extra, imported only when a plot is drawn).

Imports nothing else of `nnx_ppo.algorithms` but the records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "EVAL_REWARD": "analysis.curves",
    "Interval": "analysis.curves",
    "RunSummary": "analysis.curves",
    "area_under_curve": "analysis.curves",
    "bootstrap_interval": "analysis.curves",
    "curves_of": "analysis.curves",
    "median_band": "analysis.curves",
    "summarize": "analysis.curves",
    "summary_table": "analysis.curves",
    "plot_chronometric": "analysis.plotting",
    "plot_learning_curves": "analysis.plotting",
    "plot_psychometric": "analysis.plotting",
    "MAX_LAPSE": "analysis.psychometrics",
    "PsychometricFit": "analysis.psychometrics",
    "PsychometricKind": "analysis.psychometrics",
    "fit_psychometric": "analysis.psychometrics",
    "Estimate": "analysis.statistics",
    "check_bootstrap": "analysis.statistics",
    "interval_estimates": "analysis.statistics",
    "iqm": "analysis.statistics",
    "load_scores": "analysis.statistics",
    "normalize": "analysis.statistics",
    "percentile_interval": "analysis.statistics",
    "probability_of_improvement": "analysis.statistics",
    "resample_runs": "analysis.statistics",
    "save_scores": "analysis.statistics",
    "stratified_bootstrap": "analysis.statistics",
    "TimingScores": "analysis.task_scores",
    "WagerCheck": "analysis.task_scores",
    "timing_scores": "analysis.task_scores",
    "wager_criterion": "analysis.task_scores",
    "wager_scores": "analysis.task_scores",
    "TrialResults": "analysis.trial_results",
}
__all__ = [
    "EVAL_REWARD",
    "MAX_LAPSE",
    "Estimate",
    "Interval",
    "PsychometricFit",
    "PsychometricKind",
    "RunSummary",
    "TimingScores",
    "TrialResults",
    "WagerCheck",
    "area_under_curve",
    "bootstrap_interval",
    "check_bootstrap",
    "curves_of",
    "fit_psychometric",
    "interval_estimates",
    "iqm",
    "load_scores",
    "median_band",
    "normalize",
    "percentile_interval",
    "plot_chronometric",
    "plot_learning_curves",
    "plot_psychometric",
    "probability_of_improvement",
    "resample_runs",
    "save_scores",
    "stratified_bootstrap",
    "summarize",
    "summary_table",
    "timing_scores",
    "wager_criterion",
    "wager_scores",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.analysis.curves import (
        EVAL_REWARD,
        Interval,
        RunSummary,
        area_under_curve,
        bootstrap_interval,
        curves_of,
        median_band,
        summarize,
        summary_table,
    )
    from nnx_ppo.algorithms.analysis.plotting import (
        plot_chronometric,
        plot_learning_curves,
        plot_psychometric,
    )
    from nnx_ppo.algorithms.analysis.psychometrics import (
        MAX_LAPSE,
        PsychometricFit,
        PsychometricKind,
        fit_psychometric,
    )
    from nnx_ppo.algorithms.analysis.statistics import (
        Estimate,
        check_bootstrap,
        interval_estimates,
        iqm,
        load_scores,
        normalize,
        percentile_interval,
        probability_of_improvement,
        resample_runs,
        save_scores,
        stratified_bootstrap,
    )
    from nnx_ppo.algorithms.analysis.task_scores import (
        TimingScores,
        WagerCheck,
        timing_scores,
        wager_criterion,
        wager_scores,
    )
    from nnx_ppo.algorithms.analysis.trial_results import TrialResults

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
