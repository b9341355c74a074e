"""A point fit of a density with no mode says so (pyro_bdl/posterior/mode_check.py), instead of advising more steps.

Cases with a known answer: centred eight schools (its joint density is unbounded as tau -> 0 with every theta_j at
mu) and partially pooled baseball (unbounded as kappa -> infinity with every phi_j at m) have no mode, so MAP must
warn, naming the site and its edge; a scale whose mode lies close to 0 (a tight noise scale under a wide prior), the
non-centred eight schools' bounded density and a regression must not.
"""

from __future__ import annotations

import itertools
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


#: The noise scale's priors of the generated family: each puts its bulk at a different distance from 0.
NOISE_PRIORS = {"halfnormal": lambda: dist.HalfNormal(10.0), "exponential": lambda: dist.Exponential(1.0),
                "halfcauchy": lambda: dist.HalfCauchy(5.0)}


def noise_scale(y, prior: str = "halfnormal"):
    sigma = pyro.sample("sigma", NOISE_PRIORS[prior]())
    with pyro.plate("rows", len(y)):
        pyro.sample("y", dist.Normal(1.0, sigma), obs=y)


def noisy_walk(y, obs):
    from support.ported_programs import GaussianRandomWalk

    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    s = pyro.sample("s", GaussianRandomWalk(sigma, len(y)))
    pyro.sample("y", dist.Normal(s, obs).to_event(1), obs=y)


def _family():
    """(name, model, data, site, has_mode): the generated family on which the zones (EDGE_FRACTION, NEAR_FRACTION,
    PROBE, chosen on centred eight schools and the stochastic-volatility walk) are checked.  A noise scale has an
    interior mode at every true scale (1e-3 to 1, the mode down at 1e-4 of its prior's typical distance), size and
    prior; a centred hierarchy and a centred random walk have none (their densities grow without bound as the scale
    goes to 0 with the effects pooled / the walk flat), though they may hold a local mode inside, which a fit may
    settle at (has_mode None: either)."""
    out = []
    for true, n, prior in itertools.product([1e-3, 0.1, 1.0], [10, 1000], NOISE_PRIORS):
        y = 1.0 + true * torch.randn(n, generator=torch.Generator().manual_seed(n))
        out.append((f"noise-{true}-{n}-{prior}", noise_scale, {"y": y, "prior": prior}, "sigma", True))
    for groups, spread in itertools.product([5, 30], [0.0, 3.0]):
        g = torch.Generator().manual_seed(groups)
        y = spread * torch.randn(groups, generator=g) + torch.randn(groups, generator=g)
        out.append((f"groups-{groups}-{spread}", centred_schools, {"y": y, "sigma": torch.ones(groups)}, "tau", None))
    for steps, obs, true in itertools.product([20, 60], [0.1, 1.0], [0.05, 0.3]):
        g = torch.Generator().manual_seed(steps)
        y = torch.cumsum(true * torch.randn(steps, generator=g), 0) + obs * torch.randn(steps, generator=g)
        out.append((f"walk-{steps}-{obs}-{true}", noisy_walk, {"y": y, "obs": torch.tensor(obs)}, "sigma", None))
    return out


@pytest.mark.slow
def test_the_zones_hold_on_a_generated_family():
    """On every member: a noise scale's fit is at its mode and not flagged (down to a mode within EDGE_FRACTION of
    the edge); a hierarchy's or walk's fit that collapsed its scale (below EDGE_FRACTION of its prior's typical
    distance from 0) is flagged, that site only, and one that stopped at a local mode well inside (beyond
    NEAR_FRACTION of it) is not.  What each member did: benchmarks/RESULTS.md, "The zones on a generated family"."""
    from pyro_bdl.inference.mode_check import EDGE_FRACTION, NEAR_FRACTION
    from pyro_bdl.inference.prior_draws import prior_draws

    collapsed_seen = interior_seen = 0
    for name, model, data, site, has_mode in _family():
        result, messages = _map(model, data)
        value = float(result.samples[site])
        typical = float(prior_draws(model, data, 200)[1][site].median())
        if has_mode:  # at its mode, however close to the edge that lies (1e-3: within EDGE_FRACTION of it)
            mode = float(((data["y"] - 1.0) ** 2).mean().sqrt())
            assert abs(value - mode) < 0.05 * mode, (name, value, mode)
            assert result.diagnostics.no_mode is None, (name, value, messages)
            continue
        if value < EDGE_FRACTION * typical:  # collapsed
            assert result.diagnostics.no_mode == [site], (name, value, messages)
            collapsed_seen += 1
        elif value > NEAR_FRACTION * typical:  # at a local mode well inside
            assert result.diagnostics.no_mode is None, (name, value, messages)
            interior_seen += 1
        # between: the probe's zone, either answer (the noise scales' modes at 0.1 lie there and are not flagged)
    assert collapsed_seen >= 4 and interior_seen >= 2  # both outcomes of the unbounded densities were exercised
