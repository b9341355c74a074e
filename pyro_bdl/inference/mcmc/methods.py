"""Markov chain Monte Carlo: NUTS, HMC and random-walk Metropolis.

NUTS and HMC run on the zoo's kernel by default (``kernel="zoo"``: all chains together, see
:mod:`pyro_bdl.inference.mcmc.zoo`); with ``kernel="pyro"`` (and random-walk Metropolis) chains run one
after another (no multiprocessing: reliable in notebooks and on 2 cores), each with Pyro's
:class:`~pyro.infer.MCMC` driver and its progress bar.  A hook records per-draw
statistics under ArviZ's names: ``diverging``, ``step_size``, ``n_steps`` (leapfrog steps),
``tree_depth`` (NUTS), ``lp`` (log joint density up to a constant, unconstrained space).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from pyro.infer import HMC, MCMC, NUTS, RandomWalkKernel

from pyro_bdl.inference import pyro_internals
from pyro_bdl.inference.base import Draws, as_flag
from pyro_bdl.inference.diagnose import JudgeChains
from pyro_bdl.inference.mcmc.draws import ChainInfo, stack_chains
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.parallel.processes import current_group
from pyro_bdl.storage.checkpoint import rng_state, set_rng_state


def _nuts(model, *, target_accept, max_tree_depth, jit, full_mass):
    return NUTS(model, target_accept_prob=target_accept, max_tree_depth=max_tree_depth, jit_compile=jit,
                ignore_jit_warnings=True, full_mass=full_mass)


def _hmc(model, *, target_accept, max_tree_depth, jit, full_mass):
    return HMC(model, target_accept_prob=target_accept, jit_compile=jit, ignore_jit_warnings=True,
               trajectory_length=math.pi / 2, full_mass=full_mass)


def _random_walk(model, *, target_accept, max_tree_depth, jit, full_mass):
    return RandomWalkKernel(model, target_accept_prob=0.234)


def _tree_stats(kernel, leapfrogs: int) -> dict:
    """NUTS: it builds its tree from base trees of one leapfrog step, so the count gives the depth."""
    return {"step_size": float(kernel.step_size), "n_steps": leapfrogs,
            "tree_depth": int(math.floor(math.log2(max(leapfrogs, 1)))) + 1}


def _trajectory_stats(kernel, leapfrogs: int) -> dict:
    return {"step_size": float(kernel.step_size), "n_steps": kernel.num_steps}


def _random_walk_stats(kernel, leapfrogs: int) -> dict:
    return {"step_size": pyro_internals.random_walk_step_size(kernel), "n_steps": 1}


@dataclass(frozen=True)
class PyroKernel:
    """One of Pyro's MCMC kernels as ``kernel="pyro"`` runs it: ``build(model, **settings)`` makes it and
    ``stats(kernel, leapfrogs)`` reads a draw's kernel-specific statistics (``leapfrogs`` counted only where
    ``counts_leapfrogs``)."""

    build: Callable
    stats: Callable[[Any, int], dict]
    counts_leapfrogs: bool = False


#: The methods' kernels on Pyro's driver (the zoo's own NUTS and HMC: :data:`~pyro_bdl.inference.mcmc.sampler.KERNELS`).
PYRO_KERNELS = {"nuts": PyroKernel(_nuts, _tree_stats, counts_leapfrogs=True),
                "hmc": PyroKernel(_hmc, _trajectory_stats),
                "metropolis": PyroKernel(_random_walk, _random_walk_stats)}


class _StatsRecorder:
    """MCMC hook: after each post-warmup draw, read the kernel's state (through :mod:`~pyro_bdl.inference.pyro_internals`)."""

    def __init__(self, kernel, kind: PyroKernel):
        self.kernel, self.kind = kernel, kind
        self.rows = []
        self._leapfrogs = 0
        if kind.counts_leapfrogs:
            pyro_internals.count_nuts_leapfrog_steps(kernel, self._count_leapfrog)

    def _count_leapfrog(self) -> None:
        self._leapfrogs += 1

    def __call__(self, kernel, params, stage, i):
        n_steps, self._leapfrogs = self._leapfrogs, 0
        if stage != "Sample":
            return
        row = {"diverging": pyro_internals.divergence_count(kernel) > sum(r["diverging"] for r in self.rows)}
        stats = self.kind.stats(kernel, n_steps)
        row.update(step_size=stats.pop("step_size"), lp=-pyro_internals.potential_energy(kernel), **stats)
        self.rows.append(row)
        self.mean_accept_prob = pyro_internals.mean_accept_prob(kernel)

    def stats(self) -> dict:
        return {key: np.array([r[key] for r in self.rows]) for key in self.rows[0]}


def run_mcmc(name: str, model, data: dict, *, samples: int, warmup: int, chains: int, progress: bool,
             target_accept: float = 0.8, max_tree_depth: int = 10, jit: bool = False, full_mass=False,
             kernel: str = "pyro", checkpoint=None) -> Draws:
    """Run ``chains`` chains of kernel ``name`` one after another; stack them as (chains, draws, ...).

    ``full_mass`` (NUTS, HMC) adapts a dense mass matrix during warmup instead of a diagonal one: for
    posteriors with strongly correlated coordinates (a regression on collinear features), where a
    diagonal one leaves NUTS at its maximum tree depth.  It costs O(d^2) memory and O(d^3) per
    adaptation window in the number of latent coordinates d, so it suits small models.

    With a :class:`~pyro_bdl.storage.checkpoint.Checkpoint`, every finished chain is saved, and a rerun
    resumes after the last finished chain.

    ``kernel`` (NUTS, HMC): "zoo", the zoo's kernel with chains run together
    (:mod:`pyro_bdl.inference.mcmc.zoo`), or "pyro", Pyro's own.
    """
    if kernel not in ("zoo", "pyro"):
        raise ValueError(f"setting 'kernel' must be 'zoo' or 'pyro', got {kernel!r}")
    if kernel != "zoo" and current_group().distributed:
        raise ValueError(f"kernel='{kernel}' runs its chains on one process; the zoo's kernel (kernel='zoo') splits "
                         "them over the processes of a launch")
    if kernel == "zoo":
        from pyro_bdl.inference.mcmc.zoo import run_zoo_mcmc  # downward, at the first fit: the sampler's machinery

        return run_zoo_mcmc(name, model, data, samples=samples, warmup=warmup, chains=chains, progress=progress,
                            target_accept=target_accept, max_tree_depth=max_tree_depth, jit=jit,
                            full_mass=full_mass, checkpoint=checkpoint)
    state = (checkpoint.load() if checkpoint is not None else None) or {"chains": []}
    done = state["chains"]
    if done:
        set_rng_state(state["rng"])
    kind = PYRO_KERNELS[name]
    for _ in range(len(done), chains):
        kernel = kind.build(model, target_accept=target_accept, max_tree_depth=max_tree_depth, jit=as_flag(jit),
                            full_mass=as_flag(full_mass))
        recorder = _StatsRecorder(kernel, kind)
        mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, num_chains=1,
                    disable_progbar=not progress, hook_fn=recorder)
        mcmc.run(**data)
        done.append({
            "samples": {k: v.detach() for k, v in mcmc.get_samples().items()},
            "stats": {k: torch.as_tensor(v, device="cpu") for k, v in recorder.stats().items()},  # host-side
            "accept": recorder.mean_accept_prob,
        })
        if checkpoint is not None:
            checkpoint.save({"chains": done, "rng": rng_state()})
    return stack_chains(done)


#: What NUTS and HMC refuse: an improper prior only.  A model's enumerated discrete sites they sum out, on either
#: kernel (the zoo's marginal potential, :mod:`pyro_bdl.inference.mcmc.potential`; Pyro's enumerates them).
SUMS_OUT_ENUMERATED = frozenset({"improper-prior"})


def _register() -> None:
    # kernel: "zoo" (pyro_bdl.inference.mcmc.zoo, chains together) or "pyro" (Pyro's NUTS / HMC, one after another)
    hmc = {"samples": 1000, "warmup": 500, "chains": 2, "target_accept": 0.8, "jit": False, "full_mass": False,
           "kernel": "zoo"}
    quick = {"samples": 60, "warmup": 40}
    register_method(Method("nuts", "mcmc", "No-U-Turn sampler (adaptive HMC), the gold standard",
                           functools.partial(run_mcmc, "nuts"), {**hmc, "max_tree_depth": 10}, quick=quick,
                           refuses=SUMS_OUT_ENUMERATED, processes="split", outputs=ChainInfo,
                           diagnose=JudgeChains()))
    register_method(Method("hmc", "mcmc", "Hamiltonian Monte Carlo, trajectory length pi/2, adapted step size and mass "
                           "matrix (diagonal, or dense: full_mass)", functools.partial(run_mcmc, "hmc"), hmc, quick=quick,
                           refuses=SUMS_OUT_ENUMERATED, processes="split", outputs=ChainInfo,
                           diagnose=JudgeChains()))
    register_method(Method("metropolis", "mcmc", "random-walk Metropolis, step size adapted to 23.4% acceptance",
                           functools.partial(run_mcmc, "metropolis"), {"samples": 5000, "warmup": 2000, "chains": 2},
                           requires=frozenset({"continuous", "low-dimensional"}), quick={"samples": 100, "warmup": 100},
                           outputs=ChainInfo, diagnose=JudgeChains()))


_register()
