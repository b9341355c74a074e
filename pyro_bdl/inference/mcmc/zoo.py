"""The ``nuts`` and ``hmc`` methods on the zoo's own kernel (``kernel="zoo"``, the default).

:func:`run_zoo_mcmc` builds the model's flat potential once (:func:`~pyro_bdl.inference.mcmc.potential.flat_potential`,
shared across fits of the same model and data shapes), runs all chains together as one batch
(:func:`~pyro_bdl.inference.mcmc.sampler.sample`), and returns the same
:class:`~pyro_bdl.inference.base.Draws` as Pyro's kernels: draws in constrained space and the
per-draw ``diverging``, ``step_size``, ``n_steps``, ``tree_depth`` (NUTS), ``lp``.

Where the sampler runs a slower form than its fastest (a potential that does not trace, steps that do not fuse with
it: :class:`~pyro_bdl.inference.compile.fastest.PotentialCompileWarning`), the fit shows no warning, which the user
could do nothing about: its info says so once, in words (``ChainInfo.slower_path``).

Checkpoints hold finished chains, as with Pyro's kernels (a rerun with more chains runs the missing ones),
and the state of the batch being run, saved every minute and on Ctrl-C
(:data:`~pyro_bdl.inference.mcmc.sampler.SAVE_EVERY_SECONDS`): an interrupted run resumes where it stopped
and draws what the uninterrupted run would have drawn.  The seed of a batch is drawn from torch's global
generator (``pyro.set_rng_seed``).
"""

from __future__ import annotations

import warnings

import torch

from pyro_bdl.inference.base import Draws, as_flag
from pyro_bdl.inference.mcmc.draws import stack_chains
from pyro_bdl.inference.compile.fastest import PotentialCompileWarning
from pyro_bdl.inference.mcmc.dynamics import fusion_of
from pyro_bdl.inference.mcmc.potential import flat_potential
from pyro_bdl.inference.mcmc.sampler import sample
from pyro_bdl.inference.parallel.processes import current_group, gather_rows, my_share
from pyro_bdl.storage.checkpoint import rng_state, set_rng_state

__all__ = ["run_zoo_mcmc"]


def run_zoo_mcmc(name: str, model, data: dict, *, samples: int, warmup: int, chains: int, progress: bool,
                 target_accept: float = 0.8, max_tree_depth: int = 10, jit=False, full_mass=False,
                 checkpoint=None) -> Draws:
    """Kernel ``name`` ("nuts" or "hmc") on all chains at once; ``jit``: compile the sampler's steps fused
    with the potential from the start (else they run traced, by the static runtime, and are compiled only when
    the run is projected to be long enough to pay for it: :data:`~pyro_bdl.inference.mcmc.sampler.COMPILE_AFTER_STEPS`).
    Same arguments as :func:`pyro_bdl.inference.mcmc.methods.run_mcmc`."""
    group = current_group()
    # host-side (a seed, not model data); every process draws the same, and runs its block of chains from it
    first_seed = int(torch.randint(0, 2**62, (), device="cpu"))
    if group.distributed:
        if chains < group.world:
            raise ValueError(f"{chains} chains cannot be split over {group.world} processes: run at least as many "
                             f"chains as processes")
        mine = my_share(chains, group)
        chains, first_seed = len(mine), first_seed + mine.start
        checkpoint = None if checkpoint is None else checkpoint.for_process(group.rank)
    state = (checkpoint.load() if checkpoint is not None else None) or {"chains": []}
    done = state["chains"]
    if done or "batch" in state:
        set_rng_state(state["rng"])
    remaining = chains - len(done)
    if remaining > 0:
        batch = state.get("batch")  # an interrupted batch: its generator's state is in it, no new seed
        seed = first_seed if batch is None else 0
        rng = rng_state()

        def save_batch(sampler_state):
            checkpoint.save({"chains": done, "rng": rng, "batch": sampler_state})

        potential = flat_potential(model, data, remaining, compile=False)
        with warnings.catch_warnings():  # a slower form is the engine's business: said once, in the fit's info
            warnings.simplefilter("ignore", PotentialCompileWarning)
            out = sample(potential, potential.data_tensors(data), chains=remaining, warmup=warmup, samples=samples,
                         kernel=name, target_accept=target_accept, max_tree_depth=max_tree_depth,
                         full_mass=as_flag(full_mass), seed=seed, compile=True if as_flag(jit) else "auto",
                         progress=progress, resume=batch, on_save=None if checkpoint is None else save_batch)
        slower = potential.fallbacks + fusion_of(potential).fallbacks
        values = potential.unpack(out.theta)
        for c in range(remaining):
            done.append({"samples": {k: v[c].detach().clone() for k, v in values.items()},
                         "stats": {k: torch.as_tensor(v[c], device="cpu") for k, v in out.stats.items()},  # host-side
                         "accept": float(out.accept[c])})
        if checkpoint is not None:
            checkpoint.save({"chains": done, "rng": rng_state()})
    draws = stack_chains(gather_chains(done, group))
    if remaining > 0 and slower:
        draws.info.slower_path = "; ".join(slower)
    return draws


def gather_chains(done: list, group) -> list:
    """Every process's finished chains (``{"samples", "stats", "accept"}`` each), in rank order (one process:
    ``done`` as it is)."""
    if not group.distributed:
        return done
    rows = {**{f"samples.{k}": torch.stack([c["samples"][k] for c in done]) for k in done[0]["samples"]},
            **{f"stats.{k}": torch.stack([torch.as_tensor(c["stats"][k]).to(torch.float64) for c in done])
               for k in done[0]["stats"]},
            "accept": torch.tensor([c["accept"] for c in done], dtype=torch.float64)}
    dtypes = {k: torch.as_tensor(v).dtype for k, v in done[0]["stats"].items()}
    rows = gather_rows(rows, group)
    return [{"samples": {k[8:]: v[c] for k, v in rows.items() if k.startswith("samples.")},
             "stats": {k[6:]: v[c].cpu().to(dtypes[k[6:]]) for k, v in rows.items() if k.startswith("stats.")},
             "accept": float(rows["accept"][c])} for c in range(len(rows["accept"]))]
