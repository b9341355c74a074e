r"""1-D regression problems with a gap in the inputs: the data of the in-between uncertainty check.

A :class:`GapProblem` is a noise-free curve :math:`f` on ``span``, an empty interval ``gap`` inside it,
and ``size`` inputs drawn uniformly on either side of the gap (half on each side) with targets
:math:`y = f(x) + \varepsilon`, :math:`\varepsilon \sim \mathcal N(0, \text{noise}^2)`, all from one
``seed``.  The embedded ``sine`` data are one such problem (``embedded.sine_curve``, gap (-0.4, 0.4),
noise 0.05, 200 points, seed 20150520); :func:`gap_family` generates others, so that a setting chosen
on ``sine`` can be checked on curves, gaps, noise levels and sizes it was not chosen on.  The check of a fit's
predictive on them is :func:`pyro_bdl.bench.gap.check_gap`.

Example
-------
>>> import numpy as np
>>> family = gap_family(seed=0)
>>> len(family), family[0].name
(12, 'trend-oscillation gap(-0.20,+0.30) noise=0.05 n=50')
>>> data = family[0].dataset()
>>> data.X.shape, data.y.shape
(torch.Size([50, 1]), torch.Size([50]))
>>> inside, gap = family[0].regions(family[0].grid(400)[:, 0].numpy())
>>> round(gap_sd_ratio(np.where(gap, 0.3, 0.1), inside, gap), 2)   # a predictive sd that widens 3x in the gap
3.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch

from pyro_bdl.data.table import Dataset, from_frame

__all__ = ["GAP_FUNCTIONS", "GapProblem", "gap_family", "gap_regions", "gap_sd_ratio"]



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

