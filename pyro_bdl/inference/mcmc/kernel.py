r"""The zoo's NUTS and HMC: iterative trees, chains advanced together as one batch.

One draw of NUTS (Hoffman & Gelman 2014, multinomial sampling and the generalised no-U-turn
criterion as in Stan and NumPyro's iterative NUTS) doubles a trajectory until it turns back on
itself.  Here the tree is built without recursion: a new subtree of 2^j leapfrog steps is walked leaf
by leaf, with the momenta and momentum sums of its even leaves kept in preallocated checkpoint
arrays (NumPyro's ``_iterative_build_subtree``), so every U-turn inside the subtree is checked from
them at its odd leaves.  All chains walk their trees in lockstep: at each leaf one batched
leapfrog step (one batched potential-and-gradient call, :mod:`pyro_bdl.inference.mcmc.potential`) moves
every chain still building, and masks freeze the chains whose tree has stopped; a draw costs the
longest tree among the chains.  A leaf (leapfrog step, energy error, multinomial sampling, checkpoint
writes and every U-turn check of that leaf) is one function of tensors, as are the start of a draw
(momentum, energy, first direction) and the merge of a finished subtree with the start of the next, each
traced together with the potential (:meth:`FlatPotential.fuse`) and run by PyTorch's static runtime
(:mod:`pyro_bdl.inference.compile.static_runtime`) or compiled: Python only loops over leaves, draws a subtree's uniforms
at once and reads one flag per leaf (whether any chain still builds).

Plain HMC takes ``round(pi/2 / step_size)`` leapfrog steps (trajectory length pi/2, as the ``hmc``
method with Pyro's kernel) and a Metropolis correction.

Warm-up is Stan's: dual averaging of the step size towards ``target_accept`` (gamma 0.05, t0 10,
kappa 0.75), and the inverse mass matrix (diagonal, or dense with ``full_mass``) estimated from the
draws of windows of doubling length between an initial buffer of 75 and a final one of 50 draws
(15 % / 10 % of a short warm-up), regularised towards 1e-3 I as Stan does; after each window the step
size is found again (Hoffman & Gelman's heuristic) and dual averaging restarts.  Each chain adapts its
own step size and mass matrix.

A transition diverges when the energy error of any leapfrog step exceeds 1000 (or is not finite).

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

import functools
import inspect
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["sample", "Chains", "adaptation_windows", "MAX_DELTA_ENERGY", "COMPILE_AFTER_STEPS"]

#: An energy error above this marks a divergent transition (Stan's and Pyro's threshold).
MAX_DELTA_ENERGY = 1000.0
#: compile="auto" compiles the fused steps when a run is projected to take more (batched) leapfrog steps than this
#: (:func:`_compile_now`); 55k: the family's median break-even once the traced steps ran by the static runtime, and
#: the best of 25-70k on recorded runs replayed (benchmarks/RESULTS.md, "static runtime"); level with 45k when checked
#: again with cheaper steps ("a draw's start").
COMPILE_AFTER_STEPS = 55_000
_HMC_TRAJECTORY = math.pi / 2
#: How often a checkpointed run saves the sampler's state (and on Ctrl-C): a minute of work at most is redone.
SAVE_EVERY_SECONDS = 60.0


@dataclass
class Chains:
    """What :func:`sample` returns: ``theta`` (chains, draws, D) unconstrained draws, ``stats`` per-draw
    arrays (chains, draws) (``diverging``, ``step_size``, ``n_steps``, ``tree_depth`` (NUTS), ``lp``),
    ``accept`` the mean acceptance statistic of the sampling phase per chain (chains,)."""

    theta: torch.Tensor
    stats: dict
    accept: np.ndarray


# --- Hamiltonian dynamics on a batch of chains --------------------------------------------------

def _velocity(inverse_mass, r):
    """M^-1 r for momenta (..., C, D), inverse mass (C, D) diagonal or (C, D, D) dense."""
    if inverse_mass.dim() == 3:
        return (inverse_mass @ r.unsqueeze(-1)).squeeze(-1)
    return inverse_mass * r


def _momentum(factor, eps):
    """Momenta r = F eps ~ N(0, M) from standard normal ``eps`` (C, D), F F^T = M: (C, D) diagonal or (C, D, D)."""
    if factor.dim() == 3:
        return (factor @ eps.unsqueeze(-1)).squeeze(-1)
    return eps * factor


def _kinetic(inverse_mass, r):
    return 0.5 * (r * _velocity(inverse_mass, r)).sum(-1)


def _leapfrog(grad_and_value, inverse_mass, z, r, g, step):
    """One velocity-Verlet step of signed size ``step`` (C, 1): -> z, r, U, grad."""
    r = r - 0.5 * step * g
    z = z + step * _velocity(inverse_mass, r)
    g, u = grad_and_value(z)
    r = r - 0.5 * step * g
    return z, r, u, g


def _energy_error(inverse_mass, u, r, h0):
    dh = u + _kinetic(inverse_mass, r) - h0
    return torch.where(torch.isnan(dh), torch.full_like(dh, math.inf), dh)


def _is_turning(inverse_mass, r_left, r_right, r_sum):
    """NumPyro's generalised no-U-turn criterion (Betancourt 2017, A.4.2), per chain; (..., C, D) -> (..., C)."""
    rho = r_sum - 0.5 * (r_left + r_right)
    return (((_velocity(inverse_mass, r_left) * rho).sum(-1) <= 0)
            | ((_velocity(inverse_mass, r_right) * rho).sum(-1) <= 0))


def _where(mask, a, b):
    """Per-chain select: mask (C,) against tensors (C, ...)."""
    return torch.where(mask.view(-1, *([1] * (a.dim() - 1))), a, b)


def _nuts_leaf(grad_and_value, zc, rc, gc, s_log_w, pz, pu, pg, s_r_sum, r_ckpts, r_sum_ckpts, n_steps, sum_accept,
               s_turning, s_diverging, building, step, inverse_mass, h0, store, check, uniform):
    """One leaf of a NUTS subtree for every chain, as one function of tensors (fused with the potential).

    The first 15 arguments are the subtree's state, returned updated in the same order: the trajectory's
    end (zc, rc, gc), the subtree's log weight, proposal (pz, pu, pg) and momentum sum, the momentum and
    momentum-sum checkpoints (depth, C, D), leapfrog steps and acceptance sum, whether it turned or
    diverged, and which chains still build; then how many chains still build (a 0-dim long).
    ``store`` (depth, 1, 1) / ``check`` (depth, 1) select the checkpoints this leaf writes (an even leaf) or
    checks its U-turns against (an odd leaf); ``uniform`` (C,) draws the multinomial proposal.
    """
    z, r, u, g = _leapfrog(grad_and_value, inverse_mass, zc, rc, gc, step)
    dh = _energy_error(inverse_mass, u, r, h0)
    b = building
    zc, rc, gc = _where(b, z, zc), _where(b, r, rc), _where(b, g, gc)
    n_steps = torch.where(b, n_steps + 1, n_steps)  # not n_steps + b: slower traced (RESULTS.md, "a third of the time")
    sum_accept = sum_accept + torch.where(b, torch.exp(torch.clamp(-dh, max=0.0)), torch.zeros_like(dh))
    # multinomial sampling within the subtree, one leaf at a time (uniform progressive sampling)
    new_log_w = torch.logaddexp(s_log_w, -dh)
    take = b & (uniform < torch.exp(-dh - new_log_w))
    pz, pu, pg = _where(take, z, pz), torch.where(take, u, pu), _where(take, g, pg)
    s_log_w = torch.where(b, new_log_w, s_log_w)
    s_r_sum = s_r_sum + _where(b, r, torch.zeros_like(r))
    put = store & b.view(1, -1, 1)  # (depth, C, 1)
    r_ckpts = torch.where(put, r, r_ckpts)
    r_sum_ckpts = torch.where(put, s_r_sum, r_sum_ckpts)
    turns = _is_turning(inverse_mass, r_ckpts, r, s_r_sum - r_sum_ckpts + r_ckpts)  # (depth, C)
    s_turning = s_turning | (b & (turns & check).any(0))
    s_diverging = s_diverging | (b & (dh > MAX_DELTA_ENERGY))
    building = b & ~(s_turning | s_diverging)
    return (zc, rc, gc, s_log_w, pz, pu, pg, s_r_sum, r_ckpts, r_sum_ckpts, n_steps, sum_accept, s_turning,
            s_diverging, building, building.sum())


def _argument_index(step, name: str) -> int:
    """The position of ``step``'s argument ``name`` among those after ``grad_and_value``."""
    return list(inspect.signature(step).parameters).index(name) - 1


_BUILDING = _argument_index(_nuts_leaf, "building")


def _merge_subtree(grad_and_value, zc, rc, gc, s_log_w, pz, pu, pg, s_r_sum, r_ckpts, r_sum_ckpts, n_steps,
                   sum_accept, s_turning, s_diverging, building, right_z, right_r, right_g, left_z, left_r, left_g,
                   prop_z, prop_u, prop_g, log_w, r_sum, active, right_way, depth, diverging, uniform, next_way,
                   step_size, inverse_mass):
    """Merge a finished subtree (the state :func:`_nuts_leaf` returns) into the tree and set out the next
    one, as one function of tensors (no potential evaluation): biased progressive sampling, a subtree that
    turned or diverged is never moved to.  ``next_way`` (C,) uniform draws the next subtree's direction.
    -> right (z, r, g), left (z, r, g), proposal (z, u, g), log_w, r_sum, active, depth, diverging; the next
    subtree's direction, signed step (C, 1) and start (z, r, g) (:func:`_subtree_start`); how many chains are
    still active (a 0-dim long)."""
    to_right, to_left = active & right_way, active & ~right_way
    right_z, right_r, right_g = (_where(to_right, a, b) for a, b in ((zc, right_z), (rc, right_r), (gc, right_g)))
    left_z, left_r, left_g = (_where(to_left, a, b) for a, b in ((zc, left_z), (rc, left_r), (gc, left_g)))
    p_move = torch.where(s_turning | s_diverging, torch.zeros_like(log_w),
                         torch.exp(torch.clamp(s_log_w - log_w, max=0.0)))
    move = active & (uniform < p_move)
    prop_z, prop_u, prop_g = _where(move, pz, prop_z), torch.where(move, pu, prop_u), _where(move, pg, prop_g)
    log_w = torch.where(active, torch.logaddexp(log_w, s_log_w), log_w)
    r_sum = r_sum + _where(active, s_r_sum, torch.zeros_like(s_r_sum))
    depth = torch.where(active, depth + 1, depth)  # not depth + active.long(): likewise
    diverging = diverging | (active & s_diverging)
    turning = s_turning | _is_turning(inverse_mass, left_r, right_r, r_sum)
    active = active & ~turning & ~s_diverging
    right = (right_z, right_r, right_g)
    left = (left_z, left_r, left_g)
    return (*right, *left, prop_z, prop_u, prop_g, log_w, r_sum, active, depth, diverging,
            *_subtree_start(right, left, next_way, step_size), active.sum())


_ACTIVE = _argument_index(_merge_subtree, "active")


def _subtree_start(right, left, uniform, step_size):
    """A new subtree's direction (C,) (right with probability 1/2), signed step (C, 1) and start: the
    right end (z, r, g) of the trajectory if it goes right, else the left end."""
    right_way = uniform < 0.5
    step = torch.where(right_way, step_size, -step_size).unsqueeze(-1)
    return (right_way, step, *(_where(right_way, a, b) for a, b in zip(right, left)))


def _transition_start(grad_and_value, z, u, g, eps, momentum_factor, uniform, step_size, inverse_mass):
    """The start of a NUTS draw, as one function of tensors: the momentum (``eps`` (C, D) standard normal
    times ``momentum_factor``: M^1/2 as (C, D) diagonal or (C, D, D) dense), its energy h0 (C,), and the
    first subtree's direction, signed step and start (:func:`_subtree_start`)."""
    r0 = _momentum(momentum_factor, eps)
    h0 = u + _kinetic(inverse_mass, r0)
    return (r0, h0, *_subtree_start((z, r0, g), (z, r0, g), uniform, step_size))


def _hmc_step(grad_and_value, zc, rc, uc, gc, diverging, moving, step, inverse_mass, h0):
    """One leapfrog step of HMC for the chains ``moving``, as one function of tensors (fused)."""
    z, r, u, g = _leapfrog(grad_and_value, inverse_mass, zc, rc, gc, step)
    zc, rc, gc, uc = _where(moving, z, zc), _where(moving, r, rc), _where(moving, g, gc), torch.where(moving, u, uc)
    diverging = diverging | (moving & (_energy_error(inverse_mass, u, r, h0) > MAX_DELTA_ENERGY))
    return zc, rc, uc, gc, diverging


class _Dynamics:
    """Potential, kinetic energy and leapfrog for chains (C, D) with per-chain inverse mass matrices;
    the sampler's steps fused with the potential (:meth:`FlatPotential.fuse`)."""

    def __init__(self, potential, tensors, inverse_mass, compile=False):
        self.potential, self.tensors, self.compile = potential, tensors, compile
        self._steps = {}  # (name, compile) -> fused step (a name is one step and fixed arguments; a run's shapes
        # and mass form never change)
        self.set_mass(inverse_mass)

    def set_mass(self, inverse_mass):
        inverse_mass = inverse_mass.contiguous()  # the compiled steps take contiguous inputs (potential._inductor)
        self.inverse_mass = inverse_mass  # (C, D) diagonal or (C, D, D) dense
        self.dense = inverse_mass.dim() == 3
        if self.dense:  # r ~ N(0, M) as r = F eps, F F^T = M = inverse_mass^-1: F = L^-T, inverse_mass = L L^T
            # (in float64 and without forming M: an ill-conditioned posterior's M can fail a float32 Cholesky)
            lower = torch.linalg.cholesky(inverse_mass.double())
            eye = torch.eye(lower.shape[-1], dtype=torch.float64).expand_as(lower)
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
        index -> its value in every call, :meth:`FlatPotential.fuse`); found again by ``name`` in this run (no key
        of shapes to build at every draw), by its shapes on the potential in others."""
        compile = self.compile if compile is None else compile
        fused = self._steps.get((name, compile))
        if fused is None:
            key = (name, self.dense, tuple((tuple(t.shape), t.dtype) for t in example))
            fused = self._steps[name, compile] = self.potential.fuse(key, step, example, self.tensors, compile=compile,
                                                                     evaluates=evaluates, fixed=fixed)
        return fused

    def kinetic(self, r):
        return _kinetic(self.inverse_mass, r)

    @property
    def momentum_factor(self):
        """F with F F^T = M: momenta r = F eps draw N(0, M); (C, D) diagonal or (C, D, D) dense."""
        return self._chol_mass if self.dense else self._sd_mass

    def momentum(self, generator, like):
        return _momentum(self.momentum_factor, torch.randn(like.shape, generator=generator, dtype=like.dtype))

    def leapfrog(self, z, r, g, step):
        """One velocity-Verlet step of signed size ``step`` (C, 1), unfused: -> z, r, U, grad."""
        return _leapfrog(self._grad_and_value, self.inverse_mass, z, r, g, step)


def _checkpoint_range(n: int) -> tuple[int, int]:
    """For leaf n of a subtree: the checkpoints its U-turn checks use (idx_min, idx_max), as NumPyro's
    ``_leaf_idx_to_ckpt_idxs``; an even leaf stores its momentum at idx_max (and checks nothing)."""
    idx_max = bin(n >> 1).count("1")
    ones = 0
    while (n >> ones) & 1:
        ones += 1
    return idx_max - ones + 1, idx_max


@functools.lru_cache(maxsize=8)
def _checkpoint_masks(max_depth: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per leaf n < 2^(max_depth - 1) of a subtree: its (store, check) masks over the max_depth checkpoints, shaped
    (depth, 1, 1) and (depth, 1) to broadcast against the chains (and coordinates) as :func:`_nuts_leaf` uses them."""
    masks = []
    for n in range(2 ** max(max_depth - 1, 0)):
        idx_min, idx_max = _checkpoint_range(n)
        store, check = torch.zeros(max_depth, dtype=torch.bool), torch.zeros(max_depth, dtype=torch.bool)
        if n % 2 == 0:
            store[idx_max] = True
        check[idx_min:idx_max + 1] = True
        masks.append((store.view(-1, 1, 1), check.view(-1, 1)))
    return masks


# --- one transition -------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _start_values(chains, dim, dtype, max_depth):
    """The constant tensors a draw starts from (the fused steps never write into their inputs, so every draw
    shares them): false and zero per chain (C,), zero momenta (C, D), -inf, true, integer zero (C,),
    checkpoints (max_depth, C, D)."""
    no = torch.zeros(chains, dtype=torch.bool)
    return (no, torch.zeros(chains, dtype=dtype), torch.zeros(chains, dim, dtype=dtype),
            torch.full((chains,), -math.inf, dtype=dtype), ~no, torch.zeros(chains, dtype=torch.long),
            torch.zeros(max_depth, chains, dim, dtype=dtype))


def _nuts_transition(dyn, z, u, g, step_size, generator, max_depth):
    """One NUTS draw for every chain: -> (z, u, g) of the draws and per-chain statistics.

    Python only loops: the draw's start, each leaf and each merge (with the next subtree's start) are
    fused calls, and the uniforms of a subtree are drawn at once (its leaves', its merge's and the next
    direction's).  While every chain builds, a traced leaf runs with ``building`` fixed to true, its masks folded
    away (the same values in fewer operations: benchmarks/RESULTS.md, "every chain building"), and while every
    chain is active, a traced merge with ``active`` fixed; compiled steps have no such forms (a second compile
    costs seconds, a mask next to nothing)."""
    C, step_size = z.shape[0], step_size.to(z.dtype)
    eps = torch.randn(z.shape, generator=generator, dtype=z.dtype)
    args = (z, u, g, eps, dyn.momentum_factor, torch.rand(C, generator=generator, dtype=z.dtype), step_size,
            dyn.inverse_mass)
    # once a draw: traced is enough, a compile would cost seconds for nothing
    start = dyn.fused("nuts-start", _transition_start, args, evaluates=False, compile=False)
    r0, h0, right_way, step, zc, rc, gc = start(*args)
    right, left, prop = (z, r0, g), (z, r0, g), (z, u, g)
    no, zero, zeros, minus_inf, yes, int_zeros, r_ckpts = _start_values(C, z.shape[1], z.dtype, max_depth)
    log_w, r_sum, active, depth, diverging = zero, r0, yes, int_zeros, no
    n_steps, sum_accept, r_sum_ckpts = int_zeros, zero, r_ckpts
    masks = _checkpoint_masks(max_depth)
    building = active_count = C  # how many chains build (in this subtree), are active (in the tree)
    for j in range(max_depth):
        uniforms = torch.rand(2 ** j + 2, C, generator=generator, dtype=z.dtype).unbind(0)
        state = (zc, rc, gc, minus_inf, zc, u, gc, zeros, r_ckpts, r_sum_ckpts, n_steps, sum_accept, no, no, active)
        for n in range(2 ** j):
            args = (*state, step, dyn.inverse_mass, h0, *masks[n], uniforms[n])
            if building == C and not dyn.compile:  # every chain builds: no masks to apply
                leaf = dyn.fused("nuts-leaf-every", _nuts_leaf, args, fixed={_BUILDING: yes})
            else:
                leaf = dyn.fused("nuts-leaf", _nuts_leaf, args)
            *state, building = leaf(*args)
            building = int(building)
            if not building:
                break
        r_ckpts, r_sum_ckpts, n_steps, sum_accept = state[8:12]
        args = (*state, *right, *left, *prop, log_w, r_sum, active, right_way, depth, diverging, *uniforms[-2:],
                step_size, dyn.inverse_mass)
        if active_count == C and not dyn.compile:  # likewise while every chain is active
            merge = dyn.fused("nuts-merge-every", _merge_subtree, args, evaluates=False, fixed={_ACTIVE: yes})
        else:
            merge = dyn.fused("nuts-merge", _merge_subtree, args, evaluates=False)
        out = merge(*args)
        right, left, prop = out[0:3], out[3:6], out[6:9]
        log_w, r_sum, active, depth, diverging = out[9:14]
        right_way, step, zc, rc, gc = out[14:19]
        building = active_count = int(out[19])
        if not building:
            break
    stats = {"diverging": diverging, "n_steps": n_steps, "tree_depth": depth,
             "accept": sum_accept / n_steps.clamp(min=1)}
    return prop, stats


def _hmc_transition(dyn, z, u, g, step_size, generator, max_steps):
    """One HMC draw per chain: round(pi/2 / step_size) leapfrog steps (at most ``max_steps``), then a
    Metropolis correction."""
    C = z.shape[0]
    n_steps = torch.clamp(torch.round(_HMC_TRAJECTORY / step_size), 1, max_steps).long()
    r = dyn.momentum(generator, z)
    h0 = u + dyn.kinetic(r)
    step = step_size.unsqueeze(-1).to(z.dtype)
    state = (z, r, u, g, torch.zeros(C, dtype=torch.bool))
    for t in range(int(n_steps.max())):
        moving = (t < n_steps) & ~state[-1]
        if not bool(moving.any()):
            break
        args = (*state, moving, step, dyn.inverse_mass, h0)
        state = dyn.fused("hmc-step", _hmc_step, args)(*args)
    zc, rc, uc, gc, diverging = state
    dh = _energy_error(dyn.inverse_mass, uc, rc, h0)
    accept_prob = torch.where(diverging, torch.zeros_like(dh), torch.exp(torch.clamp(-dh, max=0.0)))
    accept = torch.rand(C, generator=generator) < accept_prob
    prop = tuple(_where(accept, a, b) for a, b in zip((zc, uc, gc), (z, u, g)))
    return prop, {"diverging": diverging, "n_steps": n_steps, "accept": accept_prob}


# --- warm-up ----------------------------------------------------------------------------------------

def adaptation_windows(warmup: int) -> list[tuple[int, int]]:
    """Stan's slow (mass matrix) windows as (first, last) warm-up iterations, both included.

    >>> adaptation_windows(500)
    [(75, 99), (100, 149), (150, 249), (250, 449)]
    """
    if warmup < 20:
        return []
    start, end, window = 75, 50, 25
    if start + end + window > warmup:
        start, end = int(0.15 * warmup), int(0.1 * warmup)
        window = warmup - start - end
    windows, first, last_start = [], start, warmup - end
    while first < last_start:
        size = window
        if 3 * size <= last_start - first:
            window = 2 * size
        else:
            size = last_start - first
        windows.append((first, first + size - 1))
        first += size
    return windows


class _DualAveraging:
    """Nesterov dual averaging of log step size (Hoffman & Gelman 2014, section 3.2), per chain."""

    def __init__(self, step_size, target):
        self.target = target
        self.restart(step_size)

    def restart(self, step_size):
        self.mu = torch.log(10 * step_size)
        self.t = 0
        self.h_bar = torch.zeros_like(step_size)
        self.x_bar = torch.zeros_like(step_size)

    def update(self, accept):
        """-> the step size for the next warm-up draw."""
        self.t += 1
        eta = 1.0 / (self.t + 10)
        self.h_bar = (1 - eta) * self.h_bar + eta * (self.target - accept)
        log_step = self.mu - math.sqrt(self.t) / 0.05 * self.h_bar
        weight = self.t ** -0.75
        self.x_bar = weight * log_step + (1 - weight) * self.x_bar
        return torch.exp(log_step)

    def final(self):
        return torch.exp(self.x_bar)

    def state(self) -> dict:
        return {"mu": self.mu, "t": self.t, "h_bar": self.h_bar, "x_bar": self.x_bar}

    def load(self, state: dict) -> None:
        self.mu, self.t, self.h_bar, self.x_bar = state["mu"], int(state["t"]), state["h_bar"], state["x_bar"]


def _reasonable_step_size(dyn, z, u, g, step_size, generator):
    """Hoffman & Gelman's heuristic, per chain: double (or halve) the step until the acceptance of one
    leapfrog step crosses 0.8 (Pyro's and Stan's threshold)."""
    threshold = math.log(0.8)

    def log_accept(step):
        r = dyn.momentum(generator, z)
        zn, rn, un, gn = dyn.leapfrog(z, r, g, step.unsqueeze(-1).to(z.dtype))
        return -_energy_error(dyn.inverse_mass, un, rn, u + dyn.kinetic(r))

    direction = torch.where(log_accept(step_size) > threshold, 2.0, 0.5).to(step_size.dtype)
    searching = torch.ones_like(step_size, dtype=torch.bool)
    for _ in range(100):
        trial = torch.where(searching, step_size * direction, step_size)
        still = torch.where(log_accept(trial) > threshold, 2.0, 0.5).to(step_size.dtype) == direction
        step_size = trial
        searching &= still & (step_size > 1e-10) & (step_size < 1e10)
        if not bool(searching.any()):
            break
    return step_size


class _MassWindow:
    """Welford estimate of the draws' covariance (or variance) in one window, per chain."""

    def __init__(self, chains, dim, dense):
        self.dense, self.n = dense, 0
        self.mean = torch.zeros(chains, dim, dtype=torch.float64)
        self.m2 = torch.zeros((chains, dim, dim) if dense else (chains, dim), dtype=torch.float64)

    def add(self, z):
        z = z.double()
        self.n += 1
        delta = z - self.mean
        self.mean += delta / self.n
        delta2 = z - self.mean
        self.m2 += delta.unsqueeze(-1) * delta2.unsqueeze(-2) if self.dense else delta * delta2

    def state(self) -> dict:
        return {"dense": self.dense, "n": self.n, "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_state(cls, state: dict | None):
        if state is None:
            return None
        window = cls.__new__(cls)
        window.dense, window.n, window.mean, window.m2 = bool(state["dense"]), int(state["n"]), state["mean"], state["m2"]
        return window

    def inverse_mass(self, dtype):
        """Stan's regularised estimate: n/(n+5) cov + 1e-3 * 5/(n+5) I."""
        n = self.n
        cov = self.m2 / max(n - 1, 1)
        shrink = 1e-3 * 5.0 / (n + 5.0)
        if self.dense:
            eye = torch.eye(cov.shape[-1], dtype=cov.dtype)
            return (n / (n + 5.0) * cov + shrink * eye).to(dtype)
        return (n / (n + 5.0) * cov + shrink).to(dtype)


# --- the sampler --------------------------------------------------------------------------------

def _initial_points(dyn, chains, dim, dtype, generator, tries=100):
    """Uniform(-2, 2) in unconstrained space (Pyro's init_to_uniform), redrawn where U or its gradient
    is not finite."""
    z = torch.rand(chains, dim, generator=generator, dtype=dtype) * 4 - 2
    for _ in range(tries):
        u, g = dyn.value_and_grad(z)
        bad = ~(torch.isfinite(u) & torch.isfinite(g).all(-1))
        if not bool(bad.any()):
            return z, u, g
        z = _where(bad, torch.rand(chains, dim, generator=generator, dtype=dtype) * 4 - 2, z)
    raise ValueError(f"no initial point with a finite potential and gradient in {tries} draws from "
                     "Uniform(-2, 2) in unconstrained space: check the model's log density")


def _compile_now(i: int, counted: dict, warmup: int, total: int, cap: int) -> bool:
    """compile="auto"'s rule, before draw ``i`` of ``total``: whether the rest of the run, projected from the
    (batched) leapfrog steps of recent draws, needs more than :data:`COMPILE_AFTER_STEPS` steps.  ``counted``:
    draw -> the potential's evaluations before it; ``cap``: the most steps one draw can take.

    Trees at the depth cap (half of it or more over the last 10 draws, as a BNN's are) stay deep: such a run
    is projected at once.  Shorter warm-up trees shrink, 2-15x on hierarchical models, as the mass matrix
    adapts, so those runs are projected from the 10 draws after each mass update, against 1.5 times the
    threshold while more updates come; before the first only a projection past 10 times the threshold
    counts, at draw 20 (benchmarks/RESULTS.md, "compile threshold").
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


def sample(potential, tensors, *, chains: int, warmup: int, samples: int, kernel: str = "nuts",
           target_accept: float = 0.8, max_tree_depth: int = 10, full_mass: bool = False, seed: int = 0,
           compile: bool | str = "auto", progress: bool = False, resume: dict | None = None,
           on_save=None, save_every: float = SAVE_EVERY_SECONDS) -> Chains:
    """Run ``chains`` chains together: ``warmup`` adapted draws (discarded), then ``samples`` draws.

    ``potential``: a :class:`~pyro_bdl.inference.mcmc.potential.FlatPotential`; ``tensors``: its data tensors
    (``potential.data_tensors(data)``).  ``kernel``: "nuts" or "hmc" (trajectory length pi/2, at most
    2^max_tree_depth steps).  A leapfrog step and its tree bookkeeping run as one function with the
    potential: traced (the static runtime, :mod:`pyro_bdl.inference.compile.static_runtime`), or compiled by inductor
    (``compile=True``; seconds to a minute to compile);
    ``compile="auto"`` compiles once the rest of the run, projected from the leapfrog steps of recent draws
    (:func:`_compile_now`), needs more than :data:`COMPILE_AFTER_STEPS` of them.  The same ``seed`` gives the
    same draws.

    ``on_save(state)`` is called with the sampler's whole state (tensors and numbers, as a checkpoint holds
    them) every ``save_every`` seconds and when the run is interrupted (Ctrl-C, re-raised after the save);
    ``resume=state`` goes on from it, drawing exactly what the uninterrupted run would have drawn.
    """
    if kernel not in ("nuts", "hmc"):
        raise ValueError(f"unknown kernel '{kernel}': 'nuts' or 'hmc'")
    generator = torch.Generator().manual_seed(seed)
    dim, dtype = potential.dim, potential.dtype
    dense = bool(full_mass)
    inverse_mass = (torch.eye(dim, dtype=dtype).expand(chains, dim, dim).clone() if dense
                    else torch.ones(chains, dim, dtype=dtype))
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")
    dyn = _Dynamics(potential, tensors, inverse_mass, compile=compile is True)
    cap = 2 ** max_tree_depth - (kernel == "nuts")  # the most leapfrog steps one draw can take
    counted = {}
    start = 0
    if resume is None:
        z, u, g = _initial_points(dyn, chains, dim, dtype, generator)
        step_size = torch.ones(chains, dtype=torch.float64)
        if warmup > 0:
            step_size = _reasonable_step_size(dyn, z, u, g, step_size, generator)
    else:
        z, u, g, step_size = (resume[k].contiguous() for k in ("z", "u", "g", "step_size"))
    averaging = _DualAveraging(step_size, target_accept)
    windows = {last: first for first, last in adaptation_windows(warmup)}
    window_firsts = set(windows.values())
    mass_window = None

    def transition(z, u, g, step_size):
        if kernel == "nuts":
            return _nuts_transition(dyn, z, u, g, step_size, generator, max_tree_depth)
        return _hmc_transition(dyn, z, u, g, step_size, generator, 2 ** max_tree_depth)

    theta = torch.empty(chains, samples, dim, dtype=dtype)
    rows = {key: [] for key in ("diverging", "step_size", "n_steps", "tree_depth", "lp")}
    if kernel != "nuts":
        del rows["tree_depth"]
    accept_sum = torch.zeros(chains, dtype=torch.float64)
    if resume is not None:
        start, counted = int(resume["iteration"]), {int(k): int(v) for k, v in resume["counted"].items()}
        potential.evaluations, dyn.compile = int(resume["evaluations"]), bool(resume["compile"])
        averaging.load(resume["averaging"])
        mass_window = _MassWindow.from_state(resume["mass_window"])
        dyn.set_mass(resume["inverse_mass"])
        generator.set_state(resume["generator"])
        kept = resume["theta"].shape[1]
        theta[:, :kept] = resume["theta"]
        rows = {key: [column.numpy() for column in resume["rows"][key].unbind(1)] for key in rows}
        accept_sum = resume["accept_sum"]

    def snapshot(i, generator_state) -> dict:
        """The state before iteration ``i`` (``generator_state``: the generator's then)."""
        return {"iteration": i, "z": z, "u": u, "g": g, "step_size": step_size, "averaging": averaging.state(),
                "mass_window": None if mass_window is None else mass_window.state(),
                "inverse_mass": dyn.inverse_mass, "generator": generator_state,
                "theta": theta[:, :max(i - warmup, 0)].clone(),
                "rows": {key: torch.as_tensor(np.stack(v, axis=1) if v else np.zeros((chains, 0)))
                         for key, v in rows.items()},
                "accept_sum": accept_sum.clone(), "compile": bool(dyn.compile), "counted": dict(counted),
                "evaluations": potential.evaluations}

    iterations = range(start, warmup + samples)
    if progress:
        from tqdm.auto import tqdm

        iterations = tqdm(iterations, desc=f"{kernel} ({chains} chains)", initial=start, total=warmup + samples)
    last_save = time.monotonic()
    for i in iterations:
        if on_save is not None and time.monotonic() - last_save > save_every:
            on_save(snapshot(i, generator.get_state()))
            last_save = time.monotonic()
        generator_state = generator.get_state() if on_save is not None else None
        counted[i] = potential.evaluations
        if compile == "auto" and not dyn.compile:  # deterministic: counts steps, never times them
            dyn.compile = _compile_now(i, counted, warmup, warmup + samples, cap)
        try:
            (z, u, g), stats = transition(z, u, g, step_size)
        except KeyboardInterrupt:
            if on_save is not None:
                del counted[i]
                on_save(snapshot(i, generator_state))
            raise
        if i < warmup:
            step_size = averaging.update(stats["accept"].double())
            if i in window_firsts:
                mass_window = _MassWindow(chains, dim, dense)
            if mass_window is not None:
                mass_window.add(z)
            if i in windows:
                dyn.set_mass(mass_window.inverse_mass(dtype))
                mass_window = None
                step_size = _reasonable_step_size(dyn, z, u, g, step_size, generator)
                averaging.restart(step_size)
            if i == warmup - 1:
                step_size = averaging.final()
            continue
        k = i - warmup
        theta[:, k] = z
        accept_sum += stats["accept"].double()
        rows["diverging"].append(stats["diverging"].numpy().copy())
        rows["step_size"].append(step_size.numpy().copy())
        rows["n_steps"].append(stats["n_steps"].numpy().copy())
        rows["lp"].append((-u).double().numpy().copy())
        if kernel == "nuts":
            rows["tree_depth"].append(stats["tree_depth"].numpy().copy())
    out = {key: np.stack(value, axis=1) for key, value in rows.items()}
    return Chains(theta, out, (accept_sum / max(samples, 1)).numpy())
