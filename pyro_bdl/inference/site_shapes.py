"""Batch dimensions outside every plate, as Pyro's NUTS accepts them and its ELBOs refuse them.

Pyro's eight schools example samples ``eta ~ Normal(zeros(8), ones(8))`` with no ``pyro.plate``: its log density
is the sum over the 8 entries, which NUTS takes as it is, while an ELBO checks every site's shape against its
plates (``check_site_shape``: "invalid log_prob shape, Expected [], actual [8]").  :func:`unplated_sites` finds
such sites in a trace, and :func:`as_event_dims` runs a model with their rightmost batch dimensions declared event
dimensions (``fn.to_event(k)``): the same joint density, summed in the same way, which every method takes.  The
fit runs the declared form; its answer (predictions, pointwise log-likelihood) comes from the model as written.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model():
...     pyro.sample("eta", dist.Normal(torch.zeros(8), 1.0))
>>> unplated_sites(model, {})
{'eta': 1}
>>> trace = pyro.poutine.trace(as_event_dims(model, {"eta": 1})).get_trace()
>>> trace.nodes["eta"]["fn"].event_shape
torch.Size([8])
"""

from __future__ import annotations

import functools
from typing import Callable

from pyro.poutine.messenger import Messenger

from pyro_bdl.inference.prototype import prototype_of

__all__ = ["unplated_sites", "as_event_dims"]


def unplated_sites(model: Callable, data: dict) -> dict:
    """Sample site -> how many of its rightmost batch dimensions lie outside every plate (and are not all of
    size 1), from the prototype trace of ``model(**data)`` (:mod:`pyro_bdl.inference.prototype`); the sites that
    have none are left out."""
    return prototype_of(model, data).unplated


class _EventDims(Messenger):
    def __init__(self, sites: dict):
        super().__init__()
        self.sites = sites

    def _pyro_sample(self, msg) -> None:
        k = self.sites.get(msg["name"])
        if k and len(msg["fn"].batch_shape) >= k:
            msg["fn"] = msg["fn"].to_event(k)


def as_event_dims(model: Callable, sites: dict) -> Callable:
    """``model`` with each site's ``sites[name]`` rightmost batch dimensions as event dimensions (same signature)."""

    @functools.wraps(model)
    def declared(*args, **kwargs):
        with _EventDims(sites):
            return model(*args, **kwargs)

    return declared
