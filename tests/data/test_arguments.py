"""A user's data in the forms a user has it (pyro_bdl/data/arguments.py), bound to any Pyro program, and what the
engine does with a program's own parameters, Pyro's setting names and a fit saved to disk."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide import init_to_value
from torch.distributions import constraints

import pyro_bdl
from pyro_bdl.data.arguments import BoundModel, as_argument, bind_arguments

# What is tested here is how data and settings reach the program; the values that are checked come from runs long
# enough for them (MAP to float32 precision), and the short runs' convergence warnings are not the point.
pytestmark = pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")

X = np.linspace(-1.0, 1.0, 40)
Y = 1.0 + 2.0 * X + 0.3 * np.random.default_rng(0).standard_normal(40)


def regression(x, y=None):
    """a, b ~ N(0, 10^2); y_i ~ N(a + b x_i, 0.3^2): the posterior is Gaussian, its mean the ridge solution."""
    a = pyro.sample("a", dist.Normal(0.0, 10.0))
    b = pyro.sample("b", dist.Normal(0.0, 10.0))
    with pyro.plate("data", len(x)):
        return pyro.sample("y", dist.Normal(a + b * x, 0.3), obs=y)


def _exact_mean():
    phi = np.stack([np.ones_like(X), X], 1)
    precision = phi.T @ phi / 0.09 + np.eye(2) / 100
    return np.linalg.solve(precision, phi.T @ Y / 0.09)


# ---- the forms of data -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["tensors", "numpy", "pandas series", "dataframe", "tuple", "list of lists"])
def test_every_form_of_data_gives_the_same_map(form):
    data = {
        "tensors": {"x": torch.tensor(X, dtype=torch.float32), "y": torch.tensor(Y, dtype=torch.float32)},
        "numpy": {"x": X, "y": Y},
        "pandas series": {"x": pd.Series(X), "y": pd.Series(Y)},
        "dataframe": pd.DataFrame({"x": X, "y": Y}),
        "tuple": (X, Y),
        "list of lists": {"x": X.tolist(), "y": Y.tolist()},
    }[form]
    fit = pyro_bdl.fit(regression, data, inference="map", steps=300, lr=0.1, progress=False)
    # the MAP of a Gaussian posterior is its mean: float32 optimisation error only
    np.testing.assert_allclose([float(fit.samples["a"]), float(fit.samples["b"])], _exact_mean(), atol=2e-3)
    assert fit.data["x"].dtype == torch.get_default_dtype()


def test_conversion_keeps_integers_and_booleans_and_refuses_text():
    assert as_argument("k", np.array([1, 2])).dtype == torch.int64
    assert as_argument("m", pd.Series([True, False])).dtype == torch.bool
    assert as_argument("n", np.int32(8)) == 8 and isinstance(as_argument("n", np.int32(8)), int)
    assert as_argument("name", "centred") == "centred"
    with pytest.raises(pyro_bdl.DataError, match="argument 'country' is a pandas column of (object|str)"):
        as_argument("country", pd.Series(["a", "b"]))
    with pytest.raises(pyro_bdl.DataError, match="argument 'group'.*category"):
        as_argument("group", pd.Series(["a", "b"], dtype="category"))
    with pytest.raises(pyro_bdl.DataError, match="takes 2 positional argument"):
        bind_arguments(regression, (X, Y, Y))


def test_nan_in_numpy_data_names_the_argument():
    y = Y.copy()
    y[3] = np.nan
    with pytest.raises(pyro_bdl.DataError, match="'y' holds 1 NaN"):
        pyro_bdl.fit(regression, {"x": X, "y": y}, inference="map", progress=False)


def _eight_schools_as_pyro_writes_it(sigma):
    """Pyro's examples/eight_schools/mcmc.py: batch dimensions outside any plate, data bound by a function whose
    first argument is called ``model``."""
    eta = pyro.sample("eta", dist.Normal(torch.zeros(8), torch.ones(8)))
    mu = pyro.sample("mu", dist.Normal(torch.zeros(1), 10 * torch.ones(1)))
    tau = pyro.sample("tau", dist.HalfCauchy(scale=25 * torch.ones(1)))
    return pyro.sample("obs", dist.Normal(mu + tau * eta, sigma))


def conditioned_model(model, sigma, y):
    return pyro.poutine.condition(model, data={"obs": y})(sigma)


SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
SCHOOLS = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])


def test_an_argument_named_model_does_not_clash_and_unplated_sites_run_under_an_elbo():
    data = {"model": _eight_schools_as_pyro_writes_it, "sigma": SIGMA, "y": SCHOOLS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)  # a short run: the binding is what is tested
        svi = pyro_bdl.fit(conditioned_model, data, inference="svi", steps=300, samples=100, progress=False)
        positional = pyro_bdl.fit(conditioned_model, (_eight_schools_as_pyro_writes_it, SIGMA, SCHOOLS),
                                  inference="svi", steps=300, samples=100, progress=False)
    assert isinstance(svi.model, BoundModel) and svi.model.call_names()["model_"] == "model"
    # the same program, data and seed: the same draws, whichever form the data came in
    torch.testing.assert_close(svi.samples["mu"], positional.samples["mu"])
    # the pointwise log-likelihood is per school (the model as written), not the summed event the ELBO ran on
    assert svi.to_inference_data().log_likelihood["obs"].shape == (1, 100, 8)


def test_a_program_taking_star_args_gets_its_values_by_position():
    def model(*args):
        x, y = args
        return regression(x, y)

    fit = pyro_bdl.fit(model, (X, Y), inference="map", steps=1500, lr=0.05, progress=False)
    np.testing.assert_allclose([float(fit.samples["a"]), float(fit.samples["b"])], _exact_mean(), atol=2e-3)
    assert sorted(fit.data) == ["args_0", "args_1"]


@pytest.mark.parametrize("new", ["tensor", "numpy", "tuple", "dict", "dataframe"])
def test_predict_takes_the_forms_the_fit_takes(new):
    fit = pyro_bdl.fit(regression, (X, Y), inference="map", steps=300, lr=0.05, progress=False)
    grid = np.array([-0.5, 0.0, 0.5])
    given = {"tensor": torch.tensor(grid), "numpy": grid, "tuple": (grid,), "dict": {"x": grid},
             "dataframe": pd.DataFrame({"x": grid})}[new]
    table = fit.predict(given)
    a, b = float(fit.samples["a"]), float(fit.samples["b"])
    np.testing.assert_allclose(table["mean"], a + b * grid, rtol=1e-5, atol=1e-5)


# ---- a program's own parameters ------------------------------------------------------------------------------------

def coin_with_a_param(data):
    """The intro tutorial's form: the coin's bias a pyro.param, no latent site; its MLE is the mean of the flips."""
    f = pyro.param("f", torch.tensor(0.5), constraint=constraints.unit_interval)
    with pyro.plate("flips", len(data)):
        pyro.sample("obs", dist.Bernoulli(f), obs=data)


FLIPS = torch.tensor([1.0] * 7 + [0.0] * 13)


@pytest.mark.parametrize("method", ["mle", "map", "svi"])
def test_a_model_of_pyro_params_only_is_fitted_by_optimisation(method):
    fit = pyro_bdl.fit(coin_with_a_param, {"data": FLIPS}, inference=method, steps=1000, lr=0.05, progress=False)
    assert abs(float(fit.params["f"]) - 0.35) < 2e-3
    assert fit.samples == {} and fit.num_draws == 0
    idata = fit.to_inference_data()
    # the log-likelihood at the fitted parameter, one draw
    expected = np.where(FLIPS.numpy() == 1, math.log(float(fit.params["f"])), math.log(1 - float(fit.params["f"])))
    np.testing.assert_allclose(idata.log_likelihood["obs"].values.reshape(-1), expected, rtol=1e-5)
    assert len(fit.predict({"data": torch.zeros(4)})) == 4


def test_a_sampler_refuses_a_model_of_params_only_and_warns_beside_latents():
    with pytest.raises(ValueError, match=r"only pyro.param sites \(f\), which 'nuts' does not fit.*mle"):
        pyro_bdl.fit(coin_with_a_param, {"data": FLIPS}, inference="nuts", progress=False)

    def mixed(x, y=None):
        s = pyro.param("s", torch.tensor(1.0), constraint=constraints.positive)
        a = pyro.sample("a", dist.Normal(0.0, 10.0))
        with pyro.plate("data", len(x)):
            pyro.sample("y", dist.Normal(a + x, s), obs=y)

    with pytest.warns(UserWarning, match=r"pyro.param sites \(s\) are held at their initial values by 'nuts'"):
        fit = pyro_bdl.fit(mixed, (X, Y), inference="nuts", samples=100, warmup=100, progress=False)
    assert float(fit.params["s"]) == 1.0
    fit = pyro_bdl.fit(mixed, (X, Y), inference="map", steps=1500, lr=0.05, progress=False)
    residual = Y - X - float(fit.samples["a"])
    assert abs(float(fit.params["s"]) - residual.std()) < 0.01  # the ML noise sd at the fitted mean


@pytest.mark.slow
def test_compare_loo_says_why_a_point_fit_is_left_out():
    nuts = pyro_bdl.fit(regression, (X, Y), inference="nuts", samples=200, warmup=200, progress=False)
    point = pyro_bdl.fit(regression, (X, Y), inference="map", steps=300, progress=False)
    with pytest.warns(UserWarning, match="leaves out map: a point estimate has no posterior draws"):
        with pytest.raises(ValueError, match="needs at least two fits with 100 or more posterior draws"):
            pyro_bdl.compare_loo({"nuts": nuts, "map": point})
    svi = pyro_bdl.fit(regression, (X, Y), inference="svi", steps=500, samples=200, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = pyro_bdl.compare_loo({"nuts": nuts, "svi": svi})
    assert sorted(table.index) == ["nuts", "svi"]
    # ArviZ's use of a keyword pandas deprecates is not shown: nothing a user could change
    assert not [w for w in caught if "inplace" in str(w.message)]


def test_a_guides_one_chain_prints_no_arviz_shape_warning(capfd):
    fit = pyro_bdl.fit(regression, (X, Y), inference="svi", steps=200, samples=100, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        fit.summary()
    assert "Shape validation failed" not in capfd.readouterr().err


# ---- Pyro's names, where to start ----------------------------------------------------------------------------------

def test_pyros_setting_names_are_ours():
    fit = pyro_bdl.fit(regression, (X, Y), inference="nuts", num_samples=150, warmup_steps=100, num_chains=2,
                       progress=False)
    assert fit.samples["a"].shape == (2, 150) and fit.record.settings["warmup"] == 100
    with pytest.raises(ValueError, match="setting 'samples' is given twice"):
        pyro_bdl.fit(regression, (X, Y), inference="nuts", num_samples=150, samples=100, progress=False)


def test_init_loc_fn_sets_where_map_starts_and_is_refused_where_nothing_starts():
    start = init_to_value(values={"a": torch.tensor(1.0), "b": torch.tensor(2.0)})
    fit = pyro_bdl.fit(regression, (X, Y), inference="map", steps=1, lr=1e-6, init_loc_fn=start, progress=False)
    assert abs(float(fit.samples["a"]) - 1.0) < 1e-4 and abs(float(fit.samples["b"]) - 2.0) < 1e-4
    with pytest.raises(ValueError, match="init_loc_fn .* is not a setting of inference 'nuts'"):
        pyro_bdl.fit(regression, (X, Y), inference="nuts", init_loc_fn=start, progress=False)


# ---- a fit of a user's program on disk -----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_user_fit_is_saved_and_loaded_with_its_program(tmp_path):
    data = {"model": _eight_schools_as_pyro_writes_it, "sigma": SIGMA, "y": SCHOOLS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        fit = pyro_bdl.fit(conditioned_model, data, inference="svi", steps=200, samples=100, progress=False)
    pyro_bdl.write_fit(fit, tmp_path / "fit", plots=False)
    with pytest.raises(pyro_bdl.FitDirectoryError, match="load it with load_fit\\(path, model=conditioned_model\\)"):
        pyro_bdl.load_fit(tmp_path / "fit")
    with pytest.raises(ValueError, match="argument\\(s\\) model could not be stored"):
        pyro_bdl.load_fit(tmp_path / "fit", model=conditioned_model)
    again = pyro_bdl.load_fit(tmp_path / "fit", model=conditioned_model, data={"model": _eight_schools_as_pyro_writes_it})
    torch.testing.assert_close(again.samples["mu"], fit.samples["mu"])
    np.testing.assert_allclose(again.predict()["mean"], fit.predict()["mean"], rtol=1e-5)
    new_sigma = {"model": _eight_schools_as_pyro_writes_it, "sigma": SIGMA * 2, "y": None}
    assert np.all(again.predict(new_sigma)["aleatoric_sd"].to_numpy() > 17)


def test_a_zoo_fit_is_loaded_without_a_program(tmp_path):
    fit = pyro_bdl.fit("blr", "linear", inference="map", steps=100, progress=False)
    pyro_bdl.write_fit(fit, tmp_path / "fit", plots=False)
    with pytest.raises(ValueError, match="zoo model 'blr': load it without model="):
        pyro_bdl.load_fit(tmp_path / "fit", model=regression)
