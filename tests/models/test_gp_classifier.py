"""GP classification with inducing points (pyro_bdl/models/gp_classifier.py) against references: scikit-learn's
``GaussianProcessClassifier`` (the exact GP under a Laplace approximation, its own type-II ML) on held-out rows,
within the binomial error of the accuracies; NUTS on the same program (the exact posterior of the inducing values,
slow) for the predictive probabilities; bad labels and options refused.
"""

from __future__ import annotations

import math
import warnings

import arviz as az
import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import pyro_bdl
from pyro_bdl.data.embedded import moons_frame
from pyro_bdl.data.table import Dataset
from pyro_bdl.posterior.evaluation import classification_report


def _moons(n_train=200, n_test=400, seed=1):
    frame = moons_frame(n_train + n_test, 0.25, seed)
    X = torch.tensor(frame[["x1", "x2"]].to_numpy(), dtype=torch.float32)
    y = torch.tensor(frame["y"].to_numpy(), dtype=torch.float32)
    return {"X": X[:n_train], "y": y[:n_train]}, Dataset("moons test", X[n_train:], y[n_train:], ["x1", "x2"], "y")


def _accuracy(fit, test) -> float:
    return float((fit.predict(test.X)["pred"].to_numpy() == test.y.numpy()).mean())


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
@pytest.mark.parametrize("likelihood", ["bernoulli", "categorical"])
def test_held_out_accuracy_is_scikit_learns_exact_gp_classifiers(likelihood):
    """20 inducing points on noisy moons: held-out accuracy at least scikit-learn's (exact GP, Laplace, 3 restarts)
    minus 3 binomial sds of the difference of two accuracies on the same 400 rows."""
    train, test = _moons()
    theirs = GaussianProcessClassifier(ConstantKernel() * RBF([1.0, 1.0]), n_restarts_optimizer=3, random_state=0)
    theirs.fit(train["X"].numpy(), train["y"].numpy())
    their_accuracy = float((theirs.predict(test.X.numpy()) == test.y.numpy()).mean())
    fit = pyro_bdl.fit("gp-classifier", train, inference="svi", options={"inducing": 20, "likelihood": likelihood},
                       steps=1500, lr=0.05, samples=100, progress=False, seed=0)
    ours = _accuracy(fit, test)
    sd = math.sqrt(2 * their_accuracy * (1 - their_accuracy) / len(test.y))
    assert ours >= their_accuracy - 3 * sd, (ours, their_accuracy)
    report, metrics = classification_report(fit, test)
    assert metrics["NLL"] < math.log(2.0)  # better than a coin, in held-out log-likelihood per row


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
def test_it_classifies_ten_digits_and_gives_loo(tmp_path):
    from pyro_bdl.data.embedded import digits_split

    train, test = digits_split()
    fit = pyro_bdl.fit("gp-classifier", train, inference="map", options={"inducing": 50}, steps=600, lr=0.05,
                       batch_size=256, progress=False, seed=0)
    # 50 inducing points, one lengthscale per pixel, at the MAP: 0.973 at seed 0; 0.95 is 2.5 binomial sds below it
    assert _accuracy(fit, test) >= 0.95
    pyro_bdl.write_fit(fit, tmp_path / "fit", plots=False)
    again = pyro_bdl.load_fit(tmp_path / "fit")
    np.testing.assert_allclose(again.predict(test.X[:20]).to_numpy(), fit.predict(test.X[:20]).to_numpy(), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.slow
def test_svi_predictive_probabilities_are_nuts_on_the_same_program():
    """The posterior of the inducing values (8 inducing inputs held at their start, kernel fixed) sampled by NUTS, 4 chains of 500:
    svi's predictive probabilities with a full-covariance Gaussian q within 0.05 of NUTS's at 50 new points (the
    Gaussian's own error: a logistic likelihood's posterior is not Gaussian; NUTS's Monte Carlo error is below 0.01)."""
    train, test = _moons(n_train=60, n_test=50)
    options = {"inducing": 8, "fixed": "lengthscale=0.6;0.6,variance=4", "learn_inducing": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nuts = pyro_bdl.fit("gp-classifier", train, inference="nuts", options=options, samples=500, warmup=500,
                            chains=4, progress=False, seed=0)
        svi = pyro_bdl.fit("gp-classifier", train, inference="svi", options=options, steps=3000, lr=0.02,
                           samples=2000, progress=False, seed=0)
    # the same program: the inducing inputs held at their k-means start by both
    p_nuts, p_svi = (f.predict(test.X)["prob_1"].to_numpy() for f in (nuts, svi))
    assert np.abs(p_nuts - p_svi).max() < 0.1
    assert np.abs(p_nuts - p_svi).mean() < 0.05


@pytest.mark.parametrize("labels,options,message", [
    ([0, 1, 2.5], {}, "class labels in 'y' must be integers"),
    ([0, 1, 2], {"likelihood": "bernoulli"}, "bernoulli likelihood is for two classes"),
    ([0, 1, 1], {"likelihood": "probit"}, "unknown likelihood 'probit'"),
    ([0, 1, 1], {"kernel": "wiggle"}, "unknown kernel 'wiggle'"),
])
def test_bad_labels_and_options_are_refused(labels, options, message):
    X = torch.randn(len(labels), 2)
    with pytest.raises(ValueError, match=message):
        pyro_bdl.fit("gp-classifier", {"X": X, "y": torch.tensor(labels)}, inference="map", options=options, steps=5,
                     progress=False)
