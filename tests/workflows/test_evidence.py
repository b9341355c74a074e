"""``pyro_bdl.evidence`` against independent references: the closed forms against the marginal density computed
another way, the Laplace estimates against the Laplace approximation computed by hand, importance sampling within
its Monte Carlo error, a network's marginal likelihood in the data's units, and the errors where there is none."""

from __future__ import annotations

import dataclasses
import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from support.problems import blr_problem, coin_problem

import pyro_bdl
from pyro_bdl.data.table import Dataset
from pyro_bdl.inference.laplace import LINEARISED_AT
from pyro_bdl.models.blr import posterior_moments
from pyro_bdl.result import FitResult

#: float32 round-off in a log density of tens of terms, and in a float32 Hessian's log determinant (measured:
#: 2e-6 on the blr problem, 1e-5 on the coin): not an optimiser's tolerance, which the tests carry separately
ROUND_OFF = 1e-4


def _blr_marginal(X: torch.Tensor, y: torch.Tensor, prior_scale: float, noise: float) -> float:
    """log N(y; 0, noise^2 I + s^2 Phi Phi^T), Phi = [X, 1]: the evidence as the Gaussian density of y itself."""
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    cov = noise**2 * torch.eye(len(X), dtype=torch.float64) + prior_scale**2 * phi @ phi.T
    return float(dist.MultivariateNormal(torch.zeros(len(X), dtype=torch.float64), cov).log_prob(y.double()))


@pytest.fixture(scope="module")
def blr():
    data, options = blr_problem()
    fit = pyro_bdl.fit("blr", data, "laplace", options=options, progress=False, steps=1500, samples=50)
    return data, options, fit


@pytest.mark.slow
def test_blr_exact_evidence_is_the_gaussian_marginal_of_y(blr):
    data, options, fit = blr
    reference = _blr_marginal(data.X, data.y, options["prior_scale"], options["noise"])
    exact = pyro_bdl.evidence(fit, "exact")
    assert exact.source == "exact" and abs(exact - reference) < 1e-8 * abs(reference)  # two float64 computations
    wide = {"prior_scale": 3.0, "noise": 0.2}  # and at other options, through the model's hook itself
    hook = pyro_bdl.get_model("blr").hooks.exact_evidence
    assert abs(hook(data.X, data.y, **wide) - _blr_marginal(data.X, data.y, **wide)) < 1e-8 * abs(reference)


def test_coin_exact_evidence_is_the_beta_function_ratio():
    data, options = coin_problem()
    hook = pyro_bdl.get_model("coin").hooks.exact_evidence
    k, n = float(data.y.sum()), len(data.y)
    a, b = options["alpha"], options["beta"]
    log_beta = lambda p, q: math.lgamma(p) + math.lgamma(q) - math.lgamma(p + q)
    assert abs(hook(data.y, n, a, b) - (log_beta(a + k, b + n - k) - log_beta(a, b))) < 1e-12
    # and as a sum over the tosses of the sequential predictive p(y_i | y_<i) = (a + k_<i) / (a + b + i)
    heads, total = 0.0, 0.0
    for i, toss in enumerate(data.y.tolist()):
        p = (a + heads) / (a + b + i)
        total += math.log(p if toss else 1 - p)
        heads += toss
    assert abs(hook(data.y, n, a, b) - total) < 1e-10


def test_laplace_on_blr_with_known_noise_is_the_exact_evidence(blr):
    """The log joint is quadratic: at the point u the optimiser reached, the Laplace estimate is the exact
    evidence less (u - m)^T H (u - m) / 2, m the exact posterior mean, H its precision (an identity at any u);
    at a settled mode that gap is far below the round-off."""
    data, options, fit = blr
    estimate = pyro_bdl.evidence(fit)
    assert estimate.source == "method" and "Laplace" in estimate.kind
    exact = _blr_marginal(data.X, data.y, options["prior_scale"], options["noise"])
    mean, cov = posterior_moments(data.X, data.y, options["prior_scale"], options["noise"])
    u = fit.guide.loc.double()
    gap = float(0.5 * (u - mean) @ torch.linalg.solve(cov, u - mean))
    assert abs(estimate + gap - exact) < ROUND_OFF, (float(estimate), gap, exact)
    assert gap < ROUND_OFF  # the optimiser's tolerance: the mode reached to within round-off of the evidence


def test_laplace_on_the_coin_is_the_analytic_laplace_approximation_in_logit_coordinates():
    """u = logit(pi): log p(y, u) = A log s(u) + B log(1 - s(u)) - log B(alpha, beta), A = alpha + k,
    B = beta + n - k, s the sigmoid; the mode is s(u*) = A / (A + B), the curvature there A B / (A + B)."""
    data, options = coin_problem()
    fit = pyro_bdl.fit("coin", data, "laplace", options=options, progress=False, steps=1000, samples=50)
    a, b = options["alpha"], options["beta"]
    A, B = a + float(data.y.sum()), b + len(data.y) - float(data.y.sum())
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)

    def laplace_at(u: float) -> float:  # the Laplace formula with the Hessian taken at u
        s = 1 / (1 + math.exp(-u))
        log_joint = A * math.log(s) + B * math.log(1 - s) - log_beta
        return log_joint + 0.5 * math.log(2 * math.pi) - 0.5 * math.log((A + B) * s * (1 - s))

    u = float(fit.guide.loc)
    estimate = pyro_bdl.evidence(fit, "method")
    assert abs(estimate - laplace_at(u)) < ROUND_OFF, (float(estimate), laplace_at(u))
    mode = math.log(A / B)
    assert abs(u - mode) < 1e-3  # the optimiser's tolerance (as tests/inference/test_laplace.py): the mode to 1e-3 in logit
    # the analytic Laplace approximation at the mode; off the mode by 1e-3 the formula moves by less than
    # |d/du| * 1e-3 (the log joint is flat there; the log curvature's slope is |1 - 2s| <= 1, times 1/2)
    assert abs(estimate - laplace_at(mode)) < 0.5 * 1e-3 + ROUND_OFF
    exact = pyro_bdl.evidence(fit, "exact")  # and it is an approximation: off the Beta integral, by a little
    assert 1e-4 < abs(estimate - exact) < 0.05, (float(estimate), float(exact))


def test_importance_is_within_monte_carlo_error_of_the_exact_evidence(blr):
    """log of the mean weight: its sd is sqrt(1/ESS - 1/S) for S draws of Kish ESS (the delta method: the
    variance of the mean weight over its square is (E w^2 / (E w)^2 - 1) / S = (S / ESS - 1) / S)."""
    data, options, _ = blr
    samples = 2000
    fit = pyro_bdl.fit("blr", data, "importance", options=options, progress=False, samples=samples, seed=1)
    estimate, exact = pyro_bdl.evidence(fit), pyro_bdl.evidence(fit, "exact")
    sd = math.sqrt(1 / fit.info.importance_ess - 1 / samples)
    assert estimate.source == "method" and exact.source == "exact"
    assert abs(estimate - exact) < 4 * sd + ROUND_OFF, (float(estimate), float(exact), sd)


# ------------------------------------------------------------------------------------------ a network's evidence


def _toy(c: float = 1.0, shift: float = 0.0, n: int = 40) -> Dataset:
    g = torch.Generator().manual_seed(3)
    X = torch.rand(n, 1, generator=g) * 2 - 1
    y = torch.sin(3 * X[:, 0]) + 0.1 * torch.randn(n, generator=g)
    return Dataset("toy", X, c * y + shift)


def _ggn(data: Dataset, **settings):
    return pyro_bdl.fit("bnn-regressor", data, "laplace-ggn", options={"hidden": "8"}, progress=False, samples=20,
                        **{"steps": 500, "grad_clamp": math.inf, **settings})


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # the identities hold at any point the MAP reached
def test_laplace_ggn_evidence_is_of_the_data_in_their_own_units():
    """The last layer of a ReLU net with the rest held at the MAP is Bayesian linear regression on its features
    phi(x): the GGN Laplace evidence at the MAP theta_* is the exact evidence of that regression less
    (theta_* - m)^T Sigma^-1 (theta_* - m) / 2, m the exact posterior mean (an identity at any theta_*).  In the
    data's units y = m_y + s_y y~, the exact evidence is log N(y; m_y, s_y^2 (sigma^2 I + Phi P^-1 Phi^T))."""
    data = _toy(c=30.0, shift=-7.0)
    fit = _ggn(data, subset="last-layer", prior_precision="model")
    point = {k[len(LINEARISED_AT):]: v for k, v in fit.params.items() if k.startswith(LINEARISED_AT)}
    st, sigma, hidden = fit.standardizer, float(fit.samples["sigma"][0, 0]), 8
    Phi = torch.cat([torch.relu(fit.standardized_data["X"] @ point["layer0.weight"].T + point["layer0.bias"]),
                     torch.ones(len(data.y), 1)], 1).double()
    prior = torch.tensor([hidden / 2.0**2] * hidden + [1 / 2.0**2], dtype=torch.float64)  # sd 2 / sqrt(fan_in), 2
    n = len(data.y)
    marginal = dist.MultivariateNormal(torch.full((n,), st.y_mean, dtype=torch.float64),
                                       st.y_sd**2 * (sigma**2 * torch.eye(n) + Phi @ torch.diag(1 / prior) @ Phi.T))
    precision = Phi.T @ Phi / sigma**2 + torch.diag(prior)
    mean = torch.linalg.solve(precision, Phi.T @ fit.standardized_data["y"].double() / sigma**2)
    gap = 0.5 * (fit.guide.mean - mean) @ precision @ (fit.guide.mean - mean)
    reference = float(marginal.log_prob(data.y.double()) - gap)
    assert abs(pyro_bdl.evidence(fit) - reference) < 1e-3, (float(pyro_bdl.evidence(fit)), reference)
    assert fit.info.log_evidence == fit.info.laplace_log_marginal_likelihood  # standardised units there


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
def test_laplace_ggn_evidence_moves_by_the_jacobian_when_y_is_rescaled():
    """y -> c y + shift leaves the standardised data (so the fit) unchanged: log p(y) moves by -n log c.  With
    c = 2^10 and no shift the standardised data are the same bits, so the fits are the same to float64 round-off;
    with c = 10 and a shift, the same to float32 round-off of the standardised targets (measured 2e-6)."""
    n = 40
    base = pyro_bdl.evidence(_ggn(_toy(n=n)))
    for c, shift, tol in ((1024.0, 0.0, 1e-9), (10.0, 5.0, 1e-3)):
        moved = pyro_bdl.evidence(_ggn(_toy(c, shift, n=n)))
        assert abs(moved - (base - n * math.log(c))) < tol, (c, float(moved), float(base))


# ------------------------------------------------------------------------------------------ where there is none


@pytest.mark.slow
def test_the_exact_source_is_refused_for_blr_with_an_unknown_noise_but_the_laplace_estimate_is_given():
    data, _ = blr_problem()
    fit = pyro_bdl.fit("blr", data, "laplace", options={"prior_scale": 1.0}, progress=False, steps=1500, samples=50)
    with pytest.raises(ValueError, match="known noise"):
        pyro_bdl.evidence(fit, "exact")
    assert pyro_bdl.evidence(fit).source == "method" and math.isfinite(pyro_bdl.evidence(fit))


def test_a_method_without_an_estimate_is_refused_naming_those_with_one():
    fit = pyro_bdl.fit("coin", "coin", "map", steps=300, progress=False)
    with pytest.raises(ValueError, match=r"'map' records no estimate.*laplace"):
        pyro_bdl.evidence(fit, "method")
    assert pyro_bdl.evidence(fit).source == "exact"  # auto: the model's closed form
    with pytest.raises(ValueError, match="source must be one of auto, exact, method"):
        pyro_bdl.evidence(fit, "loo")


def test_neither_a_method_estimate_nor_a_closed_form_is_a_clear_error():
    fit = pyro_bdl.fit("coin", "coin", "map", steps=300, progress=False)
    network = dataclasses.replace(fit, spec=pyro_bdl.get_model("bnn-regressor"), info=None)
    with pytest.raises(ValueError, match=r"model 'bnn-regressor' has no closed form \(the zoo models with one: "
                                         r"blr, coin, gp\).*laplace-ggn.*compare_loo"):
        pyro_bdl.evidence(network)

    def model(y=None):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", 3):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    own = FitResult(model, {"y": torch.zeros(3)}, "nuts", {"mu": torch.zeros(1, 4)}, ["y"])
    with pytest.raises(ValueError, match="a user's own model has no closed form"):
        pyro_bdl.evidence(own, "exact")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
def test_a_fit_loaded_from_its_directory_keeps_its_evidence(tmp_path):
    """``metrics.json`` keeps the method's estimate; the loaded fit answers with it (a network's: in data units)."""
    data = _toy(c=30.0, shift=-7.0)
    fit = _ggn(data, subset="last-layer")
    pyro_bdl.write_fit(fit, tmp_path / "fit", plots=False)
    loaded = pyro_bdl.load_fit(tmp_path / "fit")
    assert float(pyro_bdl.evidence(loaded)) == pytest.approx(float(pyro_bdl.evidence(fit)), abs=1e-6)
    assert pyro_bdl.evidence(loaded).source == "method"
