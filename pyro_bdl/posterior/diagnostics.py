"""Comparisons across fits: posterior moments side by side (:func:`compare_methods`) and PSIS-LOO
(:func:`compare_loo`).  Each fit's own checks are its method's (:mod:`pyro_bdl.inference.diagnose`).

Example
-------
>>> import pyro_bdl
>>> point = pyro_bdl.fit("coin", inference="map", steps=100, progress=False)
>>> gaussian = pyro_bdl.fit("coin", inference="laplace", steps=300, samples=200, progress=False)
>>> table = compare_methods({"map": point, "laplace": gaussian})
>>> list(table.columns.get_level_values(0).unique()), list(table.index)
(['map', 'laplace'], ['pi'])
"""

from __future__ import annotations

import warnings
from typing import Mapping

import pandas as pd

__all__ = ["compare_methods", "compare_loo", "MIN_LOO_DRAWS"]


def compare_methods(results: Mapping[str, object], sites=None) -> pd.DataFrame:
    """Posterior mean and sd of every site element, one column pair per method.

    ``results`` maps a label (e.g. the method) to a :class:`~pyro_bdl.result.FitResult`.
    Rows are site elements (``w[0]``, ``b``, ...); columns a (method, statistic) MultiIndex.
    """
    frames = {}
    for label, result in results.items():
        rows = {}
        for name, value in result.samples.items():
            if sites is not None and name not in sites:
                continue
            flat = value.reshape(value.shape[0] * value.shape[1], -1).double()
            for j in range(flat.shape[1]):
                key = name if value[0, 0].dim() == 0 else f"{name}[{j}]"
                sd = float(flat[:, j].std()) if flat.shape[0] > 1 else float("nan")
                rows[key] = {"mean": float(flat[:, j].mean()), "sd": sd}
        frames[label] = pd.DataFrame(rows).T
    return pd.concat(frames, axis=1)


#: PSIS-LOO from fewer posterior draws than this is not an estimate: ``compare_loo`` leaves such fits out.
MIN_LOO_DRAWS = 100


def compare_loo(results: Mapping[str, object], **kwargs) -> pd.DataFrame:
    """``az.compare`` on PSIS-LOO for the fits that have a posterior sample of at least :data:`MIN_LOO_DRAWS`
    draws (point estimates and, e.g., a 5-member ensemble are left out, with a warning naming them: their
    "LOO" would be the in-sample fit)."""
    import arviz as az

    points = [k for k, r in results.items() if r.point_estimate or r.num_draws <= 1]
    few = [k for k, r in results.items() if k not in points and r.num_draws < MIN_LOO_DRAWS]
    if points:
        warnings.warn(f"compare_loo leaves out {', '.join(points)}: a point estimate has no posterior draws to "
                      "leave a point out of (PSIS-LOO needs draws; its log-likelihood is the in-sample fit)",
                      UserWarning, stacklevel=2)
    if few:
        warnings.warn(f"compare_loo leaves out {', '.join(few)}: fewer than {MIN_LOO_DRAWS} posterior draws",
                      UserWarning, stacklevel=2)
    idatas = {k: r.to_inference_data() for k, r in results.items() if k not in points and k not in few}
    if len(idatas) < 2:
        raise ValueError(f"compare_loo needs at least two fits with {MIN_LOO_DRAWS} or more posterior draws "
                         f"(nuts, svi, laplace, ...); {len(idatas)} of the {len(results)} given have them")
    with warnings.catch_warnings():  # ArviZ's own use of a pandas keyword pandas deprecates: nothing a user can change
        warnings.filterwarnings("ignore", "The inplace keyword in DataFrame.sort_values is deprecated")
        return az.compare(idatas, ic="loo", **kwargs)
