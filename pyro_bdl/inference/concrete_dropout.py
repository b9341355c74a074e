r"""Concrete dropout (Gal, Hron & Kendall 2017): MC dropout whose rate is learned per layer by gradient.

MC dropout (:mod:`pyro_bdl.inference.dropout`) fixes the rate :math:`p`; here each dropped layer
:math:`\ell` has its own :math:`p_\ell`, optimised with the weights on the same objective.  Bernoulli masks
have no gradient in :math:`p`, so training draws the concrete (relaxed Bernoulli) mask

.. math::

    z = 1 - \sigma\!\Big(\tfrac{1}{t}\big(\operatorname{logit} p + \log u - \log(1 - u)\big)\Big),
    \qquad u \sim U(0, 1),

which tends to a :math:`\mathrm{Bernoulli}(1 - p)` draw as the temperature :math:`t \to 0` (:math:`t = 0.1`,
the paper's), per example and input unit (``mask="unit"``) or per weight (``mask="weight"``, DropConnect).
The objective is MC dropout's plus the terms that depend on :math:`p` alone: per layer, with :math:`K_\ell`
Bernoulli variables per network draw (its input units, or its weights),

.. math::

    -\mathcal L = -\sum_i \mathbb E_z[\log p(y_i \mid x_i, M \circ z)]
        - \sum_\ell \big[(1 - p_\ell) \log p(M_\ell) + p_\ell \log p(0)\big] - \sum_\ell K_\ell\, \mathcal H(p_\ell),
    \qquad \mathcal H(p) = -p \log p - (1 - p) \log(1 - p).

The middle term is the exact expected log prior at a dropped-out draw (each column, or weight, is :math:`M`'s or
zero); under :math:`\mathcal N(0, s^2)` it is Gal's weight decay :math:`(1 - p)\lVert M\rVert^2 / (2 s^2)` up to
a constant.  The entropy is the dropout part of Gal's KL approximation: it pulls :math:`p` towards 1/2, the
likelihood pulls it down where dropped units cost fit, so with more data (a likelihood summed over more points)
the learned rate falls (the paper's Fig. 2).  After training the draws are Bernoulli-dropped networks at the
learned rates (one mask per draw), and ``info.dropout_p`` reports them by layer, e.g.
``{"layer1": 0.07, "layer2": 0.21}``.

Example
-------
>>> import pyro_bdl
>>> fit = pyro_bdl.fit("bnn-regressor", "sine", inference="concrete-dropout", options={"hidden": (8,)}, steps=30,
...                    samples=5, progress=False, seed=0)
>>> sorted(fit.info.dropout_p), 0 < fit.info.dropout_p["layer1"] < 1
(['layer1'], True)
"""

from __future__ import annotations

import pyro
import torch
from pyro import poutine
from torch.distributions import constraints

from pyro_bdl.inference.base import Draws
from pyro_bdl.inference.dropout import DropoutInfo, DropoutMessenger, check_mask, fit_dropout, resolve_dropout_sites
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.svi import ADAM_SETTINGS

__all__ = ["ConcreteRates", "run_concrete_dropout", "TEMPERATURE"]

#: The relaxation's temperature (Gal, Hron & Kendall 2017 use 0.1): low enough that the masks are nearly 0 or 1.
TEMPERATURE = 0.1


class ConcreteRates:
    """The learned rates, one ``pyro.param`` per dropped weight site (``concrete.<site>.p``, in (0, 1), started at
    ``p``), and the terms of the objective that depend on them (the module docstring).

    Parameters
    ----------
    model, data : the model and its data (traced once for the dropped sites' shapes and priors).
    dropout_sites : predicate on site names, the weight sites dropped.
    p : float in (0, 1), the starting rate of every layer.
    mask : ``"unit"`` (K = the layer's input units) or ``"weight"`` (K = its weights).
    """

    def __init__(self, model, data: dict, dropout_sites, p: float, mask: str, prefix: str = "concrete"):
        if not 0.0 < float(p) < 1.0:
            raise ValueError(f"concrete dropout's starting rate p must lie in (0, 1), got {p}")
        with poutine.block(), torch.no_grad():
            trace = poutine.trace(model).get_trace(**data)
        self.sites = {}  # site -> (K, log p(0), the starting rate as a tensor)
        for name, site in trace.nodes.items():
            if site["type"] == "sample" and not site["is_observed"] and dropout_sites(name):
                value = site["value"]
                K = value.shape[-1] if mask == "unit" else value.shape[-2:].numel()
                log_p0 = float(site["fn"].log_prob(torch.zeros_like(value)).sum())
                self.sites[name] = (int(K), log_p0, value.new_tensor(float(p)))
        if not self.sites:
            raise ValueError("concrete dropout found no latent site to drop in the model")
        self.prefix = prefix

    def values(self) -> dict:
        """Each dropped site's rate (a tensor the optimiser steps), fetched from the param store."""
        return {name: pyro.param(f"{self.prefix}.{name}.p", start, constraint=constraints.unit_interval)
                for name, (_, _, start) in self.sites.items()}

    def log_terms(self, rates: dict) -> torch.Tensor:
        r""":math:`\sum_\ell p_\ell \log p(0) + K_\ell \mathcal H(p_\ell)`: what the log joint gains beyond the
        messenger's :math:`(1 - p)`-scaled prior (a scalar)."""
        total = 0.0
        for name, (K, log_p0, _) in self.sites.items():
            p = rates[name]
            eps = torch.finfo(p.dtype).eps
            q = p.clamp(eps, 1 - eps)
            entropy = -(q * q.log() + (1 - q) * (-q).log1p())
            total = total + p * log_p0 + K * entropy
        return total

    def learned(self) -> dict:
        """The rates after training, as numbers, by weight site."""
        return {name: float(p.detach()) for name, p in self.values().items()}


def run_concrete_dropout(model, data: dict, *, p: float, temperature: float, mask: str = "unit", dropout_sites=None,
                         **settings) -> Draws:
    """Train with concrete dropout masks and a learned rate per layer; draws as MC dropout's at the learned rates.

    ``info.dropout_p``: the learned rate by layer (``{"layer1": 0.07, ...}``); ``tau`` as MC dropout's.
    """
    if not float(temperature) > 0:
        raise ValueError(f"concrete dropout's temperature must be > 0, got {temperature}")
    mask = check_mask(mask)
    dropout_sites = resolve_dropout_sites(model, data, dropout_sites)
    rates = ConcreteRates(model, data, dropout_sites, p, mask)

    def train_model(**kwargs):
        learned = rates.values()
        with DropoutMessenger(learned, dropout_sites, mask=mask, temperature=float(temperature)):
            out = model(**kwargs)
        pyro.factor(f"{rates.prefix}.regulariser", rates.log_terms(learned))
        return out

    out = fit_dropout(model, data, train_model, rates.learned, dropout_sites=dropout_sites, mask=mask,
                      desc="concrete-dropout", **settings)
    out.info.dropout_p = {name.removesuffix(".weight"): p for name, p in out.info.dropout_p.items()}
    return out


def _register() -> None:
    register_method(Method(
        "concrete-dropout", "svi", "Concrete dropout (Gal, Hron & Kendall): MC dropout with the rate learned per "
        "layer; info dropout_p by layer; mask=weight: DropConnect", run_concrete_dropout,
        {"p": 0.1, "temperature": TEMPERATURE, "mask": "unit", "steps": 3000, "lr": 0.01, "samples": 200,
         "batch_size": None, "jit": False, **ADAM_SETTINGS},
        requires=frozenset({"continuous", "network"}), takes_init=True, quick={"steps": 100, "samples": 20},
        processes="data", outputs=DropoutInfo))


_register()
