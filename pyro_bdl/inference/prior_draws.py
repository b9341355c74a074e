"""Draws of a model's latent sites from their priors, for the checks that judge a fit against its prior
(:mod:`pyro_bdl.posterior.prior_check`, :mod:`pyro_bdl.inference.mode_check`).

Running the whole program once per draw costs what the program costs: a Gaussian process's Cholesky factor of
the training rows, 200 times after a fit that took 5 steps.  Most priors do not depend on other latent values
(``sigma ~ HalfNormal(1)``, a network's weights): two runs of the program tell which (each site's density of the
first run's value is the same in both runs), and those sites are drawn from their distribution directly, all draws
at once.  Only where some prior depends on another latent (a hierarchy's ``theta ~ N(mu, tau)``) is the program run
once per draw, as before.  The random streams are left as they were.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> runs = []
>>> def model(y):
...     runs.append(1)
...     mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
...     with pyro.plate("data", len(y)):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> first, draws = prior_draws(model, {"y": torch.zeros(3)}, 200)
>>> draws["mu"].shape, len(runs)
(torch.Size([200]), 2)
"""

from __future__ import annotations

import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["prior_draws"]


def _latent(trace) -> list[str]:
    return [name for name, node in trace.nodes.items()
            if node["type"] == "sample" and not node["is_observed"] and not site_is_subsample(node)]


def _same_prior(a, b, value) -> bool:
    """Whether two runs' distributions of a site agree (their densities of one value, entry by entry)."""
    try:
        return bool(torch.allclose(a.log_prob(value), b.log_prob(value), rtol=1e-6, atol=1e-8, equal_nan=True))
    except (ValueError, RuntimeError, NotImplementedError):
        return False


@torch.no_grad()
def prior_draws(model, data: dict, draws: int) -> tuple:
    """``(trace, {site: (draws, *shape)})``: one run of the program (its sites' distributions and supports) and
    ``draws`` prior draws of every latent site."""
    with kept_rng():
        first = poutine.trace(model).get_trace(**data)
        second = poutine.trace(model).get_trace(**data)
        latent = _latent(first)
        independent = all(name in second.nodes and _same_prior(first.nodes[name]["fn"], second.nodes[name]["fn"],
                                                                  first.nodes[name]["value"]) for name in latent)
        if independent:
            return first, {name: first.nodes[name]["fn"].sample((draws,)) for name in latent}
        traces = [first, second] + [poutine.trace(model).get_trace(**data) for _ in range(draws - 2)]
    return first, {name: torch.stack([t.nodes[name]["value"] for t in traces]) for name in latent}
