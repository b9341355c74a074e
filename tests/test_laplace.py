"""The Laplace approximation against closed forms: exact for blr with known noise (to optimiser precision,
not Monte Carlo error: the Gaussian itself is compared), and the Laplace approximation of the coin's Beta
posterior in logit coordinates, known analytically."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pyro_bdl
from pyro_bdl.models.blr import posterior_moments
from pyro_bdl.models.coin import posterior_beta

from problems import PROBLEMS


def test_recovers_the_exact_blr_posterior():
    data, options = PROBLEMS["blr"]()
    fit = pyro_bdl.fit("blr", data, inference="laplace", options=options, progress=False, steps=3000, samples=4000)
    mean, cov = posterior_moments(data.X, data.y, options["prior_scale"], options["noise"])
    q = fit.guide  # AutoMultivariateNormal over (w, b), unconstrained = constrained here
    q_loc = q.loc.double()
    q_cov = (q.scale[:, None] * q.scale_tril).double()
    q_cov = q_cov @ q_cov.T
    sd = cov.diagonal().sqrt()
    # the optimiser's precision: the mode within 1e-3 posterior sds, the covariance within 1% (float32 Hessian)
    assert torch.all((q_loc - mean).abs() < 1e-3 * sd), (q_loc, mean)
    assert torch.allclose(q_cov, cov, rtol=1e-2, atol=1e-2 * float(sd.min()) ** 2), (q_cov, cov)
    # and the draws are draws of it: means within 4.5 Monte Carlo standard errors of 4000 independent draws
    draws = torch.cat([fit.draws("w"), fit.draws("b").unsqueeze(-1)], -1).double()
    assert torch.all((draws.mean(0) - mean).abs() < 4.5 * sd / math.sqrt(4000))


def test_approximates_the_coin_beta_in_logit_coordinates():
    """Beta(a, b) in u = logit(pi) has density sigma(u)^a (1 - sigma(u))^b: mode log(a / b), curvature
    ab / (a + b).  The coin's posterior mean from the Laplace draws is then close to (not equal to) a / (a + b)."""
    data, options = PROBLEMS["coin"]()
    fit = pyro_bdl.fit("coin", data, inference="laplace", options=options, progress=False, steps=3000, samples=4000)
    post = posterior_beta(data.y, options["alpha"], options["beta"])
    a, b = float(post.concentration1), float(post.concentration0)
    assert abs(float(fit.guide.loc) - math.log(a / b)) < 1e-3
    var = float(fit.guide.scale) ** 2
    assert abs(var - (a + b) / (a * b)) < 1e-3 * (a + b) / (a * b)
    pi = fit.draws("pi").double().numpy()
    beta_mean, beta_sd = a / (a + b), math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    assert abs(pi.mean() - beta_mean) < 0.1 * beta_sd + 4.5 * pi.std() / math.sqrt(len(pi))
    assert abs(pi.std() / beta_sd - 1) < 0.1


def test_gives_inference_data_and_predictions_like_every_method():
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # 500 steps: short on purpose
        fit = pyro_bdl.fit("blr", inference="laplace", steps=500, samples=200, progress=False)
    idata = fit.to_inference_data()
    assert {"posterior", "posterior_predictive", "log_likelihood", "observed_data"} <= set(idata.groups())
    assert idata.posterior["w"].shape == (1, 200, 3)
    assert np.isfinite(fit.predict(torch.zeros(2, 3))["sd"]).all()
    assert "laplace" not in pyro_bdl.get_model("bnn-regressor").methods  # a dense Hessian: low-dimensional models
