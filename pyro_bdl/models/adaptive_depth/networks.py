r"""A residual network with one output head after every block, and the small network that guesses its depth.

:class:`ResidualHeads` maps inputs ``(..., D)`` to the class logits of every depth, ``(..., L, C)``, in one pass:

.. math::

    H_0 = \mathrm{relu}(W_0 x), \qquad H_l = H_{l-1} + F_l(H_{l-1}), \quad
    F_l(h) = V_l\, \mathrm{relu}(U_l h), \qquad \mathrm{logits}_l = A_l H_l + a_l, \quad l = 1, \dots, L.

The logits at depth :math:`l` depend on the first :math:`l` blocks only, so they equal those of the network
truncated after block :math:`l` (``forward(x, depth=l)``).  With ``detached=True`` the heads before the last read
:math:`H_l` through a stop-gradient: same values, but only the last head's loss trains the blocks, so the residual
stream is the full-depth network's and the earlier heads are read-outs of it (see ``early_heads`` of the model).
:class:`DepthGuide` maps the first block's features :math:`H_1` (``(..., W)``) to the logits of a distribution
over the depth, ``(..., L)``.

:func:`multiply_adds` counts the multiply-adds per example of a run that computes ``blocks`` blocks and
``heads`` heads (the stem always), the cost every decision rule reports against the full-depth network
(``blocks = L``, one head).  :func:`depth_prior` is the prior over the depth; :func:`heads_network` and
:func:`guide_network` are the networks a model registers with Pyro (``pyro.module``, under fixed names).

Example
-------
>>> import torch
>>> net = ResidualHeads(64, 10, width=16, blocks=3)
>>> x = torch.rand(5, 64)
>>> net(x).shape, torch.allclose(net(x)[:, :2], net(x, depth=2))
(torch.Size([5, 3, 10]), True)
>>> DepthGuide(16, 3)(net.features(x)).shape
torch.Size([5, 3])
>>> multiply_adds(64, 10, width=16, blocks=3, heads=1)  # the full-depth net: stem + 3 blocks + 1 head
2720
>>> [round(p, 4) for p in depth_prior(3, "geometric", 0.5).tolist()]  # proportional to 1, 1/2, 1/4
[0.5714, 0.2857, 0.1429]
"""

from __future__ import annotations

import torch
from torch import nn

from pyro_bdl.nn.image_networks import registered

__all__ = ["ResidualHeads", "DepthGuide", "multiply_adds", "guide_multiply_adds", "depth_prior", "heads_network",
           "guide_network"]


class ResidualHeads(nn.Module):
    """x (..., D) -> logits at every depth (..., L, C); ``depth``: only the first ``depth`` blocks and heads."""

    def __init__(self, data_dim: int, num_classes: int, width: int = 32, blocks: int = 4, detached: bool = False):
        super().__init__()
        self.detached = bool(detached)
        self.stem = nn.Linear(data_dim, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
                                    for _ in range(blocks))
        self.heads = nn.ModuleList(nn.Linear(width, num_classes) for _ in range(blocks))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """H_1, the first block's output (..., W): what the depth guide reads."""
        h = torch.relu(self.stem(x))
        return h + self.blocks[0](h)

    def forward(self, x: torch.Tensor, depth: int | None = None) -> torch.Tensor:
        L = len(self.blocks)
        depth = L if depth is None else int(depth)
        h, out = torch.relu(self.stem(x)), []
        for l, (block, head) in enumerate(zip(self.blocks[:depth], self.heads[:depth])):
            h = h + block(h)
            out.append(head(h.detach() if self.detached and l < L - 1 else h))  # values the same either way
        return torch.stack(out, -2)


class DepthGuide(nn.Module):
    """H_1 (..., W) -> logits of q(z | x) over the L depths (..., L): one hidden layer."""

    def __init__(self, width: int, blocks: int, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, blocks))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


def multiply_adds(data_dim: int, num_classes: int, width: int, blocks, heads) -> torch.Tensor | int:
    """Multiply-adds per example of the stem, ``blocks`` residual blocks (two W x W layers each) and ``heads``
    output heads (W x C each); ``blocks`` and ``heads`` may be tensors (one count per example)."""
    return data_dim * width + blocks * 2 * width * width + heads * width * num_classes


def guide_multiply_adds(width: int, blocks: int, hidden: int = 16) -> int:
    """Multiply-adds per example of :class:`DepthGuide` (it reads H_1, which the network computes anyway)."""
    return width * hidden + hidden * blocks


def depth_prior(blocks: int, prior: str = "geometric", rate: float = 0.5, device=None) -> torch.Tensor:
    """p(z = l), l = 1..L, as a tensor (L,): ``geometric`` (1 - rate)^(l - 1), ``power`` l^-rate, normalised."""
    l = torch.arange(1, int(blocks) + 1, dtype=torch.float32, device=device)
    weights = (1.0 - rate) ** (l - 1) if prior == "geometric" else l ** -float(rate)
    return weights / weights.sum()


def heads_network(x: torch.Tensor, num_classes: int, width: int, blocks: int,
                  detached: bool = False) -> ResidualHeads:
    """The :class:`ResidualHeads` for inputs like ``x`` (``detached``: the early heads' stop-gradient), registered
    with Pyro as ``adaptive_depth.net``."""
    return registered("adaptive_depth.net", ResidualHeads, x.shape[-1], int(num_classes), int(width), int(blocks),
                      bool(detached), device=x.device)


def guide_network(width: int, blocks: int, device=None) -> DepthGuide:
    """The :class:`DepthGuide`, registered with Pyro as ``adaptive_depth.guide``, on ``device`` (the data's)."""
    return registered("adaptive_depth.guide", DepthGuide, int(width), int(blocks), device=device)
