"""MAP and MLE against their closed forms: ridge / least squares for blr, mode / sample mean for the coin.

The MAP and MLE losses are deterministic (a Delta guide has no sampling noise), so the only
error is the optimiser's; it converges to float32 precision, and 1e-3 (about 1% of a
posterior sd on these problems) is far above what it leaves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.problems import PROBLEMS

import pyro_bdl
from pyro_bdl.models.blr import least_squares, posterior_moments

ATOL = 1e-3


def _theta(result):
    return np.concatenate([result.posterior_mean("w").numpy().reshape(-1), result.posterior_mean("b").numpy().reshape(-1)])


@pytest.mark.slow
def test_blr_map_is_ridge():
    data, options = PROBLEMS["blr"]()
    result = pyro_bdl.fit("blr", data, inference="map", options=options, progress=False)
    ridge, _ = posterior_moments(data.X, data.y, options["prior_scale"], options["noise"])
    np.testing.assert_allclose(_theta(result), ridge.numpy(), atol=ATOL)


@pytest.mark.slow
@pytest.mark.parametrize("noise", [0.5, None])
def test_blr_mle_is_least_squares(noise):
    data, options = PROBLEMS["blr"]()
    options = {**options, "noise": noise}
    result = pyro_bdl.fit("blr", data, inference="mle", options=options, progress=False, steps=3000)
    ols = least_squares(data.X, data.y)
    np.testing.assert_allclose(_theta(result), ols.numpy(), atol=ATOL)
    if noise is None:  # the MLE of sigma is the root mean squared residual
        phi = torch.cat([data.X.double(), torch.ones(len(data), 1, dtype=torch.float64)], 1)
        rms = float(((data.y.double() - phi @ ols) ** 2).mean().sqrt())
        assert abs(float(result.posterior_mean("sigma")) - rms) < ATOL


@pytest.mark.slow
def test_map_and_mle_differ_by_the_prior():
    """A strong prior pulls MAP towards zero and leaves MLE alone."""
    data, options = PROBLEMS["blr"]()
    strong = {**options, "prior_scale": 0.05}
    map_ = _theta(pyro_bdl.fit("blr", data, inference="map", options=strong, progress=False))
    mle = _theta(pyro_bdl.fit("blr", data, inference="mle", options=strong, progress=False))
    assert np.linalg.norm(map_) < 0.5 * np.linalg.norm(mle)


@pytest.mark.slow
def test_coin_mle_is_sample_mean_and_map_is_mode():
    data, options = PROBLEMS["coin"]()
    k, n = float(data.y.sum()), len(data)
    mle = pyro_bdl.fit("coin", data, inference="mle", options=options, progress=False)
    map_ = pyro_bdl.fit("coin", data, inference="map", options=options, progress=False)
    assert abs(float(mle.posterior_mean("pi")) - k / n) < ATOL
    mode = (options["alpha"] + k - 1) / (options["alpha"] + options["beta"] + n - 2)
    assert abs(float(map_.posterior_mean("pi")) - mode) < ATOL


def test_point_estimates_are_one_labelled_draw():
    result = pyro_bdl.fit("coin", "coin", inference="map", progress=False, steps=300)
    assert result.point_estimate and result.num_draws == 1
    idata = result.to_inference_data()
    assert idata.posterior.sizes["chain"] == 1 and idata.posterior.sizes["draw"] == 1
    assert idata.posterior.attrs["point_estimate"] == 1 and idata.posterior.attrs["inference"] == "map"


@pytest.mark.slow
def test_mle_is_overconfident_on_few_tosses():
    """Three heads in three tosses: the MLE heads for pi = 1 (the next toss is heads for sure; the
    optimiser walks towards the boundary and ConvergenceWarning says it has not settled);
    Bayes with a uniform prior says 4/5."""
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):
        mle = pyro_bdl.fit("coin", "coin-few", inference="mle", progress=False)
    nuts = pyro_bdl.fit("coin", "coin-few", inference="nuts", progress=False, samples=1000, warmup=300)
    assert float(mle.posterior_mean("pi")) > 0.95
    assert nuts.report["p_next_heads_exact"] == pytest.approx(0.8)
    assert abs(nuts.report["p_next_heads"] - 0.8) < 4.5 * float(nuts.posterior_sd("pi")) / np.sqrt(nuts.diagnostics.min_ess_bulk)


def _wavy(y=None):
    """A posterior with many modes: y_i ~ N(cos(3 theta) + theta / 4, 0.3^2), theta ~ N(0, 3^2)."""
    import pyro
    import pyro.distributions as dist

    theta = pyro.sample("theta", dist.Normal(torch.tensor(0.0), 3.0))
    with pyro.plate("data", 8):
        return pyro.sample("y", dist.Normal(torch.cos(3 * theta) + theta / 4, 0.3), obs=y)


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
@pytest.mark.parametrize("method", ["map", "mle"])
def test_restarts_keep_the_best_start_and_its_parameters(method):
    """From 8 starts (the first at the prior's mean, the others at prior draws) the fit is the one whose final loss is
    least: the loss recorded for each start, the kept theta's own loss equal to the least of them, and no worse than
    one start's."""
    import pyro
    from pyro import poutine

    y = torch.full((8,), 1.0 + 2.2 / 4) + 0.05 * torch.randn(8, generator=torch.Generator().manual_seed(0))
    one = pyro_bdl.fit(_wavy, {"y": y}, inference=method, steps=400, lr=0.05, progress=False, seed=0)
    many = pyro_bdl.fit(_wavy, {"y": y}, inference=method, steps=400, lr=0.05, restarts=8, progress=False, seed=0)
    finals = [float(v) for v in many.info.start_losses.split(",")]
    assert len(finals) == 8 and one.info.start_losses is None

    def loss(theta):
        trace = poutine.trace(poutine.condition(_wavy, {"theta": torch.tensor(theta)})).get_trace(y)
        return -float(trace.nodes["y"]["fn"].log_prob(y).sum() + (trace.nodes["theta"]["fn"].log_prob(
            torch.tensor(theta)) if method == "map" else 0.0))

    kept = float(many.posterior_mean("theta"))
    assert loss(kept) == pytest.approx(min(finals), abs=1e-2)
    assert loss(kept) <= loss(float(one.posterior_mean("theta"))) + 1e-3
    pyro.clear_param_store()


def test_restarts_are_refused_with_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="restarts > 1 cannot resume from a checkpoint"):
        pyro_bdl.fit(_wavy, {"y": torch.zeros(8)}, inference="map", steps=5, restarts=2, progress=False,
                     checkpoint=tmp_path / "ck")
