"""The draws of finished chains, stacked as the :class:`~pyro_bdl.inference.base.Draws` every MCMC method returns
(the zoo's kernel, :mod:`pyro_bdl.inference.mcmc.zoo`, and Pyro's, :mod:`pyro_bdl.inference.mcmc.methods`).

Example
-------
>>> import torch
>>> chain = {"samples": {"w": torch.zeros(5, 2)}, "stats": {"diverging": torch.zeros(5, dtype=torch.bool)},
...          "accept": 0.8}
>>> draws = stack_chains([chain, chain])
>>> draws.samples["w"].shape, draws.info.divergences
(torch.Size([2, 5, 2]), 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import math

import numpy as np
import torch

from pyro_bdl.inference.base import Draws
from pyro_bdl.inference.outputs import MethodInfo

__all__ = ["ChainInfo", "stack_chains"]


@dataclass
class ChainInfo(MethodInfo):
    """What an MCMC method returns beside its draws.

    Attributes
    ----------
    mean_accept_prob : the mean acceptance probability of the kept draws, over the chains.
    divergences : the number of divergent transitions among the kept draws.
    slower_path : where the sampler ran a slower form than its fastest (the model's potential not compiled, its
        steps not fused with it) and why, in words; None where it ran the fastest.  The draws are the same either
        way; only the time differs.
    """

    mean_accept_prob: float = math.nan
    divergences: int = 0
    slower_path: str | None = None


def stack_chains(done: list) -> Draws:
    """Finished chains (``{"samples", "stats", "accept"}`` each) stacked as (chains, draws, ...)."""
    samples_out = {k: torch.stack([c["samples"][k] for c in done]) for k in done[0]["samples"]}
    stats_out = {k: np.stack([c["stats"][k].numpy() for c in done]) for k in done[0]["stats"]}
    info = ChainInfo(float(np.mean([c["accept"] for c in done])), int(stats_out["diverging"].sum()))
    return Draws(samples_out, sample_stats=stats_out, info=info)
