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

__all__ = ["compare_methods", "compare_loo", "rows_log_likelihood", "MIN_LOO_DRAWS"]


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


def rows_log_likelihood(idata, label: str = "the fit"):
    """``idata`` with one log-likelihood array per row: where the program observes several sites of each row (a
    height and a flag in one plate), their pointwise log-likelihoods summed into one array named after them
    (``"height+flag"``), which is the row's ``log p(y_n | theta)`` that leaving row n out removes; ``idata`` itself
    where there is one site.  Sites of different shapes (observed in different plates) have no common row: a
    ValueError names them, to compare one site with ``var_name=``.

    >>> import numpy as np, arviz as az
    >>> idata = az.from_dict(log_likelihood={"a": np.zeros((1, 5, 3)), "b": np.ones((1, 5, 3))})
    >>> list(rows_log_likelihood(idata).log_likelihood.data_vars), float(rows_log_likelihood(idata).log_likelihood["a+b"].sum())
    (['a+b'], 15.0)
    """
    group = idata.log_likelihood
    names = list(group.data_vars)
    if len(names) < 2:
        return idata
    shapes = {name: tuple(group[name].shape[2:]) for name in names}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"{label} observes {', '.join(f'{n} {list(s)}' for n, s in shapes.items())} per draw: sites of "
                         f"different shapes have no common row to leave out; compare one of them with "
                         f"var_name={names[0]!r}")
    total = sum(group[name].values for name in names)
    summed = idata.copy()
    summed["log_likelihood"] = group.drop_vars(names).assign({"+".join(names): (group[names[0]].dims, total)})
    return summed


def compare_loo(results: Mapping[str, object], **kwargs) -> pd.DataFrame:
    """``az.compare`` on PSIS-LOO for the fits that have a posterior sample of at least :data:`MIN_LOO_DRAWS`
    draws (point estimates and, e.g., a 5-member ensemble are left out, with a warning naming them: their
    "LOO" would be the in-sample fit).  A program that observes several sites of each row is judged on the rows'
    log-likelihoods, its sites' summed (:func:`rows_log_likelihood`); ``var_name=`` (ArviZ's) compares one site
    instead.  ``az.compare`` itself on a dict holding a point fit fails inside ArviZ: this is the call for that."""
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
    unobserved = [k for k, idata in idatas.items() if "log_likelihood" not in idata.groups()]
    if unobserved:
        raise ValueError(f"compare_loo needs the log-likelihood of observed rows; {', '.join(unobserved)} observe(s) "
                         f"nothing (a density, no observed sample site): there is no row to leave out")
    if kwargs.get("var_name") is None:  # one array per fit: ArviZ takes it, whatever its name
        idatas = {k: rows_log_likelihood(idata, f"fit {k!r}") for k, idata in idatas.items()}
    if len(idatas) < 2:
        raise ValueError(f"compare_loo needs at least two fits with {MIN_LOO_DRAWS} or more posterior draws "
                         f"(nuts, svi, laplace, ...); {len(idatas)} of the {len(results)} given have them")
    with warnings.catch_warnings():  # ArviZ's own use of a pandas keyword pandas deprecates: nothing a user can change
        warnings.filterwarnings("ignore", "The inplace keyword in DataFrame.sort_values is deprecated")
        return az.compare(idatas, ic="loo", **kwargs)
