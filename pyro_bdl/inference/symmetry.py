r"""Point starts that are not a network's symmetric saddle.

A point method (``map``, ``mle``) starts a user's program where :func:`~pyro_bdl.inference.starts.init_to_prior_mean`
puts it: each site at its prior's mean.  For a network whose weights have zero-mean priors that is the all-zero
network, a stationary point of :math:`\log p(y, \theta)` that is no mode: every hidden unit computes the same
(zero) activation, so the gradient of each weight matrix is exactly zero and stays so; the optimiser ends where it
started, with every row given the same class probabilities (issue 53's digits MLP:
tests/test_ported_programs.py).  An SVI guide draws around its start and leaves the saddle at its first step; a point does not.

:class:`BreakSymmetry` wraps an init strategy: before the run it takes the strategy's start once, and where a site
of two or more entries starts with every entry equal and the gradient of the log joint exactly zero in every
entry (the symmetric stationary point; a regression's coefficients at 0 have a non-zero gradient), that site starts
instead at the median of 15 of its prior's draws (Pyro's own guides' default start, drawn from the fit's seed).
Every other site keeps the wrapped strategy's start.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def net(x, y):
...     w1 = pyro.sample("w1", dist.Normal(torch.zeros(3, 2), 1.0).to_event(2))
...     w2 = pyro.sample("w2", dist.Normal(torch.zeros(3), 1.0).to_event(1))
...     pyro.sample("y", dist.Normal(torch.tanh(x @ w1.T) @ w2, 0.1).to_event(1), obs=y)
>>> from pyro_bdl.inference.starts import init_to_prior_mean
>>> BreakSymmetry(init_to_prior_mean).symmetric_sites(net, {"x": torch.randn(5, 2), "y": torch.randn(5)})
['w1', 'w2']
"""

from __future__ import annotations

from typing import Callable

import torch
from pyro import poutine
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median

from pyro_bdl.inference.prototype import is_latent
from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["BreakSymmetry"]


class BreakSymmetry:
    """An init strategy's ``init`` with the sites that start at a symmetric stationary point re-started at the median
    of 15 prior draws; :meth:`prepare` reads the model once and returns the strategy to start it with."""

    def __init__(self, init: Callable):
        self.init = init

    def symmetric_sites(self, model: Callable, data: dict) -> list[str]:
        """The latent sites that ``init`` starts at a symmetric stationary point of the log joint, in the model's
        order."""
        with poutine.block(), torch.no_grad():
            start = poutine.trace(InitMessenger(self.init)(model)).get_trace(**data)
        values = {name: site["value"].detach().clone().requires_grad_(site["value"].is_floating_point())
                  for name, site in start.nodes.items() if is_latent(site)}
        candidates = [name for name, v in values.items()
                      if v.requires_grad and v.numel() >= 2 and bool((v == v.reshape(-1)[0]).all())]
        if not candidates:
            return []
        with poutine.block():
            trace = poutine.trace(poutine.condition(model, data=values)).get_trace(**data)
            log_joint = trace.log_prob_sum()
        if not log_joint.requires_grad or not torch.isfinite(log_joint):
            return []
        grads = torch.autograd.grad(log_joint, [values[n] for n in candidates], allow_unused=True)
        return [name for name, g in zip(candidates, grads) if g is None or not bool(g.ne(0).any())]

    def prepare(self, model: Callable, data: dict) -> Callable:
        """The strategy to start ``model`` with on ``data``: ``init``, with :meth:`symmetric_sites` started at the
        median of 15 prior draws."""
        with kept_rng():  # the look moves no random stream: a start with no symmetric site is the start without it
            broken = set(self.symmetric_sites(model, data))
        if not broken:
            return self.init

        def init(site=None):
            if site is None:
                return init
            if site["name"] in broken:
                return init_to_median(site, num_samples=15)
            return self.init(site)

        return init
