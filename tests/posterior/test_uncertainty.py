"""Predictive-uncertainty summaries and metrics against closed forms, hand computations and scipy/sklearn.

Monte Carlo checks allow K = 4.5 standard errors (as in test_exact_posteriors), with fixed seeds.
"""

from __future__ import annotations

import doctest

import numpy as np
import pyro
import pytest
import torch
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

import pyro_bdl.posterior.uncertainty as unc
from pyro_bdl.posterior.uncertainty import (
    accuracy,
    auroc,
    brier,
    categorical_tlpd,
    classification_summary,
    expected_calibration_error,
    gaussian_tlpd,
    nll,
    plot_reliability,
    regression_summary,
    reliability_table,
    rmse,
)

K = 4.5


def mixture_cdf(x, mu, sigma):
    """CDF of (1/S) sum_s N(mu_s, sigma_s^2) per column, written independently of the module."""
    return norm.cdf((x - mu) / sigma).mean(0)


def mixture_pdf(x, mu, sigma):
    return (norm.pdf((x - mu) / sigma) / sigma).mean(0)


# ---------------------------------------------------------------------------------------------
# Regression
# ---------------------------------------------------------------------------------------------


def test_single_draw_summary_is_the_gaussian():
    rng = np.random.default_rng(0)
    mu = rng.normal(size=(1, 50))
    sigma = rng.uniform(0.1, 3.0, size=(1, 50))
    s = regression_summary(mu, sigma, prob=0.94)
    assert list(s.columns) == ["mean", "sd", "aleatoric_sd", "epistemic_sd", "lower", "upper"]
    np.testing.assert_allclose(s["mean"], mu[0])
    np.testing.assert_allclose(s["sd"], sigma[0])
    np.testing.assert_allclose(s["aleatoric_sd"], sigma[0])
    np.testing.assert_array_equal(s["epistemic_sd"], 0.0)
    np.testing.assert_allclose(s["lower"], mu[0] - 1.8808 * sigma[0], atol=1e-4 * sigma[0].max())
    np.testing.assert_allclose(s["upper"], mu[0] + 1.8808 * sigma[0], atol=1e-4 * sigma[0].max())
    np.testing.assert_allclose(s["lower"], norm.ppf(0.03, mu[0], sigma[0]), rtol=0, atol=1e-9)
    np.testing.assert_allclose(s["upper"], norm.ppf(0.97, mu[0], sigma[0]), rtol=0, atol=1e-9)


def test_law_of_total_variance_hand_example():
    # Draws N(0, 1) and N(2, 3^2): mean 1, aleatoric var (1 + 9) / 2 = 5, epistemic var 1.
    s = regression_summary([[0.0], [2.0]], [[1.0], [3.0]])
    assert s["mean"][0] == pytest.approx(1.0)
    assert s["aleatoric_sd"][0] == pytest.approx(np.sqrt(5.0))
    assert s["epistemic_sd"][0] == pytest.approx(1.0)
    assert s["sd"][0] == pytest.approx(np.sqrt(6.0))


def test_sd_is_the_mixture_sd_by_monte_carlo():
    rng = np.random.default_rng(1)
    S, n, N = 4, 3, 200_000
    mu = rng.normal(scale=3.0, size=(S, n))
    sigma = rng.uniform(0.5, 2.0, size=(S, n))
    s = regression_summary(mu, sigma)
    comp = rng.integers(S, size=(N, n))
    cols = np.arange(n)
    y = mu[comp, cols] + sigma[comp, cols] * rng.normal(size=(N, n))
    np.testing.assert_allclose(s["epistemic_sd"], mu.std(0))  # ddof = 0
    # Sample variance: standard error sqrt((m4 - var^2) / N).
    centred = y - y.mean(0)
    se_var = np.sqrt(((centred**4).mean(0) - y.var(0) ** 2) / N)
    assert np.all(np.abs(y.var(0) - s["sd"] ** 2) < K * se_var)
    assert np.all(np.abs(y.mean(0) - s["mean"]) < K * y.std(0) / np.sqrt(N))


@pytest.mark.parametrize("prob", [0.5, 0.94, 0.99])
def test_interval_ends_are_mixture_quantiles_to_1e6_sd(prob):
    rng = np.random.default_rng(2)
    S, n = 30, 200
    # Spread of the means from tiny to huge relative to sigma: unimodal to well separated modes.
    mu = rng.normal(size=(S, n)) * np.logspace(-3, 2, n)
    sigma = rng.uniform(0.05, 2.0, size=(S, n))
    s = regression_summary(mu, sigma, prob=prob)
    tol = 1e-6 * s["sd"].to_numpy()
    for column, q in [("lower", (1 - prob) / 2), ("upper", 1 - (1 - prob) / 2)]:
        x = s[column].to_numpy()
        assert np.all(mixture_cdf(x - tol, mu, sigma) <= q)
        assert np.all(mixture_cdf(x + tol, mu, sigma) >= q)


def test_bimodal_interval_against_monte_carlo():
    rng = np.random.default_rng(3)
    mu = np.array([[-4.0, 0.0], [4.0, 0.5], [5.0, 0.2]])
    sigma = np.array([[1.0, 1.0], [0.5, 2.0], [2.0, 0.3]])
    N = 200_000
    s = regression_summary(mu, sigma, prob=0.9)
    comp = rng.integers(3, size=(N, 2))
    y = mu[comp, [0, 1]] + sigma[comp, [0, 1]] * rng.normal(size=(N, 2))
    for column, q in [("lower", 0.05), ("upper", 0.95)]:
        exact = s[column].to_numpy()
        empirical = np.quantile(y, q, axis=0)
        se = np.sqrt(q * (1 - q) / N) / mixture_pdf(exact, mu, sigma)
        assert np.all(np.abs(empirical - exact) < K * se), (column, empirical, exact, se)


def test_sigma_scalar_and_per_draw_broadcast():
    rng = np.random.default_rng(4)
    mu = rng.normal(size=(5, 7))
    per_draw = rng.uniform(0.5, 1.5, size=(5, 1))
    full = np.repeat(per_draw, 7, axis=1)
    assert regression_summary(mu, per_draw).equals(regression_summary(mu, full))
    assert regression_summary(mu, 0.7).equals(regression_summary(mu, np.full((5, 7), 0.7)))
    y = rng.normal(size=7)
    np.testing.assert_array_equal(gaussian_tlpd(mu, per_draw, y), gaussian_tlpd(mu, full, y))


def test_torch_tensors_are_accepted():
    mu = torch.randn(3, 4, requires_grad=True)
    s = regression_summary(mu, torch.tensor(0.5))
    np.testing.assert_allclose(s["mean"], mu.detach().numpy().mean(0), rtol=1e-6)
    probs = torch.softmax(torch.randn(3, 4, 2), -1)
    assert categorical_tlpd(probs, torch.tensor([0, 1, 1, 0])).shape == (4,)


def test_rmse_hand_example():
    assert rmse([1.0, 2.0, 3.0], [1.0, 2.0, 5.0]) == pytest.approx(np.sqrt(4.0 / 3.0))
    assert rmse([1.5], [1.5]) == 0.0


def test_gaussian_tlpd_single_draw_is_norm_logpdf():
    rng = np.random.default_rng(5)
    mu, sigma, y = rng.normal(size=(1, 20)), rng.uniform(0.2, 2.0, size=(1, 20)), rng.normal(size=20)
    out = gaussian_tlpd(mu, sigma, y)
    assert out.shape == (20,)
    np.testing.assert_allclose(out, norm.logpdf(y, mu[0], sigma[0]), rtol=1e-12)


def test_gaussian_tlpd_many_draws_is_log_mean_density():
    rng = np.random.default_rng(6)
    mu, sigma, y = rng.normal(size=(8, 20)), rng.uniform(0.2, 2.0, size=(8, 20)), rng.normal(size=20)
    direct = np.log(np.mean(norm.pdf(y, mu, sigma), axis=0))
    np.testing.assert_allclose(gaussian_tlpd(mu, sigma, y), direct, rtol=1e-12)


def test_gaussian_tlpd_is_finite_where_densities_underflow():
    # Direct exp underflows to 0 (log density ~ -1250 and ~ -1200); log-sum-exp does not.
    out = gaussian_tlpd([[0.0, 0.0], [0.0, 1.0]], 1.0, [50.0, 50.0])
    a, b = norm.logpdf(50.0), norm.logpdf(49.0)
    assert out[0] == pytest.approx(a, rel=1e-12)
    assert out[1] == pytest.approx(b + np.log(0.5 * (1 + np.exp(a - b))), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------


def test_uniform_prediction_has_entropy_log_c_and_no_mutual_information():
    C = 5
    s = classification_summary(np.full((4, 3, C), 1.0 / C))
    np.testing.assert_allclose(s["entropy"], np.log(C))
    np.testing.assert_allclose(s["expected_entropy"], np.log(C))
    np.testing.assert_array_equal(s["mutual_info"], 0.0)


def test_agreeing_draws_have_zero_mutual_information():
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.ones(3), size=10)
    p[0] = [1.0, 0.0, 0.0]  # a certain prediction: entropy 0, no log(0) warning
    s = classification_summary(np.stack([p, p, p]))
    np.testing.assert_allclose(s["prob"], p)
    np.testing.assert_array_equal(s["pred"], p.argmax(1))
    np.testing.assert_allclose(s["entropy"], s["expected_entropy"])
    np.testing.assert_allclose(s["mutual_info"], 0.0, atol=1e-12)  # the mean of equal draws rounds
    assert np.all(s["mutual_info"] >= 0.0)
    assert s["entropy"][0] == 0.0


def test_disagreeing_draws_hand_example():
    # Draws (0.9, 0.1) and (0.2, 0.8): mean (0.55, 0.45).
    s = classification_summary([[[0.9, 0.1]], [[0.2, 0.8]]])
    total = -(0.55 * np.log(0.55) + 0.45 * np.log(0.45))
    aleatoric = -0.5 * (0.9 * np.log(0.9) + 0.1 * np.log(0.1) + 0.2 * np.log(0.2) + 0.8 * np.log(0.8))
    np.testing.assert_allclose(s["prob"], [[0.55, 0.45]])
    assert s["pred"][0] == 0
    assert s["entropy"][0] == pytest.approx(total)
    assert s["expected_entropy"][0] == pytest.approx(aleatoric)
    assert s["mutual_info"][0] == pytest.approx(total - aleatoric)
    assert s["mutual_info"][0] > 0.1


def test_accuracy_nll_brier_hand_examples():
    prob = np.array([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0], [0.1, 0.3, 0.6]])
    y = np.array([0, 1, 1])
    assert accuracy(prob, y) == pytest.approx(1.0 / 3.0)  # row 1 ties: argmax is class 0
    assert nll(prob, y) == pytest.approx(-(np.log(0.7) + np.log(0.5) + np.log(0.3)) / 3)
    # Per point: 0.09 + 0.04 + 0.01, 0.25 + 0.25 + 0, 0.01 + 0.49 + 0.36.
    assert brier(prob, y) == pytest.approx((0.14 + 0.5 + 0.86) / 3)
    assert brier(np.eye(3), [0, 1, 2]) == 0.0
    assert brier(np.eye(3), [1, 2, 0]) == pytest.approx(2.0)


def test_nll_floors_zero_probability():
    assert nll([[1.0, 0.0], [0.5, 0.5]], [1, 0]) == pytest.approx((-np.log(1e-12) - np.log(0.5)) / 2)


def test_categorical_tlpd_hand_example():
    probs = np.array([[[0.9, 0.1], [0.0, 1.0]], [[0.5, 0.5], [0.0, 1.0]]])  # (S=2, n=2, C=2)
    out = categorical_tlpd(probs, [0, 0])
    assert out.shape == (2,)
    assert out[0] == pytest.approx(np.log(0.7))
    assert out[1] == pytest.approx(np.log(1e-12))  # every draw gives the label probability 0
    assert categorical_tlpd(probs, [1, 1]) == pytest.approx([np.log(0.3), 0.0])
    mixed = categorical_tlpd([[[1.0, 0.0]], [[0.5, 0.5]]], [1])  # floor per draw, then average
    assert mixed[0] == pytest.approx(np.log((1e-12 + 0.5) / 2))


def test_categorical_tlpd_single_draw_is_minus_nll():
    rng = np.random.default_rng(8)
    p = rng.dirichlet(np.ones(4), size=30)
    y = rng.integers(4, size=30)
    assert -categorical_tlpd(p[None], y).mean() == pytest.approx(nll(p, y))


def test_reliability_table_hand_example():
    prob = np.array([[0.3, 0.7], [0.55, 0.45], [0.2, 0.8], [0.1, 0.9], [0.5, 0.5]])
    y = np.array([1, 1, 1, 0, 0])  # argmax 1, 0, 1, 1, 0 (tie -> 0): correct 1, 0, 1, 0, 1
    t = reliability_table(prob, y, bins=4)
    assert list(t.columns) == ["bin_lower", "bin_upper", "count", "confidence", "accuracy"]
    np.testing.assert_allclose(t["bin_lower"], [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(t["bin_upper"], [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(t["count"], [0, 1, 2, 2])  # 0.5 falls in (0.25, 0.5]
    assert np.isnan(t["confidence"][0]) and np.isnan(t["accuracy"][0])
    np.testing.assert_allclose(t["confidence"][1:], [0.5, 0.625, 0.85])
    np.testing.assert_allclose(t["accuracy"][1:], [1.0, 0.5, 0.5])
    ece = (1 * 0.5 + 2 * 0.125 + 2 * 0.35) / 5
    assert expected_calibration_error(prob, y, bins=4) == pytest.approx(ece)


def binary_calibrated(n, seed):
    rng = np.random.default_rng(seed)
    p1 = rng.uniform(size=n)
    y = (rng.uniform(size=n) < p1).astype(int)
    return np.stack([1 - p1, p1], axis=1), y


def test_ece_small_for_calibrated_and_large_for_overconfident():
    prob, y = binary_calibrated(20_000, seed=9)
    assert expected_calibration_error(prob, y) < 0.02
    sharp = prob**4 / (prob**4).sum(1, keepdims=True)  # temperature 1/4: overconfident
    assert expected_calibration_error(sharp, y) > 0.1


def test_ece_is_the_count_weighted_gap_of_the_table():
    prob, y = binary_calibrated(500, seed=10)
    t = reliability_table(prob, y, bins=10)
    assert t["count"].sum() == 500
    filled = t[t["count"] > 0]
    manual = float((filled["count"] * (filled["accuracy"] - filled["confidence"]).abs()).sum() / 500)
    assert expected_calibration_error(prob, y, bins=10) == pytest.approx(manual, rel=1e-12)


def test_plot_reliability_draws_bars_and_reports_ece():
    import matplotlib.pyplot as plt

    prob, y = binary_calibrated(300, seed=11)
    fig, ax = plt.subplots()
    try:
        out = plot_reliability(prob, y, bins=10, ax=ax)
        assert out is ax
        t = reliability_table(prob, y, bins=10)
        filled = t[t["count"] > 0]
        heights = [patch.get_height() for patch in ax.patches]
        np.testing.assert_allclose(heights, filled["accuracy"])
        assert f"ECE = {expected_calibration_error(prob, y, bins=10):.3f}" in ax.get_title()
    finally:
        plt.close(fig)
    ax = plot_reliability(prob, y)
    try:
        assert "ECE" in ax.get_title()
    finally:
        plt.close(ax.figure)


# ---------------------------------------------------------------------------------------------
# Out-of-distribution detection
# ---------------------------------------------------------------------------------------------


def test_auroc_matches_sklearn_with_ties():
    rng = np.random.default_rng(12)
    score_in = rng.integers(0, 6, size=300).astype(float)
    score_out = rng.integers(2, 8, size=200).astype(float)
    labels = np.r_[np.zeros(300), np.ones(200)]
    expected = roc_auc_score(labels, np.r_[score_in, score_out])
    assert auroc(score_in, score_out) == pytest.approx(expected, rel=1e-12)


def test_auroc_extremes_and_ties():
    assert auroc([0.1, 0.2, 0.3], [0.4, 0.5]) == 1.0
    assert auroc([0.4, 0.5], [0.1, 0.2, 0.3]) == 0.0
    assert auroc([1.0, 1.0, 1.0], [1.0, 1.0]) == 0.5
    assert auroc([0.0, 1.0], [1.0]) == 0.75  # one win, one tie: (1 + 1/2) / 2


def test_auroc_identical_distributions_is_one_half():
    rng = np.random.default_rng(13)
    n_in, n_out = 2000, 1500
    value = auroc(rng.normal(size=n_in), rng.normal(size=n_out))
    se = np.sqrt((n_in + n_out + 1) / (12 * n_in * n_out))  # Mann-Whitney under the null
    assert abs(value - 0.5) < K * se


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

MU = np.zeros((2, 5))
Y5 = np.zeros(5)
P3 = np.full((2, 4, 3), 1 / 3)  # (S, n, C)
P2 = np.full((4, 3), 1 / 3)  # (n, C)
Y4 = np.array([0, 1, 2, 0])
BAD_SUM = np.array([[0.5, 0.6, 0.1]] * 4)
NEGATIVE = np.array([[1.2, -0.2, 0.0]] * 4)
WITH_NAN = np.where(np.arange(12).reshape(4, 3) == 5, np.nan, 1 / 3)

ERRORS = {
    "mu 1-D": (lambda: regression_summary(Y5, 1.0), "mu must be 2-D"),
    "mu empty": (lambda: regression_summary(np.zeros((0, 3)), 1.0), "mu is empty"),
    "mu nan": (lambda: regression_summary([[0.0, np.nan]], 1.0), "mu has 1 non-finite"),
    "sigma mismatch": (lambda: regression_summary(MU, np.ones(3)), "does not match mu"),
    "sigma 3-D": (lambda: regression_summary(MU, np.ones((1, 2, 5))), "sigma must be a scalar"),
    "sigma zero": (lambda: regression_summary(MU, 0.0), "sigma must be positive"),
    "sigma negative": (lambda: gaussian_tlpd(MU, -np.ones((2, 5)), Y5), "sigma must be positive"),
    "sigma inf": (lambda: regression_summary(MU, np.inf), "sigma has 1 non-finite"),
    "prob 1": (lambda: regression_summary(MU, 1.0, prob=1.0), "prob must lie in"),
    "prob 0": (lambda: regression_summary(MU, 1.0, prob=0.0), "prob must lie in"),
    "tlpd y length": (lambda: gaussian_tlpd(MU, 1.0, np.zeros(4)), "mu has 5 points .* y has 4"),
    "tlpd y inf": (lambda: gaussian_tlpd(MU, 1.0, [0, 0, np.inf, 0, 0]), "y has 1 non-finite"),
    "tlpd y 2-D": (lambda: gaussian_tlpd(MU, 1.0, MU), "y must be 1-D"),
    "rmse length": (lambda: rmse(np.zeros(3), np.zeros(4)), "mean has 3 points but y has 4"),
    "rmse nan": (lambda: rmse([np.nan], [0.0]), "mean has 1 non-finite"),
    "rmse text": (lambda: rmse(["a"], [0.0]), "mean must be numeric"),
    "probs 2-D": (lambda: classification_summary(P2), "probs must be 3-D"),
    "probs sum": (lambda: classification_summary(BAD_SUM[None]), "sum to 1"),
    "probs negative": (lambda: classification_summary(NEGATIVE[None]), "negative"),
    "probs nan": (lambda: classification_summary(WITH_NAN[None]), "non-finite"),
    "prob 3-D": (lambda: accuracy(P3, Y4), "prob must be 2-D"),
    "prob sum": (lambda: brier(BAD_SUM, Y4), "sum to 1"),
    "prob nan": (lambda: nll(WITH_NAN, Y4), "non-finite"),
    "label negative": (lambda: accuracy(P2, [0, -1, 2, 0]), r"labels must lie in \[0, 3\)"),
    "label too big": (lambda: nll(P2, [0, 3, 2, 0]), r"labels must lie in \[0, 3\)"),
    "label brier": (lambda: brier(P2, [0, 1, 2, 5]), r"labels must lie in \[0, 3\)"),
    "label tlpd": (lambda: categorical_tlpd(P3, [0, 1, 3, 0]), r"labels must lie in \[0, 3\)"),
    "label ece": (lambda: expected_calibration_error(P2, [0, 1, 3, 0]), r"labels must lie in \[0, 3\)"),
    "label plot": (lambda: plot_reliability(P2, [0, 1, 3, 0]), r"labels must lie in \[0, 3\)"),
    "label non-integer": (lambda: accuracy(P2, [0, 0.5, 1, 0]), "integer class labels"),
    "label nan": (lambda: accuracy(P2, [0, np.nan, 1, 0]), "y has 1 non-finite"),
    "label length": (lambda: accuracy(P2, [0, 1, 2]), r"y must have shape \(4,\)"),
    "label length tlpd": (lambda: categorical_tlpd(P3, [0, 1]), r"y must have shape \(4,\)"),
    "bins zero": (lambda: reliability_table(P2, Y4, bins=0), "bins must be a positive integer"),
    "bins float": (lambda: expected_calibration_error(P2, Y4, bins=2.5), "bins must be a positive integer"),
    "auroc in empty": (lambda: auroc([], [1.0]), "score_in is empty"),
    "auroc out empty": (lambda: auroc([1.0], []), "score_out is empty"),
    "auroc nan": (lambda: auroc([1.0, np.nan], [1.0]), "score_in has 1 non-finite"),
    "auroc 2-D": (lambda: auroc([[1.0]], [1.0]), "score_in must be 1-D"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_invalid_input_raises_value_error(name):
    call, message = ERRORS[name]
    with pytest.raises(ValueError, match=message):
        call()


def test_probabilities_within_tolerance_are_accepted():
    prob = np.array([[0.5, 0.5 + 5e-5], [1.0, 0.0]])
    assert accuracy(prob, [1, 0]) == 1.0


def test_module_docstring_example_runs():
    assert doctest.testmod(unc).failed == 0
    assert set(unc.__all__) <= set(dir(unc))


def test_vectorised_predictive_equals_the_loop_over_draws(monkeypatch):
    """A network and blr broadcast over a plate of draws: one vectorised run gives the loop's moments,
    probabilities and log-likelihoods; a model written with ``X @ w`` does not, and falls back to the loop."""
    import warnings

    import pyro_bdl
    from pyro_bdl.posterior import predictive

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)  # short fits: the predictive is tested
        net = pyro_bdl.fit("bnn-regressor", inference="svi", steps=100, samples=50, progress=False,
                           options={"hidden": "8"})
        blr = pyro_bdl.fit("blr", inference="svi", steps=100, samples=50, progress=False)
    X = torch.linspace(-1, 1, 9).unsqueeze(1)
    for fit, kwargs in ((net, net.model_kwargs(X)), (blr, blr.data)):
        fast = predictive._vectorised(fit.model, fit.samples, kwargs, fit.likelihood_sites, [], 2)
        assert fast is not None
        monkeypatch.setattr(predictive, "_vectorised", lambda *args: None)
        slow = predictive.predictive_draws(fit.model, fit.samples, kwargs, fit.likelihood_sites)
        monkeypatch.undo()
        for key in ("mean", "variance", "log_likelihood"):  # log-likelihoods where y is observed (blr's data)
            assert getattr(fast, key).keys() == getattr(slow, key).keys()
            for site, value in getattr(fast, key).items():
                np.testing.assert_allclose(value, getattr(slow, key)[site], rtol=1e-4, atol=1e-4)
        assert fit is net or "y" in fast.log_likelihood
        assert fast.draws["y"].shape[:2] == slow.draws["y"].shape[:2] == (1, 50)

    def matmul_blr(X, y=None):
        w = pyro.sample("w", pyro.distributions.Normal(torch.zeros(X.shape[1]), 1.0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            return pyro.sample("y", pyro.distributions.Normal(X @ w, 1.0), obs=y)

    samples = {"w": blr.samples["w"]}
    assert predictive._vectorised(matmul_blr, samples, blr.data, ["y"], [], 2) is None


def test_a_model_that_does_not_broadcast_over_the_draws_is_found_on_two_of_them():
    """``(phi @ w[..., None])[..., 0]`` with a batch of w runs, but broadcasts the draws against each other:
    (S, S, n).  It is found on two draws, before the plate of all S is tried (on last-layer's 2 x 10,000
    Metropolis draws that would be 24 GB); the loop gives the predictive."""
    import pyro
    import pyro.distributions as dist

    from pyro_bdl.posterior import predictive

    largest = {"numel": 0}

    def model(X, y=None):
        w = pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            mean = (X @ w.unsqueeze(-1)).squeeze(-1)
            largest["numel"] = max(largest["numel"], mean.numel())
            return pyro.sample("y", dist.Normal(mean, 1.0), obs=y)

    X = torch.randn(30, 3)
    samples = {"w": torch.randn(2, 200, 3)}
    out = predictive.predictive_draws(model, samples, {"X": X}, ["y"])
    assert out.mean["y"].shape == (2, 200, 30)
    np.testing.assert_allclose(out.mean["y"][1, 7], (X @ samples["w"][1, 7]).numpy(), rtol=1e-5, atol=1e-6)
    assert largest["numel"] <= 2 * 2 * 30  # never the (400, 400, 30) array
