"""How large a Gaussian process fit may be, and which approximation it uses: the exact GP up to
:data:`AUTO_EXACT_ROWS` training rows, Titsias's collapsed bound up to :data:`AUTO_COLLAPSED_ROWS`, the sparse
variational GP beyond (:func:`choose_approximation`, said by an :class:`ApproximationNote`), and the rows each
approximation and method refuses before anything runs (:func:`check_method`).

Example
-------
>>> import warnings, torch
>>> from pyro_bdl.data.table import Dataset
>>> small = Dataset("small", torch.zeros(50, 1), torch.zeros(50))
>>> choose_approximation(small)
{'approximation': 'exact'}
>>> with warnings.catch_warnings(record=True) as said:
...     warnings.simplefilter("always")
...     choose_approximation(Dataset("big", torch.zeros(AUTO_EXACT_ROWS + 1, 1), None))
{'approximation': 'collapsed'}
>>> said[0].category.__name__
'ApproximationNote'
"""

from __future__ import annotations

import warnings

from pyro_bdl.data.table import DataError
from pyro_bdl.inference.method import Family

__all__ = ["ApproximationNote", "choose_approximation", "check_method", "APPROXIMATIONS", "EXACT_MAX_ROWS",
           "SAMPLER_MAX_ROWS", "AUTO_EXACT_ROWS", "AUTO_COLLAPSED_ROWS", "INDUCING_POINTS"]

#: The sparse approximations' default number of inducing points (the smaller of the two the doubly stochastic DGP
#: repository's UCI demos use, 100 and 500; the cost grows as M^2 per row).
INDUCING_POINTS = 100

#: The most training rows the exact GP takes: its Cholesky factor costs n^3 / 3 per evaluation and n^2 memory
#: (10,000 rows: 800 MB a matrix in float64); seconds per step: benchmarks/RESULTS.md, "Gaussian processes".
EXACT_MAX_ROWS = 10_000
#: The most rows a sampler (nuts, hmc) takes: it evaluates the marginal likelihood or bound on every row at each of
#: its tens of thousands of leapfrog steps.
SAMPLER_MAX_ROWS = 10_000
#: The approximation a fit uses when none is named, by the number of training rows: exact up to
#: ``AUTO_EXACT_ROWS``, the collapsed bound (every row at every step, O(n M^2)) up to ``AUTO_COLLAPSED_ROWS``, the
#: svgp (minibatches) beyond; the timings behind them: benchmarks/RESULTS.md, "Gaussian processes".
AUTO_EXACT_ROWS = 2_000
AUTO_COLLAPSED_ROWS = 50_000
APPROXIMATIONS = ("exact", "collapsed", "svgp")


class ApproximationNote(UserWarning):
    """The fit uses a sparse approximation chosen by the number of rows (say ``approximation=...`` to choose)."""


def choose_approximation(dataset) -> dict:
    """The ``approximation`` for a fit that names none, by the training rows' number, said when it is not exact."""
    n = len(dataset.X)
    if n <= AUTO_EXACT_ROWS:
        return {"approximation": "exact"}
    chosen = "collapsed" if n <= AUTO_COLLAPSED_ROWS else "svgp"
    how = ("the collapsed bound of Titsias (2009), every row at every step" if chosen == "collapsed" else
           "the sparse variational GP of Hensman et al. (2013), in minibatches (batch_size=...)")
    warnings.warn(f"{dataset.name}: {n:,} rows, more than the exact GP's {AUTO_EXACT_ROWS:,} by default (its cost grows "
                  f"as rows^3): fitting {how}, with the inducing option's points (approximation=exact, collapsed or "
                  f"svgp chooses)", ApproximationNote, stacklevel=2)
    return {"approximation": chosen}


def check_method(dataset, options: dict, method, settings: dict) -> None:
    """Refuse, before anything runs, the rows the chosen approximation or method cannot afford, and minibatches
    for an approximation that uses every row."""
    n, approximation = len(dataset.X), options.get("approximation")
    if approximation == "exact" and n > EXACT_MAX_ROWS:
        raise DataError(f"{dataset.name}: {n:,} rows; the exact Gaussian process takes at most {EXACT_MAX_ROWS:,} (its "
                        f"cost grows as rows^3): use approximation=collapsed or approximation=svgp (inducing points), "
                        f"or fit a random subset of the rows")
    if method.family is Family.MCMC and n > SAMPLER_MAX_ROWS:
        raise DataError(f"{dataset.name}: {n:,} rows; '{method.name}' takes at most {SAMPLER_MAX_ROWS:,} for the gp (it "
                        f"evaluates every row at each of its leapfrog steps): fit the hyperparameters by map or mle, "
                        f"or svi with approximation=svgp, or sample on a random subset of the rows")
    if settings.get("batch_size") is not None and approximation != "svgp":
        raise ValueError(f"batch_size (minibatches) needs approximation=svgp: the {approximation} GP uses every row at "
                         f"every step")
