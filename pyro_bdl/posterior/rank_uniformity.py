r"""Are ranks uniform?  The statistics of simulation-based calibration (:mod:`pyro_bdl.workflows.sbc`), usable on
any ranks: the rank of a true value among posterior draws (:func:`rank_of`), the simultaneous ECDF band of uniform
ranks (Säilynoja, Bürkner & Vehtari 2022; :func:`ecdf_band`) and the per-entry checks (:func:`uniformity`: the ECDF
test, Pearson's chi-square of binned ranks, and the shape of a departure).

Example
-------
>>> rng = np.random.default_rng(0)
>>> ranks = pd.DataFrame({"fair": rng.integers(0, 20, 300), "narrow": np.where(rng.random(300) < 0.5, 0, 19)})
>>> uniformity(ranks, 19)[["in_band", "shape"]].values.tolist()
[[True, 'uniform'], [False, 'over-confident (ranks at both ends: posterior too narrow)']]
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["Band", "ecdf_band", "uniformity", "rank_of"]


@dataclass(frozen=True)
class Band:
    """The simultaneous ECDF band for ``n`` ranks in 0..``max_rank``: counts ``lower``/``upper`` (the ECDF times n)
    at ``z`` (``i / (max_rank + 1)``, i = 1..max_rank), the per-point level ``gamma``, and ``null``: the smallest
    per-point p-value of each simulated uniform sample, sorted (the simultaneous test's reference)."""

    n: int
    z: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    gamma: float
    null: np.ndarray


def _point_p(counts: np.ndarray, n: int, z: np.ndarray) -> np.ndarray:
    """Two-sided binomial p-values of ECDF counts (..., K) at ``z``: 2 min(P(X <= c), P(X >= c)), X ~ Bin(n, z)."""
    from scipy.stats import binom

    return np.minimum(1.0, 2.0 * np.minimum(binom.cdf(counts, n, z), binom.sf(counts - 1, n, z)))


@functools.lru_cache(maxsize=64)
def ecdf_band(n: int, max_rank: int, alpha: float = 0.05, sims: int = 10_000, seed: int = 0) -> Band:
    """The simultaneous ``1 - alpha`` band of the ECDF of ``n`` ranks uniform on 0..``max_rank`` (Säilynoja et al.
    2022, simulation method): ``sims`` uniform rank samples (seed ``seed``) give the distribution of the smallest
    per-point binomial p-value over ``z_i = i / (max_rank + 1)``; ``gamma`` is its ``alpha`` quantile (taken so that
    at most ``alpha`` of the simulated samples fall below it), and the band is the central ``1 - gamma`` binomial
    interval at each point.  The simulated level is exact up to the Monte Carlo error of ``sims`` draws
    (sd ``sqrt(alpha (1 - alpha) / sims)``, 0.002 for the defaults) and the discreteness of the counts.

    >>> band = ecdf_band(100, 19)
    >>> band.z.shape, bool((band.lower <= 100 * band.z).all() and (100 * band.z <= band.upper).all())
    ((19,), True)
    """
    if n < 1 or max_rank < 1:
        raise ValueError(f"ecdf_band needs n >= 1 ranks and max_rank >= 1, got n={n}, max_rank={max_rank}")
    from scipy.stats import binom

    rng = np.random.default_rng(seed)
    z = np.arange(1, max_rank + 1) / (max_rank + 1)
    counts = rng.multinomial(n, np.full(max_rank + 1, 1.0 / (max_rank + 1)), size=sims).cumsum(1)[:, :-1]
    null = np.sort(_point_p(counts, n, z).min(1))
    gamma = float(null[int(math.floor(alpha * sims))])
    return Band(n, z, binom.ppf(gamma / 2, n, z), binom.ppf(1 - gamma / 2, n, z), gamma, null)


def _shape(u: np.ndarray, max_rank: int) -> tuple[str, float, float]:
    """The shape of a departure of fractional ranks ``u`` from uniformity, and the two statistics it is read from:
    the mean fractional rank (1/2 under uniformity) and the spread, the mean of (u - 1/2)^2 over its value under
    uniformity (1).  The larger departure in units of its standard error decides."""
    grid = (np.arange(max_rank + 1) + 0.5) / (max_rank + 1)
    m2, m4 = float(((grid - 0.5) ** 2).mean()), float(((grid - 0.5) ** 4).mean())
    n = len(u)
    mean, square = float(u.mean()), float(((u - 0.5) ** 2).mean())
    z_bias = (mean - 0.5) / math.sqrt(m2 / n)
    z_spread = (square - m2) / math.sqrt((m4 - m2 ** 2) / n)
    if abs(z_spread) >= abs(z_bias):
        shape = ("over-confident (ranks at both ends: posterior too narrow)" if z_spread > 0
                 else "under-confident (ranks in the middle: posterior too wide)")
    else:
        shape = ("biased (ranks high: posterior too low)" if z_bias > 0
                 else "biased (ranks low: posterior too high)")
    return shape, mean, square / m2


def _chi_square(ranks: np.ndarray, max_rank: int) -> float:
    """Pearson's chi-square p-value of ``ranks`` in bins of the rank values (up to 20 bins, about 5 ranks expected
    in each at least; a bin's expected count from the number of rank values it holds)."""
    from scipy.stats import chisquare

    n = len(ranks)
    bins = int(min(20, max_rank + 1, max(2, n // 5)))
    of_value = np.arange(max_rank + 1) * bins // (max_rank + 1)
    expected = np.bincount(of_value, minlength=bins) * n / (max_rank + 1)
    observed = np.bincount(of_value[ranks], minlength=bins)
    return float(chisquare(observed, expected).pvalue)


def uniformity(ranks: pd.DataFrame, max_rank: int, alpha: float = 0.05) -> pd.DataFrame:
    """The checks of each column of ``ranks`` ((replications, entries), 0..max_rank) for uniformity.

    Returns
    -------
    DataFrame, one row per entry: ``chi2_p`` (Pearson's chi-square of binned ranks), ``ecdf_p`` (the simultaneous
    ECDF test's p-value: the fraction of uniform samples whose least per-point p-value is as small), ``in_band``
    (the ECDF stays in the ``1 - alpha`` band: ``ecdf_p > alpha`` up to the band's Monte Carlo level), ``shape``
    ("uniform" in the band, else over-confident, under-confident or biased), ``mean_rank`` (mean fractional rank,
    1/2 under uniformity) and ``spread`` (1 under uniformity, > 1 ranks at the ends, < 1 in the middle).

    >>> rng = np.random.default_rng(0)
    >>> narrow = pd.DataFrame({"x": np.where(rng.random(200) < 0.5, 0, 19)})   # every rank at an end
    >>> uniformity(narrow, 19)["shape"].iloc[0]
    'over-confident (ranks at both ends: posterior too narrow)'
    """
    values = ranks.to_numpy()
    if values.size and (values.min() < 0 or values.max() > max_rank):
        raise ValueError(f"ranks must lie in 0..{max_rank}, got {values.min()}..{values.max()}")
    n = len(ranks)
    band = ecdf_band(n, max_rank, alpha)
    rows = {}
    for entry in ranks.columns:
        r = ranks[entry].to_numpy().astype(int)
        counts = (r[None, :] < np.arange(1, max_rank + 1)[:, None]).sum(1)
        least = float(_point_p(counts, n, band.z).min())
        in_band = bool(least >= band.gamma)
        shape, mean, spread = _shape((r + 0.5) / (max_rank + 1), max_rank)
        rows[entry] = {"chi2_p": _chi_square(r, max_rank),
                       "ecdf_p": float(np.searchsorted(band.null, least, side="right") / len(band.null)),
                       "in_band": in_band, "shape": "uniform" if in_band else shape, "mean_rank": mean,
                       "spread": spread}
    return pd.DataFrame.from_dict(rows, orient="index",
                                  columns=["chi2_p", "ecdf_p", "in_band", "shape", "mean_rank", "spread"])


def rank_of(truth: np.ndarray, draws: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The rank of each entry of ``truth`` (E,) among ``draws`` (L, E): the number of draws below it, ties (discrete
    sites, repeated draws) broken at random with ``rng``; (E,) ints in 0..L.

    >>> rank_of(np.array([0.5, 1.5]), np.array([[0.0, 1.0], [1.0, 3.0], [0.2, 2.0]]), np.random.default_rng(0))
    array([2, 1])
    """
    below = (draws < truth[None, :]).sum(0)
    ties = (draws == truth[None, :]).sum(0)
    return below + rng.integers(0, ties + 1)
