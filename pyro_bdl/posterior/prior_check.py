"""After a fit: does the posterior sit where the model's prior allows, or has the data pushed it to the prior's edge?

A model whose priors have fixed scales (``b ~ N(0, 1)``) fitted on data in other units (an intercept near 28)
gives a posterior pulled towards the prior (``b`` near 6: between the two, right for neither), and nothing in the
fit says so.  :func:`prior_posterior_conflict` compares each latent entry's posterior mean with its prior, from
draws of the prior: an entry whose posterior mean lies more than :data:`CONFLICT_Z` robust prior standard
deviations (the prior draws' interquartile range / 1.349, finite for heavy-tailed priors too) from the prior
draws' median is in conflict with its prior.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
...     with pyro.plate("data", len(y)):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> y = torch.randn(50) + 30.0
>>> [c["site"] for c in prior_posterior_conflict(model, {"y": y}, {"mu": torch.full((1, 1), 29.4)})]
['mu']
>>> prior_posterior_conflict(model, {"y": y}, {"mu": torch.full((1, 1), 0.5)})
[]
"""

from __future__ import annotations

import torch

from pyro_bdl.inference.prior_draws import prior_draws

__all__ = ["prior_posterior_conflict", "CONFLICT_Z"]

#: How far (in robust prior standard deviations) a posterior mean must lie from the prior's median to be a
#: conflict: under a Normal prior, 4 sd out is a prior density e^-8 (3e-4) of the centre's, a constraint the data
#: push against rather than a prior that merely disagrees with them.
CONFLICT_Z = 4.0


@torch.no_grad()
def prior_posterior_conflict(model, data: dict, samples: dict, draws: int = 200) -> list[dict]:
    """The latent entries whose posterior mean lies far out in their prior: one dict per site with any,
    ``{"site", "index" (the flat index of its farthest entry), "posterior_mean", "prior_median", "prior_sd", "z"}``.
    ``samples``: site -> (chains, draws, *shape).  Draws the prior ``draws`` times
    (:func:`~pyro_bdl.inference.prior_draws.prior_draws`), leaving the random streams as they were."""
    first, drawn = prior_draws(model, data, draws)
    conflicts = []
    for site, value in samples.items():
        node = first.nodes.get(site)
        if node is None or node["type"] != "sample" or node["is_observed"] or not value.is_floating_point():
            continue
        prior = drawn[site].double().reshape(draws, -1)  # (draws, entries)
        posterior = value.double().reshape(value.shape[0] * value.shape[1], -1).mean(0).to(prior.device)
        if prior.shape[1] != posterior.shape[0]:
            continue
        q1, median, q3 = torch.quantile(prior, prior.new_tensor([0.25, 0.5, 0.75]), dim=0)
        spread = ((q3 - q1) / 1.349).clamp_min(1e-12)
        z = (posterior - median).abs() / spread
        worst = int(z.argmax())
        if float(z[worst]) > CONFLICT_Z:
            conflicts.append({"site": site, "index": worst, "posterior_mean": float(posterior[worst]),
                              "prior_median": float(median[worst]), "prior_sd": float(spread[worst]),
                              "z": float(z[worst])})
    return conflicts
