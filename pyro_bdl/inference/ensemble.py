r"""Deep ensembles (Lakshminarayanan et al. 2017): S independently initialised MAP fits.

The predictive is the uniform mixture :math:`\frac1S \sum_s p(y \mid x, \hat\theta_s)`.  Each member is
one "chain" of one draw in the InferenceData, so the law of total variance splits its variance
into the members' own noise (aleatoric) and their disagreement (epistemic).
"""

from __future__ import annotations

import pyro
import torch
from pyro.infer.autoguide import init_to_sample

from dataclasses import dataclass

from pyro_bdl.inference.base import Draws
from pyro_bdl.inference.outputs import MethodInfo
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.svi import ADAM_SETTINGS, run_map
from pyro_bdl.inference.parallel.processes import ProcessGroup, current_group, gather_rows, my_share

__all__ = ["run_ensemble"]


@dataclass
class EnsembleInfo(MethodInfo):
    """What ``ensemble`` returns beside its draws: ``members``, the number of independently initialised MAP fits
    (each one draw, as a chain of its own)."""

    members: int = 0


def run_ensemble(model, data: dict, *, members: int, steps: int, lr: float, progress: bool, init_loc_fn=None,
                 batch_size=None, checkpoint=None, **adam) -> Draws:
    """``members`` MAP fits from independent random starts (a prior draw each, unless the model says otherwise).

    Member m draws from its own seed (one seed drawn from the fit's stream, plus m), so a member is the same
    whichever process runs it: under ``torchrun`` each process fits its block of members
    (:func:`~pyro_bdl.inference.parallel.processes.my_share`) and the blocks are gathered in order.
    With a checkpoint, finished members are kept and a rerun continues with the next one (each process keeps its
    own members' checkpoint).
    """
    if members < 1:
        raise ValueError(f"an ensemble needs at least one member, got members={members}")
    group = current_group()
    if members < group.world:
        raise ValueError(f"an ensemble of {members} members cannot be split over {group.world} processes: "
                         f"use at least as many members as processes")
    first_seed = int(torch.randint(0, 2**31 - members, (), device="cpu"))  # host-side: a seed, not model data
    if checkpoint is not None and group.distributed:
        checkpoint = checkpoint.for_process(group.rank)
    state = (checkpoint.load() if checkpoint is not None else None) or {"members": []}
    done = state["members"]
    mine = my_share(members, group)
    for m in mine[len(done):]:
        pyro.set_rng_seed(first_seed + m)
        pyro.clear_param_store()
        fit = run_map(model, data, steps=steps, lr=lr, progress=progress, init_loc_fn=init_loc_fn or init_to_sample,
                      batch_size=batch_size, processes=ProcessGroup(), **adam)
        done.append({"samples": fit.samples, "losses": torch.as_tensor(fit.losses, device="cpu")})  # host-side
        if checkpoint is not None:
            checkpoint.save({"members": done})
    length = steps  # a member stopped by a non-finite loss has fewer
    gathered = gather_rows({
        **{k: torch.cat([m["samples"][k] for m in done]) for k in (done[0]["samples"] if done else [])},
        "losses": torch.stack([torch.nn.functional.pad(m["losses"], (0, length - len(m["losses"])), value=float("nan"))
                               for m in done]) if done else torch.zeros(0, 0),
    }, group)
    losses = gathered.pop("losses").cpu().numpy()
    return Draws(gathered, losses=losses, info=EnsembleInfo(members))


def _register() -> None:
    register_method(Method(
        "ensemble", "ensemble", "deep ensemble: independently initialised MAP fits, one chain each", run_ensemble,
        {"members": 5, "steps": 2000, "lr": 0.01, "batch_size": None, **ADAM_SETTINGS},
        requires=frozenset({"continuous", "network"}), takes_init=True, quick={"steps": 100, "members": 2},
        processes="split", outputs=EnsembleInfo))


_register()
