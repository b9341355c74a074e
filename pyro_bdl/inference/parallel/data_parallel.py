"""Data-parallel optimisation: every process of a launch steps the same parameters on its shard of each global
minibatch, and the gradients are summed across processes before the update (:mod:`.processes` explains the
arithmetic: the result is the one-process step on the same global batch).

Example (one process: nothing to split; under ``torchrun`` the same code splits)
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y, batch_size=None):
...     mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
...     with pyro.plate("data", len(y), subsample_size=batch_size) as i:
...         pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])
>>> rows_per_step(model, {"y": torch.zeros(10), "batch_size": 4}), rows_per_step(model, {"y": torch.zeros(10)})
(4, 10)
"""

from __future__ import annotations

import torch
from pyro import poutine
from pyro.infer.util import torch_item
from pyro.poutine.subsample_messenger import _Subsample

from pyro_bdl.inference.base import takes_minibatches
from pyro_bdl.inference.parallel.processes import (
    ProcessGroup,
    ShardedPlates,
    all_reduce_gradients,
    broadcast_,
    weighted_sum_over_processes,
    shard_sizes,
)
from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["DataParallel", "rows_per_step"]


@torch.no_grad()
def rows_per_step(model, data: dict) -> int:
    """The rows of the model's data plate one step sees: its ``batch_size`` where given (and smaller than the
    data), else the plate's size.  The data plate is the one the ``batch_size`` argument subsamples."""
    probe = {**data, "batch_size": 1}
    with kept_rng():  # the probe's draws do not move the fit's random streams
        trace = poutine.trace(poutine.block(model, hide_types=["param"])).get_trace(**probe)
    sizes = {site["fn"].size for site in trace.nodes.values()
             if site["type"] == "sample" and isinstance(site["fn"], _Subsample) and site["fn"].subsample_size == 1}
    if len(sizes) != 1:
        raise ValueError("data-parallel fitting needs one data plate subsampled by the model's batch_size "
                         f"argument; found {len(sizes)} plate size(s) {sorted(sizes)}")
    size = sizes.pop()
    batch = data.get("batch_size")
    return size if batch is None else min(int(batch), size)


class DataParallel:
    """The model, guide and data one process steps in a data-parallel launch, and the ``sync`` the optimiser calls
    between the backward pass and the update (:class:`pyro_bdl.inference.svi.SVI`)."""

    def __init__(self, group: ProcessGroup, model, guide, data: dict):
        if not takes_minibatches(model):
            raise ValueError("data-parallel fitting needs a model with a batch_size argument that subsamples its "
                             "data plate (pyro.plate(..., subsample_size=batch_size)), as the zoo's networks have")
        total = rows_per_step(model, data)
        sizes = shard_sizes(total, group.world)
        if min(sizes) < 1:
            raise ValueError(f"a global batch of {total} rows cannot be split over {group.world} processes")
        self.group, self.total = group, total
        self.weight = sizes[group.rank] / total
        plates = ShardedPlates(group, data.get("batch_size"))
        self.model, self.guide = plates.wrap(model, guide)
        self.data = {**data, "batch_size": sizes[group.rank]}
        self._synced = False

    def sync(self, params, loss):
        """Sum the processes' gradients (each weighted by its shard's share of the batch) into every process's
        gradients, and the loss likewise; the first call also makes every process start from process 0's
        parameters."""
        if not self._synced:
            broadcast_(params)
            self._synced = True
        all_reduce_gradients(params, self.weight)
        return weighted_sum_over_processes(torch_item(loss), self.weight, like=params[0] if params else None)
