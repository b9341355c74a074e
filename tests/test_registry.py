"""The model contract: models are programs over named data, methods declare what they need, and the
table of supported pairs, the sample sites and the resolved settings are computed, never listed."""

from __future__ import annotations

import json

import pytest
import torch

import pyro_bdl
from pyro_bdl.inference import METHODS, get_method
from pyro_bdl.registry import list_models, resolve


def test_supported_pairs_follow_from_traits_and_requirements():
    for spec in list_models():
        for name, method in METHODS.items():
            suits = method.requires <= spec.inference.traits and not method.refuses & spec.inference.traits
            stand_in = [m.name for m in METHODS.values() if m.answers_for == name and m.suits(spec.inference.traits)]
            assert (name in spec.methods) == (suits or bool(stand_in)), (spec.name, name)
            assert spec.runs_as(name) == (name if suits or not stand_in else stand_in[0]) if name in spec.methods else True
    assert "mc-dropout" in pyro_bdl.get_model("bnn-regressor").methods
    assert "mc-dropout" not in pyro_bdl.get_model("blr").methods
    with pytest.raises(ValueError, match="does not support inference 'metropolis' .*low-dimensional"):
        resolve(pyro_bdl.get_model("bnn-regressor"), "metropolis")
    # an improper prior (sparse VD's log-uniform) rules out the samplers and mode finders, not the variational fits
    assert set(pyro_bdl.get_model("sparse-vd").methods) == {"svi-meanfield", "mle"}
    with pytest.raises(ValueError, match="does not support inference 'nuts' .*refuses a model that is improper-prior"):
        resolve(pyro_bdl.get_model("sparse-vd"), "nuts")


def test_every_method_is_registered_by_the_module_that_runs_it():
    for method in METHODS.values():
        runner = getattr(method.run, "func", method.run)  # functools.partial for the MCMC kernels
        assert runner.__module__.startswith("pyro_bdl.inference."), method.name


def test_sample_sites_are_read_from_a_trace_with_the_options_given():
    """The sites follow the options (hand-written lists were wrong for non-default ones)."""
    bnn = pyro_bdl.get_model("bnn-regressor")
    assert bnn.sites() == ["layer0.weight", "layer0.bias", "layer1.weight", "layer1.bias", "sigma"]
    deeper = bnn.sites({"hidden": "5,5", "noise": "0.1"})
    assert "layer2.weight" in deeper and "sigma" not in deeper
    assert pyro_bdl.get_model("blr").sites({"noise": 0.5}) == ["w", "b"]


def test_math_is_the_model_modules_docstring():
    import pyro_bdl.models.coin as coin

    spec = pyro_bdl.get_model("coin")
    assert spec.math and spec.math in coin.__doc__ and "Example" not in spec.math


def test_resolved_settings_are_typed():
    plan = resolve(None, "svi", settings={"jit": "false", "vectorize": "1", "steps": "12", "lr": "0.5"})
    assert plan.settings["jit"] is False and plan.settings["vectorize"] is True
    assert plan.settings["steps"] == 12 and isinstance(plan.settings["steps"], int)
    with pytest.raises(ValueError, match="setting 'jit' of inference 'svi'.*true or false"):
        resolve(None, "svi", settings={"jit": "maybe"})
    with pytest.raises(ValueError, match="takes no guide"):
        resolve(None, "nuts", guide="normal")


def test_metrics_write_every_json_safe_entry_of_the_records(tmp_path):
    """No allow-list: whatever a model reports of itself, and every field of the method's records, reaches
    metrics.json, JSON-safe."""
    from pyro_bdl.store import write_fit

    fit = pyro_bdl.fit("coin", inference="map", steps=50, progress=False)
    fit.report["a_new_models_report"] = {"value": 1.5, "nan": float("nan"), "tensor": torch.ones(())}
    write_fit(fit, tmp_path / "out", plots=False)
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert written["a_new_models_report"] == {"value": 1.5, "nan": None, "tensor": 1.0}
    assert written["p_next_heads"] == fit.report["p_next_heads"]
    assert set(fit.info.to_metrics()) | set(fit.diagnostics.to_metrics()) <= set(written)


def test_unsupervised_program_over_named_data(tmp_path):
    """A user's model with no target and one local latent per data point fits; the method's defaults
    resolve the same way as for the zoo."""
    import pyro
    import pyro.distributions as dist

    def mixture_free_density(x=None, n=None):
        mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
        with pyro.plate("data", len(x) if x is not None else n):
            pyro.sample("x", dist.Normal(mu, 1.0), obs=x)

    x = torch.randn(30) + 2.0
    fit = pyro_bdl.fit(mixture_free_density, {"x": x}, inference="map", steps=300, lr=0.1, progress=False)
    assert abs(float(fit.posterior_mean("mu")) - float(x.mean())) < 0.1
    assert fit.point_estimate and get_method("map").point_estimate


def _offset_model(X, y=None):
    """y_i ~ N(c + w x_i, 0.1^2) with w ~ N(0, 1) and a learned (not sampled) offset c: a pyro.param site."""
    import pyro
    import pyro.distributions as dist

    c = pyro.param("offset.c", torch.tensor(0.0))
    w = pyro.sample("w", dist.Normal(0.0, 1.0))
    with pyro.plate("data", X.shape[0]):
        return pyro.sample("y", dist.Normal(c + w * X[:, 0], 0.1), obs=y)


@pytest.mark.slow
def test_learned_parameters_are_saved_with_the_fit_and_restored(tmp_path):
    """A model's pyro.param sites travel in params.pt (read back with weights_only) and predictions use the
    fit's own values, whatever another fit has put in Pyro's param store since."""
    import pyro

    from pyro_bdl.registry import _REGISTRY, ModelSpec, register
    from pyro_bdl.store import PARAMS, write_fit

    register(ModelSpec(name="test-offset", model=_offset_model, summary="test", options={}, default_data="linear"))
    try:
        X = torch.linspace(-1, 1, 40).unsqueeze(1)
        data = pyro_bdl.Dataset("offset", X, 3.0 + 0.5 * X[:, 0], ["x"], "y")
        fit = pyro_bdl.fit("test-offset", data, inference="map", steps=1500, lr=0.05, progress=False)
        assert set(fit.params) == {"offset.c"} and abs(float(fit.params["offset.c"]) - 3.0) < 0.05
        before = fit.predict(X[:5])["mean"].to_numpy()
        pyro.clear_param_store()
        pyro.param("offset.c", torch.tensor(-100.0))  # another fit's value under the same name
        assert fit.predict(X[:5])["mean"].to_numpy() == pytest.approx(before, abs=1e-5)
        write_fit(fit, tmp_path / "fit", plots=False)
        assert (tmp_path / "fit" / PARAMS).exists()
        back = pyro_bdl.load_fit(tmp_path / "fit")
        assert torch.equal(back.params["offset.c"], fit.params["offset.c"])
        assert back.predict(X[:5])["mean"].to_numpy() == pytest.approx(before, abs=1e-5)
    finally:
        _REGISTRY.pop("test-offset", None)


@pytest.mark.parametrize("choices, message", [
    ({"method_defaults": {"svi-meanfeld": {"steps": 10}}}, "method_defaults for 'svi-meanfeld', which is not an inference"),
    ({"method_defaults": {"svi": {"stepz": 10}}}, r"method_defaults\['svi'\]: unknown setting 'stepz'"),
    ({"method_defaults": {"svi": {"lr": -1}}}, r"method_defaults\['svi'\]: setting 'lr' of inference 'svi' must be"),
    ({"method_kwargs": {"mc-dropout": {}}}, "method_kwargs for 'mc-dropout', a method that does not suit it"),
    ({"default_guides": {"nuts": "normal"}}, "a default guide for 'nuts', which takes no guide"),
    ({"default_method": "nust"}, "declares default_method 'nust', which is not an inference method that suits it"),
])
def test_method_keyed_choices_are_checked_when_a_model_registers(choices, message):
    """A misspelt method or setting in a model's choices is an error at registration (it was silently ignored)."""
    from pyro_bdl.registry import _REGISTRY, InferenceChoices, ModelSpec, register

    spec = ModelSpec("registry-check", lambda X, y=None: None, "", {}, "linear",
                     inference=InferenceChoices(traits=frozenset({"continuous", "low-dimensional"}), **choices))
    with pytest.raises(ValueError, match=message):
        register(spec)
    assert "registry-check" not in _REGISTRY


def test_every_zoo_model_declares_a_task_and_a_default_method():
    from pyro_bdl.data.task import Task

    for spec in list_models():
        assert isinstance(spec.data.task, Task), spec.name
        assert spec.default_method in spec.methods
    assert pyro_bdl.get_model("blr").default_method == "nuts"
    assert pyro_bdl.get_model("vae").default_method == "svi"  # SVI, as the lecture and Pyro call it, which on a
    assert pyro_bdl.get_model("vae").runs_as("svi") == "svi-amortised"  # model with its own encoder is the minibatch loop
    assert pyro_bdl.get_model("gp-classifier").default_method == "svi"  # its own choice: nuts would take minutes



def test_sites_of_one_model_after_another_with_parameters_of_the_same_names():
    """``pyro-bdl describe sparse-vd`` then ``describe sparse-vd-lenet5`` in one process: the second trace must not
    read the first's ``layer0.bias`` (300 units) left in the param store (it raised a shape error)."""
    assert pyro_bdl.get_model("sparse-vd").sites()[0] == "layer0.weight"
    assert pyro_bdl.get_model("sparse-vd-lenet5").sites()[:2] == ["conv0.weight", "conv1.weight"]
