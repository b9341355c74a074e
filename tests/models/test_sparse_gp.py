"""The sparse Gaussian processes (pyro_bdl/nn/sparse_gp.py, the gp's ``approximation`` option) against exact
answers: Titsias's collapsed bound and its predictive equal the exact GP's with every row an inducing input and lie
below it with fewer, equal the dense-matrix formula; Hensman's uncollapsed bound at its optimal q(v) is the collapsed
bound; the expected log-likelihoods equal brute-force integrals; fits predict held-out rows as well as the exact GP
within their standard error; the approximation chosen by rows, and what each cannot take refused.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from pyro import poutine

import pyro_bdl
from pyro_bdl.data.table import Dataset
from pyro_bdl.models.gp.model import gp
from pyro_bdl.models.gp.sizes import (AUTO_COLLAPSED_ROWS, AUTO_EXACT_ROWS, ApproximationNote, check_method,
                                      choose_approximation)
from pyro_bdl.nn.kernels import parse_kernel
from pyro_bdl.nn.sparse_gp import (INDUCING_JITTER, CollapsedBound, ExpectedLogLikelihood, collapsed_predictive_moments,
                                   inducing_start, latent_class_probabilities, whitened_projection)
from pyro_bdl.nn import sparse_gp
from pyro_bdl.posterior.evaluation import evaluate_fit

F64 = torch.float64
KERNEL = parse_kernel("matern52")
HYPERS = {"lengthscale": torch.tensor([0.8, 1.4], dtype=F64), "variance": torch.tensor(1.3, dtype=F64)}
NOISE_VAR = torch.tensor(0.05, dtype=F64)


def _problem(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=F64) * 4 - 2
    return X, torch.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.2 * torch.randn(n, generator=g, dtype=F64)


def _projection(Z, X):
    return whitened_projection(KERNEL.matrix(Z, Z, HYPERS), KERNEL.matrix(Z, X, HYPERS), KERNEL.diagonal(X, HYPERS))


def _exact(X, y):
    K = KERNEL.matrix(X, X, HYPERS) + NOISE_VAR * torch.eye(len(X), dtype=F64)
    return torch.distributions.MultivariateNormal(torch.zeros(len(X), dtype=F64), K)


def test_the_collapsed_bound_is_the_dense_formula_and_exact_with_every_row_inducing(monkeypatch):
    X, y = _problem()
    Z = X[:7]
    A, gap = _projection(Z, X)
    bound = float(CollapsedBound(torch.zeros_like(y), A, gap, NOISE_VAR, F64).log_prob(y))
    # log N(y; 0, Q + s^2 I) - tr(K - Q) / (2 s^2), Q = K_xz K_zz^-1 K_zx, from dense matrices
    K_zz, K_zx = KERNEL.matrix(Z, Z, HYPERS), KERNEL.matrix(Z, X, HYPERS)
    K_zz = K_zz + INDUCING_JITTER * K_zz.diagonal().mean() * torch.eye(7, dtype=F64)  # as the projection has it
    Q = K_zx.T @ torch.linalg.solve(K_zz, K_zx)
    dense = torch.distributions.MultivariateNormal(torch.zeros(len(X), dtype=F64), Q + NOISE_VAR * torch.eye(len(X), dtype=F64))
    trace = (KERNEL.diagonal(X, HYPERS) - Q.diagonal()).sum() / (2 * NOISE_VAR)
    assert bound == pytest.approx(float(dense.log_prob(y) - trace), abs=1e-6)
    assert bound < float(_exact(X, y).log_prob(y))
    monkeypatch.setattr(sparse_gp, "INDUCING_JITTER", 0.0)  # K_zz as it is: the bound's own tightness, no jitter's
    A, gap = _projection(X, X)  # every row an inducing input: the bound is tight
    assert float(CollapsedBound(torch.zeros_like(y), A, gap, NOISE_VAR, F64).log_prob(y)) == pytest.approx(
        float(_exact(X, y).log_prob(y)), abs=1e-6)


def test_the_collapsed_predictive_is_the_exact_one_with_every_row_inducing(monkeypatch):
    from pyro_bdl.nn.gaussian_process import predictive_moments, stable_cholesky

    monkeypatch.setattr(sparse_gp, "INDUCING_JITTER", 0.0)
    X, y = _problem()
    Xs = torch.linspace(-3, 3, 11, dtype=F64)[:, None].expand(11, 2)
    A, _ = _projection(X, X)
    A_star, _ = _projection(X, Xs)
    mean, var = collapsed_predictive_moments(A, NOISE_VAR, y, A_star, KERNEL.diagonal(Xs, HYPERS), 0.0)
    L, _ = stable_cholesky(KERNEL.matrix(X, X, HYPERS) + NOISE_VAR * torch.eye(len(X), dtype=F64))
    exact_mean, exact_var = predictive_moments(L, KERNEL.matrix(X, Xs, HYPERS), KERNEL.diagonal(Xs, HYPERS), y, 0.0)
    np.testing.assert_allclose(mean, exact_mean, atol=1e-6)
    np.testing.assert_allclose(var, exact_var, atol=1e-6)


def test_the_uncollapsed_bound_at_its_optimal_q_is_the_collapsed_bound():
    """Hensman's bound, sum_i E_q E_{f_i|v} log N(y_i; f_i, s^2) - KL(q || N(0, I)), at the optimal Gaussian q(v)
    (precision I + A A^T / s^2, mean S A y / s^2) equals Titsias's bound: the two objectives agree where they
    should, and ExpectedLogLikelihood is the inner expectation."""
    X, y = _problem()
    A, gap = _projection(X[:9], X)
    S = torch.linalg.inv(torch.eye(9, dtype=F64) + A @ A.T / NOISE_VAR)
    m_v = S @ A @ y / NOISE_VAR
    f_var = gap + ((A.T @ S) * A.T).sum(-1)  # the variance of f_i under q(v) and p(f_i | v)
    data_term = ExpectedLogLikelihood("normal", A.T @ m_v, f_var, NOISE_VAR.sqrt(), F64).log_prob(y).sum()
    q = torch.distributions.MultivariateNormal(m_v, S)
    kl = torch.distributions.kl_divergence(q, torch.distributions.MultivariateNormal(torch.zeros(9, dtype=F64),
                                                                                     torch.eye(9, dtype=F64)))
    collapsed = CollapsedBound(torch.zeros_like(y), A, gap, NOISE_VAR, F64).log_prob(y)
    assert float(data_term - kl) == pytest.approx(float(collapsed), abs=1e-8)


@pytest.mark.parametrize("likelihood", ["normal", "bernoulli", "categorical"])
def test_the_expected_log_likelihoods_are_the_integrals(likelihood):
    """E_{f ~ N(mu, s^2)} log p(y | f) against 400,000 Monte Carlo draws of f (their standard error sets the
    tolerance: 5 of them); the categorical's own estimate from its 32 draws, averaged over 2,000 evaluations."""
    g = torch.Generator().manual_seed(1)
    shape = (6, 3) if likelihood == "categorical" else (6,)
    mu, var = torch.randn(shape, generator=g, dtype=F64), torch.rand(shape, generator=g, dtype=F64) + 0.2
    y = torch.tensor([0, 1, 2, 1, 0, 2] if likelihood == "categorical" else [0, 1, 1, 0, 1, 0], dtype=F64)
    if likelihood == "normal":
        y = y + 0.3
    noise = torch.tensor(0.4, dtype=F64)
    ours = ExpectedLogLikelihood(likelihood, mu, var, noise if likelihood == "normal" else None, F64)
    torch.manual_seed(0)
    estimate = torch.stack([ours.log_prob(y) for _ in range(2000)]).mean(0) if likelihood == "categorical" \
        else ours.log_prob(y)
    f = mu + var.sqrt() * torch.randn((400_000,) + shape, generator=g, dtype=F64)
    if likelihood == "normal":
        lp = torch.distributions.Normal(f, noise).log_prob(y)
    elif likelihood == "bernoulli":
        lp = torch.distributions.Bernoulli(logits=f).log_prob(y)
    else:
        lp = torch.log_softmax(f, -1).gather(-1, y.long()[None, :, None].expand(len(f), 6, 1)).squeeze(-1)
    se = lp.std(0) / math.sqrt(len(lp))
    assert ((estimate - lp.mean(0)).abs() <= 5 * se + 1e-9).all()


def test_predictive_class_probabilities_are_the_integrals():
    g = torch.Generator().manual_seed(2)
    mu, var = torch.randn(5, generator=g, dtype=F64), torch.rand(5, generator=g, dtype=F64) + 0.5
    p = latent_class_probabilities("bernoulli", mu, var)
    f = mu + var.sqrt() * torch.randn(400_000, 5, generator=g, dtype=F64)
    mc = torch.sigmoid(f)
    assert ((p[:, 1] - mc.mean(0)).abs() <= 5 * mc.std(0) / math.sqrt(len(mc))).all()
    assert torch.allclose(p.sum(-1), torch.ones(5, dtype=F64))


def test_the_inducing_inputs_start_at_k_means_centres_the_same_each_time():
    X, _ = _problem(n=200)
    Z = inducing_start(X, 10)
    assert Z.shape == (10, 2) and torch.equal(Z, inducing_start(X, 10))
    nearest = torch.cdist(X, Z).min(1).values.mean()  # k-means: closer to the rows than 10 random rows are
    assert nearest < torch.cdist(X, X[:10]).min(1).values.mean()
    assert torch.equal(inducing_start(X[:5], 10), torch.unique(X[:5], dim=0))  # fewer distinct rows: all of them


def _held_out(n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n + 300, 1, generator=g) * 6 - 3
    y = torch.sin(2 * X[:, 0]) + 0.25 * torch.randn(n + 300, generator=g)
    return {"X": X[:n], "y": y[:n]}, Dataset("held out", X[n:], y[n:], ["x0"], "y")


def _pointwise_ll(fit, test) -> np.ndarray:
    mean, sd = (fit.predict(test.X)[c].to_numpy() for c in ("mean", "sd"))
    return -0.5 * np.log(2 * np.pi * sd ** 2) - 0.5 * (test.y.numpy() - mean) ** 2 / sd ** 2


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
@pytest.mark.parametrize("approximation,inference,settings", [
    ("collapsed", "map", {}),
    ("svgp", "svi", {"batch_size": 100}),
], ids=["collapsed-map", "svgp-svi-minibatch"])
def test_sparse_fits_predict_held_out_rows_as_well_as_the_exact_gp(approximation, inference, settings):
    """30 inducing points for a 1-D function: the sparse fit's held-out log-likelihood per row is the exact GP's
    (map) within 3 standard errors of their paired difference over the 300 held-out rows."""
    train, test = _held_out()
    exact = pyro_bdl.fit("gp", train, inference="map", options={"kernel": "rbf"}, steps=800, lr=0.05,
                         progress=False, seed=0)
    sparse = pyro_bdl.fit("gp", train, inference=inference, options={"kernel": "rbf", "approximation": approximation,
                                                                      "inducing": 30},
                          steps=1500, lr=0.05, progress=False, seed=0, **settings)
    diff = _pointwise_ll(sparse, test) - _pointwise_ll(exact, test)
    assert diff.mean() >= -3 * diff.std() / math.sqrt(len(diff))
    assert evaluate_fit(sparse, test)["coverage_94"] > 0.85


def test_the_approximation_is_chosen_by_rows_and_said():
    def rows(n):
        return Dataset("d", torch.zeros(n, 1), torch.zeros(n), ["x0"], "y")

    assert choose_approximation(rows(AUTO_EXACT_ROWS)) == {"approximation": "exact"}
    with pytest.warns(ApproximationNote, match="2,001 rows.*collapsed bound of Titsias"):
        assert choose_approximation(rows(AUTO_EXACT_ROWS + 1)) == {"approximation": "collapsed"}
    with pytest.warns(ApproximationNote, match="minibatches"):
        assert choose_approximation(rows(AUTO_COLLAPSED_ROWS + 1)) == {"approximation": "svgp"}


def test_what_an_approximation_cannot_take_is_refused_before_anything_runs():
    from pyro_bdl.inference import get_method

    many = Dataset("d", torch.zeros(50_000, 1), torch.zeros(50_000), ["x0"], "y")
    with pytest.raises(ValueError, match="'nuts' takes at most 10,000.*approximation=svgp"):
        check_method(many, {"approximation": "svgp"}, get_method("nuts"), {})
    with pytest.raises(ValueError, match="exact Gaussian process takes at most 10,000.*approximation=collapsed"):
        check_method(many, {"approximation": "exact"}, get_method("map"), {})
    train, _ = _held_out(n=50)
    with pytest.raises(ValueError, match="batch_size.*needs approximation=svgp"):
        pyro_bdl.fit("gp", train, inference="svi", options={"approximation": "collapsed"}, batch_size=10, steps=5,
                     progress=False)
    with pytest.raises(ValueError, match="approximation must be one of exact, collapsed, svgp, got 'fitc'"):
        pyro_bdl.fit("gp", train, inference="map", options={"approximation": "fitc"}, steps=5, progress=False)


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
def test_an_svgp_fit_reloads_with_its_inducing_inputs_and_predicts_the_same(tmp_path):
    train, test = _held_out(n=120)
    fit = pyro_bdl.fit("gp", train, inference="svi", options={"approximation": "svgp", "inducing": 12},
                       batch_size=40, steps=300, lr=0.05, samples=40, progress=False, seed=0)
    start = inducing_start(train["X"], 12)
    assert not torch.allclose(fit.params["inducing_inputs"], start)  # learned, not held at the start
    pyro_bdl.write_fit(fit, tmp_path / "fit", plots=False)
    again = pyro_bdl.load_fit(tmp_path / "fit")
    np.testing.assert_allclose(again.predict(test.X).to_numpy(), fit.predict(test.X).to_numpy(), rtol=1e-5,
                               atol=1e-6)


def test_the_svgp_program_broadcasts_over_draws_as_one_draw_at_a_time():
    """The vectorised predictive (every posterior draw at once) gives each draw's density as the program run on
    that draw alone."""
    train, test = _held_out(n=60)
    Z = inducing_start(train["X"], 8)
    kwargs = dict(kernel="rbf", approximation="svgp", inducing=8, train=(train["X"], train["y"]))
    g = torch.Generator().manual_seed(3)
    v = torch.randn(4, 1, 8, generator=g)
    ls, var, noise = (torch.rand(4, 1, generator=g) + 0.5 for _ in range(3))
    draws = {"inducing_values": v, "lengthscale": ls.unsqueeze(-1), "variance": var, "noise": noise}
    import pyro
    pyro.clear_param_store()
    pyro.param("inducing_inputs", Z)
    with pyro.plate("draws", 4, dim=-2):
        batched = poutine.trace(poutine.condition(gp, draws)).get_trace(test.X, test.y, **kwargs)
    together = batched.nodes["y"]["fn"].log_prob(test.y).detach()
    for s in range(4):
        one = {k: t[s, 0] for k, t in draws.items()}
        alone = poutine.trace(poutine.condition(gp, one)).get_trace(test.X, test.y, **kwargs)
        np.testing.assert_allclose(together[s].numpy(), alone.nodes["y"]["fn"].log_prob(test.y).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    pyro.clear_param_store()


def test_the_collapsed_leave_one_out_is_conditioning_on_the_other_rows():
    """Each training row's predictive under the Nyström model N(0, A^T A + s^2 I), by Woodbury, equals conditioning
    that Gaussian on the other rows, row by row (dense matrices)."""
    from pyro_bdl.nn.sparse_gp import collapsed_leave_one_out_moments

    X, y = _problem(n=25)
    A, _ = _projection(X[:6], X)
    mean, var = collapsed_leave_one_out_moments(A, NOISE_VAR, y, 0.0)
    K = A.T @ A + NOISE_VAR * torch.eye(25, dtype=F64)
    for i in range(25):
        rest = torch.arange(25) != i
        w = torch.linalg.solve(K[rest][:, rest], K[rest, i])
        assert float(mean[i]) == pytest.approx(float(w @ y[rest]), abs=1e-8)
        assert float(var[i]) == pytest.approx(float(K[i, i] - K[i, rest] @ w), abs=1e-8)
