"""The processes of a ``torchrun`` launch: data-parallel optimisation and work split without communication.

``torchrun --nproc-per-node N`` (or ``pyro-bdl fit ... --nproc N``, which starts it) runs N copies of a fit; the
environment it sets (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ...) makes
:func:`join` start a :mod:`torch.distributed` process group: gloo on the CPU, NCCL on CUDA.  Every process runs
the same program with the same seed, so their random draws agree; they differ only in the rows they see.

Data-parallel optimisation (SVI, MAP, MLE, MC dropout, amortised SVI): each global minibatch of B rows (the whole
data set without ``batch_size``) is cut into contiguous shards, one per process (:func:`shard_sizes`).
:class:`ShardedPlates` gives every process the indices of its shard in the model's subsampled data plate, so the
likelihood of process r is scaled by N / b_r; :func:`all_reduce_gradients` sums the gradients weighted by b_r / B.
The sum is the gradient of the one-process loss on the same global batch (the global latents' draws agree
because the seeds do; a local latent's draw, a VAE's ``z``, is drawn by the process that holds its row, so
there the processes agree with one process in distribution, not draw for draw).

Split work (ensemble members, MCMC chains): :func:`my_share` gives each process a contiguous block of items,
:func:`gather_rows` concatenates the processes' tensors in rank order.

Example
-------
>>> shard_sizes(10, 4)
[3, 3, 2, 2]
>>> my_share(5, ProcessGroup(rank=1, world=2))
range(3, 5)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from pyro.poutine.messenger import Messenger
from pyro.poutine.subsample_messenger import _Subsample

__all__ = ["ProcessGroup", "ShardedPlates", "all_reduce_gradients", "current_group", "gather_rows", "join",
           "leave", "weighted_sum_over_processes", "my_share", "shard_sizes", "broadcast_"]


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place in a launch: ``rank`` of ``world`` processes; ``local_rank`` of ``local_world`` on
    this machine (``local_rank`` picks the GPU)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        """The process that writes files, shows progress and saves checkpoints."""
        return self.rank == 0


def current_group() -> ProcessGroup:
    """The launch this process is part of, from ``torch.distributed`` once joined, else from the environment
    ``torchrun`` sets (one process when it is not set)."""
    if dist.is_available() and dist.is_initialized():
        world, rank = dist.get_world_size(), dist.get_rank()
    else:
        world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return ProcessGroup(rank, world, int(os.environ.get("LOCAL_RANK", rank % max(local_world, 1))), local_world)


def join(device: torch.device) -> ProcessGroup:
    """Start the process group the environment describes, if it is not started (gloo for the CPU, NCCL for
    CUDA); the group."""
    group = current_group()
    if group.distributed and not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            raise ValueError("WORLD_SIZE is set but MASTER_ADDR is not: start the processes with torchrun "
                             "(pyro-bdl fit ... --nproc N does)")
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
    return group


def leave() -> None:
    """End the process group (at the end of a launched command)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard_sizes(total: int, world: int) -> list[int]:
    """``total`` rows cut into ``world`` contiguous shards, the first ``total % world`` one row longer."""
    base, extra = divmod(int(total), int(world))
    return [base + (r < extra) for r in range(world)]


def my_share(items: int, group: ProcessGroup) -> range:
    """The contiguous block of ``items`` (members, chains) that process ``group.rank`` runs."""
    sizes = shard_sizes(items, group.world)
    start = sum(sizes[: group.rank])
    return range(start, start + sizes[group.rank])


class ShardedPlates(Messenger):
    """Gives this process its shard of every global minibatch.

    A subsampled plate of size N whose subsample size is this process's shard size b_r (the model is called with
    ``batch_size=b_r``) gets, instead of its own random subsample, rows ``[start_r, start_r + b_r)`` of the global
    batch: ``randperm(N)[:B]`` drawn from the random stream every process shares (the same call one process
    makes for a batch of B), or ``arange(N)`` for the whole data (``global_batch`` None).  The guide draws; the
    model, run after it on the guide's trace, reuses the guide's indices (wrap both with :meth:`wrap`).
    """

    def __init__(self, group: ProcessGroup, global_batch: int | None):
        super().__init__()
        self.group, self.global_batch = group, global_batch
        self.indices: dict[str, torch.Tensor] = {}

    def wrap(self, model, guide):
        """``(model, guide)`` run under this messenger; each call of the guide draws fresh indices."""
        def sharded_guide(*args, **kwargs):
            self.indices.clear()
            with self:
                return guide(*args, **kwargs)

        def sharded_model(*args, **kwargs):
            with self:
                return model(*args, **kwargs)

        return sharded_model, sharded_guide

    def _pyro_sample(self, msg) -> None:
        fn = msg["fn"]
        if not isinstance(fn, _Subsample) or msg["done"] or msg["value"] is not None or fn.subsample_size is None:
            return
        total = fn.size if self.global_batch is None else min(self.global_batch, fn.size)
        sizes = shard_sizes(total, self.group.world)
        if fn.subsample_size != sizes[self.group.rank]:
            raise ValueError(f"plate '{msg['name']}' asks for {fn.subsample_size} rows, not this process's shard of "
                             f"{sizes[self.group.rank]} of the global batch of {total}: data-parallel fitting needs "
                             f"the model's data plate subsampled by its batch_size argument")
        if msg["name"] not in self.indices:
            self.indices[msg["name"]] = (torch.arange(fn.size, device=fn.device) if total >= fn.size
                                         else torch.randperm(fn.size, device=fn.device)[:total])
        start = sum(sizes[: self.group.rank])
        msg["value"] = self.indices[msg["name"]][start:start + sizes[self.group.rank]].clone()
        msg["done"] = True


def all_reduce_gradients(params, weight: float) -> None:
    """Replace every parameter's gradient by the sum over processes of ``weight`` x its gradient (a missing
    gradient counts as zeros), in one all-reduce of a flat buffer."""
    params = list(params)
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads]) * weight
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def weighted_sum_over_processes(value: float, weight: float, like: torch.Tensor | None = None) -> float:
    """The sum over processes of ``weight`` x ``value`` (a loss weighted by its shard's share of the batch)."""
    device = like.device if like is not None else torch.device("cpu")
    total = torch.tensor([float(value) * weight], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return float(total.item())


def broadcast_(tensors) -> None:
    """Copy every tensor of process 0 into the same tensor of the others (in place)."""
    for t in tensors:
        dist.broadcast(t.data, src=0)


def gather_rows(tensors: dict, group: ProcessGroup) -> dict:
    """Each name's tensors of all processes concatenated along dim 0 in rank order (the processes may hold
    different numbers of rows; every other dimension agrees)."""
    if not group.distributed:
        return dict(tensors)
    out = {}
    for name in sorted(tensors):
        value = tensors[name]
        counts = [torch.zeros(1, dtype=torch.long, device=value.device) for _ in range(group.world)]
        dist.all_gather(counts, torch.tensor([len(value)], dtype=torch.long, device=value.device))
        longest = int(max(c.item() for c in counts))
        padded = torch.zeros((longest,) + tuple(value.shape[1:]), dtype=value.dtype, device=value.device)
        padded[: len(value)] = value
        parts = [torch.empty_like(padded) for _ in range(group.world)]
        dist.all_gather(parts, padded.contiguous())
        out[name] = torch.cat([p[: int(c.item())] for p, c in zip(parts, counts)])
    return out
