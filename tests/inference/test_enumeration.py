"""Discrete latents summed out by enumeration in a user's Pyro program (pyro_bdl.inference.enumeration).

The reference is exact: a two-component mixture whose components sit at mu -/+ 2 with weights (w, 1 - w) and unit
scale, so that its posterior over (w, mu) is two-dimensional (no label switching) and its marginal density
prod_i sum_k w_k N(y_i | mu_k, 1) is computed on a grid by quadrature, as are the log evidence and the posterior of
every row's assignment.  NUTS and HMC draws are held to the exact moments within Monte Carlo error (4 standard errors
from ArviZ's ESS); SVI (a Gaussian guide) to the exact ones within its approximation, and its ELBO to the exact log
evidence.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import TraceEnum_ELBO, config_enumerate
from scipy.special import logsumexp
from scipy.stats import beta as beta_dist
from scipy.stats import norm

import pyro_bdl
from pyro_bdl.inference import METHODS
from pyro_bdl.inference.enumeration import marginal_log_likelihood, model_traits
from pyro_bdl.inference.mcmc.potential import FlatPotential
from pyro_bdl.result import FitResult

OFFSETS = (-2.0, 2.0)


@config_enumerate
def shifted_mixture(y):
    """w ~ Beta(2, 2), mu ~ N(0, 5^2); per row z ~ Categorical(w, 1 - w), y ~ N(mu + OFFSETS[z], 1)."""
    w = pyro.sample("w", dist.Beta(2.0, 2.0))
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    locs = mu + torch.tensor(OFFSETS)
    with pyro.plate("rows", len(y)):
        z = pyro.sample("z", dist.Categorical(torch.stack([w, 1 - w])))
        pyro.sample("y", dist.Normal(locs[z], 1.0), obs=y)


def _data() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.cat([torch.randn(10, generator=g) - 1.5, torch.randn(20, generator=g) + 2.5])


Y = _data()


def _joint_rows(w, mu, y):
    """log w_k + log N(y | mu + offset_k, 1), float64, shape broadcast(w, mu, y) + (2,)."""
    w, mu, y = (np.asarray(a, dtype=float) for a in (w, mu, y))
    return np.stack([np.log(w) + _log_normal(y - mu - OFFSETS[0]), np.log1p(-w) + _log_normal(y - mu - OFFSETS[1])], -1)


def _log_normal(residual):
    """log N(residual | 0, 1)."""
    return -0.5 * residual ** 2 - 0.5 * np.log(2 * np.pi)


def _marginal_rows(w, mu, y):
    """log p(y_i | w, mu) = logsumexp_k (log w_k + log N(y_i | mu_k, 1)), by hand."""
    return logsumexp(_joint_rows(w, mu, y), axis=-1)


@pytest.fixture(scope="module")
def exact():
    """The exact posterior on a grid (midpoints; the posterior sds are 0.08 for w and 0.2 for mu, the steps 0.005
    and 0.01, from 8 sds below mu's mean to 11 above: halving both steps moves no moment by 1e-4 of an sd): moments
    of w and mu, the log evidence, and p(z_i = 0 | y) per row."""
    w = (np.arange(200) + 0.5) / 200
    mu = np.linspace(-1.0, 3.0, 401)
    W, M = np.meshgrid(w, mu, indexing="ij")
    rows = [_joint_rows(W, M, y) for y in Y.double().numpy()]  # per row (400, 901, 2)
    log_joint = beta_dist.logpdf(W, 2, 2) + norm.logpdf(M, 0, 5) + sum(logsumexp(r, -1) for r in rows)
    post = np.exp(log_joint - logsumexp(log_joint))
    moments = {}
    for name, grid in (("w", W), ("mu", M)):
        mean = float((post * grid).sum())
        moments[name] = (mean, float(np.sqrt((post * (grid - mean) ** 2).sum())))
    # p(z_i = 0 | y) = sum over the grid of p(w, mu | y) p(z_i = 0 | w, mu, y_i)
    first = np.array([(post * np.exp(r[..., 0] - logsumexp(r, -1))).sum() for r in rows])
    return {"moments": moments, "log_evidence": float(logsumexp(log_joint) + np.log(w[1] - w[0]) + np.log(mu[1] - mu[0])),
            "first": first}


@pytest.fixture(scope="module")
def nuts_fit():
    # 800 draws: with 400 the split r_hat of this well-mixed chain pair is 1.011 on 2 seeds in 3 (r_hat noise ~ 1/sqrt(ESS))
    return pyro_bdl.fit(shifted_mixture, {"y": Y}, inference="nuts", samples=800, warmup=300, seed=0, progress=False)


def _check_draws(result, exact):
    """Posterior means and sds of w and mu within 4 Monte Carlo standard errors of the exact ones (se of the mean
    sd / sqrt(ESS), of the sd sd / sqrt(2 ESS))."""
    idata = result.to_inference_data()
    for name, (mean, sd) in exact["moments"].items():
        ess = float(az.ess(idata, var_names=[name])[name])
        got_mean, got_sd = float(result.posterior_mean(name)), float(result.posterior_sd(name))
        assert abs(got_mean - mean) < 4 * sd / np.sqrt(ess), (name, got_mean, mean, ess)
        assert abs(got_sd / sd - 1) < 4 / np.sqrt(2 * ess), (name, got_sd, sd, ess)


def test_traits_are_read_from_the_trace():
    def continuous(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    def unmarked(y):
        k = pyro.sample("k", dist.Bernoulli(0.5))
        pyro.sample("y", dist.Normal(k, 1.0), obs=y)

    assert model_traits(shifted_mixture, {"y": Y}) == {"continuous", "enumerated"}
    suits = {name for name, method in METHODS.items() if method.suits({"continuous", "enumerated"})}
    assert suits == {"nuts", "hmc", "svi"}  # the methods that sum enumerated sites out
    assert model_traits(continuous, {"y": Y[0]}) == {"continuous"}
    with pytest.raises(ValueError, match="latent site 'k' is discrete .* not marked for enumeration.*config_enumerate"):
        model_traits(unmarked, {"y": Y[0]})
    with pytest.raises(ValueError, match="latent site 'k' is discrete .* not marked for enumeration"):
        pyro_bdl.fit(unmarked, {"y": Y[0]}, inference="nuts", progress=False)


def test_the_zoo_potential_is_minus_the_exact_marginal_density():
    """U(theta) = -log p(y, w, mu) - log|J|, the assignments summed out, and its gradient, against the formula."""
    potential = FlatPotential(shifted_mixture, {"y": Y}, compile=False)
    assert potential.sites == ["w", "mu"] and potential.enumerated == ["z"]
    theta = torch.tensor([[-0.5, 0.7], [0.3, -1.0], [1.2, 2.0]])
    u, g = potential.value_and_grad(theta, potential.data_tensors({"y": Y}))
    t = theta.double().requires_grad_()
    w, mu = torch.sigmoid(t[:, 0]), t[:, 1]
    rows = torch.stack([w.log()[:, None] + torch.distributions.Normal(mu[:, None] - 2, 1.0).log_prob(Y.double()),
                        (1 - w).log()[:, None] + torch.distributions.Normal(mu[:, None] + 2, 1.0).log_prob(Y.double())])
    log_joint = (torch.distributions.Beta(2.0, 2.0).log_prob(w) + torch.distributions.Normal(0.0, 5.0).log_prob(mu)
                 + torch.logsumexp(rows, 0).sum(-1) + (w * (1 - w)).log())
    want_g, = torch.autograd.grad(-log_joint.sum(), t)
    assert torch.allclose(u.double(), -log_joint.detach(), rtol=1e-5)
    assert torch.allclose(g.double(), want_g, rtol=1e-4, atol=1e-4)
    assert potential.mode == "traced"  # the loop over chains, traced once


@pytest.mark.slow
def test_nuts_matches_the_exact_posterior(nuts_fit, exact):
    assert set(nuts_fit.samples) == {"w", "mu"}  # the assignments are summed out, not drawn
    _check_draws(nuts_fit, exact)


@pytest.mark.slow
def test_hmc_matches_the_exact_posterior(exact):
    result = pyro_bdl.fit(shifted_mixture, {"y": Y}, inference="hmc", samples=400, warmup=200, seed=1, progress=False)
    _check_draws(result, exact)


@pytest.mark.slow
def test_svi_sums_out_the_assignments(exact):
    """TraceEnum_ELBO with a Gaussian guide over (w, mu): its means within a quarter of a posterior sd of the exact
    ones (the Gaussian approximation's error on this near-Gaussian posterior, far above the draws' Monte Carlo
    error), and its ELBO below the exact log evidence by less than 0.3 nats (KL(q || p)), within 4 standard
    errors of the 300-draw estimate."""
    result = pyro_bdl.fit(shifted_mixture, {"y": Y}, inference="svi", steps=600, lr=0.05, jit=True, seed=0,
                          progress=False)
    assert set(result.samples) == {"w", "mu"}
    for name, (mean, sd) in exact["moments"].items():
        assert abs(float(result.posterior_mean(name)) - mean) < 0.25 * sd, name
    elbo = TraceEnum_ELBO(max_plate_nesting=1)
    with torch.no_grad():
        draws = np.array([-elbo.loss(shifted_mixture, result.guide, Y) for _ in range(300)])
    estimate, se = draws.mean(), draws.std() / np.sqrt(len(draws))
    assert estimate < exact["log_evidence"] + 4 * se, (estimate, exact["log_evidence"], se)
    assert estimate > exact["log_evidence"] - 0.3, (estimate, exact["log_evidence"])


@pytest.mark.parametrize("method", ["map", "svi-meanfield", "laplace"])
def test_methods_that_cannot_sum_out_are_refused_before_running(method):
    pyro.clear_param_store()
    with pytest.raises(ValueError, match=rf"inference '{method}' cannot fit this model: it is enumerated .*'z'.* "
                                         r"the methods that suit it: svi, nuts, hmc"):
        pyro_bdl.fit(shifted_mixture, {"y": Y}, inference=method, progress=False)
    assert not list(pyro.get_param_store().keys())  # nothing was fitted


def test_the_elbo_setting():
    def continuous(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
        with pyro.plate("rows", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    with pytest.raises(ValueError, match="setting 'elbo' of inference 'svi' must be one of auto, trace, meanfield, "
                                         "tracegraph, enum; got 'renyi'"):
        pyro_bdl.fit(continuous, {"y": Y}, inference="svi", elbo="renyi", steps=5, progress=False)
    with pytest.raises(ValueError, match=r"elbo='trace' \(inference 'svi'\) cannot sum out the model's enumerated "
                                         r"sites \(z\): use elbo='enum'"):
        pyro_bdl.fit(shifted_mixture, {"y": Y}, inference="svi", elbo="trace", steps=5, progress=False)
    # "auto" is the method's own estimator: Trace_ELBO without enumerated sites, TraceEnum_ELBO with them (the same
    # losses step by step as naming it, from the same seed); the other names run
    fits = {}
    with warnings.catch_warnings():  # 30 steps: unsettled, as the diagnostics may say
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        for model, data, elbo in ((continuous, {"y": Y}, "trace"), (continuous, {"y": Y}, "auto"),
                                  (continuous, {"y": Y}, "meanfield"), (shifted_mixture, {"y": Y}, "enum"),
                                  (shifted_mixture, {"y": Y}, "auto")):
            fits[model.__name__, elbo] = pyro_bdl.fit(model, data, inference="svi", elbo=elbo, steps=30, samples=20,
                                                      seed=3, progress=False)
        fits["bbvi"] = pyro_bdl.fit(continuous, {"y": Y}, inference="bbvi", elbo="tracegraph", steps=20, samples=20,
                                    seed=3, progress=False)
    for name, named in (("continuous", "trace"), ("shifted_mixture", "enum")):
        np.testing.assert_array_equal(fits[name, "auto"].losses, fits[name, named].losses)
    assert not np.array_equal(fits["continuous", "meanfield"].losses, fits["continuous", "trace"].losses)
    assert all(np.isfinite(fit.losses).all() for fit in fits.values())


def test_pointwise_log_likelihood_is_the_marginal_one(nuts_fit):
    """log_likelihood['y'][c, s, i] = logsumexp_k (log w_k + log N(y_i | mu_k, 1)) at draw (c, s), to float32's
    precision; the likelihood given a drawn assignment would differ by nats per row."""
    idata = nuts_fit.to_inference_data()
    w, mu = (nuts_fit.samples[k].double().numpy() for k in ("w", "mu"))
    hand = _marginal_rows(w[..., None], mu[..., None], Y.double().numpy())
    got = idata.log_likelihood["y"].values
    assert got.shape == hand.shape == (2, 800, len(Y))
    np.testing.assert_allclose(got, hand, rtol=0, atol=2e-5)


def test_loo_of_the_fit_is_the_loo_of_the_marginal_likelihood(nuts_fit):
    w, mu = (nuts_fit.samples[k].double().numpy() for k in ("w", "mu"))
    hand = az.from_dict(posterior={"w": w, "mu": mu},
                        log_likelihood={"y": _marginal_rows(w[..., None], mu[..., None], Y.double().numpy())})
    got, want = az.loo(nuts_fit.to_inference_data(), pointwise=True), az.loo(hand, pointwise=True)
    assert abs(got["elpd_loo"] - want["elpd_loo"]) < 1e-3 and abs(got["p_loo"] - want["p_loo"]) < 1e-3
    np.testing.assert_allclose(got["pareto_k"].values, want["pareto_k"].values, atol=1e-3)


def test_infer_discrete_gives_the_posterior_of_the_assignments(nuts_fit, exact):
    """Drawn (temperature 1): the frequency of z_i = 0 over the draws is p(z_i = 0 | y) within 4 standard errors
    (variance at most p (1 - p) / ESS, the ESS of the continuous draws); most probable (temperature 0): the argmax
    of p(z_i | w, mu, y_i) at every draw, exactly.  On every 8th draw of the fit (one run of the model per draw)."""
    thinned = FitResult(shifted_mixture, {"y": Y}, "nuts", {k: v[:, ::8] for k, v in nuts_fit.samples.items()}, ["y"])
    drawn = thinned.infer_discrete()
    assert set(drawn) == {"z"} and drawn["z"].shape == (2, 100, len(Y))
    ess = min(float(az.ess(thinned.samples[k].numpy())) for k in ("w", "mu"))
    p = exact["first"]
    frequency = (drawn["z"] == 0).double().mean((0, 1)).numpy()
    assert (np.abs(frequency - p) < 4 * np.sqrt(p * (1 - p) / ess) + 1e-3).all(), (frequency, p)
    best = thinned.infer_discrete(temperature=0)["z"].numpy()
    w, mu = (thinned.samples[k].double().numpy() for k in ("w", "mu"))
    want = _joint_rows(w[..., None], mu[..., None], Y.double().numpy()).argmax(-1)
    assert (best == want).all()
    with pytest.raises(ValueError, match="temperature must be 1"):
        thinned.infer_discrete(temperature=0.5)


def test_the_marginal_is_conditional_on_the_other_sites_of_the_row():
    """Two observed sites sharing a row's assignment: the log-likelihood of x_i is log p(x_i | v_i, theta), the
    joint with x_i less the joint without it, each summed over z_i."""
    @config_enumerate
    def two_sites(x, v):
        mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
        with pyro.plate("rows", len(x)):
            z = pyro.sample("z", dist.Bernoulli(0.3))
            pyro.sample("x", dist.Normal(mu + 3.0 * z, 1.0), obs=x)
            pyro.sample("v", dist.Normal(-z, 0.5), obs=v)

    x, v = torch.tensor([0.2, 3.1, 1.4]), torch.tensor([-0.9, 0.1, -0.5])
    mu = torch.tensor([[0.0, 0.5, -0.4]])
    got = marginal_log_likelihood(two_sites, {"mu": mu}, {"x": x, "v": v}, ["x", "v"])
    m = mu.double().numpy()[..., None]
    log_z = np.log([0.7, 0.3])
    lx = np.stack([norm.logpdf(x.double().numpy(), m + 3.0 * k, 1.0) for k in (0, 1)], -1)
    lv = np.stack([np.broadcast_to(norm.logpdf(v.double().numpy(), -k, 0.5), lx.shape[:-1]) for k in (0, 1)], -1)
    for site, own, other in (("x", lx, lv), ("v", lv, lx)):
        want = logsumexp(log_z + own + other, -1) - logsumexp(log_z + other, -1)
        np.testing.assert_allclose(got[site], want, atol=1e-5)


def test_a_global_enumerated_site_is_drawn_from_its_posterior():
    """A discrete site shared by every row is not summed out per row: each draw's row vector is the likelihood
    given one value of it, drawn from its posterior (here the data leave no doubt which)."""
    scales = torch.tensor([0.5, 1.0, 2.0])

    @config_enumerate
    def global_switch(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
        k = pyro.sample("k", dist.Categorical(torch.ones(3) / 3))
        with pyro.plate("rows", len(y)):
            pyro.sample("y", dist.Normal(mu, scales[k]), obs=y)

    y = 2.0 * torch.randn(200, generator=torch.Generator().manual_seed(0))
    mu = torch.tensor([[0.0, 0.1, -0.1, 0.05]])
    got = marginal_log_likelihood(global_switch, {"mu": mu}, {"y": y}, ["y"])["y"][0]
    given = np.stack([norm.logpdf(y.double().numpy(), mu.double().numpy()[0, :, None], s) for s in (0.5, 1.0, 2.0)])
    np.testing.assert_allclose(got, given[2], atol=1e-5)  # scale 2, the only one the data allow
