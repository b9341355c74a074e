r"""The Beta-Bernoulli coin.

.. math::

    \pi \sim \mathrm{Beta}(\alpha, \beta), \qquad y_i \mid \pi \sim \mathrm{Bernoulli}(\pi).

Conjugacy gives the posterior :math:`\pi \mid y \sim \mathrm{Beta}(\alpha + k, \beta + n - k)` with
:math:`k = \sum_i y_i`, and the posterior predictive of the next toss

.. math::

    p(y_{n+1} = 1 \mid y) = \frac{\alpha + k}{\alpha + \beta + n},

which for the uniform prior is Laplace's rule of succession :math:`(k + 1) / (n + 2)`.  The evidence of the
sequence of tosses is :math:`\log p(y) = \log B(\alpha + k, \beta + n - k) - \log B(\alpha, \beta)`
(:func:`exact_log_evidence`).
The MLE is the sample mean :math:`k / n` and the MAP the mode
:math:`(\alpha + k - 1) / (\alpha + \beta + n - 2)`.

Example
-------
>>> import torch
>>> y = torch.tensor([1.0, 1.0, 1.0])
>>> next_toss_probability(y, alpha=1.0, beta=1.0)
0.8
"""

from __future__ import annotations

import functools
import math

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from pyro_bdl.data.table import check_binary
from pyro_bdl.inference import Domain
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, Task, register

__all__ = ["coin", "beta_guide", "exact_posterior", "exact_log_evidence", "posterior_beta", "next_toss_probability"]


def coin(y: torch.Tensor | None = None, n: int | None = None, alpha: float = 1.0, beta: float = 1.0):
    """Beta-Bernoulli coin. ``y``: (n,) tosses, 0 or 1; or None with ``n``, the number of tosses to simulate."""
    n = len(y) if y is not None else n
    if n is None:
        raise ValueError("coin needs the tosses y or their number n")
    # pi ~ Beta(alpha, beta)
    like = {"device": y.device} if y is not None else {}
    pi = pyro.sample("pi", dist.Beta(torch.tensor(float(alpha), **like), torch.tensor(float(beta), **like)))
    # y_i ~ Bernoulli(pi)
    with pyro.plate("tosses", n):
        return pyro.sample("y", dist.Bernoulli(pi), obs=y)


def beta_guide(y: torch.Tensor | None = None, n: int | None = None, alpha: float = 1.0, beta: float = 1.0):
    """Variational family q(pi) = Beta(a, b): it contains the exact posterior, and its KL to the
    Beta prior is analytic (so ``svi-meanfield`` needs no sampled KL)."""
    a = pyro.param("coin.a", torch.tensor(1.0), constraint=constraints.positive)
    b = pyro.param("coin.b", torch.tensor(1.0), constraint=constraints.positive)
    return pyro.sample("pi", dist.Beta(a, b))


def posterior_beta(y: torch.Tensor, alpha: float = 1.0, beta: float = 1.0) -> dist.Beta:
    """The exact posterior Beta(alpha + k, beta + n - k)."""
    k, n = float(y.sum()), float(y.numel())
    return dist.Beta(torch.tensor(alpha + k, dtype=torch.float64), torch.tensor(beta + n - k, dtype=torch.float64))


def exact_posterior(y, n=None, alpha: float = 1.0, beta: float = 1.0) -> dict:
    """``{"pi": (mean, sd)}`` of the exact posterior."""
    post = posterior_beta(y, alpha, beta)
    return {"pi": (post.mean, post.variance.sqrt())}


def exact_log_evidence(y, n=None, alpha: float = 1.0, beta: float = 1.0) -> float:
    """``log p(y)`` (natural log) of the tosses ``y`` (n,), in the order they came:
    ``log B(alpha + k, beta + n - k) - log B(alpha, beta)``.

    >>> round(math.exp(exact_log_evidence(torch.tensor([1.0, 0.0]))), 10)   # uniform prior: 1! 1! / 3!
    0.1666666667
    """
    k, n = float(y.sum()), float(y.numel())
    return _log_beta(alpha + k, beta + n - k) - _log_beta(alpha, beta)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def next_toss_probability(y: torch.Tensor, alpha: float = 1.0, beta: float = 1.0) -> float:
    """Exact p(y_{n+1} = 1 | y) = (alpha + k) / (alpha + beta + n)."""
    return (alpha + float(y.sum())) / (alpha + beta + float(y.numel()))


def _bound_options(model) -> dict:
    """The prior options bound into ``model`` (the guide takes the same arguments)."""
    return dict(getattr(model, "keywords", {}))


def _report(result) -> dict:
    """The next-toss predictive from the fit, next to the exact one."""
    y = result.data["y"]
    opts = result.record.options
    pi = result.samples["pi"].reshape(-1)
    return {
        "p_next_heads": float(pi.mean()),
        "p_next_heads_exact": next_toss_probability(y, opts.get("alpha", 1.0), opts.get("beta", 1.0)),
        "heads": int(y.sum()),
        "tosses": int(y.numel()),
    }


SPEC = register(
    ModelSpec(
        name="coin",
        model=coin,
        summary="Beta-Bernoulli coin pi ~ Beta(alpha, beta) (exact posterior)",
        options={
            "alpha": Option(1.0, "prior pseudo-count of heads", domain=Domain(float, 0, open_low=True, finite=True)),
            "beta": Option(1.0, "prior pseudo-count of tails", domain=Domain(float, 0, open_low=True, finite=True)),
        },
        default_data="coin",
        data=DataContract(
            features=None,
            size="n",
            task=Task.BINARY,
            check=check_binary,
        ),
        inference=InferenceChoices(
            traits=frozenset({"continuous", "low-dimensional"}),
            guides={"beta": lambda model: functools.partial(beta_guide, **_bound_options(model))},
            default_guides={"svi-meanfield": "beta"},
            # The Beta guide's concentration must grow from 2 to about n; its reparameterised gradients
            # are noisy, so it needs a larger step and a few particles to settle.
            method_defaults={"svi-meanfield": {"lr": 0.1, "steps": 3000, "particles": 4}},
        ),
        hooks=PostFit(
            exact_posterior=exact_posterior,
            exact_evidence=exact_log_evidence,
            report=_report,
        ),
    )
)
