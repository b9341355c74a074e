"""One trace per fit (:mod:`pyro_bdl.inference.prototype`) and the preparation every fit and workflow starts with
(:mod:`pyro_bdl.prepare`)."""

from __future__ import annotations

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_bdl
from pyro_bdl.inference.prototype import Prototype, prototype_of, sharing
from pyro_bdl.prepare import prepare

from support.problems import SCHOOLS_SIGMA as SIGMA, SCHOOLS_Y as Y


def counted():
    """Non-centred eight schools (:func:`support.problems.noncentred_schools`, with a deterministic site of another
    name) that counts its runs."""
    runs = [0]

    def schools(sigma, y=None):
        runs[0] += 1
        mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = pyro.sample("tau", dist.HalfCauchy(5.0))
        with pyro.plate("J", len(sigma)):
            theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
            pyro.deterministic("effect", mu + tau * theta)
            pyro.sample("y", dist.Normal(mu + tau * theta, sigma), obs=y)

    return schools, runs


@pytest.mark.parametrize("method", ["svi", "svi-meanfield"])
def test_an_svi_fit_runs_a_users_program_twice_besides_its_steps(method):
    """One prototype trace (ours) and one by Pyro's AutoGuide as it builds itself; every check, the thread choice,
    enumeration, the drift record, the deterministic sites' names and the result read ours.  The deterministic site
    is computed from each draw afterwards: not counted here (no draws asked)."""
    schools, runs = counted()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyro_bdl.fit(schools, {"sigma": SIGMA, "y": Y}, inference=method, steps=50, samples=1, progress=False)
    assert runs[0] - 50 - 1 == 2  # 50: one per step (one particle); 1: the deterministic site of the one draw


def test_the_prototype_reads_what_the_checks_need_and_moves_nothing():
    schools, runs = counted()
    state = torch.get_rng_state()
    p = Prototype.of(schools, {"sigma": SIGMA, "y": Y})
    assert torch.equal(torch.get_rng_state(), state) and runs[0] == 1
    assert p.latent == ["mu", "tau", "theta"] and p.observed == ["y"] and p.deterministic == ["effect"]
    assert p.params == {} and p.unplated == {} and p.enumerated == [] and p.traits == frozenset({"continuous"})
    assert p.plate_nesting == 1 and p.largest_site == 8 and sorted(p.supports) == ["mu", "tau", "theta"]
    data = {"sigma": SIGMA, "y": Y}
    with sharing(p, [schools], data):
        assert prototype_of(schools, data) is p and runs[0] == 1
        assert prototype_of(schools, {"sigma": SIGMA, "y": Y}) is not p  # another dict: traced afresh
    assert runs[0] == 2


def test_a_prior_that_cannot_be_sampled_is_a_clear_error():
    def improper(y=None):
        mu = pyro.sample("mu", dist.ImproperUniform(dist.constraints.real, (), ()))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    with pytest.raises(ValueError, match="prior cannot be sampled"):
        pyro_bdl.fit(improper, {"y": torch.tensor(0.0)}, inference="map", progress=False)


def test_prepare_binds_a_zoo_models_data_as_fit_does():
    X, y = torch.randn(30, 2), torch.randn(30)
    prepared = prepare("blr", {"X": X, "y": y})
    assert prepared.spec.name == "blr" and torch.equal(prepared.dataset.X, X)
    assert prepared.sites.observed == ["y"] and set(prepared.kwargs) == {"X", "y"}
    unlabelled = prepare("blr", {"X": X, "y": None})  # what a workflow simulates the observations of
    assert unlabelled.kwargs["y"] is None
    with pytest.raises(pyro_bdl.DataError, match="no target to fit on"):
        pyro_bdl.fit("blr", {"X": X, "y": None}, inference="map", progress=False)
    with pytest.raises(TypeError, match="zoo model name or a Pyro model callable"):
        prepare(42, {"y": y})
