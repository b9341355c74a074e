r"""What a fitted network with a latent depth answers: its ``predict``, ``evaluate`` and ``report`` hooks.

A model hands these functions ``inputs(result, x) ->`` :class:`DepthInputs` (:func:`depth_inputs` for the
adaptive-depth ResNet, from its options and its registered networks): the log class probabilities at every
depth, the depth distribution used at test time :math:`\pi(z \mid x)`, its prior, and the sizes for counting
multiply-adds.  The decision rules are :mod:`pyro_bdl.models.adaptive_depth.decisions`; the exact posterior of a row's depth given
a label is :math:`p(z \mid x, y) \propto p(z)\, p(y \mid x, z)`.  Compute is multiply-adds per example
(:func:`~pyro_bdl.models.adaptive_depth.networks.multiply_adds`), against the full-depth network (every block, one head).

Example
-------
>>> import torch
>>> logp = torch.log(torch.tensor([[[0.9, 0.1], [0.2, 0.8]]]))      # one row, L = 2 depths, C = 2
>>> inp = DepthInputs(logp, torch.tensor([[0.5, 0.5]]), torch.tensor([0.5, 0.5]), False, 4, 0, 3)
>>> [round(p, 4) for p in posterior_depth(inp, torch.tensor([1]))[0].tolist()]  # p(z | x, y = 1) = (0.1, 0.8) / 0.9
[0.1111, 0.8889]
>>> scores(inp, torch.tensor([0]), threshold=0.85)["test_threshold_depth"]
1.0
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
import pyro
import torch

from pyro_bdl.models.adaptive_depth.decisions import RULES, Decision, decide
from pyro_bdl.models.adaptive_depth.networks import (
    depth_prior,
    guide_multiply_adds,
    guide_network,
    heads_network,
    multiply_adds,
)
from pyro_bdl.posterior.uncertainty import expected_calibration_error

__all__ = ["DepthInputs", "depth_inputs", "posterior_depth", "decisions", "scores", "predict", "evaluate", "report"]


class DepthInputs(NamedTuple):
    """``logp`` (n, L, C): log p(y | x, z = l); ``pi`` (n, L): pi(z | x); ``prior`` (L,): p(z); ``learned``: pi is
    learned (a guide or a global q(z)), so ``mode`` is its mode, not the joint's; ``width`` W, ``guide_macs``: the
    guide's multiply-adds per example (0 without one); ``data_dim`` D."""

    logp: torch.Tensor
    pi: torch.Tensor
    prior: torch.Tensor
    learned: bool
    width: int
    guide_macs: int
    data_dim: int

    def macs(self, d: Decision, rule: str) -> torch.Tensor:
        """Multiply-adds per example of decision ``d`` (n,): blocks and heads run, and the guide if used."""
        C = self.logp.shape[-1]
        guide = self.guide_macs if rule in ("mode", "sample", "marginal") else 0
        return multiply_adds(self.data_dim, C, self.width, d.blocks, d.heads).double() + guide

    @property
    def full_macs(self) -> int:
        """The full-depth network's: every block, one head."""
        return multiply_adds(self.data_dim, self.logp.shape[-1], self.width, self.logp.shape[1], 1)


@torch.no_grad()
def depth_inputs(result, x: torch.Tensor) -> DepthInputs:
    """What the decision rules read for the adaptive-depth ResNet ``result`` (its options and its own parameters)
    at inputs ``x`` (n, D): log p(y | x, z) at every depth and pi(z | x)."""
    o = result.model.keywords
    W, L = int(o["width"]), int(o["blocks"])
    with result.own_params():
        net = heads_network(x, o["num_classes"], W, L, o.get("early_heads", "trained") == "detached")
        logp, prior = torch.log_softmax(net(x), -1), depth_prior(L, o["prior"], o["rate"], x.device)
        pi, learned, guide_macs = prior.expand(len(x), L), True, 0
        if o["depth"] == "global":
            pi = torch.softmax(pyro.param("adaptive_depth.q_depth"), -1).expand(len(x), L)
        elif o["estimator"] == "exact":
            learned = False
        else:
            pi = torch.softmax(guide_network(W, L, x.device)(net.features(x)), -1)
            guide_macs = guide_multiply_adds(W, L)
    return DepthInputs(logp, pi, prior, learned, W, guide_macs, x.shape[-1])


def posterior_depth(inp: DepthInputs, y: torch.Tensor) -> torch.Tensor:
    """p(z = l | x, y) (n, L), exact: proportional to p(z = l) p(y | x, z = l)."""
    logp_y = inp.logp[torch.arange(len(y), device=y.device), :, y.long()]
    return torch.softmax(logp_y + inp.prior.log(), -1)


def decisions(inp: DepthInputs, threshold: float, seed: int = 0) -> dict:
    """rule -> :class:`~pyro_bdl.models.adaptive_depth.decisions.Decision` for every rule."""
    return {rule: decide(rule, inp.logp, inp.pi, threshold, joint=not inp.learned, seed=seed) for rule in RULES}


def scores(inp: DepthInputs, y: torch.Tensor, threshold: float, rule: str = "mode") -> dict:
    """Per rule: ``test_RULE_accuracy``, ``_depth`` (mean blocks run), ``_macs`` and ``_saved`` (1 - macs / the
    full-depth net's); the chosen ``rule``'s as ``test_accuracy``, ``test_mean_depth``, ``test_compute_saved``; the
    marginal predictive's ``test_ll`` and ``test_ece``; the exact posterior mean depth E[z | x, y] of the rows the
    marginal predictive gets right and wrong."""
    y = y.long()
    full = inp.full_macs
    out = {"test_rows": int(len(y)), "full_depth_macs": full}
    made = decisions(inp, threshold)
    for name, d in made.items():
        macs = float(inp.macs(d, name).mean())
        out.update({f"test_{name}_accuracy": float((d.pred == y).double().mean()),
                    f"test_{name}_depth": float(d.blocks.double().mean()), f"test_{name}_macs": macs,
                    f"test_{name}_saved": 1.0 - macs / full})
    out.update(test_accuracy=out[f"test_{rule}_accuracy"], test_mean_depth=out[f"test_{rule}_depth"],
               test_compute_saved=out[f"test_{rule}_saved"])
    prob = made["marginal"].prob
    out["test_ll"] = float(prob[torch.arange(len(y)), y].clamp_min(1e-12).log().mean())
    out["test_ece"] = expected_calibration_error(prob.double().cpu().numpy(), y.cpu().numpy())
    depth = (posterior_depth(inp, y) * torch.arange(1, inp.logp.shape[1] + 1)).sum(-1)
    right = made["marginal"].pred == y
    for label, rows in (("correct", right), ("wrong", ~right)):
        out[f"test_posterior_depth_{label}"] = float(depth[rows].mean()) if bool(rows.any()) else float("nan")
    return out


def _settings(result) -> dict:
    return result.model.keywords


def predict(result, kwargs: dict, inputs) -> pd.DataFrame:
    """Per row: ``pred``, ``depth`` (the head read) and ``blocks`` (run) of the fit's rule, ``prob_c`` (its class
    probabilities), ``post_depth_l`` = p(z = l | x, y = pred) (exact, l = 1..L) and, for a learned pi(z | x),
    ``q_depth_l``."""
    options = _settings(result)
    inp = inputs(result, kwargs[result.spec.data.features])
    d = decide(options["rule"], inp.logp, inp.pi, options["threshold"], joint=not inp.learned)
    table = pd.DataFrame(d.prob.cpu().numpy(), columns=[f"prob_{c}" for c in range(d.prob.shape[-1])])
    table.insert(0, "pred", d.pred.cpu().numpy())
    table.insert(1, "depth", d.depth.cpu().numpy())
    table.insert(2, "blocks", d.blocks.cpu().numpy())
    table["macs"] = inp.macs(d, options["rule"]).cpu().numpy()
    post = posterior_depth(inp, d.pred)
    for l in range(post.shape[-1]):
        table[f"post_depth_{l + 1}"] = post[:, l].cpu().numpy()
    if inp.learned:
        for l in range(post.shape[-1]):
            table[f"q_depth_{l + 1}"] = inp.pi[:, l].cpu().numpy()
    return table


def evaluate(result, test, inputs) -> dict:
    """:func:`scores` of the held-out rows (a Dataset with labels)."""
    options = _settings(result)
    return scores(inputs(result, test.X), test.y, options["threshold"], options["rule"])


def report(result, inputs) -> dict:
    """Training rows: the fit's rule's ``train_accuracy`` and mean blocks, the exact posterior mean depth
    E[z | x, y], and ``depth_posterior``: pi averaged over the rows (a global depth: its q(z)), next to
    ``global_depth_posterior`` p(z | all rows) proportional to p(z) prod_i p(y_i | x_i, z) (exact, given the
    learned weights)."""
    options = _settings(result)
    x, y = result.data[result.spec.data.features], result.data[result.spec.data.target].long()
    inp = inputs(result, x)
    d = decide(options["rule"], inp.logp, inp.pi, options["threshold"], joint=not inp.learned)
    post = posterior_depth(inp, y)
    loglik = inp.logp[torch.arange(len(y), device=y.device), :, y].double().sum(0) + inp.prior.double().log()
    return {"train_accuracy": float((d.pred == y).double().mean()), "train_mean_blocks": float(d.blocks.double().mean()),
            "train_posterior_depth": float((post * torch.arange(1, post.shape[-1] + 1, device=post.device)).sum(-1).mean()),
            "depth_posterior": np.round(inp.pi.double().mean(0).cpu().numpy(), 4).tolist(),
            "global_depth_posterior": np.round(torch.softmax(loglik, 0).cpu().numpy(), 4).tolist()}
