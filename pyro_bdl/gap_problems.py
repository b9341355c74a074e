r"""1-D regression problems with a gap in the inputs, and the check of in-between uncertainty on them.

A :class:`GapProblem` is a noise-free curve :math:`f` on ``span``, an empty interval ``gap`` inside it,
and ``size`` inputs drawn uniformly on either side of the gap (half on each side) with targets
:math:`y = f(x) + \varepsilon`, :math:`\varepsilon \sim \mathcal N(0, \text{noise}^2)`, all from one
``seed``.  The embedded ``sine`` data are one such problem (``datasets.sine_curve``, gap (-0.4, 0.4),
noise 0.05, 200 points, seed 20150520); :func:`gap_family` generates others, so that a setting chosen
on ``sine`` can be checked on curves, gaps, noise levels and sizes it was not chosen on.

:func:`check_gap` judges a fit's predictive on a grid by the criterion of issue 3 and its slow tests:

* ``ratio``: the mean predictive sd in the middle of the gap over its mean where the data lie
  (:func:`gap_regions`), at least :data:`MIN_RATIO`;
* ``rmse``: the predictive mean against ``f`` where the data lie, at most :data:`MAX_RMSE_IN_NOISE`
  times the noise sd (on ``sine``: 0.1);
* ``gap_z``: the mean of :math:`|f - \text{mean}| / \text{sd}` in the middle of the gap, below
  :data:`MAX_GAP_Z` (the truth lies within the widened band).

Given the epistemic sd too, it reports (but does not judge) ``epistemic_ratio``, the same ratio for the
epistemic sd alone.  The total-sd ratio depends on the noise: where the data's sd is about the noise sd
:math:`\sigma`, the gap sd :math:`\sqrt{\sigma^2 + e^2}` reaches twice it only if the epistemic sd in the
gap is :math:`e \ge \sqrt 3\,\sigma`, so the same widening of :math:`f`'s uncertainty passes on a quiet
problem and fails on a noisy one.

Example
-------
>>> import numpy as np
>>> family = gap_family(seed=0)
>>> len(family), family[0].name
(12, 'trend-oscillation gap(-0.20,+0.30) noise=0.05 n=50')
>>> data = family[0].dataset()
>>> data.X.shape, data.y.shape
(torch.Size([50, 1]), torch.Size([50]))
>>> problem = family[0]
>>> x = problem.grid(400)[:, 0].numpy()
>>> inside, gap = problem.regions(x)
>>> sd = np.where(gap, 0.3, 0.1)                        # a predictive that widens 3x in the gap
>>> result = check_gap(problem, x, mean=problem.curve(x), sd=sd)
>>> round(result.ratio, 2), round(result.rmse, 6), result.passed
(3.0, 0.0, True)
>>> check_gap(problem, x, mean=problem.curve(x), sd=np.full_like(x, 0.1)).failures
'ratio 1.00 < 2'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch

from .data import Dataset, from_frame
from .uncertainty import rmse

__all__ = ["GAP_FUNCTIONS", "GapProblem", "GapCheck", "gap_family", "gap_regions", "gap_sd_ratio", "check_gap",
           "MIN_RATIO", "MAX_RMSE_IN_NOISE", "MAX_GAP_Z"]

#: The gap sd must be at least this multiple of the in-data sd (issue 3).
MIN_RATIO = 2.0
#: The in-data RMSE of the predictive mean to the curve must be at most this multiple of the noise sd.
MAX_RMSE_IN_NOISE = 2.0
#: The mean |truth - mean| / sd in the middle of the gap must be below this.
MAX_GAP_Z = 2.0


def _sin(x):
    return torch.sin(x) if isinstance(x, torch.Tensor) else np.sin(x)


def _tanh(x):
    return torch.tanh(x) if isinstance(x, torch.Tensor) else np.tanh(x)


#: The curves of :func:`gap_family` on [-1, 1] (tensors or arrays): none of them is ``sine``'s.
GAP_FUNCTIONS: dict[str, Callable] = {
    "trend-oscillation": lambda x: 0.8 * x + 0.3 * _sin(3 * math.pi * x),  # a trend plus a faster oscillation
    "cubic": lambda x: 2 * x ** 3 - x,
    "smooth-step": lambda x: _tanh(5 * (x - 0.25)),  # the step in the gap or beside it, as the gap falls
    "sine-mix": lambda x: 0.5 * _sin(1.5 * math.pi * x + 1.0) + 0.3 * _sin(3 * math.pi * x),
}
#: The levels :func:`gap_family` crosses: gap widths (of a span of 2), noise sds, numbers of points.
GAP_WIDTHS = (0.5, 0.8, 1.1)
NOISES = (0.05, 0.1, 0.2)
SIZES = (50, 100, 200)
#: The gap centres are drawn uniformly on [-CENTRE_SHIFT, CENTRE_SHIFT].
CENTRE_SHIFT = 0.2


def gap_regions(x, span: tuple[float, float], gap: tuple[float, float], edge: float = 0.05,
                middle: float = 0.625) -> tuple[np.ndarray, np.ndarray]:
    """Where the in-between check looks, as boolean masks over 1-D inputs ``x`` (a tensor or array):
    ``inside``, where the data lie (``span`` minus ``gap``) at least ``edge`` from the span's ends, and
    ``gap``, the middle ``middle`` fraction of the empty interval.

    >>> inside, gap = gap_regions(np.array([-1.2, -0.6, 0.0, 0.3, 0.9]), span=(-1, 1), gap=(-0.4, 0.4))
    >>> inside.tolist(), gap.tolist()
    ([False, True, False, False, True], [False, False, True, False, False])
    """
    x = x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    (a, b), (lo, hi) = span, gap
    if not a < lo < hi < b:
        raise ValueError(f"the gap {gap} must lie strictly inside the span {span}")
    inside = ((x > a + edge) & (x < lo)) | ((x > hi) & (x < b - edge))
    return inside, np.abs(x - (lo + hi) / 2) < middle * (hi - lo) / 2


def gap_sd_ratio(sd, inside, gap) -> float:
    """Mean predictive ``sd`` over the ``gap`` mask divided by its mean over the ``inside`` mask (NaN when
    the sd is zero where the data lie, e.g. a point estimate's epistemic sd).

    >>> gap_sd_ratio(np.array([0.1, 0.4, 0.3]), inside=np.array([True, False, True]), gap=np.array([False, True, False]))
    2.0
    """
    sd = np.asarray(sd, dtype=float)
    inside_sd = sd[inside].mean()
    return float(sd[gap].mean() / inside_sd) if inside_sd > 0 else math.nan


@dataclass(frozen=True)
class GapProblem:
    """A curve, a gap and how the data are drawn (see the module docstring)."""

    name: str
    curve: Callable
    gap: tuple[float, float]
    noise: float
    size: int
    seed: int
    span: tuple[float, float] = (-1.0, 1.0)

    def frame(self) -> pd.DataFrame:
        """The data: ``size`` rows, columns ``x`` (float32) and ``y``, rows in random order."""
        rng = np.random.default_rng(self.seed)
        (a, b), (lo, hi) = self.span, self.gap
        left = self.size // 2
        x = np.concatenate([rng.uniform(a, lo, left), rng.uniform(hi, b, self.size - left)])
        x = x[rng.permutation(x.size)].astype(np.float32)
        y = self.curve(x.astype(np.float64)) + self.noise * rng.normal(size=x.size)
        return pd.DataFrame({"x": x, "y": y})

    def dataset(self) -> Dataset:
        return from_frame(self.frame(), "y", name=self.name)

    def grid(self, n: int = 400) -> torch.Tensor:
        """``n`` evenly spaced inputs, shape (n, 1), a quarter of the span beyond the data on each side."""
        a, b = self.span
        return torch.linspace(a - (b - a) / 4, b + (b - a) / 4, int(n)).unsqueeze(1)

    def regions(self, x) -> tuple[np.ndarray, np.ndarray]:
        """``inside`` and ``gap`` masks over ``x``: :func:`gap_regions` with this problem's span and gap."""
        return gap_regions(x, self.span, self.gap)


def gap_family(seed: int = 0, per_function: int = 3) -> list[GapProblem]:
    """``per_function`` problems for each of :data:`GAP_FUNCTIONS`: the gap widths, noise levels and sizes
    cycle through :data:`GAP_WIDTHS`, :data:`NOISES` and :data:`SIZES` in a Latin square (every function
    meets every level of each, once per three problems), the gap centres and the data are drawn from
    ``seed``.  The same ``seed`` gives the same family."""
    rng = np.random.default_rng(seed)
    problems = []
    for i, (function, curve) in enumerate(GAP_FUNCTIONS.items()):
        for j in range(per_function):
            width, noise = GAP_WIDTHS[j % 3], NOISES[(i + j) % 3]
            size = SIZES[(2 * i + j + j // 3) % 3]
            centre = round(float(rng.uniform(-CENTRE_SHIFT, CENTRE_SHIFT)), 2)
            gap = (round(centre - width / 2, 2), round(centre + width / 2, 2))
            name = f"{function} gap({gap[0]:+.2f},{gap[1]:+.2f}) noise={noise:g} n={size}"
            problems.append(GapProblem(name, curve, gap, noise, size, int(rng.integers(2 ** 31))))
    return problems


@dataclass(frozen=True)
class GapCheck:
    """The in-between check of one fit on one problem (see the module docstring)."""

    ratio: float
    rmse: float
    gap_z: float
    noise: float
    epistemic_ratio: float | None = None

    @property
    def failures(self) -> str:
        """The criteria it misses, '' when it passes."""
        missed = []
        if not self.ratio >= MIN_RATIO:
            missed.append(f"ratio {self.ratio:.2f} < {MIN_RATIO:g}")
        if not self.rmse <= MAX_RMSE_IN_NOISE * self.noise:
            missed.append(f"rmse {self.rmse:.3f} > {MAX_RMSE_IN_NOISE:g} x noise")
        if not self.gap_z < MAX_GAP_Z:
            missed.append(f"gap z {self.gap_z:.2f} >= {MAX_GAP_Z:g}")
        return "; ".join(missed)

    @property
    def passed(self) -> bool:
        return not self.failures


def check_gap(problem: GapProblem, x, mean, sd, epistemic_sd=None) -> GapCheck:
    """Judge a predictive (``mean`` and ``sd`` at 1-D inputs ``x``, all the same length) on ``problem``;
    with ``epistemic_sd``, report its gap ratio too."""
    x = x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)
    mean, sd = np.asarray(mean, dtype=float), np.asarray(sd, dtype=float)
    inside, gap = problem.regions(x)
    truth = np.asarray(problem.curve(x.astype(np.float64)), dtype=float)
    gap_z = float(np.mean(np.abs(truth[gap] - mean[gap]) / sd[gap]))
    epistemic = None if epistemic_sd is None else gap_sd_ratio(epistemic_sd, inside, gap)
    return GapCheck(gap_sd_ratio(sd, inside, gap), rmse(mean[inside], truth[inside]), gap_z, problem.noise, epistemic)
