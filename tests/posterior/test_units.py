"""Original units everywhere: a network fitted in standardised units answers, in its InferenceData as in
``predict``, in the data's units, so ArviZ compares it with a model fitted on the raw data."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pytest
import torch
from scipy import stats

import pyro_bdl
from pyro_bdl.data.table import Dataset


@pytest.fixture(scope="module")
def wide_data():
    """y = 200 + 60 x + 40 sin(3 x) + noise: a target whose sd (about 60) is far from 1."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.5, 1.5, size=60)
    y = 200 + 60 * x + 40 * np.sin(3 * x) + 8 * rng.normal(size=60)
    return Dataset("wide", torch.tensor(x[:, None], dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                   ["x"], "y")


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # short fits: the units are what is tested
def test_network_inference_data_is_in_the_datas_units(wide_data):
    fit = pyro_bdl.fit("bnn-regressor", wide_data, inference="map", steps=300, progress=False,
                       options={"hidden": "10"})
    idata = fit.to_inference_data()
    np.testing.assert_allclose(idata.observed_data["y"].values, wide_data.y.numpy())
    np.testing.assert_allclose(idata.constant_data["X"].values, wide_data.X.numpy())
    # the pointwise log-likelihood is log N(y | mean, aleatoric sd) of the predictions, both in the data's units
    table = fit.predict(wide_data)
    expected = stats.norm(table["mean"], table["aleatoric_sd"]).logpdf(wide_data.y.numpy())
    np.testing.assert_allclose(idata.log_likelihood["y"].values.reshape(-1), expected, rtol=1e-4, atol=1e-4)
    # posterior predictive draws spread like the data (in standardised units their sd would be about 1)
    assert idata.posterior_predictive["y"].values.std() > 20


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # short fits: the scale is what is tested
def test_compare_a_network_and_blr_on_the_same_data(wide_data):
    """elpd of both on one scale: each within a few nats per point of the truth's, the standardisation's
    log(sd y) = log 64 = 4.2 nats per point would put the network far outside."""
    fits = {
        # blr's unit priors are for standardised data: here a wide prior and the noise sd of a straight-line fit
        "blr": pyro_bdl.fit("blr", wide_data, inference="nuts", samples=200, warmup=200, progress=False,
                            options={"prior_scale": 300.0, "noise": 25.0}),
        "bnn-regressor": pyro_bdl.fit("bnn-regressor", wide_data, inference="ensemble", steps=400, members=3,
                                      progress=False, options={"hidden": "10"}),
    }
    with warnings.catch_warnings():  # 3 ensemble members: ArviZ warns about PSIS; the scale is what is tested
        warnings.simplefilter("ignore")
        table = az.compare({k: f.to_inference_data() for k, f in fits.items()})
    per_point = table["elpd_loo"] / len(wide_data)
    truth = stats.norm(0, 8).logpdf(0) - 0.5  # E log N(eps | 0, 8^2) = -log(8 sqrt(2 pi)) - 1/2
    assert np.all(np.abs(per_point - truth) < 2.0), (per_point, truth)
