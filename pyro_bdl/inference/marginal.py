r"""Per-row importance weights of a model with local latents and its guide: the ELBO, the importance-sampled
marginal likelihood, and the importance-weighted training bound (IWAE).

For row :math:`i` and draws :math:`z_{ik} \sim q(z \mid x_i)`, :math:`k = 1, \dots, K`, the log weights are
:math:`\log w_{ik} = \log p(x_i, z_{ik}) - \log q(z_{ik} \mid x_i)` (every sample site of the model and the guide,
unscaled: neither the minibatch factor nor a KL weight enters), and

.. math::

    \mathrm{ELBO}_i \approx \frac1K \sum_k \log w_{ik}, \qquad
    \log \hat p(x_i) = \log \frac1K \sum_k w_{ik}, \qquad
    \mathrm{se}(\log \hat p(x_i)) \approx \frac{\mathrm{sd}_k(w_{ik})}{\sqrt K\, \overline{w_{i\cdot}}}

(the delta method).  :math:`\mathbb E \log \hat p(x_i) \le \log p(x_i)`, with equality as :math:`K \to \infty`;
the ELBO lies below both.  The model's rows are one ``pyro.plate`` (dim -1); the K draws are a plate to its
left, and rows and draws are taken in chunks so that a chunk holds at most :data:`CHUNK` (row, draw) pairs.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(x):
...     with pyro.plate("data", len(x)):
...         z = pyro.sample("z", dist.Normal(0.0, 1.0))
...         pyro.sample("x", dist.Normal(z, 1.0), obs=x)
>>> def guide(x):  # the exact posterior N(x / 2, 1 / 2): every weight is p(x) = N(x; 0, 2)
...     with pyro.plate("data", len(x)):
...         pyro.sample("z", dist.Normal(x / 2, 0.5 ** 0.5))
>>> x = torch.tensor([0.0, 1.0])
>>> est = estimate(model, guide, {"x": x}, particles=10)
>>> torch.allclose(est.log_px, dist.Normal(0.0, 2 ** 0.5).log_prob(x).double(), atol=1e-5)
True
>>> torch.allclose(est.elbo, est.log_px, atol=1e-5), bool(est.log_px_se.abs().max() < 1e-5)
(True, True)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pyro
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["log_weights", "particle_dim", "plate_nesting", "estimate", "Estimate", "IWAE_ELBO", "CHUNK", "row_slices"]

#: (row, draw) pairs per chunk: 16384 x 784 pixels of decoder output is 50 MB.
CHUNK = 16384
PARTICLES = "_pyro_bdl_particles"


def _nesting(trace) -> int:
    return max((-f.dim for node in trace.nodes.values() if node["type"] == "sample"
                for f in node["cond_indep_stack"] if f.vectorized and f.dim is not None), default=0)


def plate_nesting(model, guide, data: dict) -> int:
    """How many plates the model and guide nest (one run of each, blocked): enumeration goes left of them."""
    with poutine.block():
        guide_trace = poutine.trace(guide).get_trace(**data)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(**data)
    return max(_nesting(guide_trace), _nesting(model_trace))


def particle_dim(guide, data: dict) -> int:
    """The dim of the draws' plate: left of every plate of the guide (one run of it, blocked)."""
    with poutine.block():
        return -(_nesting(poutine.trace(guide).get_trace(**data)) + 1)


def log_weights(model, guide, data: dict, particles: int = 1, dim: int | None = None) -> tuple[torch.Tensor, float]:
    """``(log w, scale)``: log weights of shape (particles, rows) (differentiable: z is reparameterised) and the
    minibatch factor of the rows' plate (n / B when the model subsamples, else 1).  ``dim``: the draws' plate
    (default: :func:`particle_dim`, one more run of the guide)."""
    with pyro.plate(PARTICLES, particles, dim=particle_dim(guide, data) if dim is None else dim):
        guide_trace = poutine.trace(guide).get_trace(**data)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(**data)
    total, scale = 0.0, 1.0
    for trace, sign in ((model_trace, 1.0), (guide_trace, -1.0)):
        trace.compute_log_prob()
        for site in trace.nodes.values():
            if site["type"] != "sample" or site_is_subsample(site):
                continue
            total = total + sign * site["unscaled_log_prob"]
            for frame in site["cond_indep_stack"]:
                if frame.name != PARTICLES and frame.full_size is not None and frame.size:
                    scale = frame.full_size / frame.size
    return total, scale


class Estimate(NamedTuple):
    """Per row (n,): ``elbo`` (the mean log weight), ``log_px`` (log-mean-exp of the weights), ``log_px_se`` (its
    Monte Carlo standard error, by the delta method); ``particles``: K."""

    elbo: torch.Tensor
    log_px: torch.Tensor
    log_px_se: torch.Tensor
    particles: int


def row_slices(n: int, per: int):
    """Consecutive slices of ``range(n)`` of at most ``per`` rows."""
    return [slice(i, min(i + per, n)) for i in range(0, n, max(int(per), 1))]


def _rows(data: dict, rows: slice, n: int) -> dict:
    return {k: v[rows] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == n else v for k, v in data.items()}


@torch.no_grad()
def estimate(model, guide, data: dict, particles: int = 1000, seed: int | None = 0, chunk: int = CHUNK) -> Estimate:
    """ELBO and importance-sampled log p(x) of every row of ``data`` with K = ``particles`` draws from the guide.

    ``data``: the model's arguments, the row-indexed tensors (first dimension n, the first tensor's) taken in chunks.
    ``seed``: the draws come from this seed and the caller's random streams are left as they were (None: from
    the current streams, which move).
    """
    n = next(v.shape[0] for v in data.values() if isinstance(v, torch.Tensor) and v.dim())
    K = int(particles)
    per_k = max(1, min(K, chunk))
    per_row = max(1, chunk // per_k)
    elbo, log_px, se = [], [], []
    with kept_rng() if seed is not None else _nothing():
        if seed is not None:
            pyro.set_rng_seed(seed)
        dim = particle_dim(guide, _rows(data, slice(0, 1), n))
        for rows in row_slices(n, per_row):
            sub = _rows(data, rows, n)
            w = torch.cat([log_weights(model, guide, sub, min(per_k, K - k), dim)[0].double().expand(-1, rows.stop - rows.start)
                           for k in range(0, K, per_k)])  # (K, rows)
            lme = torch.logsumexp(w, 0) - math.log(K)
            rel = torch.exp(w - lme)  # weights over their mean
            elbo.append(w.mean(0))
            log_px.append(lme)
            se.append(rel.std(0, unbiased=True) / math.sqrt(K) if K > 1 else torch.full_like(lme, math.nan))
    return Estimate(torch.cat(elbo), torch.cat(log_px), torch.cat(se), K)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class IWAE_ELBO:
    """The importance-weighted bound (Burda et al. 2016) for a model whose latents are local to its rows:
    loss = -(n / B) sum_i log (1/K) sum_k w_ik over a minibatch of B rows, K = ``num_particles`` in one vectorised
    pass; a loss callable ``loss(model, guide, **data)`` as :class:`pyro.infer.SVI` takes one.  Pyro's
    ``RenyiELBO(alpha=0)`` uses the scaled log densities inside the log-mean-exp (log (1/K) sum_k w_ik^(n/B)):
    the same bound on the whole data, a different objective when the model subsamples its rows
    (``tests/models/test_vae.py`` shows both)."""

    def __init__(self, num_particles: int = 5):
        self.num_particles = int(num_particles)
        self._dim = None

    def __call__(self, model, guide, *args, **kwargs):
        return self.differentiable_loss(model, guide, *args, **kwargs)

    def differentiable_loss(self, model, guide, *args, **kwargs):
        if self._dim is None:
            self._dim = particle_dim(guide, kwargs)
        w, scale = log_weights(model, guide, kwargs, self.num_particles, self._dim)
        return -scale * (torch.logsumexp(w, 0) - math.log(self.num_particles)).sum()

    def loss(self, model, guide, *args, **kwargs) -> float:
        with torch.no_grad():
            return float(self.differentiable_loss(model, guide, *args, **kwargs))
