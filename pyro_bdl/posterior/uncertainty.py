r"""Predictive uncertainty: summaries and scores for regression and classification.

Every model's predictive is a mixture over its :math:`S` posterior draws :math:`\theta_s` (one
draw for a point estimate).  All functions take plain arrays (NumPy, or anything
``np.asarray`` accepts; torch tensors are detached first) with the draws on the first axis.

**Regression.**  Draw :math:`s` predicts :math:`\mathcal N(\mu_s, \sigma_s^2)`, so

.. math::

    p(y) = \frac1S \sum_s \mathcal N(y \mid \mu_s, \sigma_s^2), \qquad
    \mathbb E[y] = \overline{\mu_s}, \qquad
    \mathrm{Var}[y] = \underbrace{\overline{\sigma_s^2}}_{\text{aleatoric}}
                    + \underbrace{\mathrm{Var}_s[\mu_s]}_{\text{epistemic}} .

Intervals are exact quantiles of the mixture (bisection on its CDF), and the test log
predictive density of a point is :math:`\log p(y_i)`.

**Classification.**  Draw :math:`s` predicts class probabilities :math:`p_s`; the predictive is
:math:`\bar p = \overline{p_s}` and its entropy splits into aleatoric and epistemic parts,

.. math::

    \underbrace{H[\bar p]}_{\text{total}}
    = \underbrace{\overline{H[p_s]}}_{\text{aleatoric}}
    + \underbrace{I[y; \theta]}_{\text{epistemic (mutual information)}} .

Calibration is the expected calibration error over equal-width confidence bins,
:math:`\mathrm{ECE} = \sum_b \frac{n_b}{n} |\mathrm{acc}_b - \mathrm{conf}_b|`, and out-of-distribution
detection by an uncertainty score is scored by the area under the ROC curve.

Example
-------
>>> import numpy as np
>>> mu = np.array([[0.0, 1.0], [2.0, 1.0]])    # S = 2 draws, n = 2 points
>>> summary = regression_summary(mu, sigma=1.0)
>>> summary[["mean", "aleatoric_sd", "epistemic_sd"]].to_numpy().tolist()
[[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
>>> round(float(summary["upper"][1]), 4)       # one Gaussian: mean + 1.8808 sd
2.8808
>>> probs = np.array([[[0.9, 0.1]], [[0.1, 0.9]]])  # two draws that disagree on one point
>>> s = classification_summary(probs)
>>> round(float(s["entropy"][0]), 4), round(float(s["mutual_info"][0]), 4)
(0.6931, 0.3681)
>>> auroc(score_in=[0.1, 0.2, 0.3], score_out=[0.25, 0.9])
0.8333333333333334
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import entr, logsumexp, ndtr, ndtri

__all__ = [
    "regression_summary",
    "predictive_moments",
    "rmse",
    "gaussian_tlpd",
    "classification_summary",
    "accuracy",
    "categorical_tlpd",
    "nll",
    "brier",
    "reliability_table",
    "expected_calibration_error",
    "plot_reliability",
    "auroc",
]

#: Probabilities are floored here before taking logs, so a confidently wrong model scores
#: -log(1e-12) ~ 27.6 nats on that point instead of infinity.
PROB_FLOOR = 1e-12
#: Class probabilities must sum to one within this.
SUM_TOL = 1e-4
#: Mixture quantiles are bisected until the bracket is narrower than this fraction of the sd.
QUANTILE_RTOL = 1e-7
#: Bisection works on blocks of at most this many (draw, point) pairs, to bound memory.
_BLOCK = 2**20


# --------------------------------------------------------------------------------------------
# Input checks (every public function goes through these; they raise ValueError)
# --------------------------------------------------------------------------------------------


def _array(x, name: str, ndim: int | None = None, shape: str = "") -> np.ndarray:
    """``x`` as a finite, non-empty float array, optionally of a given number of dimensions."""
    if hasattr(x, "detach"):  # a torch tensor, possibly requiring grad or on a GPU
        x = x.detach().cpu().numpy()
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric: {err}") from None
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {shape}, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape})")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} has {int((~np.isfinite(a)).sum())} non-finite values (NaN or inf)")
    return a


def _regression_inputs(mu, sigma, y=None):
    """Checked ``mu`` (S, n), ``sigma`` broadcast to (S, n) and ``y`` (n,) (or None)."""
    mu = _array(mu, "mu", 2, "(S draws, n points)")
    sigma = _array(sigma, "sigma")
    if sigma.ndim > 2:
        raise ValueError(f"sigma must be a scalar, (S, 1) or (S, n) = {mu.shape}, got shape {sigma.shape}")
    try:
        sigma = np.broadcast_to(sigma, mu.shape)
    except ValueError:
        raise ValueError(
            f"sigma of shape {sigma.shape} does not match mu of shape {mu.shape} "
            "(give a scalar, (S, 1) for one sd per draw, or (S, n))"
        ) from None
    if sigma.min() <= 0:
        raise ValueError(f"sigma must be positive (it is a standard deviation); its minimum is {sigma.min():g}")
    if y is not None:
        y = _array(y, "y", 1, "(n,)")
        if len(y) != mu.shape[1]:
            raise ValueError(f"mu has {mu.shape[1]} points (columns) but y has {len(y)}")
    return mu, sigma, y


def _probabilities(p, name: str, ndim: int, shape: str) -> np.ndarray:
    """Checked class probabilities: non-negative, summing to one over the last axis."""
    p = _array(p, name, ndim, shape)
    if p.min() < 0:
        raise ValueError(f"{name} has negative probabilities (minimum {p.min():g})")
    worst = float(np.abs(p.sum(-1) - 1.0).max())
    if worst > SUM_TOL:
        raise ValueError(
            f"{name} must sum to 1 over classes (the last axis) within {SUM_TOL:g}; it is off by up to "
            f"{worst:.3g} (pass probabilities, not logits)"
        )
    return p


def _labels(y, n: int, classes: int) -> np.ndarray:
    """Checked integer labels of shape (n,) in [0, classes)."""
    if hasattr(y, "detach"):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"y must have shape ({n},) to match the probabilities, got shape {y.shape}")
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)):
        values = _array(y, "y")
        if not np.array_equal(values, np.round(values)):
            raise ValueError("y must hold integer class labels, got non-integer values")
        y = values
    y = y.astype(np.intp)
    if y.min() < 0 or y.max() >= classes:
        raise ValueError(f"labels must lie in [0, {classes}) for {classes} classes; got min {y.min()}, max {y.max()}")
    return y


def _classification_inputs(prob, y):
    """Checked predictive probabilities (n, C) and labels (n,)."""
    prob = _probabilities(prob, "prob", 2, "(n points, C classes)")
    return prob, _labels(y, *prob.shape)


def _bins(bins) -> int:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    return int(bins)


# --------------------------------------------------------------------------------------------
# Regression
# --------------------------------------------------------------------------------------------


def _bisect_quantile(mu: np.ndarray, sigma: np.ndarray, q: float) -> np.ndarray:
    r"""The ``q``-quantile of each column's mixture :math:`\frac1S\sum_s N(\mu_s, \sigma_s^2)`.

    The quantile lies between the smallest and the largest component quantile
    :math:`\mu_s + z_q \sigma_s` (there every component CDF is below, resp. above, ``q``);
    the bracket is halved until it is narrower than ``QUANTILE_RTOL`` times the mixture's sd.
    """
    comp = mu + ndtri(q) * sigma
    lo, hi = comp.min(0), comp.max(0)
    sd = np.sqrt((sigma**2).mean(0) + mu.var(0))
    ratio = float(((hi - lo) / (QUANTILE_RTOL * sd)).max())
    steps = int(np.ceil(np.log2(ratio))) if ratio > 1 else 0
    for _ in range(min(steps, 200)):
        mid = 0.5 * (lo + hi)
        below = ndtr((mid - mu) / sigma).mean(0) < q
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _mixture_quantile(mu: np.ndarray, sigma: np.ndarray, q: float) -> np.ndarray:
    """:func:`_bisect_quantile` over blocks of columns, shape (n,)."""
    S, n = mu.shape
    width = max(1, _BLOCK // S)
    out = np.empty(n)
    for start in range(0, n, width):
        cols = slice(start, start + width)
        out[cols] = _bisect_quantile(mu[:, cols], sigma[:, cols], q)
    return out


def regression_summary(mu, sigma, prob: float = 0.94) -> pd.DataFrame:
    """Predictive mean, total / aleatoric / epistemic sd and central interval per point.

    Parameters
    ----------
    mu : array, shape (S, n)
        Predictive mean of each of the S draws at each of the n points.
    sigma : float or array, shape (S, n) or (S, 1)
        Predictive (noise) sd of each draw; a scalar when it is known and shared.
    prob : float
        Probability mass of the central interval, in (0, 1).

    Returns
    -------
    DataFrame, n rows
        ``mean`` (mean of ``mu`` over draws), ``sd`` = sqrt(aleatoric var + epistemic var),
        ``aleatoric_sd`` = sqrt(mean of sigma^2), ``epistemic_sd`` = sd of ``mu`` over draws
        (ddof=0), ``lower``/``upper``: the (1-prob)/2 and (1+prob)/2 quantiles of the mixture
        (1/S) sum_s N(mu_s, sigma_s^2), to within 1e-7 sd.
    """
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob must lie in (0, 1), got {prob!r}")
    mu, sigma, _ = _regression_inputs(mu, sigma)
    table = predictive_moments(mu, sigma)
    tail = (1.0 - prob) / 2.0
    table["lower"] = _mixture_quantile(mu, sigma, tail)
    table["upper"] = _mixture_quantile(mu, sigma, 1.0 - tail)
    return table


def predictive_moments(mu, sigma) -> pd.DataFrame:
    """The law of total variance per point: ``mean``, ``sd``, ``aleatoric_sd``, ``epistemic_sd``.

    ``mu``: (S, n) per-draw predictive means; ``sigma``: per-draw predictive sds, broadcastable
    to (S, n).  Used by :func:`regression_summary` and for any likelihood with a mean and variance.
    """
    mu, sigma, _ = _regression_inputs(mu, sigma)
    aleatoric = (sigma**2).mean(0)
    epistemic = mu.var(0)
    return pd.DataFrame(
        {
            "mean": mu.mean(0),
            "sd": np.sqrt(aleatoric + epistemic),
            "aleatoric_sd": np.sqrt(aleatoric),
            "epistemic_sd": np.sqrt(epistemic),
        }
    )


def rmse(mean, y) -> float:
    """Root mean squared error of the point predictions ``mean`` (n,) against ``y`` (n,)."""
    mean = _array(mean, "mean", 1, "(n,)")
    y = _array(y, "y", 1, "(n,)")
    if len(mean) != len(y):
        raise ValueError(f"mean has {len(mean)} points but y has {len(y)}")
    return float(np.sqrt(np.mean((mean - y) ** 2)))


def gaussian_tlpd(mu, sigma, y) -> np.ndarray:
    r"""Test log predictive density of each point under the Gaussian mixture over draws.

    Parameters
    ----------
    mu : array, shape (S, n)
    sigma : float or array, shape (S, n) or (S, 1)
    y : array, shape (n,)

    Returns
    -------
    array, shape (n,)
        :math:`\log \frac1S \sum_s N(y_i \mid \mu_{si}, \sigma_{si}^2)`, by log-sum-exp (finite
        even when every density underflows).  Average it for the mean TLPD.
    """
    mu, sigma, y = _regression_inputs(mu, sigma, y)
    logp = -0.5 * ((y - mu) / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2.0 * np.pi)
    return logsumexp(logp, axis=0) - np.log(mu.shape[0])


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------


def classification_summary(probs) -> dict:
    """Predictive probabilities, predicted class and the entropy decomposition per point.

    Parameters
    ----------
    probs : array, shape (S, n, C)
        Class probabilities of each draw.

    Returns
    -------
    dict of arrays
        ``prob`` (n, C): mean over draws; ``pred`` (n,): its argmax; ``entropy`` (n,):
        H[prob] in nats (total); ``expected_entropy`` (n,): mean over draws of H[p_s]
        (aleatoric); ``mutual_info`` (n,): entropy - expected_entropy, clipped at 0 (epistemic).
    """
    probs = _probabilities(probs, "probs", 3, "(S draws, n points, C classes)")
    prob = probs.mean(0)
    entropy = entr(prob).sum(-1)
    expected = entr(probs).sum(-1).mean(0)
    return {
        "prob": prob,
        "pred": prob.argmax(-1),
        "entropy": entropy,
        "expected_entropy": expected,
        "mutual_info": np.clip(entropy - expected, 0.0, None),
    }


def accuracy(prob, y) -> float:
    """Fraction of points whose most probable class (``prob`` (n, C)) is the label ``y`` (n,)."""
    prob, y = _classification_inputs(prob, y)
    return float(np.mean(prob.argmax(-1) == y))


def categorical_tlpd(probs, y) -> np.ndarray:
    r"""Test log predictive density per point: log of the mean over draws of p_s(y_i).

    Parameters
    ----------
    probs : array, shape (S, n, C)
    y : int array, shape (n,)

    Returns
    -------
    array, shape (n,)
        :math:`\log \frac1S \sum_s \max(p_{s,i,y_i}, 10^{-12})`, by log-sum-exp.
    """
    probs = _probabilities(probs, "probs", 3, "(S draws, n points, C classes)")
    S, n, C = probs.shape
    y = _labels(y, n, C)
    picked = probs[:, np.arange(n), y]  # (S, n)
    return logsumexp(np.log(np.maximum(picked, PROB_FLOOR)), axis=0) - np.log(S)


def nll(prob, y) -> float:
    """Mean negative log probability of the labels: -mean_i log max(prob[i, y_i], 1e-12)."""
    prob, y = _classification_inputs(prob, y)
    picked = prob[np.arange(len(y)), y]
    return float(-np.mean(np.log(np.maximum(picked, PROB_FLOOR))))


def brier(prob, y) -> float:
    """Brier score: mean over points of sum_c (prob[i, c] - [y_i = c])^2, in [0, 2]."""
    prob, y = _classification_inputs(prob, y)
    onehot = np.zeros_like(prob)
    onehot[np.arange(len(y)), y] = 1.0
    return float(np.mean(((prob - onehot) ** 2).sum(-1)))


def reliability_table(prob, y, bins: int = 15) -> pd.DataFrame:
    """Accuracy against confidence in equal-width confidence bins.

    A point's confidence is its largest predictive probability; bin b holds the confidences in
    (bin_lower, bin_upper] (the first bin also holds 0).

    Parameters
    ----------
    prob : array, shape (n, C)
        Predictive class probabilities.
    y : int array, shape (n,)
    bins : int
        Number of equal-width bins on [0, 1].

    Returns
    -------
    DataFrame, ``bins`` rows
        ``bin_lower``, ``bin_upper``, ``count``, ``confidence`` (mean confidence in the bin) and
        ``accuracy`` (fraction correct in the bin); both NaN for an empty bin.
    """
    prob, y = _classification_inputs(prob, y)
    bins = _bins(bins)
    confidence = prob.max(-1)
    correct = (prob.argmax(-1) == y).astype(float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    count = np.bincount(which, minlength=bins)
    filled = count > 0

    def bin_mean(values):
        out = np.full(bins, np.nan)
        out[filled] = np.bincount(which, weights=values, minlength=bins)[filled] / count[filled]
        return out

    return pd.DataFrame(
        {
            "bin_lower": edges[:-1],
            "bin_upper": edges[1:],
            "count": count,
            "confidence": bin_mean(confidence),
            "accuracy": bin_mean(correct),
        }
    )


def _ece(table: pd.DataFrame) -> float:
    """ECE from a :func:`reliability_table`: the count-weighted mean |accuracy - confidence|."""
    filled = table[table["count"] > 0]
    gap = (filled["accuracy"] - filled["confidence"]).abs()
    return float((filled["count"] * gap).sum() / table["count"].sum())


def expected_calibration_error(prob, y, bins: int = 15) -> float:
    """ECE = sum_b (n_b / n) |acc_b - conf_b| over the bins of :func:`reliability_table`.

    Parameters
    ----------
    prob : array, shape (n, C)
    y : int array, shape (n,)
    bins : int

    Returns
    -------
    float in [0, 1]; 0 for a perfectly calibrated model (up to sampling noise).
    """
    return _ece(reliability_table(prob, y, bins))


def plot_reliability(prob, y, bins: int = 15, ax=None):
    """Reliability diagram: accuracy per confidence bin against the diagonal, ECE in the title.

    Parameters
    ----------
    prob : array, shape (n, C)
    y : int array, shape (n,)
    bins : int
    ax : matplotlib Axes, optional
        Drawn on a new figure when omitted.

    Returns
    -------
    matplotlib Axes
    """
    import matplotlib.pyplot as plt

    table = reliability_table(prob, y, bins)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 4.5))
    filled = table[table["count"] > 0]
    ax.bar(filled["bin_lower"], filled["accuracy"], width=filled["bin_upper"] - filled["bin_lower"],
           align="edge", edgecolor="black", alpha=0.7, label="accuracy")
    ax.plot([0, 1], [0, 1], ls="--", color="grey", label="perfect calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (largest probability)", ylabel="accuracy",
           title=f"Reliability diagram (ECE = {_ece(table):.3f})")
    ax.legend(loc="upper left")
    return ax


# --------------------------------------------------------------------------------------------
# Out-of-distribution detection
# --------------------------------------------------------------------------------------------


def auroc(score_in, score_out) -> float:
    """Area under the ROC curve for detecting out-of-distribution inputs by an uncertainty score.

    Out-of-distribution inputs are the positives; a higher score means more uncertain.  This is
    the Mann-Whitney statistic P(score_out > score_in) + P(tie) / 2, from average ranks.

    Parameters
    ----------
    score_in : array, shape (n_in,)
        Scores (e.g. entropy, mutual information, predictive sd) of in-distribution inputs.
    score_out : array, shape (n_out,)
        Scores of out-of-distribution inputs.

    Returns
    -------
    float in [0, 1]: 1 when every OOD input scores higher, 0.5 for an uninformative score.
    """
    score_in = _array(score_in, "score_in", 1, "(n_in,)")
    score_out = _array(score_out, "score_out", 1, "(n_out,)")
    n_in, n_out = len(score_in), len(score_out)
    from scipy.stats import rankdata  # scipy.stats takes a second to import: only where ranks are needed

    ranks = rankdata(np.concatenate([score_in, score_out]))  # ties get their average rank
    u = ranks[n_in:].sum() - n_out * (n_out + 1) / 2.0
    return float(u / (n_in * n_out))
