r"""The zoo's HMC transition: ``round(pi/2 / step_size)`` leapfrog steps (trajectory length pi/2, as the ``hmc``
method with Pyro's kernel) and a Metropolis correction, every chain advanced together as one batch.

Each leapfrog step (with the divergence check of its energy error) is one function of tensors (:func:`hmc_step`),
fused with the potential's graph (:meth:`~pyro_bdl.inference.mcmc.dynamics.Dynamics.fused`); a chain that has
taken its steps, or diverged, stands still while the others move.  :class:`HMC` is the transition as the sampling
loop (:mod:`pyro_bdl.inference.mcmc.sampler`) takes it.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> from pyro_bdl.inference.mcmc.dynamics import Dynamics
>>> from pyro_bdl.inference.mcmc.potential import FlatPotential
>>> def model(y):
...     pyro.sample("y", dist.Normal(pyro.sample("mu", dist.Normal(0.0, 1.0)), 1.0), obs=y)
>>> pot = FlatPotential(model, {"y": torch.tensor(0.5)}, compile=False)
>>> dyn = Dynamics(pot, pot.data_tensors({"y": torch.tensor(0.5)}), torch.ones(2, 1))
>>> z = torch.zeros(2, 1)
>>> u, g = dyn.value_and_grad(z)
>>> (z, u, g), stats = HMC().transition(dyn, z, u, g, torch.full((2,), 0.5), torch.Generator().manual_seed(0))
>>> stats["n_steps"].tolist()  # round(pi/2 / 0.5)
[3, 3]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pyro_bdl.inference.mcmc.dynamics import MAX_DELTA_ENERGY, energy_error, leapfrog, select

__all__ = ["HMC", "transition", "hmc_step"]

_HMC_TRAJECTORY = math.pi / 2


def hmc_step(grad_and_value, zc, rc, uc, gc, diverging, moving, step, inverse_mass, h0):
    """One leapfrog step of HMC for the chains ``moving``, as one function of tensors (fused)."""
    z, r, u, g = leapfrog(grad_and_value, inverse_mass, zc, rc, gc, step)
    zc, rc, gc, uc = select(moving, z, zc), select(moving, r, rc), select(moving, g, gc), torch.where(moving, u, uc)
    diverging = diverging | (moving & (energy_error(inverse_mass, u, r, h0) > MAX_DELTA_ENERGY))
    return zc, rc, uc, gc, diverging


def transition(dyn, z, u, g, step_size, generator, max_steps):
    """One HMC draw per chain: round(pi/2 / step_size) leapfrog steps (at most ``max_steps``), then a
    Metropolis correction."""
    C = z.shape[0]
    n_steps = torch.clamp(torch.round(_HMC_TRAJECTORY / step_size), 1, max_steps).long()
    r = dyn.momentum(generator, z)
    h0 = u + dyn.kinetic(r)
    step = step_size.unsqueeze(-1).to(z.dtype)
    state = (z, r, u, g, torch.zeros(C, dtype=torch.bool, device=z.device))
    for t in range(int(n_steps.max())):
        moving = (t < n_steps) & ~state[-1]
        if not bool(moving.any()):
            break
        args = (*state, moving, step, dyn.inverse_mass, h0)
        state = dyn.fused("hmc-step", hmc_step, args)(*args)
    zc, rc, uc, gc, diverging = state
    dh = energy_error(dyn.inverse_mass, uc, rc, h0)
    accept_prob = torch.where(diverging, torch.zeros_like(dh), torch.exp(torch.clamp(-dh, max=0.0)))
    accept = torch.rand(C, generator=generator, device=z.device) < accept_prob
    prop = tuple(select(accept, a, b) for a, b in zip((zc, uc, gc), (z, u, g)))
    return prop, {"diverging": diverging, "n_steps": n_steps, "accept": accept_prob}


@dataclass(frozen=True)
class HMC:
    """The HMC transition for the sampling loop: at most 2^max_tree_depth leapfrog steps a draw (the cap NUTS
    has); no per-draw statistics besides the common ones."""

    max_tree_depth: int = 10
    name = "hmc"
    stats = ()

    @property
    def max_steps(self) -> int:
        """The most leapfrog steps one draw can take."""
        return 2 ** self.max_tree_depth

    def transition(self, dyn, z, u, g, step_size, generator):
        """One draw for every chain (:func:`transition`)."""
        return transition(dyn, z, u, g, step_size, generator, self.max_steps)
