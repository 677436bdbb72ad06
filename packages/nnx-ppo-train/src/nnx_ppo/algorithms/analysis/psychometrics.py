"""Psychometric curves: `fit_psychometric` and the `PsychometricFit` it returns.

A psychometric curve is the probability of one choice (here: action 2, e.g. "right")
as a function of a stimulus variable ``x`` (e.g. the signed motion coherence). The
model is the symmetric-lapse sigmoid::

    p(x) = lapse / 2 + (1 - lapse) * F(slope * (x - bias))

with ``F`` the logistic function (``kind="logistic"``) or the standard normal CDF
(``kind="probit"``), ``bias`` the point of subjective equality (``p = 1/2``), ``slope``
the sensitivity and ``lapse`` in ``[0, 0.5)`` the rate of stimulus-independent guesses.

It is fitted by maximum likelihood over the trials' binary choices (Bernoulli per trial,
which depends only on the counts per distinct ``x``) in float64 NumPy: Fisher scoring
with step halving from a handful of deterministic starting points, ``lapse`` kept in
its range by an active set (it may end at exactly 0). The result is deterministic.

Examples:
    Choices drawn from a known curve are fitted back:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = np.repeat(np.linspace(-50, 50, 11), 2000)
    >>> truth = 0.1 / 2 + 0.9 / (1 + np.exp(-0.1 * (x - 5.0)))
    >>> fit = fit_psychometric(x, rng.random(x.size) < truth)
    >>> round(fit.bias, 1), round(fit.slope, 2), round(fit.lapse, 2)
    (5.1, 0.1, 0.1)
    >>> fit.x.shape, int(fit.n.sum()), fit.converged
    ((11,), 22000, True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal, cast

import numpy as np

__all__ = ["MAX_LAPSE", "PsychometricFit", "PsychometricKind", "fit_psychometric"]

PsychometricKind = Literal["logistic", "probit"]
"""The sigmoid ``F``: the logistic function or the standard normal CDF."""

MAX_LAPSE = 0.499
"""The largest lapse the fit reaches (``lapse = 0.5`` is a flat curve, ``p = 1/2``)."""

_TINY = 1e-300  # the floor of p and 1 - p inside the logarithms
_SQRT2 = math.sqrt(2.0)
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _logistic(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cdf = 0.5 * (1.0 + np.tanh(0.5 * z))  # 1 / (1 + exp(-z)) without overflow
    return cdf, cdf * (1.0 - cdf)


def _probit(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cdf = np.asarray(_ERFC(-z / _SQRT2), np.float64) / 2.0
    return cdf, np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


_SIGMOIDS: dict[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
    "logistic": _logistic,
    "probit": _probit,
}


@dataclasses.dataclass(frozen=True, eq=False)
class PsychometricFit:
    """A fitted psychometric curve and the data it was fitted to.

    ``p(x) = lapse / 2 + (1 - lapse) * F(slope * (x - bias))`` (see the module
    docstring); calling the fit evaluates it.

    Attributes:
        variable: The name of ``x`` (e.g. ``"signed_coherence"``).
        kind: ``"logistic"`` or ``"probit"``.
        bias: The ``x`` at which ``p = 1/2``.
        slope: The sensitivity (per unit of ``x``); negative if action 2 gets rarer as
            ``x`` grows.
        lapse: The symmetric lapse rate, in ``[0, MAX_LAPSE]``.
        log_likelihood: The maximized log-likelihood of the choices (natural log, sum
            over trials).
        x: ``[M]`` the distinct values of ``x``, sorted.
        n: ``[M]`` int, trials at each value.
        p: ``[M]`` the observed fraction of those trials choosing action 2.
        standard_errors: ``{"bias", "slope", "lapse"}``: asymptotic standard errors
            from the inverse Fisher information at the fit (``nan`` for a lapse that is
            fixed or on the bound 0, and for parameters the data do not determine).
        converged: Whether the fit reached a stationary point (no ascent step gains
            ``1e-10`` of log-likelihood). For perfectly separable data the likelihood's
            supremum is at an infinite slope: the fit stops where the curve is a step to
            rounding (a huge slope standard error says so) or at the cap
            ``1000 / (max(x) - min(x))``, where it reports ``False``.
        fixed_lapse: Whether ``lapse`` was given rather than fitted.

    `problems` lists what makes the numbers unfit to report (`degenerate`).
    """

    variable: str
    kind: str
    bias: float
    slope: float
    lapse: float
    log_likelihood: float
    x: np.ndarray
    n: np.ndarray
    p: np.ndarray
    standard_errors: dict[str, float]
    converged: bool
    fixed_lapse: bool = False

    def __call__(self, x: Any) -> np.ndarray:
        """The fitted probability of action 2 at ``x`` (any shape; float64)."""
        z = self.slope * (np.asarray(x, np.float64) - self.bias)
        cdf, _ = _SIGMOIDS[self.kind](z)
        return self.lapse / 2.0 + (1.0 - self.lapse) * cdf

    @property
    def threshold(self) -> float:
        """``1 / |slope|``: how far from ``bias`` ``F`` reaches ``F(1)`` (73 % for the
        logistic, 84 % for the probit); ``inf`` for a flat curve."""
        return math.inf if self.slope == 0 else 1.0 / abs(self.slope)

    @property
    def n_trials(self) -> int:
        """The number of trials fitted."""
        return int(self.n.sum())

    @property
    def problems(self) -> tuple[str, ...]:
        """Why the fitted numbers do not describe a curve through the data (empty for a
        sound fit): the ascent did not converge (e.g. every choice on one side), fewer
        distinct values of ``x`` than fitted parameters, the ``bias`` outside the range
        of ``x`` (an extrapolated point of subjective equality), the lapse on its upper
        bound (a flat curve), or a bias or slope the data do not determine (no standard
        error).

        Examples:
            >>> import numpy as np
            >>> x = np.repeat([-2.0, -1.0, 1.0, 2.0], 50)
            >>> fit_psychometric(x, x + np.tile([-1.5, 1.5], 100) > 0).problems
            ()
            >>> fit_psychometric(x, np.arange(x.size) % 7 == 0).problems  # 1 in 7 everywhere
            ('bias -2.31 outside the range of x [-2, 2]',)
        """
        found = []
        if not self.converged:
            found.append("the fit did not converge (choices all on one side, or a step)")
        parameters = 2 if self.fixed_lapse else 3
        if self.x.size < parameters:
            found.append(f"{self.x.size} values of x for {parameters} parameters")
        low, high = float(self.x[0]), float(self.x[-1])
        if not low <= self.bias <= high:
            found.append(f"bias {self.bias:.3g} outside the range of x [{low:g}, {high:g}]")
        if not self.fixed_lapse and self.lapse >= MAX_LAPSE * (1 - 1e-6):
            found.append(f"lapse at its bound {MAX_LAPSE} (a flat curve)")
        if any(math.isnan(self.standard_errors[k]) for k in ("bias", "slope")):
            found.append("the data do not determine the bias or slope (no standard error)")
        return tuple(found)

    @property
    def degenerate(self) -> bool:
        """Whether the fit has `problems`: flag or leave out its numbers."""
        return bool(self.problems)

    def to_dict(self) -> dict[str, Any]:
        """The fit as JSON-ready Python values (the data points as lists)."""
        return {
            "variable": self.variable,
            "kind": self.kind,
            "bias": self.bias,
            "slope": self.slope,
            "threshold": None if math.isinf(self.threshold) else self.threshold,
            "lapse": self.lapse,
            "log_likelihood": self.log_likelihood,
            "standard_errors": {
                k: None if math.isnan(v) else v for k, v in self.standard_errors.items()
            },
            "converged": self.converged,
            "fixed_lapse": self.fixed_lapse,
            "degenerate": self.degenerate,
            "problems": list(self.problems),
            "x": self.x.tolist(),
            "n": self.n.tolist(),
            "p": self.p.tolist(),
        }


# --------------------------------------------------------------------------- fitting


class _Model:
    """The grouped binomial log-likelihood, its score and Fisher information.

    ``p`` and ``q = 1 - p`` are computed separately (``F`` is symmetric, ``1 - F(z) =
    F(-z)``), so neither loses precision when the other is close to 1.
    """

    def __init__(self, x: np.ndarray, n: np.ndarray, k: np.ndarray, kind: str) -> None:
        self.x, self.n, self.k = x, n, k
        self.sigmoid = _SIGMOIDS[kind]

    def probability(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``p [M]``, ``q = 1 - p [M]`` and the gradient of ``p`` ``[M, 3]`` in
        ``(bias, slope, lapse)``."""
        bias, slope, lapse = theta
        z = slope * (self.x - bias)
        cdf, pdf = self.sigmoid(z)
        upper, _ = self.sigmoid(-z)
        p = lapse / 2.0 + (1.0 - lapse) * cdf
        q = lapse / 2.0 + (1.0 - lapse) * upper
        grad = np.stack(
            [-(1.0 - lapse) * pdf * slope, (1.0 - lapse) * pdf * (self.x - bias), 0.5 - cdf],
            axis=1,
        )
        return np.maximum(p, _TINY), np.maximum(q, _TINY), grad

    def log_likelihood(self, theta: np.ndarray) -> float:
        p, q, _ = self.probability(theta)
        return float(np.sum(self.k * np.log(p) + (self.n - self.k) * np.log(q)))

    def score_and_information(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p, q, grad = self.probability(theta)
        residual = self.k * q - (self.n - self.k) * p  # k - n p, without cancellation
        score = grad.T @ (residual / (p * q))
        information = (grad * (self.n / (p * q))[:, None]).T @ grad
        return score, information


def _free(theta: np.ndarray, score: np.ndarray, fit_lapse: bool) -> list[int]:
    """The parameters a step may move: the lapse is fixed when it is not fitted, or sits
    on a bound with the score pushing it out."""
    at_bound = (theta[2] <= 0.0 and score[2] <= 0.0) or (theta[2] >= MAX_LAPSE and score[2] >= 0)
    return [0, 1, 2] if fit_lapse and not at_bound else [0, 1]


def _ascend(
    model: _Model, theta: np.ndarray, fit_lapse: bool, max_slope: float
) -> tuple[np.ndarray, float, bool]:
    """Fisher scoring with step halving from ``theta``: ``(theta, log_lik, converged)``."""
    value = model.log_likelihood(theta)
    converged = False
    for _ in range(200):
        score, information = model.score_and_information(theta)
        free = _free(theta, score, fit_lapse)
        block = information[np.ix_(free, free)]
        ridge = 1e-12 * max(float(np.trace(block)), 1e-300) * np.eye(len(free))
        step = np.zeros(3)
        step[free] = np.linalg.lstsq(block + ridge, score[free], rcond=None)[0]
        decrement = float(score[free] @ step[free])  # the Newton decrement squared
        if not math.isfinite(decrement) or decrement < 1e-10:
            converged = math.isfinite(decrement)
            break
        size, moved = 1.0, False
        while size > 1e-8:
            trial = theta + size * step
            trial[1] = np.clip(trial[1], -max_slope, max_slope)
            trial[2] = np.clip(trial[2], 0.0, MAX_LAPSE)
            trial_value = model.log_likelihood(trial)
            if trial_value > value:
                theta, value, moved = trial, trial_value, True
                break
            size /= 2.0
        if not moved:  # no ascent left along the step: a stationary point to rounding
            converged = decrement < 1e-6
            break
    at_cap = abs(theta[1]) >= max_slope * (1.0 - 1e-9)
    return theta, value, converged and not at_cap


def _check_kind(kind: Any) -> PsychometricKind:
    if kind not in _SIGMOIDS:
        raise ValueError(
            f"fit_psychometric: kind={kind!r} is not one of 'logistic', 'probit'; pass "
            "kind='logistic' (the default) or kind='probit'."
        )
    return cast(PsychometricKind, kind)


def fit_psychometric(
    x: Any,
    chose: Any,
    *,
    kind: PsychometricKind = "logistic",
    lapse: float | None = None,
    variable: str = "x",
) -> PsychometricFit:
    """Fit ``P(chose | x)`` by maximum likelihood (see the module docstring).

    Args:
        x: ``[N]`` the stimulus value of each trial.
        chose: ``[N]`` bool, whether the trial's choice was action 2 (trials without a
            decision should be left out).
        kind: ``"logistic"`` or ``"probit"``.
        lapse: ``None`` fits the lapse rate; a number in ``[0, MAX_LAPSE]`` fixes it
            (``lapse=0`` fits a plain sigmoid).
        variable: The name of ``x``, kept on the fit for labels.

    Returns:
        A `PsychometricFit`: the parameters of the best of several starting points, the
        log-likelihood and the data points ``(x, n, p)``; ``converged=False`` where the
        ascent did not settle or every choice is on one side (no finite maximum).

    Raises:
        ValueError: If ``x`` and ``chose`` are not ``[N]`` of one length, hold no trial,
            ``x`` is not finite or takes fewer than two distinct values, or ``kind`` or
            ``lapse`` is invalid.
    """
    kind = _check_kind(kind)
    xs = np.asarray(x, np.float64)
    ys = np.asarray(chose)
    if xs.ndim != 1 or ys.shape != xs.shape:
        raise ValueError(
            f"fit_psychometric: x and chose must be [N] arrays of one length, got shapes "
            f"{xs.shape} and {ys.shape}."
        )
    if not np.all(np.isfinite(xs)):
        raise ValueError("fit_psychometric: x has non-finite values; drop those trials.")
    values, index = np.unique(xs, return_inverse=True)
    if values.size < 2:
        raise ValueError(
            f"fit_psychometric: {variable} takes {values.size} distinct value(s) over "
            f"{xs.size} trials; a psychometric curve needs trials at two values or more "
            "(are there decided trials at every condition?)."
        )
    if lapse is not None and (
        isinstance(lapse, bool) or not isinstance(lapse, int | float) or not 0 <= lapse <= MAX_LAPSE
    ):
        raise ValueError(
            f"fit_psychometric: lapse={lapse!r} must be None (fit it) or a number in "
            f"[0, {MAX_LAPSE}] (fix it, e.g. lapse=0.0)."
        )
    n = np.bincount(index, minlength=values.size).astype(np.int64)
    k = np.bincount(index, weights=ys.astype(np.float64), minlength=values.size)
    model = _Model(values, n.astype(np.float64), k, kind)
    p = k / n

    # Starting points: bias at the weighted mean and where the observed p crosses 1/2;
    # slope of the observed trend's sign at two scales; no lapse and 10 % lapse.
    span = float(values[-1] - values[0])
    mean = float(np.sum(n * values) / np.sum(n))
    sign = 1.0 if np.sum(n * (values - mean) * (p - p.mean())) >= 0 else -1.0
    crossing = np.flatnonzero(np.diff(np.sign(p - 0.5)) != 0)
    biases = [mean]
    if crossing.size:
        i = int(crossing[0])
        dp = p[i + 1] - p[i]
        biases.append(float(values[i] + (0.5 - p[i]) * (values[i + 1] - values[i]) / dp))
    lapses = [0.0, 0.1] if lapse is None else [float(lapse)]
    max_slope = 1000.0 / span
    best: tuple[np.ndarray, float, bool] | None = None
    for b0 in biases:
        for scale in (2.0, 8.0):
            for l0 in lapses:
                start = np.array([b0, sign * scale / span, l0])
                found = _ascend(model, start, lapse is None, max_slope)
                if best is None or found[1] > best[1]:
                    best = found
    assert best is not None  # at least one starting point
    theta, value, converged = best
    # Choices all on one side have no finite maximum (the bias runs off to infinity):
    # whatever the ascent stopped at is reported as not converged.
    converged = converged and 0 < float(k.sum()) < float(n.sum())
    score, information = model.score_and_information(theta)
    free = _free(theta, score, lapse is None)
    errors = np.full(3, np.nan)
    block = information[np.ix_(free, free)]
    if np.linalg.matrix_rank(block) == len(free):
        errors[free] = np.sqrt(np.maximum(np.diag(np.linalg.inv(block)), 0.0))
    return PsychometricFit(
        variable=variable,
        kind=kind,
        bias=float(theta[0]),
        slope=float(theta[1]),
        lapse=float(theta[2]),
        log_likelihood=value,
        x=values,
        n=n,
        p=p,
        standard_errors=dict(zip(("bias", "slope", "lapse"), map(float, errors), strict=True)),
        converged=converged,
        fixed_lapse=lapse is not None,
    )
