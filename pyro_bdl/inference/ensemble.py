r"""Deep ensembles (Lakshminarayanan et al. 2017): S independently initialised MAP fits.

The predictive is the uniform mixture :math:`\frac1S \sum_s p(y \mid x, \hat\theta_s)`.  Each member is
one "chain" of one draw in the InferenceData, so the law of total variance splits its variance
into the members' own noise (aleatoric) and their disagreement (epistemic).
"""

from __future__ import annotations

import numpy as np
import pyro
import torch
from pyro.infer.autoguide import init_to_sample

from pyro_bdl.inference.base import Draws
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.svi import ADAM_SETTINGS, run_map
from pyro_bdl.storage.checkpoint import rng_state, set_rng_state

__all__ = ["run_ensemble"]


def run_ensemble(model, data: dict, *, members: int, steps: int, lr: float, progress: bool, init_loc_fn=None,
                 batch_size=None, checkpoint=None, **adam) -> Draws:
    """``members`` MAP fits from independent random starts (a prior draw each, unless the model says otherwise).

    With a checkpoint, finished members are kept and a rerun continues with the next one.
    """
    if members < 1:
        raise ValueError(f"an ensemble needs at least one member, got members={members}")
    state = (checkpoint.load() if checkpoint is not None else None) or {"members": []}
    done = state["members"]
    if done:
        set_rng_state(state["rng"])
    for _ in range(len(done), members):
        pyro.clear_param_store()
        fit = run_map(model, data, steps=steps, lr=lr, progress=progress, init_loc_fn=init_loc_fn or init_to_sample,
                      batch_size=batch_size, **adam)
        done.append({"samples": fit.samples, "losses": torch.tensor(fit.losses)})
        if checkpoint is not None:
            checkpoint.save({"members": done, "rng": rng_state()})
    samples = {k: torch.cat([m["samples"][k] for m in done]) for k in done[0]["samples"]}  # (members, 1, ...)
    length = max(len(m["losses"]) for m in done)
    losses = np.full((members, length), np.nan)
    for i, m in enumerate(done):
        losses[i, : len(m["losses"])] = m["losses"].numpy()
    return Draws(samples, losses=losses, info={"members": members})


def _register() -> None:
    register_method(Method(
        "ensemble", "ensemble", "deep ensemble: independently initialised MAP fits, one chain each", run_ensemble,
        {"members": 5, "steps": 2000, "lr": 0.01, "batch_size": None, **ADAM_SETTINGS},
        requires=frozenset({"continuous", "network"}), takes_init=True, quick={"steps": 100, "members": 2}))


_register()
