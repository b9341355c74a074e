"""A point fit of a density with no mode says so (pyro_bdl/posterior/mode_check.py), instead of advising more steps.

Cases with a known answer: centred eight schools (its joint density is unbounded as tau -> 0 with every theta_j at
mu) and partially pooled baseball (unbounded as kappa -> infinity with every phi_j at m) have no mode, so MAP must
warn, naming the site and its edge; a scale whose mode lies close to 0 (a tight noise scale under a wide prior), the
non-centred eight schools' bounded density and a regression must not.
"""

from __future__ import annotations

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_bdl
from pyro_bdl.inference.mode_check import running_to_an_edge
from support.problems import SCHOOLS_SIGMA, SCHOOLS_Y, centred_schools
from support.pyro_example_models import EXAMPLES



def tight_noise(y):
    sigma = pyro.sample("sigma", dist.HalfNormal(10.0))
    with pyro.plate("rows", len(y)):
        pyro.sample("y", dist.Normal(1.0, sigma), obs=y)


def _map(model, data, **settings):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = pyro_bdl.fit(model, data, inference="map", progress=False, seed=0, **settings)
    return result, [str(w.message) for w in caught if issubclass(w.category, pyro_bdl.ConvergenceWarning)]


@pytest.mark.slow
def test_centred_eight_schools_has_no_mode_and_the_warning_says_so():
    result, messages = _map(centred_schools, {"sigma": SCHOOLS_SIGMA, "y": SCHOOLS_Y})
    assert float(result.samples["tau"]) < 0.05  # collapsing, as the density leads it
    assert result.diagnostics.no_mode == ["tau"]
    (message,) = messages
    assert "'tau' is running to 0, the edge of its support" in message and "more steps will not help" in message
    assert "nuts" in message and "non-centred" in message
    assert "run more steps (--steps), a larger" not in message  # not the advice for an answer still on its way


@pytest.mark.slow
def test_a_concentration_running_to_infinity_is_found():
    example = EXAMPLES["partially_pooled"]
    result, messages = _map(example.model, example.data())
    assert result.diagnostics.no_mode == ["kappa"] and float(result.samples["kappa"]) > 1e4
    assert any("'kappa' is running to inf" in m for m in messages), messages


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eight_schools_noncentered", "ruggedness", "pumps"])
def test_a_density_with_a_mode_gives_no_such_warning(name):
    example = EXAMPLES[name]
    result, messages = _map(example.model, example.data())
    assert result.diagnostics.no_mode is None and not any("edge of its support" in m for m in messages), messages


@pytest.mark.slow
def test_a_mode_close_to_the_edge_is_a_mode():
    """sigma's mode 0.05 lies within 1% of its prior's typical distance from 0 (HalfNormal(10): 6.7), but any
    move towards 0 lowers the density: no warning, and the fit is the mode sqrt(mean((y - 1)^2)) (with the prior's
    negligible pull)."""
    y = 1.0 + 0.05 * torch.randn(200, generator=torch.Generator().manual_seed(0))
    result, messages = _map(tight_noise, {"y": y})
    assert messages == [] and result.diagnostics.no_mode is None
    mode = float(((y - 1.0) ** 2).mean().sqrt())
    assert abs(float(result.samples["sigma"]) - mode) < 1e-3 * mode
    # and the function itself, at the mode and at points on either side of it
    at = {"sigma": torch.full((1, 1), mode)}
    assert running_to_an_edge(tight_noise, {"y": y}, at) == []
    assert running_to_an_edge(tight_noise, {"y": y}, {"sigma": torch.full((1, 1), mode / 20)}) == []


def test_mle_is_judged_on_the_likelihood():
    """The density judged is the one the fit maximised: at centred schools' collapsed point (tau near 0, every
    theta_j at mu) the joint density rises towards tau = 0, but the likelihood alone (MLE's objective, the priors
    dropped) does not involve tau: no edge in it."""
    from pyro_bdl.inference import get_method

    collapsed = {"mu": torch.full((1, 1), 4.4), "tau": torch.full((1, 1), 1e-4), "theta": torch.full((1, 1, 8), 4.4)}
    data = {"sigma": SCHOOLS_SIGMA, "y": SCHOOLS_Y}
    assert running_to_an_edge(centred_schools, data, collapsed) == [("tau", 0.0)]
    likelihood = get_method("mle").diagnose.objective(centred_schools)
    assert running_to_an_edge(centred_schools, data, collapsed, likelihood) == []


def test_a_point_near_the_edge_is_judged_by_the_slope_further_on():
    """A point nearer the edge than NEAR_FRACTION of the prior's typical distance but not at it: the slope is taken
    where it is and PROBE units further.  NumPyro's stochastic-volatility walk at the step 2.5e-3 where 2000 Adam
    steps leave it (its prior's median 0.014), the walk flat: the density still rises all the way (as sigma^-T), no
    mode; the tight noise scale at ten times its mode (0.5 against 0.05, within a quarter of its prior's 6.7): the
    density rises towards 0 there, but falls again before e^-4 of the way, at the mode: not flagged."""
    from support.ported_programs import stochastic_volatility, volatility_data

    data = volatility_data()
    flat = torch.full((1, 1, 60), float(torch.log(data["returns"].abs()).mean()))
    walk = {"sigma": torch.full((1, 1), 2.5e-3), "s": flat, "nu": torch.full((1, 1), 10.0)}
    assert running_to_an_edge(stochastic_volatility, data, walk) == [("sigma", 0.0)]
    y = 1.0 + 0.05 * torch.randn(200, generator=torch.Generator().manual_seed(0))
    assert running_to_an_edge(tight_noise, {"y": y}, {"sigma": torch.full((1, 1), 0.5)}) == []
