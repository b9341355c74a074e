r"""The check of in-between uncertainty: a fit's predictive on a 1-D problem with a gap (:mod:`pyro_bdl.data.gap`).

:func:`check_gap` judges a predictive on a grid by the criterion of issue 3 and its slow tests:

* ``ratio``: the mean predictive sd in the middle of the gap over its mean where the data lie
  (:func:`~pyro_bdl.data.gap.gap_regions`), at least :data:`MIN_RATIO`;
* ``rmse``: the predictive mean against ``f`` where the data lie, at most :data:`MAX_RMSE_IN_NOISE`
  times the noise sd (on ``sine``: 0.1);
* ``gap_z``: the mean of :math:`|f - \text{mean}| / \text{sd}` in the middle of the gap, below
  :data:`MAX_GAP_Z` (the truth lies within the widened band).

Given the epistemic sd too, it reports (but does not judge) ``epistemic_ratio``, the same ratio for the
epistemic sd alone.  The total-sd ratio depends on the noise: where the data's sd is about the noise sd
:math:`\sigma`, the gap sd :math:`\sqrt{\sigma^2 + e^2}` reaches twice it only if the epistemic sd in the
gap is :math:`e \ge \sqrt 3\,\sigma`, so the same widening of :math:`f`'s uncertainty passes on a quiet
problem and fails on a noisy one.  :func:`gap_report` runs the check on a fit (default problem: ``sine``).

Example
-------
>>> import numpy as np
>>> from pyro_bdl.data.gap import gap_family
>>> problem = gap_family(seed=0)[0]
>>> x = problem.grid(400)[:, 0].numpy()
>>> inside, gap = problem.regions(x)
>>> sd = np.where(gap, 0.3, 0.1)                        # a predictive that widens 3x in the gap
>>> result = check_gap(problem, x, mean=problem.curve(x), sd=sd)
>>> round(result.ratio, 2), round(result.rmse, 6), result.passed
(3.0, 0.0, True)
>>> check_gap(problem, x, mean=problem.curve(x), sd=np.full_like(x, 0.1)).failures
'ratio 1.00 < 2'
>>> import pyro_bdl, warnings; warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)  # 100 steps: short
>>> net = pyro_bdl.fit("bnn-regressor", "sine", inference="map", steps=100, options={"hidden": "8"}, progress=False)
>>> report = gap_report(net)            # on the sine data's gap: a point estimate has only the noise sd
>>> round(report.check.ratio, 1), sorted(report.row())[:3]
(1.0, ['epistemic gap / data', 'gap / data', 'gap |z|'])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from pyro_bdl.data.embedded import SINE_PROBLEM
from pyro_bdl.data.gap import GapProblem, gap_sd_ratio
from pyro_bdl.posterior.uncertainty import rmse

__all__ = ["GapCheck", "check_gap", "GapReport", "gap_report", "MIN_RATIO", "MAX_RMSE_IN_NOISE", "MAX_GAP_Z"]


#: The gap sd must be at least this multiple of the in-data sd (issue 3).
MIN_RATIO = 2.0


#: The in-data RMSE of the predictive mean to the curve must be at most this multiple of the noise sd.
MAX_RMSE_IN_NOISE = 2.0


#: The mean |truth - mean| / sd in the middle of the gap must be below this.
MAX_GAP_Z = 2.0


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


@dataclass(frozen=True)
class GapReport:
    """A fit's predictive on a gap problem's grid and its judgement.

    ``x``: the grid (n,); ``table``: :meth:`FitResult.predict` on it (mean, sd, aleatoric_sd, epistemic_sd);
    ``check``: the :class:`~pyro_bdl.bench.gap.GapCheck`; ``inside``, ``gap``: the regions (n,) masks.
    """

    problem: GapProblem
    x: np.ndarray
    table: pd.DataFrame
    check: GapCheck
    inside: np.ndarray
    gap: np.ndarray

    def mean_in(self, column: str, region: str) -> float:
        """The mean of a predict column (e.g. ``sd``) over ``"inside"`` or ``"gap"``."""
        return float(self.table[column].to_numpy()[getattr(self, region)].mean())

    def row(self) -> dict:
        """The report's numbers by name, for a table with a row per fit."""
        c = self.check
        return {
            "rmse where data are": c.rmse,
            "noise sd (aleatoric)": self.mean_in("aleatoric_sd", "inside"),
            "sd in data": self.mean_in("sd", "inside"),
            "sd in gap": self.mean_in("sd", "gap"),
            "gap / data": c.ratio,
            "epistemic gap / data": c.epistemic_ratio,
            "gap |z|": c.gap_z,
            "passes": c.passed,
        }


def gap_report(fit, problem: GapProblem = SINE_PROBLEM, grid_size: int = 400) -> GapReport:
    """Judge a fitted 1-D regressor's in-between uncertainty on ``problem`` (default: the ``sine`` data's),
    predicting on ``problem.grid(grid_size)``."""
    grid = problem.grid(grid_size)
    x = grid[:, 0].numpy()
    table = fit.predict(grid)
    epistemic = table["epistemic_sd"] if "epistemic_sd" in table else None
    check = check_gap(problem, x, table["mean"], table["sd"], epistemic)
    inside, gap = problem.regions(x)
    return GapReport(problem, x, table, check, inside, gap)
