"""The Gaussian process regression model (pyro_bdl/models/gp.py) against exact answers: scikit-learn's
``GaussianProcessRegressor`` at the same fixed hyperparameters (predictive mean and sd, log marginal likelihood, to
1e-6), its optimiser's log marginal likelihood (type-II ML), brute-force leave-one-out, and the exact posterior of a
lengthscale on a grid (NUTS, within Monte Carlo error); bad input refused with errors that say what to change.
"""

from __future__ import annotations

import math
import warnings

import arviz as az
import numpy as np
import pytest
import torch
from pyro import poutine
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process import kernels as sk
from support.posterior_checks import check_means, check_sds

import pyro_bdl
from pyro_bdl.models.gp.model import gp
from pyro_bdl.models.gp.sizes import EXACT_MAX_ROWS
from pyro_bdl.nn.gaussian_process import SingularKernelError, stable_cholesky
from pyro_bdl.nn.kernels import parse_kernel


def _problem(n=30, d=2, seed=0, noise=0.1):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64) * 4.0 - 2.0
    y = torch.sin(2.0 * X[:, 0]) + 0.5 * X[:, -1] + noise * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


#: (our kernel, our fixed hyperparameters, scikit-learn's kernel of the same function)
SAME_KERNELS = [
    ("rbf", {"lengthscale": [0.7, 1.3], "variance": 1.5}, sk.ConstantKernel(1.5) * sk.RBF([0.7, 1.3])),
    ("matern12", {"lengthscale": [0.7, 1.3], "variance": 1.5}, sk.ConstantKernel(1.5) * sk.Matern([0.7, 1.3], nu=0.5)),
    ("matern32", {"lengthscale": [0.7, 1.3], "variance": 1.5}, sk.ConstantKernel(1.5) * sk.Matern([0.7, 1.3], nu=1.5)),
    ("matern52", {"lengthscale": [0.7, 1.3], "variance": 1.5}, sk.ConstantKernel(1.5) * sk.Matern([0.7, 1.3], nu=2.5)),
    ("rq", {"lengthscale": 0.8, "alpha": 2.0, "variance": 1.5},
     sk.ConstantKernel(1.5) * sk.RationalQuadratic(length_scale=0.8, alpha=2.0)),
    ("periodic", {"lengthscale": 0.9, "period": 2.5, "variance": 1.5},
     sk.ConstantKernel(1.5) * sk.ExpSineSquared(length_scale=0.9, periodicity=2.5)),
    ("linear", {"offset": 0.3, "variance": 1.0}, sk.DotProduct(sigma_0=math.sqrt(0.3))),
    ("rbf+linear", {"rbf.lengthscale": [0.7, 1.3], "rbf.variance": 1.5, "linear.offset": 0.3,
                    "linear.variance": 1.0},
     sk.ConstantKernel(1.5) * sk.RBF([0.7, 1.3]) + sk.DotProduct(sigma_0=math.sqrt(0.3))),
    ("rbf*periodic", {"rbf.lengthscale": 0.7, "rbf.variance": 1.5, "periodic.lengthscale": 0.9,  # one input
                      "periodic.period": 2.5},
     sk.ConstantKernel(1.5) * sk.RBF(0.7) * sk.ExpSineSquared(length_scale=0.9, periodicity=2.5)),
]


def _fixed_text(fixed: dict) -> str:
    return ",".join(f"{k}={';'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in fixed.items())


def _run(X, y, Xs, kernel, fixed, noise, ys=None):
    """The program at new rows ``Xs`` conditioned on (X, y), every hyperparameter fixed: its y site."""
    trace = poutine.trace(gp).get_trace(Xs, ys, kernel=kernel, noise=noise, mean="zero", fixed=_fixed_text(fixed),
                                        train=(X, y))
    return trace.nodes["y"]["fn"]


@pytest.mark.parametrize("kernel,fixed,theirs", SAME_KERNELS, ids=[k for k, *_ in SAME_KERNELS])
def test_the_predictive_is_scikit_learns_at_the_same_hyperparameters(kernel, fixed, theirs):
    X, y = _problem()
    Xs = torch.linspace(-3.0, 3.0, 17, dtype=torch.float64)[:, None].expand(17, 2) * torch.tensor([1.0, -0.5])
    if "periodic" in kernel:  # scikit-learn's ExpSineSquared takes the distance over all inputs (not a kernel in 2-D)
        X, Xs = X[:, :1], Xs[:, :1]
    noise = 0.2
    reg = GaussianProcessRegressor(theirs, alpha=noise ** 2, optimizer=None, normalize_y=False).fit(X.numpy(),
                                                                                                    y.numpy())
    mean, sd = reg.predict(Xs.numpy(), return_std=True)
    fn = _run(X, y, Xs, kernel, fixed, noise)
    np.testing.assert_allclose(fn.loc.numpy(), mean, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fn.latent_variance.sqrt().numpy(), sd, rtol=0, atol=1e-6)
    np.testing.assert_allclose((fn.scale ** 2 - fn.latent_variance).numpy(), noise ** 2, atol=1e-9)
    # the log marginal likelihood of the training rows
    trace = poutine.trace(gp).get_trace(X, y, kernel=kernel, noise=noise, mean="zero", fixed=_fixed_text(fixed))
    ours = float(trace.nodes["y"]["fn"].log_prob(y))
    assert ours == pytest.approx(reg.log_marginal_likelihood_value_, abs=1e-6)


def test_the_training_rows_are_predicted_leaving_each_out():
    """At the training rows the predictive is y_i | y_-i (R&W eq. 5.12): the same as conditioning on the other
    rows, one at a time."""
    X, y = _problem(n=12)
    fixed, noise = {"lengthscale": [0.7, 1.3], "variance": 1.5}, 0.2
    fn = _run(X, y, X, "rbf", fixed, noise, ys=y)
    for i in range(len(y)):
        rest = torch.arange(len(y)) != i
        alone = _run(X[rest], y[rest], X[i:i + 1], "rbf", fixed, noise)
        assert float(fn.loc[i]) == pytest.approx(float(alone.loc[0]), abs=1e-9)
        assert float(fn.scale[i]) == pytest.approx(float(alone.scale[0]), abs=1e-9)


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
def test_type_two_maximum_likelihood_reaches_scikit_learns_optimum():
    """mle maximises the log marginal likelihood over the hyperparameters: at least scikit-learn's L-BFGS-B with
    5 restarts, on the same kernel (variance x ARD RBF + noise)."""
    X, y = _problem(n=40, seed=3)
    theirs = sk.ConstantKernel(1.0, (1e-5, 1e5)) * sk.RBF([1.0, 1.0], (1e-5, 1e5)) + sk.WhiteKernel(0.1, (1e-8, 1e2))
    reg = GaussianProcessRegressor(theirs, normalize_y=False, n_restarts_optimizer=5, random_state=0).fit(X.numpy(),
                                                                                                          y.numpy())
    fit = pyro_bdl.fit("gp", {"X": X.float(), "y": y.float()}, inference="mle", options={"mean": "zero"}, steps=1500,
                       lr=0.05, progress=False, seed=0)
    point = {k: v[0, 0] for k, v in fit.samples.items()}
    trace = poutine.trace(poutine.condition(gp, data=point)).get_trace(X, y, mean="zero")
    ours = float(trace.nodes["y"]["fn"].log_prob(y))
    assert ours >= reg.log_marginal_likelihood_value_ - 1e-3, (ours, reg.log_marginal_likelihood_value_, point)


def _lengthscale_posterior(X, y, fixed, noise, grid):
    """The exact posterior of a single lengthscale (the rest fixed) on ``grid``: its mean and sd."""
    log_post = []
    for value in grid:
        trace = poutine.trace(poutine.condition(gp, data={"lengthscale": torch.tensor([value])})).get_trace(
            X, y, noise=noise, fixed=_fixed_text(fixed))
        log_post.append(float(trace.log_prob_sum()))
    w = np.exp(np.array(log_post) - max(log_post))
    w /= w.sum()
    mean = float((w * grid).sum())
    return mean, float(np.sqrt((w * (grid - mean) ** 2).sum()))


@pytest.mark.slow
def test_nuts_samples_the_exact_posterior_of_a_lengthscale():
    """variance and noise fixed, one input: the posterior of the lengthscale by quadrature on a fine grid; NUTS's
    mean and sd within K Monte Carlo standard errors of it (support/posterior_checks.py)."""
    g = torch.Generator().manual_seed(1)
    X = torch.linspace(-2.0, 2.0, 25)[:, None]
    y = torch.sin(2.0 * X[:, 0]) + 0.2 * torch.randn(25, generator=g)
    fixed, noise = {"variance": 0.6}, 0.2
    grid = np.linspace(0.05, 3.0, 3000)
    mean, sd = _lengthscale_posterior(X.double(), y.double(), fixed, noise, grid)
    fit = pyro_bdl.fit("gp", {"X": X, "y": y}, inference="nuts", options={"noise": noise, "fixed": "variance=0.6"},
                       chains=2, samples=1000, warmup=500, progress=False, seed=0)
    exact = {"lengthscale": (torch.tensor([mean]), torch.tensor([sd]))}
    check_means(fit, exact)
    check_sds(fit, exact)


def test_the_predictive_splits_function_and_noise_and_grows_away_from_the_data():
    """A MAP fit's predict: the sd's epistemic part is the latent function's (one draw: no spread of means), it
    grows away from the data, and the aleatoric part is the fitted noise."""
    g = torch.Generator().manual_seed(0)
    X = torch.linspace(-1.0, 1.0, 30)[:, None]
    y = torch.sin(3.0 * X[:, 0]) + 0.1 * torch.randn(30, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        fit = pyro_bdl.fit("gp", {"X": X, "y": y}, inference="map", steps=600, progress=False, seed=0)
    table = fit.predict(torch.tensor([[0.0], [1.5], [4.0]]))
    noise = float(fit.samples["noise"])
    np.testing.assert_allclose(table["aleatoric_sd"], noise, rtol=1e-5)
    assert table["epistemic_sd"][0] < table["epistemic_sd"][1] < table["epistemic_sd"][2]
    np.testing.assert_allclose(table["sd"] ** 2, table["aleatoric_sd"] ** 2 + table["epistemic_sd"] ** 2, rtol=1e-5)
    variance = float(fit.samples["variance"])
    assert float(table["epistemic_sd"][2]) == pytest.approx(math.sqrt(variance), rel=1e-2)  # far out: the prior's


def test_kernels_are_positive_semi_definite_differentiable_and_named():
    X = torch.randn(15, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for name in ("rbf", "matern12", "matern32", "matern52", "rq", "periodic", "linear", "arccos", "arcsin",
                 "rbf*periodic+linear", "matern52+rbf"):
        kernel = parse_kernel(name)
        values = {h.name: torch.full((3,) if h.per_input else (), 0.8, dtype=torch.float64, requires_grad=True)
                  for h in kernel.hypers}
        Kx = kernel.matrix(X, X, values)
        grads = torch.autograd.grad(Kx.sum(), list(values.values()))  # finite on the diagonal too (acos' is not)
        assert all(bool(torch.isfinite(g).all()) for g in grads), name
        Kx = Kx.detach()
        assert torch.allclose(Kx, Kx.T, atol=1e-12), name
        assert float(torch.linalg.eigvalsh(Kx).min()) > -1e-9 * float(Kx.diagonal().mean()), name
        assert torch.allclose(kernel.diagonal(X, values).detach(), Kx.diagonal(), atol=1e-10), name
    assert [h.name for h in parse_kernel("rbf+rbf").hypers] == ["rbf.lengthscale", "rbf.variance",
                                                                 "rbf_2.lengthscale", "rbf_2.variance"]


def test_the_arccos_kernel_is_a_wide_relu_network():
    """Cho & Saul's order-1 arc-cosine kernel is the covariance of a ReLU unit with Gaussian weights: the Monte
    Carlo average of relu(w.x + b) relu(w.z + b) over 400,000 units, weights N(0, 1 / l^2), bias N(0, b), times 2
    (the kernel's 1 / pi against the expectation's 1 / (2 pi))."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(4, 2, dtype=torch.float64, generator=g)
    length, bias = torch.tensor([0.7, 1.4], dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64)
    kernel = parse_kernel("arccos")
    exact = kernel.matrix(X, X, {"weight": length, "bias": bias, "variance": torch.tensor(1.0, dtype=torch.float64)})
    units = 400_000
    w = torch.randn(units, 2, dtype=torch.float64, generator=g) / length
    b = torch.randn(units, dtype=torch.float64, generator=g) * bias.sqrt()
    h = torch.relu(X @ w.T + b)
    mc = 2.0 * h @ h.T / units
    assert torch.allclose(mc, exact, rtol=0.02, atol=0.01), (mc, exact)


@pytest.mark.parametrize("options,message", [
    ({"kernel": "rbf+squiggle"}, "unknown kernel 'squiggle'.*rbf, matern12"),
    ({"fixed": "lengthscale=-1"}, "'lengthscale' must be positive"),
    ({"fixed": "period=2"}, "'period', not hyperparameters of this kernel"),
    ({"noise": 0.0}, "option 'noise' of model 'gp' must be"),
])
def test_bad_options_are_refused_naming_what_to_change(options, message):
    X, y = _problem(n=10)
    with pytest.raises(ValueError, match=message):
        pyro_bdl.fit("gp", {"X": X.float(), "y": y.float()}, inference="map", options=options, steps=5,
                     progress=False)


def test_too_many_rows_for_the_exact_gp_are_refused_before_anything_runs():
    X = torch.zeros(EXACT_MAX_ROWS + 1, 1)
    with pytest.raises(ValueError, match="at most 10,000.*random subset"):
        pyro_bdl.fit("gp", {"X": X, "y": torch.zeros(len(X))}, inference="nuts", progress=False)


def test_a_matrix_singular_beyond_the_jitter_is_an_error_and_nan_is_rejected_quietly():
    indefinite = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)
    with pytest.raises(SingularKernelError, match="not positive definite.*noise"):
        stable_cholesky(indefinite)
    L, jitter = stable_cholesky(torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64))  # rank one: jittered
    assert 0 < float(jitter) <= 1e-2 and torch.isfinite(L).all()
    L, jitter = stable_cholesky(torch.full((2, 2), math.inf, dtype=torch.float64))  # an overflowed sampler's point
    assert torch.isnan(L).all() and math.isnan(float(jitter))


def test_a_fit_reloads_predicts_the_same_and_gives_loo(tmp_path):
    X, y = _problem(n=20, d=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        fit = pyro_bdl.fit("gp", {"X": X.float(), "y": y.float()}, inference="laplace", steps=300, samples=50,
                           progress=False, seed=0)
    pyro_bdl.write_fit(fit, tmp_path / "fit")
    again = pyro_bdl.load_fit(tmp_path / "fit")
    new = torch.linspace(-3, 3, 7)[:, None]
    np.testing.assert_allclose(again.predict(new).to_numpy(), fit.predict(new).to_numpy(), rtol=1e-5, atol=1e-6)
    # LOO from the rows' leave-one-out densities: one per training row and draw
    idata = again.to_inference_data()
    assert idata.log_likelihood["y"].shape == (1, 50, 20)
    assert np.isfinite(az.loo(idata).elpd_loo)


def test_the_exact_evidence_is_the_marginal_likelihood_at_fixed_hyperparameters():
    """The evidence hook is scikit-learn's log marginal likelihood where every hyperparameter is fixed; with any
    free it names them (a fit's evidence then comes from a method that integrates them, e.g. laplace)."""
    X, y = _problem()
    kernel, fixed, theirs = SAME_KERNELS[0]
    reg = GaussianProcessRegressor(theirs, alpha=0.2 ** 2, optimizer=None).fit(X.numpy(), y.numpy())
    hook = pyro_bdl.get_model("gp").hooks.exact_evidence
    assert hook(X, y, kernel=kernel, noise=0.2, mean="zero", fixed=_fixed_text(fixed)) == pytest.approx(
        reg.log_marginal_likelihood_value_, abs=1e-6)
    with pytest.raises(ValueError, match="free here: lengthscale, noise"):
        hook(X, y, fixed="variance=1.5")


def test_the_closed_form_gradient_and_its_derivative_are_autograds():
    """GaussianLogLikelihood's gradient (1/2 (alpha alpha^T - K^-1)) and, differentiated again, the Hessian a
    Laplace approximation takes, equal autograd's through the Cholesky factor, with respect to the hyperparameters."""
    from pyro_bdl.nn.gaussian_process import GaussianProcessMarginal

    X, y = _problem(n=15)
    kernel = parse_kernel("rbf")
    eye = torch.eye(len(y), dtype=torch.float64)

    def log_lik(theta, closed_form):
        values = {"lengthscale": theta[:2].exp(), "variance": theta[2].exp()}
        K = kernel.matrix(X, X, values) + theta[3].exp() ** 2 * eye
        if not closed_form:  # autograd through the factorisation
            return torch.distributions.MultivariateNormal(torch.zeros_like(y), scale_tril=torch.linalg.cholesky(K)) \
                .log_prob(y)
        return GaussianProcessMarginal(torch.zeros_like(y), K, torch.linalg.cholesky(K.detach()), torch.float64) \
            .log_prob(y)

    theta = torch.tensor([-0.3, 0.2, 0.4, -1.5], dtype=torch.float64)
    for f in (lambda t: log_lik(t, True), lambda t: log_lik(t, False)):
        assert torch.isfinite(f(theta))
    torch.testing.assert_close(log_lik(theta, True), log_lik(theta, False), rtol=1e-10, atol=1e-10)
    grads = [torch.autograd.functional.jacobian(lambda t: log_lik(t, c), theta) for c in (True, False)]
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-8, atol=1e-10)
    hessians = [torch.autograd.functional.hessian(lambda t: log_lik(t, c), theta) for c in (True, False)]
    torch.testing.assert_close(hessians[0], hessians[1], rtol=1e-7, atol=1e-9)


def test_the_data_scales_are_kept_per_tensor_and_recomputed_when_the_data_change():
    from pyro_bdl.nn.gp_hyperparameters import data_scales

    X, y = _problem(n=20)
    first = data_scales(X, y)
    assert data_scales(X, y) is first  # kept: the same tensors, unchanged
    torch.testing.assert_close(first[0], y.std())
    other = y * 3.0
    torch.testing.assert_close(data_scales(X, other)[0], other.std())  # another target: its own scale
    X.mul_(2.0)  # changed in place: recomputed
    torch.testing.assert_close(data_scales(X, y)[1], X.std(0))
