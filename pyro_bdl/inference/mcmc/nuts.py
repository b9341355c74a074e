r"""The zoo's NUTS transition: an iterative tree, every chain advanced together as one batch.

One draw of NUTS (Hoffman & Gelman 2014, multinomial sampling and the generalised no-U-turn
criterion as in Stan and NumPyro's iterative NUTS) doubles a trajectory until it turns back on
itself.  Here the tree is built without recursion: a new subtree of 2^j leapfrog steps is walked leaf
by leaf, with the momenta and momentum sums of its even leaves kept in preallocated checkpoint
arrays (NumPyro's ``_iterative_build_subtree``), so every U-turn inside the subtree is checked from
them at its odd leaves.  All chains walk their trees in lockstep: at each leaf one batched
leapfrog step (one batched potential-and-gradient call, :mod:`pyro_bdl.inference.mcmc.potential`) moves
every chain still building, and masks freeze the chains whose tree has stopped; a draw costs the
longest tree among the chains.  A leaf (:func:`leaf`: leapfrog step, energy error, multinomial sampling,
checkpoint writes and every U-turn check of that leaf) is one function of tensors, as are the start of a draw
(:func:`transition_start`: momentum, energy, first direction) and the merge of a finished subtree with the start
of the next (:func:`merge_subtree`), each fused with the potential's graph
(:meth:`~pyro_bdl.inference.mcmc.dynamics.Dynamics.fused`) and run by PyTorch's static runtime or compiled:
Python only loops over leaves, draws a subtree's uniforms at once and reads one flag per leaf (whether any chain
still builds).  :class:`NUTS` is the transition as the sampling loop (:mod:`pyro_bdl.inference.mcmc.sampler`)
takes it.

A transition diverges when the energy error of any leapfrog step exceeds 1000 (or is not finite).

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> from pyro_bdl.inference.mcmc.dynamics import Dynamics
>>> from pyro_bdl.inference.mcmc.potential import FlatPotential
>>> def model(y):
...     pyro.sample("y", dist.Normal(pyro.sample("mu", dist.Normal(0.0, 1.0)), 1.0), obs=y)
>>> pot = FlatPotential(model, {"y": torch.tensor(0.5)}, compile=False)
>>> dyn = Dynamics(pot, pot.data_tensors({"y": torch.tensor(0.5)}), torch.ones(3, 1))
>>> z = torch.zeros(3, 1)
>>> u, g = dyn.value_and_grad(z)
>>> (z, u, g), stats = NUTS(max_tree_depth=4).transition(dyn, z, u, g, torch.full((3,), 0.5),
...                                                      torch.Generator().manual_seed(0))
>>> z.shape, sorted(stats), bool((stats["n_steps"] <= 15).all())
(torch.Size([3, 1]), ['accept', 'diverging', 'n_steps', 'tree_depth'], True)
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass

import torch

from pyro_bdl.inference.mcmc.dynamics import (
    MAX_DELTA_ENERGY,
    energy_error,
    kinetic_energy,
    leapfrog,
    scaled_momentum,
    select,
    velocity,
)

__all__ = ["NUTS", "transition", "leaf", "merge_subtree", "transition_start", "checkpoint_masks"]


@dataclass(frozen=True)
class NUTS:
    """The NUTS transition for the sampling loop: trees of at most ``max_tree_depth`` doublings
    (2^max_tree_depth - 1 leapfrog steps a draw); per-draw statistics ``tree_depth`` besides the common ones."""

    max_tree_depth: int = 10
    name = "nuts"
    stats = ("tree_depth",)

    @property
    def max_steps(self) -> int:
        """The most leapfrog steps one draw can take."""
        return 2 ** self.max_tree_depth - 1

    def transition(self, dyn, z, u, g, step_size, generator):
        """One draw for every chain (:func:`transition`)."""
        return transition(dyn, z, u, g, step_size, generator, self.max_tree_depth)


def _is_turning(inverse_mass, r_left, r_right, r_sum):
    """NumPyro's generalised no-U-turn criterion (Betancourt 2017, A.4.2), per chain; (..., C, D) -> (..., C)."""
    rho = r_sum - 0.5 * (r_left + r_right)
    return (((velocity(inverse_mass, r_left) * rho).sum(-1) <= 0)
            | ((velocity(inverse_mass, r_right) * rho).sum(-1) <= 0))


def leaf(grad_and_value, zc, rc, gc, s_log_w, pz, pu, pg, s_r_sum, r_ckpts, r_sum_ckpts, n_steps, sum_accept,
         s_turning, s_diverging, building, step, inverse_mass, h0, store, check, uniform):
    """One leaf of a NUTS subtree for every chain, as one function of tensors (fused with the potential).

    The first 15 arguments are the subtree's state, returned updated in the same order: the trajectory's
    end (zc, rc, gc), the subtree's log weight, proposal (pz, pu, pg) and momentum sum, the momentum and
    momentum-sum checkpoints (depth, C, D), leapfrog steps and acceptance sum, whether it turned or
    diverged, and which chains still build; then how many chains still build (a 0-dim long).
    ``store`` (depth, 1, 1) / ``check`` (depth, 1) select the checkpoints this leaf writes (an even leaf) or
    checks its U-turns against (an odd leaf); ``uniform`` (C,) draws the multinomial proposal.
    """
    z, r, u, g = leapfrog(grad_and_value, inverse_mass, zc, rc, gc, step)
    dh = energy_error(inverse_mass, u, r, h0)
    b = building
    zc, rc, gc = select(b, z, zc), select(b, r, rc), select(b, g, gc)
    # not n_steps + b: slower traced (benchmarks/history/nuts_speed.md, "a third of the time")
    n_steps = torch.where(b, n_steps + 1, n_steps)
    sum_accept = sum_accept + torch.where(b, torch.exp(torch.clamp(-dh, max=0.0)), torch.zeros_like(dh))
    # multinomial sampling within the subtree, one leaf at a time (uniform progressive sampling)
    new_log_w = torch.logaddexp(s_log_w, -dh)
    take = b & (uniform < torch.exp(-dh - new_log_w))
    pz, pu, pg = select(take, z, pz), torch.where(take, u, pu), select(take, g, pg)
    s_log_w = torch.where(b, new_log_w, s_log_w)
    s_r_sum = s_r_sum + select(b, r, torch.zeros_like(r))
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


_BUILDING = _argument_index(leaf, "building")


def merge_subtree(grad_and_value, zc, rc, gc, s_log_w, pz, pu, pg, s_r_sum, r_ckpts, r_sum_ckpts, n_steps,
                  sum_accept, s_turning, s_diverging, building, right_z, right_r, right_g, left_z, left_r, left_g,
                   prop_z, prop_u, prop_g, log_w, r_sum, active, right_way, depth, diverging, uniform, next_way,
                  step_size, inverse_mass):
    """Merge a finished subtree (the state :func:`leaf` returns) into the tree and set out the next
    one, as one function of tensors (no potential evaluation): biased progressive sampling, a subtree that
    turned or diverged is never moved to.  ``next_way`` (C,) uniform draws the next subtree's direction.
    -> right (z, r, g), left (z, r, g), proposal (z, u, g), log_w, r_sum, active, depth, diverging; the next
    subtree's direction, signed step (C, 1) and start (z, r, g) (:func:`_subtree_start`); how many chains are
    still active (a 0-dim long)."""
    to_right, to_left = active & right_way, active & ~right_way
    right_z, right_r, right_g = (select(to_right, a, b) for a, b in ((zc, right_z), (rc, right_r), (gc, right_g)))
    left_z, left_r, left_g = (select(to_left, a, b) for a, b in ((zc, left_z), (rc, left_r), (gc, left_g)))
    p_move = torch.where(s_turning | s_diverging, torch.zeros_like(log_w),
                         torch.exp(torch.clamp(s_log_w - log_w, max=0.0)))
    move = active & (uniform < p_move)
    prop_z, prop_u, prop_g = select(move, pz, prop_z), torch.where(move, pu, prop_u), select(move, pg, prop_g)
    log_w = torch.where(active, torch.logaddexp(log_w, s_log_w), log_w)
    r_sum = r_sum + select(active, s_r_sum, torch.zeros_like(s_r_sum))
    depth = torch.where(active, depth + 1, depth)  # not depth + active.long(): likewise
    diverging = diverging | (active & s_diverging)
    turning = s_turning | _is_turning(inverse_mass, left_r, right_r, r_sum)
    active = active & ~turning & ~s_diverging
    right = (right_z, right_r, right_g)
    left = (left_z, left_r, left_g)
    return (*right, *left, prop_z, prop_u, prop_g, log_w, r_sum, active, depth, diverging,
            *_subtree_start(right, left, next_way, step_size), active.sum())


_ACTIVE = _argument_index(merge_subtree, "active")


def _subtree_start(right, left, uniform, step_size):
    """A new subtree's direction (C,) (right with probability 1/2), signed step (C, 1) and start: the
    right end (z, r, g) of the trajectory if it goes right, else the left end."""
    right_way = uniform < 0.5
    step = torch.where(right_way, step_size, -step_size).unsqueeze(-1)
    return (right_way, step, *(select(right_way, a, b) for a, b in zip(right, left)))


def transition_start(grad_and_value, z, u, g, eps, momentum_factor, uniform, step_size, inverse_mass):
    """The start of a NUTS draw, as one function of tensors: the momentum (``eps`` (C, D) standard normal
    times ``momentum_factor``: M^1/2 as (C, D) diagonal or (C, D, D) dense), its energy h0 (C,), and the
    first subtree's direction, signed step and start (:func:`_subtree_start`)."""
    r0 = scaled_momentum(momentum_factor, eps)
    h0 = u + kinetic_energy(inverse_mass, r0)
    return (r0, h0, *_subtree_start((z, r0, g), (z, r0, g), uniform, step_size))


def _checkpoint_range(n: int) -> tuple[int, int]:
    """For leaf n of a subtree: the checkpoints its U-turn checks use (idx_min, idx_max), as NumPyro's
    ``_leaf_idx_to_ckpt_idxs``; an even leaf stores its momentum at idx_max (and checks nothing)."""
    idx_max = bin(n >> 1).count("1")
    ones = 0
    while (n >> ones) & 1:
        ones += 1
    return idx_max - ones + 1, idx_max


@functools.lru_cache(maxsize=8)
def checkpoint_masks(max_depth: int, device=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per leaf n < 2^(max_depth - 1) of a subtree: its (store, check) masks over the max_depth checkpoints, shaped
    (depth, 1, 1) and (depth, 1) to broadcast against the chains (and coordinates) as :func:`leaf` uses them."""
    masks = []
    for n in range(2 ** max(max_depth - 1, 0)):
        idx_min, idx_max = _checkpoint_range(n)
        store = torch.zeros(max_depth, dtype=torch.bool, device=device)
        check = torch.zeros(max_depth, dtype=torch.bool, device=device)
        if n % 2 == 0:
            store[idx_max] = True
        check[idx_min:idx_max + 1] = True
        masks.append((store.view(-1, 1, 1), check.view(-1, 1)))
    return masks


@functools.lru_cache(maxsize=8)
def _start_values(chains, dim, dtype, max_depth, device=None):
    """The constant tensors a draw starts from (the fused steps never write into their inputs, so every draw
    shares them): false and zero per chain (C,), zero momenta (C, D), -inf, true, integer zero (C,),
    checkpoints (max_depth, C, D)."""
    no = torch.zeros(chains, dtype=torch.bool, device=device)
    return (no, torch.zeros(chains, dtype=dtype, device=device), torch.zeros(chains, dim, dtype=dtype, device=device),
            torch.full((chains,), -math.inf, dtype=dtype, device=device), ~no,
            torch.zeros(chains, dtype=torch.long, device=device), torch.zeros(max_depth, chains, dim, dtype=dtype, device=device))


def transition(dyn, z, u, g, step_size, generator, max_depth):
    """One NUTS draw for every chain: -> (z, u, g) of the draws and per-chain statistics.

    Python only loops: the draw's start, each leaf and each merge (with the next subtree's start) are
    fused calls, and the uniforms of a subtree are drawn at once (its leaves', its merge's and the next
    direction's).  While every chain builds, a traced leaf runs with ``building`` fixed to true, its masks folded
    away (the same values in fewer operations: benchmarks/history/nuts_speed.md, "every chain building"), and while
    every chain is active, a traced merge with ``active`` fixed; compiled steps have no such forms (a second compile
    costs seconds, a mask next to nothing)."""
    C, step_size = z.shape[0], step_size.to(z.dtype)
    eps = torch.randn(z.shape, generator=generator, dtype=z.dtype, device=z.device)
    args = (z, u, g, eps, dyn.momentum_factor, torch.rand(C, generator=generator, dtype=z.dtype, device=z.device),
            step_size,
            dyn.inverse_mass)
    # once a draw: traced is enough, a compile would cost seconds for nothing
    start = dyn.fused("nuts-start", transition_start, args, evaluates=False, compile=False)
    r0, h0, right_way, step, zc, rc, gc = start(*args)
    right, left, prop = (z, r0, g), (z, r0, g), (z, u, g)
    no, zero, zeros, minus_inf, yes, int_zeros, r_ckpts = _start_values(C, z.shape[1], z.dtype, max_depth, z.device)
    log_w, r_sum, active, depth, diverging = zero, r0, yes, int_zeros, no
    n_steps, sum_accept, r_sum_ckpts = int_zeros, zero, r_ckpts
    masks = checkpoint_masks(max_depth, z.device)
    building = active_count = C  # how many chains build (in this subtree), are active (in the tree)
    for j in range(max_depth):
        uniforms = torch.rand(2 ** j + 2, C, generator=generator, dtype=z.dtype, device=z.device).unbind(0)
        state = (zc, rc, gc, minus_inf, zc, u, gc, zeros, r_ckpts, r_sum_ckpts, n_steps, sum_accept, no, no, active)
        for n in range(2 ** j):
            args = (*state, step, dyn.inverse_mass, h0, *masks[n], uniforms[n])
            if building == C and not dyn.compile:  # every chain builds: no masks to apply
                run_leaf = dyn.fused("nuts-leaf-every", leaf, args, fixed={_BUILDING: yes})
            else:
                run_leaf = dyn.fused("nuts-leaf", leaf, args)
            *state, building = run_leaf(*args)
            building = int(building)
            if not building:
                break
        r_ckpts, r_sum_ckpts, n_steps, sum_accept = state[8:12]
        args = (*state, *right, *left, *prop, log_w, r_sum, active, right_way, depth, diverging, *uniforms[-2:],
                step_size, dyn.inverse_mass)
        if active_count == C and not dyn.compile:  # likewise while every chain is active
            merge = dyn.fused("nuts-merge-every", merge_subtree, args, evaluates=False, fixed={_ACTIVE: yes})
        else:
            merge = dyn.fused("nuts-merge", merge_subtree, args, evaluates=False)
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
