"""Held-out metrics are in the original units of the data (the fit itself runs on standardised targets)."""

from __future__ import annotations

import dataclasses
import math

import pytest

import pyro_bdl
from pyro_bdl.datasets import split_dataset
from pyro_bdl.evaluate import evaluate_fit


def _rescaled(ds, scale, shift):
    return dataclasses.replace(ds, y=ds.y * scale + shift)


def test_regression_metrics_are_in_the_units_of_the_target():
    """Fitting y and c*y + d gives the same standardised fit (same seed), so RMSE scales by c and
    the test log density per point drops by log c: a metric computed in standardised units would not move."""
    train, test = split_dataset(pyro_bdl.load("sine"), 0.2)
    scale, shift = 1000.0, -40.0

    def metrics(tr, te):
        with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # 300 steps: short on purpose
            fit = pyro_bdl.fit("bnn-regressor", tr, inference="map", steps=300, progress=False, options={"hidden": "16"})
        return evaluate_fit(fit, te)

    plain = metrics(train, test)
    big = metrics(_rescaled(train, scale, shift), _rescaled(test, scale, shift))
    assert big["rmse"] == pytest.approx(scale * plain["rmse"], rel=1e-3)
    assert big["test_ll"] == pytest.approx(plain["test_ll"] - math.log(scale), abs=1e-3)
    assert big["coverage_94"] == plain["coverage_94"]
