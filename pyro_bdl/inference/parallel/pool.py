"""Independent jobs side by side in worker processes: the one pool the workflows share (SBC's replications, the UCI
table's fits, active-learning runs).

:func:`run_jobs` yields each job's answer as it finishes, in this process for ``workers`` 1 and else in that many
worker processes.  The workers are **forked** where the platform can (Linux): the function travels to them with the
fork and is never pickled, so a model written in a notebook runs as it is; where it cannot, they are spawned and the
function must be picklable (defined at a module's top level).  Each worker runs torch on one thread (forking a
process whose torch has used threads is safe once the child does not use them), ignores Ctrl-C (it reaches the
whole process group: the parent stops the workers and the jobs in progress are lost, those finished are kept by the
caller), ends at SIGTERM whatever handler the parent had when it forked, and draws no progress bar lock from
``multiprocessing``.

Example
-------
>>> sorted(run_jobs(lambda n: n * n, [1, 2, 3], workers=2))
[1, 4, 9]
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from typing import Callable, Iterable, Iterator

import torch

__all__ = ["run_jobs", "start_method"]

#: the job function of the forked workers (set before they fork, so it is never pickled)
_FUNCTION: Callable | None = None


def start_method() -> str:
    """``"fork"`` where the platform has it, else ``"spawn"`` (the job function must then be picklable)."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _start_worker(function: Callable | None) -> None:
    global _FUNCTION
    if function is not None:  # spawned: the function came pickled
        _FUNCTION = function
    torch.set_num_threads(1)
    from tqdm.std import tqdm

    # a thread lock for the bars (they are off in workers): tqdm's default is a multiprocessing lock, which a worker
    # never frees and the resource tracker reports as leaked
    tqdm.set_lock(threading.RLock())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker inherits the parent's handler: the pool's
    # terminate() must end it, not set the parent's stop flag in the worker's copy


def _call(job):
    return _FUNCTION(job)


def run_jobs(function: Callable, jobs: Iterable, workers: int = 1, *, stop: threading.Event | None = None
             ) -> Iterator:
    """``function(job)`` for each of ``jobs``, yielded as each finishes (in order for one worker, in the order they
    finish for several).  ``stop``: an event that ends the run between two answers (a ``KeyboardInterrupt`` is
    raised; the workers are ended).  Closing the iterator early ends the workers too."""
    global _FUNCTION
    jobs = list(jobs)
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield function(job)
        return
    method = start_method()
    _FUNCTION = function
    pool = multiprocessing.get_context(method).Pool(
        min(workers, len(jobs)), initializer=_start_worker, initargs=(function if method == "spawn" else None,))
    try:
        answers = pool.imap_unordered(_call, jobs)
        for _ in jobs:
            while True:  # wait in short steps, so that a signal only sets the flag, never breaks a lock's wait
                if stop is not None and stop.is_set():
                    raise KeyboardInterrupt
                try:
                    yield answers.next(timeout=0.5)
                    break
                except multiprocessing.TimeoutError:
                    continue
    finally:
        _FUNCTION = None
        pool.terminate()
        pool.join()
