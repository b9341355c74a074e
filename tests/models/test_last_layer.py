"""``last-layer``: its exact Gaussian posterior against SVI with each of its guides, the
reparameterisation-trick gradient against its closed form, the feature map, and a trained feature map
through a saved fit.  Every method's recovery of the exact posterior on this problem (tests/problems.py):
tests/test_exact_posteriors.py.

Tolerances (K = 4.5 standard errors, tests/posterior_checks.py):

* SVI (full-rank guide, whose family holds the exact posterior): the Monte Carlo error of its 2,000
  draws plus the optimiser's own error, measured on this problem from the fitted guide's moments
  (no draws) over seeds 0-3 at these settings: at most 0.064 posterior sd in the means and 4% in the
  sds; allowed: 0.1 sd and 6%.
* The gradient estimator: K Monte Carlo standard errors of its own S draws.

The problem is small and well conditioned (n = 30, d = 2, h = 4, noise 0.5: posterior condition number
58).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyro
import pytest
import torch
from support.posterior_checks import K, check_means, check_sds, ess, exact_posterior_of, flat_draws
from support.problems import last_layer_problem
from pyro.infer import NUTS

import pyro_bdl
import pyro_bdl.store
from pyro_bdl.cli import main
from pyro_bdl.data.table import Dataset
from pyro_bdl.inference.guides import PrincipalAxesGuide
from pyro_bdl.models.last_layer import feature_training as ft
from pyro_bdl.models.last_layer import model as ll
from pyro_bdl.nn import feature_maps as fm
from pyro_bdl.bench import gradient_variance as gradients

#: Optimiser allowance of SVI with the mvn guide at SVI_RUN (see the module docstring).
SVI_RUN = {"steps": 3000, "lr": 0.05, "samples": 2000}
SVI_MEAN_ALLOWANCE, SVI_SD_ALLOWANCE = 0.1, 0.06


def problem(seed: int = 1) -> Dataset:
    """The shared last-layer problem (tests/problems.py): n = 30, d = 2, noise 0.5, fixed seed."""
    return last_layer_problem(seed)[0]


OPTIONS = last_layer_problem()[1]  # 4 random tanh features, known noise 0.5


def _fit(method, **settings):
    result = pyro_bdl.fit("last-layer", problem(), inference=method, options=OPTIONS, seed=0, progress=False,
                          **settings)
    return result, exact_posterior_of(result)  # on the standardised data the model saw


@pytest.mark.slow
def test_svi_full_rank_recovers_exact_posterior():
    result, exact = _fit("svi", guide="mvn", **SVI_RUN)
    for site, (mean, sd) in exact.items():
        draws = flat_draws(result, site).reshape(-1, mean.numel())
        mean, sd = mean.numpy().reshape(-1), sd.numpy().reshape(-1)
        n = ess(result, site, "mean")
        mean_err, sd_err = np.abs(draws.mean(0) - mean), np.abs(draws.std(0, ddof=1) - sd)
        assert np.all(mean_err < (K / np.sqrt(n) + SVI_MEAN_ALLOWANCE) * sd), (site, mean_err / sd)
        assert np.all(sd_err < (K / np.sqrt(2 * n) + SVI_SD_ALLOWANCE) * sd), (site, sd_err / sd)


#: The principal-axes guide at the model's svi defaults on ``sine`` (50 collinear tanh features, posterior
#: condition number about 4e5): the guide's own moments against the exact posterior, over seeds 0-3 with
#: random and trained features, measured: means within 0.058 posterior sd, sds within 1.9%, KL(q || exact)
#: 0.047-0.35 nats (51 dimensions).  No draws enter, so no Monte Carlo error: the allowance is the optimiser's.
AXES_MEAN_ALLOWANCE, AXES_SD_ALLOWANCE, AXES_KL_ALLOWANCE = 0.1, 0.04, 0.5


def _gaussian_kl(m0, C0, m1, C1) -> float:
    """KL(N(m0, C0) || N(m1, C1))."""
    d = m1 - m0
    return float(0.5 * (torch.trace(torch.linalg.solve(C1, C0)) + d @ torch.linalg.solve(C1, d) - m0.numel()
                        + torch.logdet(C1) - torch.logdet(C0)))


@pytest.fixture(scope="module")
def trained_map():
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # 2000 steps: the map is good enough to make the features collinear
        return ft.train_feature_map("sine", hidden=(50,), steps=2000)


@pytest.mark.slow  # 15-25 s each (trained: 2000 MAP steps first); last-layer's fast exact check: test_exact_posteriors
@pytest.mark.parametrize("features", ["random", "trained"])
def test_svi_default_guide_recovers_exact_posterior_on_collinear_features(features, request):
    """``svi`` with the model's defaults (the principal-axes guide) on the default data, where a full-rank
    guide in w's own coordinates is far off (see pyro_bdl.inference.guides.PrincipalAxesGuide)."""
    options = {} if features == "random" else {"feature_weights": request.getfixturevalue("trained_map")}
    result = pyro_bdl.fit("last-layer", inference="svi", options=options, seed=0, progress=False, samples=2000)
    assert isinstance(result.guide, PrincipalAxesGuide)  # the model's default guide for svi
    mean, cov = ll.posterior_moments(**result.standardized_data, **result.record.options)
    assert np.linalg.cond(cov.numpy()) > 1e5  # the problem is as ill-conditioned as claimed
    Q = result.guide.axes(result.standardized_data["X"]).double()
    store = pyro.get_param_store()
    loc, scale = store["axes.loc"].detach().double(), store["axes.scale"].detach().double()
    q_mean, q_cov = Q @ loc, Q @ torch.diag(scale**2) @ Q.T
    sd = cov.diagonal().sqrt()
    mean_err, sd_err = ((q_mean - mean).abs() / sd).max(), (q_cov.diagonal().sqrt() / sd - 1).abs().max()
    assert mean_err < AXES_MEAN_ALLOWANCE, mean_err
    assert sd_err < AXES_SD_ALLOWANCE, sd_err
    kl = _gaussian_kl(q_mean, q_cov, mean, cov)
    assert kl < AXES_KL_ALLOWANCE, kl
    # the stored draws are the guide's: in its axes, independent N(loc, scale^2) per coordinate
    theta = torch.cat([result.samples["w"].reshape(2000, -1), result.samples["b"].reshape(2000, 1)], 1).double()
    z = (theta @ Q - loc) / scale
    n = z.shape[0]
    assert (z.mean(0).abs() < K / n**0.5).all(), z.mean(0).abs().max()
    assert ((z.std(0) - 1).abs() < K / (2 * n) ** 0.5).all(), (z.std(0) - 1).abs().max()


@pytest.mark.parametrize("data", ["toy", "sine"])
def test_principal_axes_diagonalise_the_exact_posterior(data):
    """The claim the guide rests on: Q^T Sigma_N Q is diagonal, so the family holds the exact posterior.
    Measured largest correlation between two axes: 6e-6 on sine (condition number 4e5)."""
    if data == "toy":
        X, y, options = problem().X, problem().y, OPTIONS
    else:
        ds = pyro_bdl.load("sine")
        X, y, options = (ds.X - ds.X.mean(0)) / ds.X.std(0), (ds.y - ds.y.mean()) / ds.y.std(), {}
    guide = ll.principal_axes_guide(pyro_bdl.get_model("last-layer").bind(options))
    Q = guide.axes(X).double()
    assert torch.allclose(Q.T @ Q, torch.eye(Q.shape[0], dtype=torch.float64), atol=1e-5)
    _, cov = ll.posterior_moments(X, y, **options)
    rotated = Q.T @ cov @ Q
    sd = rotated.diagonal().sqrt()
    corr = rotated / sd[:, None] / sd[None, :] - torch.eye(Q.shape[0], dtype=torch.float64)
    assert corr.abs().max() < 1e-4, corr.abs().max()
    with pytest.raises(TypeError, match="bound last-layer model"):
        ll.principal_axes_guide(ll.last_layer)


def test_principal_axes_are_fixed_by_the_training_inputs():
    """q(theta) does not change with the inputs: after the first call (the training inputs), a call on other
    inputs, as Predictive(model, guide=...)(X_new) makes, draws the same theta from the same seed; and the
    guide and model take a vectorised batch of particles."""
    X_train, X_new = problem().X, torch.linspace(-3, 3, 7).unsqueeze(1).expand(7, 2).contiguous()
    model = pyro_bdl.get_model("last-layer").bind(OPTIONS)
    guide = ll.principal_axes_guide(model)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    on_train = guide(X_train)
    pyro.set_rng_seed(0)
    assert torch.equal(guide(X_new), on_train)
    assert torch.equal(guide.axes(X_new), guide.axes(X_train))
    predictive = pyro.infer.Predictive(model, guide=guide, num_samples=5, parallel=True)(X_new)
    assert predictive["w"].shape == (5, 1, 4) and predictive["y"].shape == (5, 7)  # particles at dim -2
    result = pyro_bdl.fit("last-layer", problem(), inference="svi", options=OPTIONS, progress=False, steps=20,
                          samples=5, particles=3, vectorize=True)
    assert np.isfinite(result.losses).all()


#: svi-meanfield (its mean-field guide in w's own coordinates) on the small, well-conditioned problem:
#: the closed-form mean-field optimum has the exact means and sds 1 / sqrt(Lambda_jj) (Lambda: the exact
#: precision).  Measured over seeds 0-3 from the guide's parameters: means within 0.35 mean-field sd,
#: sds within 6.2%.
MF_MEAN_ALLOWANCE, MF_SD_ALLOWANCE = 0.5, 0.1


@pytest.mark.slow
def test_svi_meanfield_reaches_the_mean_field_optimum():
    result = pyro_bdl.fit("last-layer", problem(), inference="svi-meanfield", options=OPTIONS, seed=0,
                          progress=False, samples=10)
    mean, cov = ll.posterior_moments(**result.standardized_data, **result.record.options)
    mf_sd = torch.linalg.inv(cov).diagonal().rsqrt()
    store = pyro.get_param_store()
    loc = torch.cat([store["mf.w.loc"].detach(), store["mf.b.loc"].detach().reshape(1)]).double()
    sd = torch.nn.functional.softplus(torch.cat([store["mf.w.rho"].detach(), store["mf.b.rho"].detach().reshape(1)])).double()
    assert ((loc - mean).abs() / mf_sd).max() < MF_MEAN_ALLOWANCE
    assert (sd / mf_sd - 1).abs().max() < MF_SD_ALLOWANCE
    assert (mf_sd / cov.diagonal().sqrt()).max() < 0.8  # and that optimum is narrower than the posterior


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # smoke runs; the warnings: test_diagnostics
def test_every_method_runs_on_the_default_data():
    """The registry's methods on sine with a small feature map, on each method's smoke settings (structure
    only: accuracy is tested above; whether a smoke run's diagnostics warn is not what is checked here)."""
    from pyro_bdl.inference import METHODS

    spec = pyro_bdl.get_model("last-layer")
    X = torch.linspace(-2, 2, 5).unsqueeze(1)
    for method in spec.methods:
        quick = METHODS[method].quick
        result = pyro_bdl.fit("last-layer", inference=method, options={"hidden": "3"}, progress=False, **quick)
        assert result.samples["w"].shape[-1] == 3
        assert np.isfinite(result.predict(X)["mean"]).all(), method


# --------------------------------------------------------------------------- the reparameterisation gradient

def _agrees(estimate, se, value) -> bool:
    return bool(((estimate - value).abs() < K * se).all())


def test_reparameterisation_gradient_matches_closed_form():
    ds = problem()
    h1 = 5  # h = 4 weights, then the bias
    m = torch.linspace(-0.5, 0.5, h1, dtype=torch.float64)
    v = torch.full((h1,), 0.3, dtype=torch.float64)
    mc, exact = gradients.expected_loglik_and_grad(ds.X, ds.y, m, v, num_samples=4000, seed=1, **OPTIONS)
    assert _agrees(mc.loglik, mc.loglik_se, exact.loglik)
    assert _agrees(mc.grad_m, mc.grad_m_se, exact.grad_m)
    assert _agrees(mc.grad_v, mc.grad_v_se, exact.grad_v)
    # the same checks have the power to see a wrong answer: a 10% error in the m-gradient; the v-gradient
    # of an estimator that takes v for a variance (theta = m + v^2 eps: 2v times the exact one) or that
    # drops the path through v (zero); the plug-in log-likelihood (no variance term)
    assert not _agrees(mc.grad_m, mc.grad_m_se, 1.1 * exact.grad_m)
    assert not _agrees(mc.grad_v, mc.grad_v_se, 2 * v * exact.grad_v)
    assert not _agrees(mc.grad_v, mc.grad_v_se, torch.zeros_like(exact.grad_v))
    plug_in, _ = gradients.expected_loglik_and_grad(ds.X, ds.y, m, 0 * v, num_samples=2, **OPTIONS)
    assert not _agrees(mc.loglik, mc.loglik_se, plug_in.loglik)


def test_gradient_estimator_is_seeded_and_checks_shapes():
    ds = problem()
    m, v = torch.zeros(5), torch.ones(5)
    a, _ = gradients.expected_loglik_and_grad(ds.X, ds.y, m, v, num_samples=10, seed=3, **OPTIONS)
    b, _ = gradients.expected_loglik_and_grad(ds.X, ds.y, m, v, num_samples=10, seed=3, **OPTIONS)
    assert torch.equal(a.grad_m, b.grad_m)
    with pytest.raises(ValueError, match=r"m and v must have shape \(5,\)"):
        gradients.expected_loglik_and_grad(ds.X, ds.y, torch.zeros(4), torch.ones(4), **OPTIONS)


# --------------------------------------------------------------------------- the feature map

def test_random_features_are_deterministic_and_leave_the_global_rng_alone():
    X = problem().X
    fm._random_layers.cache_clear()
    state = torch.get_rng_state()
    first = fm.features(X, hidden="4,3", feature_seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    fm._random_layers.cache_clear()
    assert torch.equal(first, fm.features(X, hidden=(4, 3), feature_seed=7))  # redrawn, not cached
    assert first.shape == (30, 3)
    assert not torch.equal(first, fm.features(X, hidden="4,3", feature_seed=8))
    assert fm.features(X).shape == (30, 50)  # the default: 50 tanh features


def test_given_feature_weights_are_the_map_they_describe():
    X = problem().X
    A, c = torch.randn(3, 2, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    given = {"activation": "sigmoid", "layers": [{"weight": A.tolist(), "bias": c.tolist()}]}
    assert torch.allclose(fm.features(X.double(), feature_weights=given), torch.sigmoid(X.double() @ A.T + c))
    assert fm.features(X, hidden=3, activation="sigmoid", feature_weights=given).shape == (30, 3)


LAYER = {"weight": [[1.0, 0.0], [0.0, 1.0]], "bias": [0.0, 0.0]}
BAD_OPTIONS = {
    "activation": ({"activation": "swish"}, "unknown activation 'swish'"),
    "hidden": ({"hidden": "0"}, "hidden must be one or more positive widths"),
    # checked by the options' domains before the model runs (issue 19)
    "feature_seed": ({"feature_seed": -1}, "option 'feature_seed' of model 'last-layer' must be a whole number >= 0, got -1"),
    "feature_scale": ({"feature_scale": 0.0}, "option 'feature_scale' of model 'last-layer' must be a finite number > 0"),
    "noise": ({"noise": 0.0}, "option 'noise' of model 'last-layer' must be a finite number > 0, got 0.0"),
    "weights format": ({"feature_weights": [LAYER]}, "feature_weights must be"),
    "weights text": ({"feature_weights": {"activation": "tanh", "layers": [{"weight": "eye", "bias": [0.0, 0.0]}]}},
                     "of lists or tensors"),
    "weights inputs": ({"feature_weights": {"activation": "tanh", "layers": [{"weight": [[1.0]], "bias": [0.0]}]}},
                       "layer 0 takes 1 inputs but X has 2 column"),
    "weights chain": ({"feature_weights": {"activation": "tanh", "layers": [LAYER, {"weight": [[1.0]], "bias": [0.0]}]}},
                      "layer 1 takes 1 inputs but layer 0 has 2 outputs"),
    "weights nan": ({"feature_weights": {"activation": "tanh", "layers": [{**LAYER, "bias": [0.0, float("nan")]}]}},
                    "NaN or infinite"),
    "weights vs hidden": ({"feature_weights": {"activation": "tanh", "layers": [LAYER]}, "hidden": "5"},
                          r"hidden=\(5,\) disagrees with the widths \(2,\)"),
    "weights vs activation": ({"feature_weights": {"activation": "tanh", "layers": [LAYER]}, "activation": "relu"},
                              "activation='relu' disagrees"),
}


@pytest.mark.parametrize("case", BAD_OPTIONS)
def test_bad_options_give_clear_errors(case):
    options, message = BAD_OPTIONS[case]
    with pytest.raises(ValueError, match=message):
        pyro_bdl.fit("last-layer", problem(), inference="map", options=options, progress=False, steps=1)


def test_unknown_option_and_bad_weights_file(tmp_path):
    with pytest.raises(ValueError, match="unknown option 'width'"):
        pyro_bdl.fit("last-layer", problem(), inference="map", options={"width": 3}, progress=False, steps=1)
    with pytest.raises(ValueError, match="no such file or fit directory"):
        pyro_bdl.get_model("last-layer").resolve_options({"feature_weights": str(tmp_path / "nope.json")})


# --------------------------------------------------------------------------- a trained feature map, saved and loaded

@pytest.mark.slow
def test_trained_feature_map_survives_write_and_load(tmp_path):
    """A given feature map travels as the model's parameters: params.pt holds its layers, metrics.json and the
    NetCDF attributes only a pointer, and the loaded fit predicts the same."""
    ds = problem()
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # 300 steps: short on purpose
        phi = ft.train_feature_map(ds, hidden=(4,), activation="tanh", steps=300)
    assert json.loads(json.dumps(phi)) == phi  # JSON-able, for a file the command line reads
    result = pyro_bdl.fit("last-layer", ds, inference="importance", options={"feature_weights": phi, "noise": 0.5},
                          progress=False, samples=500)
    assert result.record.options["feature_weights"] == phi
    # the map is the trained net's hidden layer on the standardised inputs
    A, c = (torch.tensor(phi["layers"][0][k], dtype=torch.float64) for k in ("weight", "bias"))
    X = result.standardized_data["X"].double()
    assert torch.allclose(fm.features(X, feature_weights=phi), torch.tanh(X @ A.T + c))
    pyro_bdl.store.write_fit(result, tmp_path / "fit", plots=False)
    saved = torch.load(tmp_path / "fit" / "params.pt", weights_only=True)
    assert torch.equal(saved["phi.0.weight"], A) and torch.equal(saved["phi.0.bias"], c)
    on_disk = {"activation": "tanh", "layers": "params.pt"}
    assert json.loads((tmp_path / "fit" / "metrics.json").read_text())["options"]["feature_weights"] == on_disk
    back = pyro_bdl.load_fit(tmp_path / "fit")
    assert back.record.options["feature_weights"] == on_disk
    new = torch.linspace(-3, 3, 7).unsqueeze(1).repeat(1, 2)
    pyro.clear_param_store()  # what the store holds now does not matter: the fit runs with its own parameters
    pd.testing.assert_frame_equal(result.predict(new)[["mean", "sd"]], back.predict(new)[["mean", "sd"]])
    # outside its fit the loaded model says where its map is
    with pytest.raises(ValueError, match="params.pt"):
        back.model(X=new)

    # the command line takes the same map from a JSON file, and predicts from the saved fit
    (tmp_path / "phi.json").write_text(json.dumps(phi))
    pd.DataFrame({"x0": ds.X[:, 0], "x1": ds.X[:, 1], "y": ds.y}).to_csv(tmp_path / "train.csv", index=False)
    out = tmp_path / "cli"
    assert main(["fit", "last-layer", "--inference", "map", "--data", str(tmp_path / "train.csv"), "--target", "y",
                 "--option", f"feature_weights={tmp_path / 'phi.json'}", "--option", "noise=0.5", "--steps", "200",
                 "--out", str(out), "--no-progress", "--test-fraction", "0"]) == 0
    assert json.loads((out / "metrics.json").read_text())["options"]["feature_weights"] == on_disk
    assert torch.equal(torch.load(out / "params.pt", weights_only=True)["phi.0.weight"].float(), A.float())
    assert main(["predict", str(out), "--data", str(tmp_path / "train.csv"),
                 "--out", str(tmp_path / "pred.csv")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "pred.csv")[["mean"]],
                                  pyro_bdl.load_fit(out).predict(ds.X)[["mean"]].reset_index(drop=True), rtol=1e-5)


def test_random_feature_map_is_a_parameter_of_the_model():
    """Random features are the model's parameters too (saved with a fit), fixed: no gradient reaches them."""
    ds = problem()
    pyro.clear_param_store()
    tr = pyro.poutine.trace(ll.last_layer).get_trace(ds.X, ds.y, hidden=(3,))
    assert tr.nodes["phi.0.weight"]["type"] == "param" and tr.nodes["phi.0.weight"]["value"].shape == (3, 2)
    w = tr.nodes["w"]["value"].requires_grad_()
    pyro.poutine.trace(pyro.poutine.condition(ll.last_layer, {"w": w})).get_trace(ds.X, ds.y, hidden=(3,)) \
        .log_prob_sum().backward()
    assert w.grad is not None and pyro.param("phi.0.weight").grad is None and pyro.param("phi.0.bias").grad is None
    result = pyro_bdl.fit("last-layer", problem(), inference="map", options=OPTIONS, progress=False, steps=300)
    assert torch.equal(result.params["phi.0.weight"], fm._random_layers(2, (4,), 0, 2.0)[0][0])


@pytest.mark.slow
def test_feature_map_from_a_fitted_network_directory(tmp_path):
    """``--option feature_weights=DIR``: the hidden layers of a map bnn-regressor fitted by the CLI,
    the same map train_feature_map gives for the same data, seed and settings."""
    ds = problem()
    pd.DataFrame({"x0": ds.X[:, 0], "x1": ds.X[:, 1], "y": ds.y}).to_csv(tmp_path / "train.csv", index=False)
    data = ["--data", str(tmp_path / "train.csv"), "--target", "y", "--no-progress", "--test-fraction", "0"]
    net = tmp_path / "net"
    assert main(["fit", "bnn-regressor", "--inference", "map", "--option", "hidden=4", "--option", "activation=tanh",
                 "--option", "prior_scale=2", "--steps", "300", "--out", str(net), *data]) == 0
    out = tmp_path / "ll"
    assert main(["fit", "last-layer", "--inference", "map", "--option", f"feature_weights={net}",
                 "--option", "noise=0.5", "--out", str(out), *data]) == 0
    saved = torch.load(out / "params.pt", weights_only=True)
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # 300 steps: short on purpose
        want = ft.train_feature_map(pyro_bdl.load(str(tmp_path / "train.csv"), target="y"), hidden=(4,), steps=300)
    assert json.loads((out / "metrics.json").read_text())["options"]["feature_weights"]["activation"] == "tanh"
    assert sorted(saved) == ["phi.0.bias", "phi.0.weight"]
    np.testing.assert_allclose(saved["phi.0.weight"], want["layers"][0]["weight"], rtol=1e-5, atol=1e-6)
    # only a point estimate of bnn-regressor is a feature map
    svi = tmp_path / "svi"
    assert main(["fit", "bnn-regressor", "--inference", "svi", "--option", "hidden=4", "--steps", "5",
                 "--samples", "5", "--out", str(svi), *data]) == 0
    with pytest.raises(ValueError, match=r"point-estimate \(map or mle\) fit of a network regressor \(bnn-regressor\); this fit is bnn-regressor with svi"):
        pyro_bdl.get_model("last-layer").resolve_options({"feature_weights": str(svi)})


@pytest.mark.slow
def test_describe_and_default_cli_fit(tmp_path, capsys):
    assert main(["describe", "last-layer"]) == 0
    text = capsys.readouterr().out
    assert "feature_weights = None" in text and "Sample sites (default options): w, b" in text and "train_feature_map" in text
    out = tmp_path / "run"
    assert main(["fit", "last-layer", "--inference", "importance", "--samples", "300", "--option", "hidden=5",
                 "--out", str(out), "--no-progress"]) == 0
    assert (out / "posterior.nc").exists()
    (tmp_path / "new.csv").write_text("x\n-1\n0\n1\n")
    assert main(["predict", str(out), "--data", str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "p.csv")) == 3



# --------------------------------------------------------------------------- the dense mass matrix

def collinear_problem(n: int = 40) -> Dataset:
    """A 1-D input: random tanh features of it are nearly collinear (a badly conditioned posterior)."""
    rng = np.random.default_rng(2)
    x = np.sort(rng.uniform(-1, 1, size=n))
    y = np.sin(3 * x) + 0.1 * rng.normal(size=n)
    return Dataset("collinear", torch.tensor(x[:, None], dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                   ["x"], "y")


@pytest.mark.parametrize("given,expected", [(None, True), ("false", False), (True, True)])
def test_nuts_full_mass_is_the_model_default_and_reaches_the_kernel(given, expected, monkeypatch):
    """The model's default (or the user's setting, text included) is what Pyro's NUTS is built with.
    (tests/test_exact_posteriors.py runs NUTS with the default against the exact posterior.)"""
    from pyro_bdl.inference.mcmc import methods as mcmc

    built = []

    def recording_nuts(*args, **kwargs):
        built.append(kwargs["full_mass"])
        return NUTS(*args, **kwargs)

    monkeypatch.setattr(mcmc, "NUTS", recording_nuts)
    settings = {} if given is None else {"full_mass": given}
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="only one chain"):  # 5 draws: only the kernel is read
        pyro_bdl.fit("last-layer", problem(), inference="nuts", options=OPTIONS, progress=False,
                     samples=5, warmup=5, chains=1, kernel="pyro", **settings)
    assert built == [expected]


@pytest.mark.slow  # about a minute
@pytest.mark.filterwarnings("default::pyro_bdl.ConvergenceWarning")  # slow, not yet run with the warning as an error: shown, not hidden
def test_nuts_full_mass_mixes_on_collinear_features():
    """A dense mass matrix recovers the exact posterior on collinear features with short trajectories
    (about 7 leapfrog steps per draw), where the diagonal one runs into a depth-7 cap (127)."""
    options = {"hidden": "10", "noise": 0.2}
    # the diagonal run is short and its trees capped at depth 7 (127 steps): its depth is all we read
    settings = {True: {"samples": 300, "warmup": 300, "chains": 2},
                False: {"samples": 50, "warmup": 200, "chains": 1, "max_tree_depth": 7}}
    runs = {full_mass: pyro_bdl.fit("last-layer", collinear_problem(), inference="nuts", options=options, seed=0,
                                    progress=False, full_mass=full_mass, **settings[full_mass])
            for full_mass in (True, False)}
    dense = runs[True]
    exact = ll.exact_posterior(**dense.standardized_data, **dense.record.options)
    check_means(dense, exact)
    check_sds(dense, exact)
    depth = {k: float(np.mean(r.sample_stats["n_steps"])) for k, r in runs.items()}
    assert depth[True] < 0.5 * depth[False], depth


def test_boolean_settings_are_checked():
    with pytest.raises(ValueError, match="boolean setting"):
        pyro_bdl.fit("last-layer", problem(), inference="nuts", options=OPTIONS, full_mass="maybe", progress=False,
                     samples=5, warmup=5, chains=1)


def test_zoo_nuts_traces_the_model_with_a_given_feature_map():
    """The feature map is checked at the model's first call only: later calls have no data-dependent branch, so
    the zoo kernel traces the potential (no fallback warning) with given weights and a dense mass matrix."""
    import warnings

    from pyro_bdl.inference.mcmc.potential import PotentialCompileWarning

    ds = problem()
    phi = {"activation": "tanh", "layers": [{"weight": torch.randn(4, 2).tolist(), "bias": torch.zeros(4).tolist()}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", PotentialCompileWarning)
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)  # a short run: tracing is what is checked
        fit = pyro_bdl.fit("last-layer", ds, inference="nuts", options={"feature_weights": phi, "noise": 0.5},
                           progress=False, samples=20, warmup=60, chains=1)
    assert fit.info.slower_path is None  # a fit holds the warning back and says it here
    assert fit.samples["w"].shape == (1, 20, 4)
