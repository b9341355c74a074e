r"""Hamiltonian dynamics on a batch of chains: momentum, kinetic energy, leapfrog, and the sampler's fused steps.

Chains are rows: positions and momenta (C, D), a per-chain inverse mass matrix (C, D) diagonal or (C, D, D) dense.
The functions here are plain functions of tensors, so that a sampler's step built from them (a NUTS leaf, an HMC
step) traces to one graph.  :class:`Dynamics` holds a run's potential, data and mass matrix, and gives the run its
steps fused with the potential's traced graph (:func:`fuse_with`: one call to the compiler,
:class:`~pyro_bdl.inference.compile.fusion.Fusion`), kept for later fits on the same potential.

Example
-------
>>> import torch
>>> inverse_mass = torch.ones(2, 3)
>>> def grad_and_value(z):  # U = |z|^2 / 2
...     return z, 0.5 * (z * z).sum(-1)
>>> z, r = torch.zeros(2, 3), torch.ones(2, 3)
>>> z1, r1, u1, g1 = leapfrog(grad_and_value, inverse_mass, z, r, z, torch.full((2, 1), 0.1))
>>> z1.shape, u1.shape
(torch.Size([2, 3]), torch.Size([2]))
>>> energy_error(inverse_mass, u1, r1, kinetic_energy(inverse_mass, r)).abs().max() < 1e-3
tensor(True)
"""

from __future__ import annotations

import math
import weakref

import torch

from pyro_bdl.inference.compile.fusion import Fusion, contiguous_tensors

__all__ = ["Dynamics", "MAX_DELTA_ENERGY", "energy_error", "fuse_with", "fusion_of", "kinetic_energy", "leapfrog",
           "scaled_momentum", "select", "velocity"]

#: An energy error above this marks a divergent transition (Stan's and Pyro's threshold).
MAX_DELTA_ENERGY = 1000.0


def velocity(inverse_mass, r):
    """M^-1 r for momenta (..., C, D), inverse mass (C, D) diagonal or (C, D, D) dense."""
    if inverse_mass.dim() == 3:
        return (inverse_mass @ r.unsqueeze(-1)).squeeze(-1)
    return inverse_mass * r


def scaled_momentum(factor, eps):
    """Momenta r = F eps ~ N(0, M) from standard normal ``eps`` (C, D), F F^T = M: (C, D) diagonal or (C, D, D)."""
    if factor.dim() == 3:
        return (factor @ eps.unsqueeze(-1)).squeeze(-1)
    return eps * factor


def kinetic_energy(inverse_mass, r):
    """r^T M^-1 r / 2 per chain: momenta (..., C, D) -> (..., C)."""
    return 0.5 * (r * velocity(inverse_mass, r)).sum(-1)


def leapfrog(grad_and_value, inverse_mass, z, r, g, step):
    """One velocity-Verlet step of signed size ``step`` (C, 1): -> z, r, U, grad."""
    r = r - 0.5 * step * g
    z = z + step * velocity(inverse_mass, r)
    g, u = grad_and_value(z)
    r = r - 0.5 * step * g
    return z, r, u, g


def energy_error(inverse_mass, u, r, h0):
    """H(z, r) - h0 per chain (C,), +inf where it is NaN."""
    dh = u + kinetic_energy(inverse_mass, r) - h0
    return torch.where(torch.isnan(dh), torch.full_like(dh, math.inf), dh)


def select(mask, a, b):
    """Per-chain select: mask (C,) against tensors (C, ...)."""
    return torch.where(mask.view(-1, *([1] * (a.dim() - 1))), a, b)


#: potential -> the :class:`~pyro_bdl.inference.compile.fusion.Fusion` of its graph: the fused steps later fits on
#: the same (cached: :func:`~pyro_bdl.inference.mcmc.potential.flat_potential`) potential reuse; gone with it.
_FUSIONS = weakref.WeakKeyDictionary()


def fusion_of(potential):
    """The fused steps kept for ``potential`` (built: :meth:`~pyro_bdl.inference.mcmc.potential.FlatPotential.build`),
    a :class:`~pyro_bdl.inference.compile.fusion.Fusion` of its graph."""
    fusion = _FUSIONS.get(potential)
    if fusion is None:
        fusion = _FUSIONS[potential] = Fusion(potential.graph)
    return fusion


def fuse_with(potential, key, step, example: tuple, tensors: tuple, *, compile: bool, evaluates: bool = True,
              fixed: dict | None = None):
    """``step(grad_and_value, *args)`` (tensors in, a tuple of tensors out, no Python branching on values) as one
    function ``fused(*args) -> tuple`` with ``potential``'s traced graph inlined and its data ``tensors`` bound:
    run traced (the static runtime), or compiled by inductor (``compile=True``; seconds)
    (:meth:`~pyro_bdl.inference.compile.fusion.Fusion.fuse`).  ``evaluates``: whether ``step`` calls the potential
    (counted in its ``evaluations``).  ``example``: arguments of the shapes (and strides) it will be called with;
    ``key``: names the step and those shapes (the fused function is kept with the potential, :func:`fusion_of`, so
    later fits reuse it); ``fixed``: argument index -> the value that argument always has in these calls.  Where
    fusing fails, ``step`` runs op by op on the potential's batched function, with one warning."""
    tensors = contiguous_tensors(tensors)  # as compiled (fusion.inductor)
    potential.build((fixed or {}).get(0, example[0]), tensors)
    fused = fusion_of(potential).fuse(key, step, example, tensors, eager=potential.batched, compile=compile,
                                      fixed=fixed, stacklevel=3)

    def call(*args):
        potential.evaluations += evaluates
        return fused(*args, *tensors)

    return call


class Dynamics:
    """Potential, kinetic energy and leapfrog for chains (C, D) with per-chain inverse mass matrices;
    the sampler's steps fused with the potential (:func:`fuse_with`)."""

    def __init__(self, potential, tensors, inverse_mass, compile=False):
        self.potential, self.tensors, self.compile = potential, tensors, compile
        self._steps = {}  # (name, compile) -> fused step (a name is one step and fixed arguments; a run's shapes
        # and mass form never change)
        self.set_mass(inverse_mass)

    def set_mass(self, inverse_mass):
        inverse_mass = inverse_mass.contiguous()  # the compiled steps take contiguous inputs (fusion.inductor)
        self.inverse_mass = inverse_mass  # (C, D) diagonal or (C, D, D) dense
        self.dense = inverse_mass.dim() == 3
        if self.dense:  # r ~ N(0, M) as r = F eps, F F^T = M = inverse_mass^-1: F = L^-T, inverse_mass = L L^T
            # (in float64 and without forming M: an ill-conditioned posterior's M can fail a float32 Cholesky)
            lower = torch.linalg.cholesky(inverse_mass.double())
            eye = torch.eye(lower.shape[-1], dtype=torch.float64, device=lower.device).expand_as(lower)
            self._chol_mass = torch.linalg.solve_triangular(lower, eye, upper=False).mT.to(inverse_mass.dtype)
            self._chol_mass = self._chol_mass.contiguous()
        else:
            self._sd_mass = inverse_mass.rsqrt()

    def value_and_grad(self, z):
        u, g = self.potential.value_and_grad(z, self.tensors)
        return u.detach(), g.detach()

    def _grad_and_value(self, z):
        u, g = self.value_and_grad(z)
        return g, u

    def fused(self, name, step, example, evaluates=True, compile=None, fixed=None):
        """``step`` fused with the potential (compiled as the run is, or as ``compile`` says; ``fixed``: argument
        index -> its value in every call, :func:`fuse_with`); found again by ``name`` in this run (no key of shapes
        to build at every draw), by its shapes with the potential in others."""
        compile = self.compile if compile is None else compile
        fused = self._steps.get((name, compile))
        if fused is None:
            key = (name, self.dense, tuple((tuple(t.shape), t.dtype) for t in example))
            fused = self._steps[name, compile] = fuse_with(self.potential, key, step, example, self.tensors,
                                                           compile=compile, evaluates=evaluates, fixed=fixed)
        return fused

    def kinetic(self, r):
        return kinetic_energy(self.inverse_mass, r)

    @property
    def momentum_factor(self):
        """F with F F^T = M: momenta r = F eps draw N(0, M); (C, D) diagonal or (C, D, D) dense."""
        return self._chol_mass if self.dense else self._sd_mass

    def momentum(self, generator, like):
        return scaled_momentum(self.momentum_factor, torch.randn(like.shape, generator=generator, dtype=like.dtype,
                                                                          device=like.device))

    def leapfrog(self, z, r, g, step):
        """One velocity-Verlet step of signed size ``step`` (C, 1), unfused: -> z, r, U, grad."""
        return leapfrog(self._grad_and_value, self.inverse_mass, z, r, g, step)
