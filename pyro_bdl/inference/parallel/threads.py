"""How many threads torch runs a fit on.

torch's default, one intra-op thread per core, suits large operations on an idle machine.  A Bayesian model's
operations are mostly small (a network of a few thousand weights, a sampler's vector of a few dozen
coordinates): split over threads they gain nothing alone, and beside another busy process the threads wait on
each other and run several times slower than one thread (benchmarks/RESULTS.md, "Threads").  ``threads="auto"`` therefore
chooses one thread, and more only where the largest operation of a step is large enough to gain
(:data:`MIN_WORK_PER_THREAD` multiply-adds per thread) and cores are free (the 1-minute load average).

Example
-------
>>> choose_threads(5_000, cores=8, load=0.0), choose_threads(4e7, cores=8, load=0.0)
(1, 4)
>>> choose_threads(4e7, cores=2, load=2.5)  # a large step, but the machine is busy
1
"""

from __future__ import annotations

import contextlib
import math
import os

import torch

from pyro_bdl.inference.prototype import prototype_of

__all__ = ["MIN_WORK_PER_THREAD", "available_cores", "choose_threads", "largest_op", "resolve_threads",
           "using_threads"]

#: The multiply-adds of one operation below which a second thread does not pay, even on an idle machine
#: (benchmarks/RESULTS.md, "Threads").
MIN_WORK_PER_THREAD = 1e7


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def choose_threads(work: float, *, cores: int | None = None, load: float | None = None, processes: int = 1) -> int:
    """The thread count for steps whose largest operation costs ``work`` multiply-adds: one below
    :data:`MIN_WORK_PER_THREAD`, else one per that much work, at most the cores not busy with other processes
    (``load``: the 1-minute load average, read from the system when None) shared by the ``processes`` of this
    launch on this machine."""
    cores = available_cores() if cores is None else int(cores)
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if work < MIN_WORK_PER_THREAD:
        return 1
    free = max(1, cores - math.floor(load))
    return max(1, min(int(work // MIN_WORK_PER_THREAD), free // max(1, processes), cores // max(1, processes)))


def largest_op(model, data: dict, rows: int | None = None) -> float:
    """The multiply-adds of the largest operation one call of ``model(**data)`` makes, estimated as its largest
    parameter or latent site (a weight matrix: inputs x outputs; from its prototype trace,
    :mod:`pyro_bdl.inference.prototype`) times the rows a step sees (``rows``; default the leading size of the
    largest data tensor)."""
    largest = prototype_of(model, data).largest_site
    if rows is None:
        tensors = [v for v in data.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
        rows = max((len(v) for v in tensors), default=1)
    return float(largest) * max(int(rows), 1)


def resolve_threads(threads, work: float, processes: int = 1) -> int:
    """``threads`` as given (a positive int, or text of one) or, for ``"auto"`` / None, :func:`choose_threads`."""
    if threads is None or (isinstance(threads, str) and threads.lower() == "auto"):
        return choose_threads(work, processes=processes)
    whole = (isinstance(threads, int) and not isinstance(threads, bool)) or (
        isinstance(threads, str) and threads.strip().isdigit())
    if not whole or int(threads) < 1:
        raise ValueError(f"threads must be a positive whole number or 'auto', got {threads!r}")
    return int(threads)


@contextlib.contextmanager
def using_threads(count: int):
    """Run the block on ``count`` intra-op threads; the previous count is put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(count))
    try:
        yield count
    finally:
        torch.set_num_threads(before)
