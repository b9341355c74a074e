r"""The zoo's sampling loop: warm-up and sampling for a batch of chains, with snapshots to resume from.

:func:`sample` runs ``chains`` chains together on a flat potential (:mod:`pyro_bdl.inference.mcmc.potential`):
each draw is one transition of the kernel it is given (:class:`~pyro_bdl.inference.mcmc.nuts.NUTS`, or
:class:`~pyro_bdl.inference.mcmc.hmc.HMC`: trajectory length pi/2), the warm-up adapts step size and mass matrix
(:class:`~pyro_bdl.inference.mcmc.adaptation.WarmUp`), and the sampling draws are kept with per-draw statistics.
The kernels' steps run fused with the potential's graph, traced (by PyTorch's static runtime) or compiled by
inductor; ``compile="auto"`` compiles once the rest of the run is projected to be long enough to pay for it
(:func:`compile_now`).  The sampler's whole state can be saved at any draw and the run resumed from it, drawing
what the uninterrupted run would have drawn.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
...     with pyro.plate("data", len(y)):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> from pyro_bdl.inference.mcmc.potential import FlatPotential
>>> pot = FlatPotential(model, {"y": torch.ones(10)}, compile=False)
>>> out = sample(pot, pot.data_tensors({"y": torch.ones(10)}), chains=2, warmup=50, samples=20, seed=0)
>>> out.theta.shape, sorted(out.stats)
(torch.Size([2, 20, 1]), ['diverging', 'lp', 'n_steps', 'step_size', 'tree_depth'])
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from pyro_bdl.inference.mcmc.adaptation import WarmUp, adaptation_windows, initial_points, reasonable_step_size
from pyro_bdl.inference.mcmc.dynamics import Dynamics
from pyro_bdl.inference.mcmc.hmc import HMC
from pyro_bdl.inference.mcmc.nuts import NUTS

__all__ = ["sample", "Chains", "KERNELS", "COMPILE_AFTER_STEPS", "SAVE_EVERY_SECONDS", "compile_now"]

#: compile="auto" compiles the fused steps when a run is projected to take more (batched) leapfrog steps than this
#: (:func:`compile_now`); 55k: the family's median break-even once the traced steps ran by the static runtime, and
#: the best of 25-70k on recorded runs replayed (benchmarks/history/nuts_speed.md, "static runtime"); level with 45k
#: when checked again with cheaper steps ("a draw's start").
COMPILE_AFTER_STEPS = 55_000
#: How often a checkpointed run saves the sampler's state (and on Ctrl-C): a minute of work at most is redone.
SAVE_EVERY_SECONDS = 60.0
#: The kernels :func:`sample` takes by name, each built from ``max_tree_depth``.
KERNELS = {"nuts": NUTS, "hmc": HMC}


@dataclass
class Chains:
    """What :func:`sample` returns: ``theta`` (chains, draws, D) unconstrained draws, ``stats`` per-draw
    arrays (chains, draws) (``diverging``, ``step_size``, ``n_steps``, ``tree_depth`` (NUTS), ``lp``),
    ``accept`` the mean acceptance statistic of the sampling phase per chain (chains,)."""

    theta: torch.Tensor
    stats: dict
    accept: np.ndarray


def compile_now(i: int, counted: dict, warmup: int, total: int, cap: int) -> bool:
    """compile="auto"'s rule, before draw ``i`` of ``total``: whether the rest of the run, projected from the
    (batched) leapfrog steps of recent draws, needs more than :data:`COMPILE_AFTER_STEPS` steps.  ``counted``:
    draw -> the potential's evaluations before it; ``cap``: the most steps one draw can take.

    Trees at the depth cap (half of it or more over the last 10 draws, as a BNN's are) stay deep: such a run
    is projected at once.  Shorter warm-up trees shrink, 2-15x on hierarchical models, as the mass matrix
    adapts, so those runs are projected from the 10 draws after each mass update, against 1.5 times the
    threshold while more updates come; before the first only a projection past 10 times the threshold
    counts, at draw 20 (benchmarks/history/nuts_speed.md, "rule, replayed").
    """
    recent, settle = 10, 10
    updates = [last + 1 + settle for _, last in adaptation_windows(warmup) if last + 1 + settle < total]
    updates = updates[1:] or updates  # the first window is short (25 draws): its mass matrix is rough
    first = updates[0] if updates else min(50, total // 10)
    left = total - i
    if recent <= i < first:
        rate = (counted[i] - counted[i - recent]) / recent
        if rate >= cap / 2:
            return rate * left > COMPILE_AFTER_STEPS
        return i == 20 and rate * left > 10 * COMPILE_AFTER_STEPS
    if i in updates:  # the fewer steps a draw of the 10 draws after the update and of the 50 before it
        before = max(i - settle - 50, 0)
        rate = min((counted[i] - counted[i - settle]) / settle,
                   (counted[i - settle] - counted[before]) / max(i - settle - before, 1))
        return rate * left > (1.5 if i != updates[-1] else 1.0) * COMPILE_AFTER_STEPS
    if i == first > 0:  # no mass adaptation: one projection, from the draws since half-way
        return (counted[i] - counted[i // 2]) / (i - i // 2) * left > COMPILE_AFTER_STEPS
    return False


def sample(potential, tensors, *, chains: int, warmup: int, samples: int, kernel="nuts",
           target_accept: float = 0.8, max_tree_depth: int = 10, full_mass: bool = False, seed: int = 0,
           compile: bool | str = "auto", progress: bool = False, resume: dict | None = None,
           on_save=None, save_every: float = SAVE_EVERY_SECONDS) -> Chains:
    """Run ``chains`` chains together: ``warmup`` adapted draws (discarded), then ``samples`` draws.

    ``potential``: a :class:`~pyro_bdl.inference.mcmc.potential.FlatPotential`; ``tensors``: its data tensors
    (``potential.data_tensors(data)``).  ``kernel``: "nuts" or "hmc" (trajectory length pi/2, at most
    2^max_tree_depth steps), or a kernel object (:data:`KERNELS`: ``name``, ``stats``, ``max_steps``,
    ``transition``; ``max_tree_depth`` is then its own).  A leapfrog step and its tree bookkeeping run as one
    function with the potential: traced (the static runtime, :mod:`pyro_bdl.inference.compile.static_runtime`),
    or compiled by inductor (``compile=True``; seconds to a minute to compile); ``compile="auto"`` compiles once
    the rest of the run, projected from the leapfrog steps of recent draws (:func:`compile_now`), needs more than
    :data:`COMPILE_AFTER_STEPS` of them.  The same ``seed`` gives the same draws.

    ``on_save(state)`` is called with the sampler's whole state (tensors and numbers, as a checkpoint holds
    them) every ``save_every`` seconds and when the run is interrupted (Ctrl-C, re-raised after the save);
    ``resume=state`` goes on from it, drawing exactly what the uninterrupted run would have drawn.
    """
    if isinstance(kernel, str):
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel '{kernel}': 'nuts' or 'hmc'")
        kernel = KERNELS[kernel](max_tree_depth)
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")
    run = _Run(potential, tensors, kernel, chains=chains, warmup=warmup, samples=samples, full_mass=full_mass,
               seed=seed, compile=compile, target_accept=target_accept, resume=resume)
    return run.loop(progress, on_save, save_every)


class _Run:
    """One run of :func:`sample`: the chains' state (``z`` (C, D), ``u`` (C,), ``g`` (C, D), ``step_size`` (C,)),
    the warm-up, the draws and statistics kept so far, and the loop over the draws left."""

    def __init__(self, potential, tensors, kernel, *, chains, warmup, samples, full_mass, seed, compile,
                 target_accept, resume):
        self.potential, self.kernel, self.chains, self.warmup, self.samples = potential, kernel, chains, warmup, samples
        self.auto = compile == "auto"
        device = potential.device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        dim, dtype, dense = potential.dim, potential.dtype, bool(full_mass)
        inverse_mass = (torch.eye(dim, dtype=dtype, device=device).expand(chains, dim, dim).clone() if dense
                        else torch.ones(chains, dim, dtype=dtype, device=device))
        self.dyn = Dynamics(potential, tensors, inverse_mass, compile=compile is True)
        self.counted, self.start = {}, 0  # draw -> the potential's evaluations before it; the first draw to make
        if resume is None:
            z, u, g = initial_points(self.dyn, chains, dim, dtype, self.generator)
            step_size = torch.ones(chains, dtype=torch.float64, device=device)
            if warmup > 0:
                step_size = reasonable_step_size(self.dyn, z, u, g, step_size, self.generator)
        else:
            z, u, g, step_size = (resume[k].contiguous() for k in ("z", "u", "g", "step_size"))
        self.z, self.u, self.g, self.step_size = z, u, g, step_size
        self.warm_up = WarmUp(warmup, chains, dim, dtype, dense, step_size, target_accept)
        self.theta = torch.empty(chains, samples, dim, dtype=dtype, device=device)
        self.rows = {key: [] for key in ("diverging", "step_size", "n_steps", *kernel.stats, "lp")}
        self.accept_sum = torch.zeros(chains, dtype=torch.float64, device=device)
        if resume is not None:
            self._load(resume)

    def _load(self, state: dict) -> None:
        """Goes on from :meth:`snapshot`'s ``state``."""
        self.start, self.counted = int(state["iteration"]), {int(k): int(v) for k, v in state["counted"].items()}
        self.potential.evaluations, self.dyn.compile = int(state["evaluations"]), bool(state["compile"])
        self.warm_up.load(state)
        self.dyn.set_mass(state["inverse_mass"])
        self.generator.set_state(state["generator"])
        kept = state["theta"].shape[1]
        self.theta[:, :kept] = state["theta"]
        self.rows = {key: [column.cpu().numpy() for column in state["rows"][key].unbind(1)] for key in self.rows}
        self.accept_sum = state["accept_sum"]

    def snapshot(self, i: int, generator_state) -> dict:
        """The state before iteration ``i`` (``generator_state``: the generator's then)."""
        return {"iteration": i, "z": self.z, "u": self.u, "g": self.g, "step_size": self.step_size,
                **self.warm_up.state(), "inverse_mass": self.dyn.inverse_mass, "generator": generator_state,
                "theta": self.theta[:, :max(i - self.warmup, 0)].clone(),
                "rows": {key: torch.as_tensor(np.stack(v, axis=1) if v else np.zeros((self.chains, 0)))
                         for key, v in self.rows.items()},
                "accept_sum": self.accept_sum.clone(), "compile": bool(self.dyn.compile), "counted": dict(self.counted),
                "evaluations": self.potential.evaluations}

    def loop(self, progress: bool, on_save, save_every: float) -> Chains:
        """The draws left, saving the state every ``save_every`` seconds and on Ctrl-C (``on_save``)."""
        total = self.warmup + self.samples
        iterations = range(self.start, total)
        if progress:
            from tqdm.auto import tqdm

            iterations = tqdm(iterations, desc=f"{self.kernel.name} ({self.chains} chains)", initial=self.start,
                              total=total)
        last_save = time.monotonic()
        for i in iterations:
            if on_save is not None and time.monotonic() - last_save > save_every:
                on_save(self.snapshot(i, self.generator.get_state()))
                last_save = time.monotonic()
            generator_state = self.generator.get_state() if on_save is not None else None
            self.counted[i] = self.potential.evaluations
            if self.auto and not self.dyn.compile:  # deterministic: counts steps, never times them
                self.dyn.compile = compile_now(i, self.counted, self.warmup, total, self.kernel.max_steps)
            try:
                (self.z, self.u, self.g), stats = self.kernel.transition(self.dyn, self.z, self.u, self.g,
                                                                         self.step_size, self.generator)
            except KeyboardInterrupt:
                if on_save is not None:
                    del self.counted[i]
                    on_save(self.snapshot(i, generator_state))
                raise
            if i < self.warmup:
                self.step_size = self.warm_up.adapt(i, self.dyn, self.z, self.u, self.g, stats["accept"].double(),
                                                    self.generator)
            else:
                self._record(i - self.warmup, stats)
        out = {key: np.stack(value, axis=1) for key, value in self.rows.items()}
        return Chains(self.theta, out, (self.accept_sum / max(self.samples, 1)).cpu().numpy())

    def _record(self, k: int, stats: dict) -> None:
        """Keeps sampling draw ``k``: the chains' point and the draw's statistics."""
        self.theta[:, k] = self.z
        self.accept_sum += stats["accept"].double()
        self.rows["diverging"].append(stats["diverging"].cpu().numpy().copy())
        self.rows["step_size"].append(self.step_size.cpu().numpy().copy())
        self.rows["n_steps"].append(stats["n_steps"].cpu().numpy().copy())
        self.rows["lp"].append((-self.u).double().cpu().numpy().copy())
        for key in self.kernel.stats:
            self.rows[key].append(stats[key].cpu().numpy().copy())
