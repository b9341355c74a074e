"""Bayesian neural networks: standardisation, minibatch weighting, and point fits that must be good.

The uncertainty claims of issue 3 (gap sd, calibration, SVI vs NUTS) are not tested here yet:
see the issue's closing note.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pyro
from pyro.infer import Trace_ELBO

import pyro_bdl
from pyro_bdl.datasets import SINE_GAP, SINE_NOISE, digits_split, sine_curve, sine_grid
from pyro_bdl.inference.guides import MeanFieldGuide
from pyro_bdl.uncertainty import accuracy, rmse

pytestmark = pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")


def test_map_fits_the_sine_curve_in_original_units():
    result = pyro_bdl.fit("bnn-regressor", "sine", inference="map", progress=False, steps=3000)
    x = sine_grid(400)
    inside = ((x[:, 0] > -0.95) & (x[:, 0] < SINE_GAP[0])) | ((x[:, 0] > SINE_GAP[1]) & (x[:, 0] < 0.95))
    pred = result.predict(x[inside])
    truth = sine_curve(x[inside][:, 0]).numpy()
    # the curve is recovered to well within the noise (sd 0.05) where there is data
    assert rmse(pred["mean"].to_numpy(), truth) < SINE_NOISE
    assert abs(float(pred["aleatoric_sd"].mean()) - SINE_NOISE) < 0.02
    assert np.allclose(pred["epistemic_sd"], 0.0)  # a point estimate has no epistemic spread


def test_predictions_answer_in_the_units_of_the_data():
    """Scaling the target by 1000 and shifting it scales the predictions exactly (the fit sees the same data)."""
    base = pyro_bdl.load("sine")
    scaled = pyro_bdl.Dataset("scaled", base.X, base.y * 1000 + 5, base.feature_names, "y")
    kw = dict(inference="map", progress=False, steps=300, seed=1)
    p1 = pyro_bdl.fit("bnn-regressor", base, **kw).predict(base.X[:10])
    p2 = pyro_bdl.fit("bnn-regressor", scaled, **kw).predict(base.X[:10])
    np.testing.assert_allclose(p2["mean"], p1["mean"] * 1000 + 5, rtol=1e-4)
    np.testing.assert_allclose(p2["sd"], p1["sd"] * 1000, rtol=1e-4)


def test_minibatch_elbo_is_an_unbiased_estimate_of_the_full_elbo():
    """Blundell et al. Eq. 8: with the data plate subsampled, the likelihood is scaled by N / B so the
    minibatch ELBO has the full ELBO as its expectation (means agree within 4.5 standard errors)."""
    ds = pyro_bdl.load("sine")
    spec = pyro_bdl.get_model("bnn-regressor")
    model = spec.bind({"hidden": (10,), "noise": 0.3})
    pyro.set_rng_seed(0)
    guide = MeanFieldGuide(model, init_scale=0.05)
    guide(X=ds.X, y=ds.y)
    elbo = Trace_ELBO()
    full = np.array([elbo.loss(model, guide, X=ds.X, y=ds.y) for _ in range(300)])
    mini = np.array([elbo.loss(model, guide, X=ds.X, y=ds.y, batch_size=20) for _ in range(600)])
    se = math.sqrt(full.var() / len(full) + mini.var() / len(mini))
    assert abs(full.mean() - mini.mean()) < 4.5 * se
    assert mini.std() > full.std()  # subsampling adds noise, not bias


def test_classifier_map_on_digits_and_its_prediction_columns():
    train, test = digits_split()
    result = pyro_bdl.fit("bnn-classifier", train, inference="map", progress=False, steps=500, lr=0.01)
    assert result.info["options"]["num_classes"] == 10
    table = result.predict(test)
    assert [f"prob_{c}" for c in range(10)] == list(table.columns[:10])
    assert {"pred", "entropy", "mutual_info"} <= set(table.columns)
    assert accuracy(table[[f"prob_{c}" for c in range(10)]].to_numpy(), test.y.numpy()) > 0.9
    assert np.allclose(table["mutual_info"], 0.0, atol=1e-6)  # one draw: no disagreement


def test_classifier_rejects_non_integer_labels():
    train, _ = digits_split()
    bad = pyro_bdl.Dataset("bad", train.X, train.y + 0.5, train.feature_names, "target")
    with pytest.raises(pyro_bdl.DataError, match="must be integers"):
        pyro_bdl.fit("bnn-classifier", bad, inference="map", progress=False, steps=5)


def test_classifier_fit_directory_round_trip(tmp_path):
    from pyro_bdl.store import write_fit

    train, test = digits_split()
    result = pyro_bdl.fit("bnn-classifier", train, inference="map", progress=False, steps=200,
                          options={"hidden": "20"})
    write_fit(result, tmp_path / "fit")
    back = pyro_bdl.load_fit(tmp_path / "fit")
    assert back.standardizer is not None
    a, b = result.predict(test.X[:20]), back.predict(test.X[:20])
    np.testing.assert_allclose(a["prob_3"], b["prob_3"], atol=1e-5)
    assert torch.equal(torch.tensor(a["pred"].to_numpy()), torch.tensor(b["pred"].to_numpy()))


def test_ensemble_members_differ_and_uncertainty_grows_away_from_the_data():
    result = pyro_bdl.fit("bnn-regressor", "sine", inference="ensemble", progress=False)
    w = result.samples["layer1.weight"]
    assert w.shape[:2] == (5, 1) and not torch.allclose(w[0], w[1])  # independent starts, distinct members
    x = sine_grid(400)
    xs = x[:, 0]
    inside = ((xs > -0.95) & (xs < SINE_GAP[0])) | ((xs > SINE_GAP[1]) & (xs < 0.95))
    outside = xs.abs() > 1.2
    pred = result.predict(x)
    sd = pred["sd"].to_numpy()
    assert rmse(pred["mean"][inside.numpy()].to_numpy(), sine_curve(xs[inside]).numpy()) < SINE_NOISE
    # measured 2.7x with this seed; the members disagree where there is no data
    assert sd[outside.numpy()].mean() > 2 * sd[inside.numpy()].mean()


def test_mc_dropout_weight_decay_is_the_prior_at_dropped_out_weights():
    """Gal's KL term: E_z[-log p(M diag z)] = (1 - p) |M|^2 / (2 s^2) + const, checked by Monte Carlo."""
    from pyro_bdl.inference.dropout import DropoutGuide

    ds = pyro_bdl.load("sine")
    model = pyro_bdl.get_model("bnn-regressor").bind({"hidden": (20, 20)})
    p = 0.3
    guide = DropoutGuide(model, p, lambda name: name == "layer1.weight")
    guide(X=ds.X, y=ds.y)
    M = pyro.param("dropout.layer1.weight").detach()
    s2 = 1.0 / 20  # prior variance of layer1.weight: prior_scale^2 / fan_in
    draws = torch.stack([(guide(X=ds.X, y=ds.y)["layer1.weight"] ** 2).sum() / (2 * s2) for _ in range(2000)])
    expected = (1 - p) * float((M**2).sum()) / (2 * s2)
    assert abs(float(draws.mean()) - expected) < 4.5 * float(draws.std()) / math.sqrt(len(draws))


def test_mc_dropout_draws_drop_hidden_units_at_rate_p():
    result = pyro_bdl.fit("bnn-regressor", "sine", inference="mc-dropout", progress=False, steps=500, p=0.2,
                          samples=200)
    w = result.samples["layer1.weight"][0]  # (draws, out, in)
    dropped = (w == 0).all(dim=1).float()  # a dropped input unit is a zero column
    rate, n = float(dropped.mean()), dropped.numel()
    assert abs(rate - 0.2) < 4.5 * math.sqrt(0.2 * 0.8 / n)
    assert torch.all(result.samples["layer0.weight"][0] == result.samples["layer0.weight"][0, 0])  # not dropped
    assert result.predict(sine_grid(20))["epistemic_sd"].min() > 0
