"""Natural gradients for a conjugate Gaussian site (pyro_bdl.inference.natural_gradient), on the sparse GP's
whitened inducing values: one full-batch step of size 1 is the optimal q(v); the setting's errors; a model without a
conjugate site fits as it did."""

import pyro
import pytest
import torch

import pyro_bdl
from pyro_bdl.inference.natural_gradient import NaturalGaussianGuide
from pyro_bdl.nn.kernels import parse_kernel
from pyro_bdl.nn.sparse_gp import whitened_projection

FIXED = {"approximation": "svgp", "inducing": 10, "learn_inducing": False, "noise": 0.1,
         "fixed": "lengthscale=0.3,variance=1.5"}


def _data(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 1, generator=g, dtype=torch.float64)
    return {"X": X, "y": torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)}


def test_one_full_batch_step_of_size_one_is_the_optimal_q():
    data = _data()
    pyro_bdl.fit("gp", data, inference="svi", options=FIXED, steps=1, samples=5, natural_gradient=1.0, lr_hold=1.0,
                 progress=False)
    store = pyro.get_param_store()
    Z = store["inducing_inputs"].detach().double()
    k, h = parse_kernel("rbf"), {"lengthscale": torch.tensor([0.3], dtype=torch.float64),
                                 "variance": torch.tensor(1.5, dtype=torch.float64)}
    A, _ = whitened_projection(k.matrix(Z, Z, h), k.matrix(Z, data["X"], h), k.diagonal(data["X"], h))
    precision = torch.eye(10, dtype=torch.float64) + A @ A.T / 0.01
    mean = torch.linalg.solve(precision, A @ (data["y"] - data["y"].mean()) / 0.01)
    shift_name, precision_name = NaturalGaussianGuide.names("inducing_values")
    assert torch.allclose(store[precision_name], precision, rtol=1e-10, atol=1e-8)
    assert torch.allclose(torch.linalg.solve(store[precision_name], store[shift_name]), mean, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("settings,message", [
    ({"natural_gradient": 2.0}, "natural_gradient.*a step in \\(0, 1\\]"),
    ({"natural_gradient": 0.1, "jit": True}, "cannot be used with jit=true"),
])
def test_what_natural_gradients_cannot_do_is_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        pyro_bdl.fit("gp", _data(50), inference="svi", options=FIXED, steps=2, samples=5, progress=False, **settings)


def test_a_model_with_no_conjugate_site_refuses_them_and_fits_as_before_under_auto():
    data = _data(40)
    with pytest.raises(ValueError, match="no latent site a data term is conjugate to"):
        pyro_bdl.fit("gp", data, inference="svi", options={"approximation": "exact"}, steps=2, samples=5,
                     natural_gradient=0.1, progress=False)
    auto, off = (pyro_bdl.fit("gp", data, inference="svi", steps=30, samples=20, natural_gradient=v, progress=False)
                 for v in ("auto", "off"))
    assert torch.equal(auto.samples["noise"], off.samples["noise"])


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
def test_ctrl_c_then_resume_ends_where_the_uninterrupted_run_ends(monkeypatch, tmp_path):
    from pyro_bdl.inference import svi as svi_module

    data, ck = _data(120), tmp_path / "checkpoint.pt"
    kw = dict(inference="svi", options={"approximation": "svgp", "inducing": 8}, steps=40, batch_size=30, samples=10,
              progress=False, seed=2)
    reference = pyro_bdl.fit("gp", data, **kw)
    real, count = svi_module.SVI.step, {"n": 0}

    def step_then_stop(self, *args, **kwargs):
        count["n"] += 1
        if count["n"] == 17:
            raise KeyboardInterrupt()
        return real(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(svi_module.SVI, "step", step_then_stop)
        with pytest.raises(KeyboardInterrupt):
            pyro_bdl.fit("gp", data, checkpoint=ck, **kw)
    resumed = pyro_bdl.fit("gp", data, checkpoint=ck, **kw)
    for name in reference.samples:
        assert torch.equal(reference.samples[name], resumed.samples[name]), name
    assert torch.equal(torch.as_tensor(reference.losses), torch.as_tensor(resumed.losses))
