"""The warning when a zoo model's fixed prior scale is far from the data's (pyro_bdl/posterior/prior_check.py): it
fires on data in natural units, and never on a generated family of standardised regressions."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

import pyro_bdl
from pyro_bdl.data.table import Dataset


def _regression(seed: int, n: int, d: int, noise: float, intercept: float = 0.0, scale: float = 1.0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g) * scale
    w = torch.randn(d, generator=g)
    y = intercept + X @ w + noise * torch.randn(n, generator=g)
    return Dataset(f"generated-{seed}", X, y, [f"x{j}" for j in range(d)], "y")


def _warnings_of(data, method="map", **settings) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pyro_bdl.fit("blr", data, inference=method, progress=False, **settings)
    return [str(w.message) for w in caught if issubclass(w.category, pyro_bdl.DataWarning)
            and "far out in the model's fixed priors" in str(w.message)]


@pytest.mark.slow
def test_data_in_natural_units_warn_and_name_the_site():
    data = _regression(0, 100, 2, 1.0, intercept=27.8, scale=5.0)  # an intercept 28 prior sds out
    found = _warnings_of(data)
    assert len(found) == 1 and "b (entry 0)" in found[0] and "pyro-bdl describe blr" in found[0]


@pytest.mark.slow
def test_a_wide_enough_prior_silences_it():
    data = _regression(0, 100, 2, 1.0, intercept=27.8, scale=5.0)
    assert _warnings_of(data, options={"prior_scale": 100.0, "noise": 1.0}) == []


@pytest.mark.slow
@pytest.mark.parametrize("seed,n,d,noise", [(s, n, d, e) for s, (n, d, e) in enumerate(
    itertools.product((20, 200), (1, 4), (0.1, 1.0)))])
def test_no_warning_on_standardised_regressions(seed, n, d, noise):
    # weights drawn from the prior itself, so every posterior sits where the prior allows
    assert _warnings_of(_regression(100 + seed, n, d, noise)) == []


def test_no_warning_on_the_embedded_data_under_nuts():
    assert _warnings_of("linear", "nuts", samples=200, warmup=200) == []
