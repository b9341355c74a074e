"""The one entry point on a model a user writes in a notebook, not only on the zoo's."""

from __future__ import annotations

import math
import warnings

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoNormal

import pyro_bdl
from support import FIXTURES
from pyro_bdl.inference.guides import MeanFieldGuide
from support.problems import SCHOOLS_SIGMA, SCHOOLS_Y, centred_schools, noncentred_schools

K = 4.5


def normal_mean_model(y=None, n=None):
    """mu ~ N(0, 10^2); y_i ~ N(mu, 1): the posterior of mu is N(sum y / (n + 0.01), 1 / (n + 0.01))."""
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    with pyro.plate("data", n if y is None else len(y)):
        return pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def _data():
    g = torch.Generator().manual_seed(3)
    return torch.randn(30, generator=g) + 2.0


def _exact(y):
    precision = len(y) + 1 / 100
    return float(y.sum()) / precision, 1 / math.sqrt(precision)


@pytest.mark.parametrize("method,settings", [
    ("nuts", {"samples": 400, "warmup": 200}),
    ("svi", {"steps": 3000, "samples": 2000}),
    ("importance", {"samples": 2000}),
])
def test_user_model_posterior_mean(method, settings):
    y = _data()
    result = pyro_bdl.fit(normal_mean_model, {"y": y}, inference=method, progress=False, **settings)
    mean, sd = _exact(y)
    ess = getattr(result.diagnostics, "min_ess_bulk", None) or getattr(result.info, "importance_ess", None) or result.num_draws
    assert abs(float(result.posterior_mean("mu")) - mean) < K * sd / math.sqrt(ess)


@pytest.mark.slow
def test_user_model_with_its_own_guide_and_prediction():
    y = _data()

    def guide(y=None, n=None):
        loc = pyro.param("loc", torch.tensor(0.0))
        scale = pyro.param("scale", torch.tensor(1.0), constraint=dist.constraints.positive)
        pyro.sample("mu", dist.Normal(loc, scale))

    result = pyro_bdl.fit(normal_mean_model, {"y": y}, inference="svi", guide=guide, progress=False,
                          steps=2500, samples=2000)
    mean, sd = _exact(y)
    assert abs(float(result.posterior_mean("mu")) - mean) < K * sd / math.sqrt(2000)
    table = result.predict({"n": 4})
    assert list(table.columns) == ["mean", "sd", "aleatoric_sd", "epistemic_sd", "lower", "upper"]
    assert len(table) == 4
    # The law of total variance, exactly, on the fit's own draws of mu: every new y_i ~ N(mu, 1), so the
    # predictive mean is the mean of the draws, the aleatoric variance 1 and the epistemic variance theirs.
    # (Against the closed form sqrt(1 + sd^2) = 1.017 a loose tolerance could not tell the epistemic part,
    # 1.6% of the sd here, from nothing.)
    mu = result.samples["mu"].double().reshape(-1).numpy()
    np.testing.assert_allclose(table["mean"], mu.mean(), rtol=1e-5)
    np.testing.assert_allclose(table["aleatoric_sd"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(table["epistemic_sd"], mu.std(), rtol=1e-5)
    np.testing.assert_allclose(table["sd"], np.sqrt(1.0 + mu.var()), rtol=1e-6)


def test_autoguide_class_is_accepted():
    result = pyro_bdl.fit(normal_mean_model, {"y": _data()}, inference="svi", guide=AutoNormal,
                          progress=False, steps=300, samples=50)
    assert isinstance(result.guide, AutoNormal)


def test_inference_data_groups_for_a_user_model():
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="MCMC diagnostics"):  # 2 x 200 draws: ESS under 200
        result = pyro_bdl.fit(normal_mean_model, {"y": _data()}, inference="nuts", progress=False,
                              samples=200, warmup=100)
    idata = result.to_inference_data()
    for group in ("posterior", "posterior_predictive", "log_likelihood", "observed_data", "sample_stats"):
        assert group in idata.groups()
    assert idata.log_likelihood["obs"].shape == (2, 200, 30)
    assert idata.posterior_predictive["obs"].shape == (2, 200, 30)
    for stat in ("diverging", "step_size", "tree_depth", "n_steps", "lp"):
        assert stat in idata.sample_stats


def test_options_are_rejected_for_user_models():
    with pytest.raises(ValueError, match="options"):
        pyro_bdl.fit(normal_mean_model, {"y": _data()}, inference="map", options={"a": 1}, progress=False)


def test_nan_in_user_data_is_rejected():
    y = _data()
    y[3] = float("nan")
    with pytest.raises(pyro_bdl.DataError, match="'y' holds 1 NaN"):
        pyro_bdl.fit(normal_mean_model, {"y": y}, inference="map", progress=False)


def test_a_program_that_observes_nothing_is_fitted_as_its_density():
    """Without y the program's sites are all latent (its prior predictive): a density, fitted as Pyro would; what
    needs observations says so when asked (tests/test_ported_programs.py: Neal's funnel)."""
    fit = pyro_bdl.fit(normal_mean_model, {"n": 3}, inference="map", steps=300, progress=False)
    assert fit.likelihood_sites == [] and sorted(fit.samples) == ["mu", "obs"]
    assert float(fit.samples["mu"].abs().max()) < 1e-2 and float(fit.samples["obs"].abs().max()) < 1e-2  # the mode: 0
    with pytest.raises(ValueError, match="observes nothing .*nothing to predict"):
        fit.predict()


@pytest.mark.parametrize("method,settings,shape", [
    ("nuts", {"samples": 100, "warmup": 100, "chains": 2}, (2, 100, 8)),
    ("svi", {"steps": 300, "samples": 50}, (1, 50, 8)),
    ("map", {"steps": 300}, (1, 1, 8)),
])
def test_deterministic_site_is_in_the_posterior_not_the_likelihood(method, settings, shape):
    data = {"sigma": SCHOOLS_SIGMA, "y": SCHOOLS_Y}
    with warnings.catch_warnings():  # short runs: convergence is not what is tested here
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        result = pyro_bdl.fit(noncentred_schools, data, inference=method, progress=False, **settings)
    assert result.likelihood_sites == ["obs"]
    idata = result.to_inference_data()
    assert list(idata.log_likelihood.data_vars) == ["obs"]
    post = idata.posterior
    assert post["theta"].shape == shape
    expected = post["mu"].values[..., None] + post["tau"].values[..., None] * post["theta_tilde"].values
    np.testing.assert_allclose(post["theta"].values, expected, rtol=1e-5, atol=1e-5)
    if method == "nuts":
        with warnings.catch_warnings():  # 8 points, 200 draws: Pareto k may warn; loo must run
            warnings.simplefilter("ignore", UserWarning)
            loo = az.loo(idata)
        assert np.isfinite(loo.elpd_loo)
    # predictions: theta recomputed from the latents for the data given, never taken from the fit
    pred = result.predictive({"sigma": SCHOOLS_SIGMA})
    np.testing.assert_allclose(pred.deterministic["theta"], expected, rtol=1e-5, atol=1e-5)
    assert set(pred.log_likelihood) <= {"obs"}


@pytest.mark.slow
def test_a_compiled_fit_prints_no_deprecation_of_torchs_own(tmp_path):
    """Inductor's first import in a process warns of torch.jit.script_method (torch's own use, in
    torch.utils.mkldnn): nothing a user can act on.  In a fresh process (the import happens once), every warning
    shown: none of those."""
    import subprocess
    import sys

    code = ("import pyro_bdl\n"
            "pyro_bdl.fit('blr', 'linear', inference='nuts', jit=True, samples=30, warmup=30, progress=False)\n")
    run = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "script_method" not in run.stderr


def test_a_reparameterised_site_is_not_a_likelihood_term():
    """poutine.reparam (LocScaleReparam, as Pyro's docs non-centre eight schools) leaves an observed Delta where
    'theta' was: a function of the new latents, drawn with them, not data in the log-likelihood."""
    from pyro.infer.reparam import LocScaleReparam
    from pyro import poutine


    noncentred = poutine.reparam(centred_schools, config={"theta": LocScaleReparam(centered=0.0)})
    y, sigma = torch.tensor([28.0, 8.0, -3.0, 7.0]), torch.tensor([15.0, 10.0, 16.0, 11.0])
    result = pyro_bdl.fit(noncentred, {"sigma": sigma, "y": y}, inference="map", steps=200, progress=False, seed=0)
    assert result.likelihood_sites == ["y"]
    assert list(result.to_inference_data().log_likelihood.data_vars) == ["y"]
    theta = result.samples["theta"].reshape(-1)
    want = result.samples["mu"].reshape(()) + result.samples["tau"].reshape(()) * result.samples["theta_decentered"].reshape(-1)
    assert torch.allclose(theta, want, atol=1e-5)


@pytest.mark.slow
def test_exchangeable_entries_start_apart_and_a_mixture_is_found():
    """init_to_prior_mean (where svi and map start on a user's program) spreads the entries of a plated site that
    share one prior mean evenly over +/- 0.2 prior sd: started equal, two mixture components stay one (a saddle point).  Pyro's GMM
    tutorial model (enumerated assignments) then finds both components: its svi means within 0.3 posterior sds of
    Pyro's NUTS (tests/support/fixtures/pyro_examples_reference.json), the test_pyro_examples tolerance."""
    import json
    from pathlib import Path

    from pyro_bdl.inference.starts import EXCHANGEABLE_SPREAD, init_to_prior_mean
    from support.pyro_example_models import EXAMPLES

    from types import SimpleNamespace

    plated = {"fn": dist.Normal(0.0, 10.0).expand([4]), "name": "locs", "value": None, "is_observed": False,
              "cond_indep_stack": (SimpleNamespace(size=4),)}
    pyro.set_rng_seed(0)
    start = init_to_prior_mean(plated)
    assert torch.allclose(start, torch.tensor([-1.0, -1 / 3, 1 / 3, 1.0]) * EXCHANGEABLE_SPREAD * 10.0)
    coefficients = {**plated, "cond_indep_stack": ()}  # a vector outside any plate: its entries are told apart
    assert torch.equal(init_to_prior_mean(coefficients), torch.zeros(4))
    one = {"fn": dist.Normal(178.0, 20.0), "name": "a", "value": None, "is_observed": False}
    assert float(init_to_prior_mean(one)) == 178.0  # a single entry starts at the mean itself

    example = EXAMPLES["gmm"]
    result = pyro_bdl.fit(example.model, example.data(), inference="svi", steps=2000, lr=0.05, progress=False, seed=0)
    draws = example.relabel({k: v.double().numpy() for k, v in result.samples.items()})
    reference = json.loads((FIXTURES / "pyro_examples_reference.json").read_text())
    for name, ref in reference["models"][example.reference_name]["sites"].items():
        mean = draws[name].reshape(draws[name].shape[0] * draws[name].shape[1], -1).mean(0)
        assert np.all(np.abs(mean - np.array(ref["mean"])) < 0.3 * np.array(ref["sd"])), (name, mean, ref["mean"])


def test_predicting_other_groups_than_the_fit_is_a_clear_error():
    """Eight schools' theta is one entry per school fitted: asked to predict 3 schools, predict names the site and
    the shapes instead of a broadcasting error from inside the model; the same 8 schools with other sigmas predict."""
    schools = centred_schools

    y, sigma = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]), torch.full((8,), 10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        result = pyro_bdl.fit(schools, {"sigma": sigma, "y": y}, inference="svi", steps=300, samples=50,
                              progress=False, seed=0)
    assert len(result.predict({"sigma": torch.ones(8)})) == 8
    with pytest.raises(ValueError, match=r"latent site 'theta' the shape \(3,\), but its posterior draws have the "
                                         r"shape \(8,\).*theta_new ~ N\(mu, tau\)"):
        result.predict({"sigma": torch.ones(3)})


def local_means_model(y, subsample_size=None):
    """theta_j ~ N(0, 1), y_j ~ N(theta_j, 1) in one plate: the exact posterior is N(y_j / 2, 1/2) per group, a
    mean-field Gaussian, so the mean-field guide can match it."""
    with pyro.plate("groups", len(y), subsample_size=subsample_size) as members:
        theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
        pyro.sample("obs", dist.Normal(theta, 1.0), obs=y[members])


@pytest.mark.slow
def test_svi_meanfield_fits_a_plated_user_program():
    """The mean-field guide draws a plated site inside the model's plate (it failed with 'invalid log_prob shape'
    before): posterior means within Monte Carlo error of the exact y_j / 2."""
    y = torch.linspace(-2.0, 2.0, 8)
    result = pyro_bdl.fit(local_means_model, {"y": y}, inference="svi-meanfield", steps=3000, samples=2000,
                          progress=False, seed=0)
    error = (result.posterior_mean("theta") - y / 2).abs().max()
    assert float(error) < K * math.sqrt(0.5) / math.sqrt(result.num_draws)


@pytest.mark.slow
def test_meanfield_guide_keeps_one_factor_per_member_of_a_subsampled_plate():
    """A subsampled plate: the guide holds a factor for each of the 20 groups and trains the 5 drawn at each step;
    every factor ends at the exact N(y_j / 2, 1/2).  Tolerance 0.1: the last Adam iterate's own noise (three seeds
    gave at most 0.03 on the means and sds)."""
    y = torch.linspace(-2.0, 2.0, 20)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    guide = MeanFieldGuide(local_means_model)
    svi = SVI(local_means_model, guide, pyro.optim.ClippedAdam({"lr": 0.02, "lrd": 0.999}), TraceMeanField_ELBO())
    for _ in range(6000):
        svi.step(y, subsample_size=5)
    loc = pyro.param("mf.theta.loc")
    sd = torch.nn.functional.softplus(pyro.param("mf.theta.rho"))
    assert loc.shape == (20,)
    assert float((loc - y / 2).abs().max()) < 0.1
    assert float((sd - math.sqrt(0.5)).abs().max()) < 0.1
