r"""Test-time decision rules for a network whose depth is a latent variable: which depth to run, what to answer.

Input: the log class probabilities at every depth, :math:`\log p(y \mid x, z = l)`, ``logp`` (n, L, C), and the
distribution over the depth used at test time, :math:`\pi(z \mid x)`, ``pi`` (n, L) (the prior :math:`p(z)` for
a per-example depth, a guide's :math:`q(z \mid x)`, or the posterior of one global depth).  Every rule returns a
:class:`Decision`: the answer, the depth it read, and the blocks and heads it ran (its compute).

=============  =================================================================================================
``mode``       the mode of the joint :math:`p(y, z \mid x) \propto \pi(z \mid x)\, p(y \mid x, z)`, found
               exactly with early exit: after block :math:`l` the best joint value so far,
               :math:`m_l = \max_{l' \le l, y} \pi(l') p(y \mid x, l')`, is final once
               :math:`m_l \ge \max_{l' > l} \pi(l')`, since no deeper head can beat it (:math:`p(y \mid x, l') \le 1`);
               with a geometric prior of rate :math:`\rho` that is a confidence threshold :math:`1 - \rho`
               (``joint=False``: the mode of :math:`\pi` alone, one head: for a guide or a global depth)
``sample``     :math:`z \sim \pi(z \mid x)`, answer :math:`\arg\max_y p(y \mid x, z)` (one head)
``threshold``  stop at the first head whose confidence :math:`\max_y p(y \mid x, l)` reaches ``threshold``
               (else the last)
``marginal``   :math:`p(y \mid x) = \sum_l \pi(l \mid x)\, p(y \mid x, l)`: every block and head (DUN's predictive)
=============  =================================================================================================

Example
-------
>>> import torch
>>> logp = torch.log(torch.tensor([[[0.6, 0.4], [0.95, 0.05]], [[0.99, 0.01], [0.5, 0.5]]]))
>>> pi = torch.tensor([0.6, 0.4]).expand(2, 2)
>>> d = decide("mode", logp, pi)      # row 0: 0.6 * 0.6 < 0.4 (depth 2 may win) and 0.4 * 0.95 > 0.36
>>> d.depth.tolist(), d.blocks.tolist(), d.pred.tolist()
([2, 1], [2, 1], [0, 0])
>>> decide("threshold", logp, pi, threshold=0.9).blocks.tolist()
[2, 1]
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["RULES", "Decision", "decide"]

#: The decision rules :func:`decide` implements.
RULES = ("mode", "sample", "threshold", "marginal")


class Decision(NamedTuple):
    """Per row (n,): ``pred`` (the answer), ``depth`` (the head read, 1..L; L for ``marginal``), ``blocks`` and
    ``heads`` (how many were run), ``prob`` (n, C): the class probabilities answered."""

    pred: torch.Tensor
    depth: torch.Tensor
    blocks: torch.Tensor
    heads: torch.Tensor
    prob: torch.Tensor


def _at(logp: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    return logp[torch.arange(logp.shape[0], device=logp.device), depth - 1].exp()


def _answer(logp, depth, blocks, heads) -> Decision:
    prob = _at(logp, depth)
    return Decision(prob.argmax(-1), depth, blocks, heads, prob)


def decide(rule: str, logp: torch.Tensor, pi: torch.Tensor, threshold: float = 0.9, joint: bool = True,
           seed: int = 0) -> Decision:
    """Apply ``rule`` (one of :data:`RULES`) to ``logp`` (n, L, C) and ``pi`` (n, L); ``seed`` for ``sample``."""
    n, L, _ = logp.shape
    ones = torch.ones(n, dtype=torch.long, device=logp.device)
    if rule == "marginal":
        prob = (pi.unsqueeze(-1) * logp.exp()).sum(-2)
        return Decision(prob.argmax(-1), L * ones, L * ones, L * ones, prob)
    if rule == "sample":
        depth = torch.multinomial(pi, 1, generator=torch.Generator().manual_seed(int(seed))).squeeze(-1) + 1
        return _answer(logp, depth, depth, ones)
    if rule == "threshold":
        passed = torch.cat([logp.max(-1).values.exp()[:, :-1] >= threshold, torch.ones(n, 1, dtype=torch.bool)], -1)
        depth = passed.long().argmax(-1) + 1  # the first head that passes
        return _answer(logp, depth, depth, depth)
    if rule == "mode":
        log_pi = pi.clamp_min(1e-30).log()
        if not joint:
            depth = log_pi.argmax(-1) + 1
            return _answer(logp, depth, depth, ones)
        score = logp.max(-1).values + log_pi                     # max_y log p(y, z = l | x), (n, L)
        best = score.cummax(-1).values                            # m_l
        tail = torch.cat([log_pi.flip(-1).cummax(-1).values.flip(-1)[:, 1:], torch.full((n, 1), -torch.inf, device=logp.device)], -1)
        blocks = (best >= tail).long().argmax(-1) + 1             # the first l at which m_l is final
        run = torch.arange(1, L + 1, device=logp.device) <= blocks.unsqueeze(-1)
        depth = score.masked_fill(~run, -torch.inf).argmax(-1) + 1
        return _answer(logp, depth, blocks, blocks)
    raise ValueError(f"unknown decision rule {rule!r}; choose one of: {', '.join(RULES)}")
