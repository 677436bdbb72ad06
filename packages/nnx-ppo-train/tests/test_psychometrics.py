"""Psychometric fits: hand-derived maxima, recovery of known curves, errors, to_dict."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nnx_ppo.algorithms.analysis.psychometrics import MAX_LAPSE, PsychometricFit, fit_psychometric

_PHI_1 = 0.5 * math.erfc(-1 / math.sqrt(2))  # the standard normal CDF at 1, 0.8413...


def _logistic(z):
    return 1.0 / (1.0 + np.exp(-z))


def _probit(z):
    return np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in np.ravel(z)]).reshape(np.shape(z))


def _exact_trials(x_values, probabilities, n):
    """``n`` trials per value, ``round(n * p)`` of them choosing: the counts of a curve
    with no sampling noise (each fraction off by at most ``1 / (2 n)``)."""
    x = np.repeat(x_values, n)
    chose = np.concatenate([np.arange(n) < round(n * p) for p in probabilities])
    return x, chose


def test_two_points_are_fitted_exactly():
    # Two values with fractions 1/4 and 3/4 and no lapse: two parameters, two points, so
    # the curve passes through both: by symmetry bias = 0, and F(slope) = 3/4, i.e.
    # slope = logit(3/4) = ln 3 (logistic) or Phi^-1(3/4) = 0.67449 (probit). The
    # log-likelihood is then 2 * (ln 1/4 + 3 ln 3/4) = -4.49868.
    x = np.repeat([-1.0, 1.0], 4)
    chose = np.array([1, 0, 0, 0, 1, 1, 1, 0], bool)
    expected_ll = 2 * (math.log(0.25) + 3 * math.log(0.75))
    for kind, slope in (("logistic", math.log(3.0)), ("probit", 0.6744897501960817)):
        fit = fit_psychometric(x, chose, kind=kind, lapse=0.0, variable="c")
        assert fit.bias == pytest.approx(0.0, abs=1e-7)
        assert fit.slope == pytest.approx(slope, rel=1e-7)
        assert fit.lapse == 0.0 and fit.fixed_lapse and fit.converged
        assert fit.log_likelihood == pytest.approx(expected_ll, rel=1e-9)
        np.testing.assert_array_equal(fit.x, [-1.0, 1.0])
        np.testing.assert_array_equal(fit.n, [4, 4])
        np.testing.assert_array_equal(fit.p, [0.25, 0.75])
        np.testing.assert_allclose(fit([-1.0, 1.0]), [0.25, 0.75], rtol=1e-7)
        assert (fit.variable, fit.kind, fit.n_trials) == ("c", kind, 8)


@pytest.mark.parametrize(
    ("kind", "sigmoid", "slope"), [("logistic", _logistic, 0.1), ("probit", _probit, 0.06)]
)
def test_fit_recovers_bias_slope_and_lapse_of_a_known_curve(kind, sigmoid, slope):
    # 10_000 trials at each of 11 values, choices counted exactly from the curve: the
    # counts are rounded by at most 1/20_000 of a fraction, so the maximum-likelihood
    # parameters sit within rounding of the truth (tolerances: bias 0.05, 0.5 % of the
    # slope, lapse 0.002).
    bias, lapse = 5.0, 0.1
    values = np.linspace(-50, 50, 11)
    truth = lapse / 2 + (1 - lapse) * sigmoid(slope * (values - bias))
    fit = fit_psychometric(*_exact_trials(values, truth, 10_000), kind=kind)
    assert fit.bias == pytest.approx(bias, abs=0.05)
    assert fit.slope == pytest.approx(slope, rel=5e-3)
    assert fit.lapse == pytest.approx(lapse, abs=2e-3)
    assert fit.converged and not fit.fixed_lapse
    np.testing.assert_allclose(fit(values), truth, atol=1e-3)


def test_standard_errors_cover_the_truth_of_sampled_choices():
    # Bernoulli choices from a known logistic curve (seeded): each estimate lies within
    # 4 of its standard errors of the truth, and the errors shrink like 1 / sqrt(n).
    rng = np.random.default_rng(0)
    bias, slope, lapse = -3.0, 0.15, 0.06
    x = np.repeat(np.linspace(-40, 40, 9), 2_000)
    chose = rng.random(x.size) < lapse / 2 + (1 - lapse) * _logistic(slope * (x - bias))
    fit = fit_psychometric(x, chose)
    for name, truth in (("bias", bias), ("slope", slope), ("lapse", lapse)):
        error = fit.standard_errors[name]
        assert 0 < error < math.inf
        assert abs(getattr(fit, name) - truth) < 4 * error, name
    quarter = fit_psychometric(x[::4], chose[::4])  # a quarter of the trials: twice the error
    assert quarter.standard_errors["slope"] == pytest.approx(
        2 * fit.standard_errors["slope"], rel=0.25
    )


def test_lapse_stays_at_zero_for_data_without_lapses():
    # A plain logistic (no lapse) counted exactly, with easy values (+-8: p = 6e-6,
    # rounded to no error in 4_000 trials) where a lapse would show: any lapse lowers the
    # likelihood, so the fit stops on the bound lapse = 0 (its standard error is then
    # undefined) and the slope and bias are the plain curve's.
    values = np.array([-8.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 8.0])
    fit = fit_psychometric(*_exact_trials(values, _logistic(1.5 * values), 4_000))
    assert fit.lapse == 0.0 and not fit.fixed_lapse
    assert math.isnan(fit.standard_errors["lapse"])
    assert fit.slope == pytest.approx(1.5, rel=5e-3) and fit.bias == pytest.approx(0, abs=5e-3)


def test_threshold_is_the_distance_at_which_F_reaches_F_of_1():
    # threshold = 1 / |slope|, so p(bias + threshold) = lapse / 2 + (1 - lapse) F(1):
    # F(1) = 1 / (1 + e^-1) = 0.7311 (logistic), Phi(1) = 0.8413 (probit).
    base = {"variable": "x", "bias": 2.0, "lapse": 0.2, "log_likelihood": -1.0,
            "x": np.array([0.0, 1.0]), "n": np.array([1, 1]), "p": np.array([0.0, 1.0]),
            "standard_errors": dict.fromkeys(("bias", "slope", "lapse"), math.nan),
            "converged": True}  # fmt: skip
    for kind, f_of_1 in (("logistic", 1 / (1 + math.exp(-1))), ("probit", _PHI_1)):
        for slope in (0.25, -0.25):
            fit = PsychometricFit(kind=kind, slope=slope, **base)
            assert fit.threshold == 4.0
            expected = 0.1 + 0.8 * (f_of_1 if slope > 0 else 1 - f_of_1)
            assert float(fit(2.0 + fit.threshold)) == pytest.approx(expected, rel=1e-12)
            assert float(fit(2.0)) == pytest.approx(0.5, rel=1e-12)  # p = 1/2 at the bias
    flat = PsychometricFit(kind="logistic", slope=0.0, **base)
    assert flat.threshold == math.inf and flat.to_dict()["threshold"] is None


def test_bad_kind_shape_lapse_and_values_are_refused_with_their_names():
    x, chose = np.array([0.0, 1.0, 2.0]), np.array([False, True, True])
    with pytest.raises(ValueError, match=r"kind='cubic' is not one of 'logistic', 'probit'"):
        fit_psychometric(x, chose, kind="cubic")
    with pytest.raises(ValueError, match=r"x and chose must be \[N\].*\(1, 3\) and \(1, 3\)"):
        fit_psychometric(x[None], chose[None])
    with pytest.raises(ValueError, match=r"got shapes \(3,\) and \(2,\)"):
        fit_psychometric(x, chose[:2])
    with pytest.raises(ValueError, match=r"lapse=0\.7 must be None"):
        fit_psychometric(x, chose, lapse=0.7)
    with pytest.raises(ValueError, match=r"lapse=True must be None"):
        fit_psychometric(x, chose, lapse=True)
    with pytest.raises(ValueError, match="x has non-finite values"):
        fit_psychometric([0.0, math.nan, 1.0], chose)
    with pytest.raises(ValueError, match=r"coherence takes 1 distinct value\(s\) over 3 trials"):
        fit_psychometric(np.ones(3), chose, variable="coherence")
    assert fit_psychometric(x, chose, lapse=MAX_LAPSE).lapse == MAX_LAPSE  # the bound is valid


def test_to_dict_is_json_serialisable():
    fit = fit_psychometric(np.repeat([-1.0, 1.0], 4), [1, 0, 0, 0, 1, 1, 1, 0], lapse=0.0)
    data = json.loads(json.dumps(fit.to_dict(), allow_nan=False))
    assert data["standard_errors"]["lapse"] is None  # fixed: nan becomes None
    assert data["threshold"] == pytest.approx(1 / math.log(3.0), rel=1e-7)
    assert data["x"] == [-1.0, 1.0] and data["n"] == [4, 4] and data["p"] == [0.25, 0.75]
    assert (data["kind"], data["fixed_lapse"], data["converged"]) == ("logistic", True, True)
    assert data["bias"] == fit.bias and data["slope"] == fit.slope


def test_choices_all_on_one_side_are_not_reported_as_converged():
    # Every trial chose action 2: the likelihood grows as the bias runs to -infinity, so
    # no finite maximum exists, whatever point the ascent stopped at.
    x = np.repeat([-10.0, 0.0, 10.0], 20)
    fit = fit_psychometric(x, np.ones_like(x, bool))
    assert not fit.converged
    assert fit_psychometric(x, x > 0).n_trials == 60  # both sides: a fit to report


def test_degenerate_fits_name_their_problems():
    # A sound fit: choices follow x on both sides of 0 (1.5 of noise flips the nearer
    # values half the time), the bias is inside [-2, 2] and every error is finite.
    x = np.repeat([-2.0, -1.0, 1.0, 2.0], 50)
    sound = fit_psychometric(x, x + np.tile([-1.5, 1.5], 100) > 0)
    assert sound.problems == () and not sound.degenerate
    # Every choice on one side: no finite maximum, the ascent cannot converge.
    one_sided = fit_psychometric(x, np.ones_like(x, bool))
    assert one_sided.degenerate and "did not converge" in one_sided.problems[0]
    # 1 choice in 7 at every x: the curve is flat at 1/7, its point of subjective
    # equality (p = 1/2) lies outside the stimulus range (the issue's "bias 57 outside
    # +-51" case).
    flat = fit_psychometric(x, np.arange(x.size) % 7 == 0)
    assert not -2 <= flat.bias <= 2
    assert f"bias {flat.bias:.3g} outside the range of x [-2, 2]" in flat.problems
    # Two values of x for three parameters (go/no-go's two conditions).
    two = fit_psychometric(np.repeat([0.0, 1.0], 10), np.tile([0, 1, 1, 1, 0], 4))
    assert "2 values of x for 3 parameters" in two.problems
    assert "2 values" not in " ".join(fit_psychometric(np.repeat([0.0, 1.0], 10),
                                                       np.tile([0, 1, 1, 1, 0], 4),
                                                       lapse=0.0).problems)  # fmt: skip
    data = flat.to_dict()
    assert data["degenerate"] is True and data["problems"] == list(flat.problems)
