r"""Report recipes: the numbers a fit is judged by, computed one way for notebooks, benchmarks, tests and the CLI.

* :func:`evaluate_fit`, held-out metrics in the data's original units (a UCI row).  Regression: RMSE of the
  predictive mean, the test log predictive density per point
  :math:`\log \frac1S \sum_s p(y_i \mid x_i, \theta_s)` (averaged: ``test_ll``), and the coverage of the
  central 94% interval.  Classification: accuracy, test log-likelihood, Brier score and ECE.
* :func:`gaussian_predictive_draws`, a regression fit's predictive mean and sd per posterior draw on held-out
  rows (what ``test_ll`` averages over), for looking at single points.
* :func:`classification_report`, a classifier on a test set and out-of-distribution sets: accuracy, NLL,
  ECE, and the AUROC of telling test from each OOD set by predictive entropy and by mutual information.

Example
-------
>>> import pyro_bdl
>>> from pyro_bdl.data.embedded import split_dataset
>>> train, test = split_dataset(pyro_bdl.load("linear"), 0.2)
>>> fit = pyro_bdl.fit("blr", train, inference="map", steps=500, progress=False)
>>> sorted(evaluate_fit(fit, test))
['coverage_94', 'rmse', 'test_ll', 'test_rows']
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from pyro_bdl.posterior.uncertainty import (
    accuracy,
    auroc,
    brier,
    categorical_tlpd,
    expected_calibration_error,
    gaussian_tlpd,
    nll,
    regression_summary,
    rmse,
)

__all__ = ["evaluate_fit", "gaussian_predictive_draws", "classification_report"]


def evaluate_fit(result, test) -> dict:
    """Metrics of ``result`` on the :class:`~pyro_bdl.data.table.Dataset` ``test`` (which has targets, unless the model
    evaluates itself: its spec's ``hooks.evaluate``)."""
    if result.spec is not None and result.spec.hooks.evaluate is not None:
        return result.spec.hooks.evaluate(result, test)
    if test.y is None:
        raise ValueError(f"{test.name}: held-out data need a target column")
    site = result.likelihood_sites[0]
    pred = result.predictive(test)
    y = test.y.double().numpy()
    out = {"test_rows": int(len(y))}
    if site in pred.probs:
        probs = pred.probs[site].reshape((-1,) + pred.probs[site].shape[2:])
        prob = probs.mean(0)
        labels = y.astype(int)
        out.update(accuracy=accuracy(prob, labels), test_ll=float(categorical_tlpd(probs, labels).mean()),
                   brier=brier(prob, labels), ece=expected_calibration_error(prob, labels))
        return out
    mu, sigma = _gaussian_draws(pred, site, len(y))
    table = regression_summary(mu, sigma, 0.94)
    out.update(rmse=rmse(table["mean"].to_numpy(), y), test_ll=float(gaussian_tlpd(mu, sigma, y).mean()),
               coverage_94=float(np.mean((y >= table["lower"].to_numpy()) & (y <= table["upper"].to_numpy()))))
    return out


def _gaussian_draws(pred, site: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    if not pred.gaussian.get(site, False):
        raise ValueError("held-out evaluation needs a Gaussian or Categorical likelihood")
    mu = pred.mean[site].reshape(-1, n)
    return mu, np.sqrt(pred.variance[site].reshape(mu.shape))


def gaussian_predictive_draws(result, test) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Gaussian-likelihood fit's predictive on ``test`` (a Dataset with targets), one Gaussian per posterior draw:
    -> ``mu`` and ``sigma`` (S, n), the data's units, and the targets ``y`` (n,).  :func:`evaluate_fit`'s
    ``test_ll`` is ``gaussian_tlpd(mu, sigma, y).mean()``; the per-point values show which rows cost the most.

    >>> import pyro_bdl
    >>> from pyro_bdl.data.embedded import split_dataset
    >>> train, test = split_dataset(pyro_bdl.load("linear"), 0.2)
    >>> fit = pyro_bdl.fit("blr", train, inference="map", steps=500, progress=False)
    >>> mu, sigma, y = gaussian_predictive_draws(fit, test)
    >>> mu.shape[1] == sigma.shape[1] == len(y) == len(test)
    True
    """
    if test.y is None:
        raise ValueError(f"{test.name}: held-out data need a target column")
    site = result.likelihood_sites[0]
    pred = result.predictive(test)
    if site in pred.probs:
        raise ValueError(f"per-draw Gaussians: the fit needs a Gaussian likelihood; {site!r} is categorical "
                         "(evaluate_fit scores a classifier)")
    y = test.y.double().numpy()
    mu, sigma = _gaussian_draws(pred, site, len(y))
    return mu, sigma, y


def classification_report(fit, test, ood: Mapping[str, object] | None = None) -> tuple[pd.DataFrame, dict]:
    """A classifier's predict table on ``test`` (a Dataset with labels) and its row of metrics: accuracy,
    NLL, ECE and, for each named out-of-distribution data set in ``ood``, the AUROC of telling test from it
    by predictive entropy and by mutual information (higher: more uncertain on the OOD inputs)."""
    if test.y is None:
        raise ValueError(f"{test.name}: a classification report needs labels")
    table = fit.predict(test)
    classes = [c for c in table.columns if c.startswith("prob_")]
    if not classes:
        raise ValueError("a classification report needs a classifier's fit (no prob_ columns in its predictions)")
    prob, y = table[classes].to_numpy(), test.y.numpy()
    row = {"accuracy": accuracy(prob, y), "NLL": nll(prob, y), "ECE": expected_calibration_error(prob, y)}
    for kind, data in (ood or {}).items():
        other = fit.predict(data)
        row[f"AUROC {kind} (entropy)"] = auroc(table["entropy"], other["entropy"])
        row[f"AUROC {kind} (mutual info)"] = auroc(table["mutual_info"], other["mutual_info"])
    return table, row
