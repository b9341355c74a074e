"""Where optimisation starts on a user's own program: :func:`init_to_prior_mean`, the centre the program's priors name.

Every method that starts from a point (``svi``'s guide locations, ``map``, ``mle``, ``bbvi``) and the one structural
run of a program (:class:`~pyro_bdl.inference.prototype.Prototype`) start there, so that a program is run at a point
its own density holds finite: not at the mean of a prior whose mean is far out in its tail (NumPyro's GP example's
``LogNormal(0, 10)`` hyperpriors, mean e^50: a kernel matrix no Cholesky factor survives), not at a random prior draw.
"""

from __future__ import annotations

import torch
from pyro.infer.autoguide.initialization import init_to_median

__all__ = ["init_to_prior_mean", "BULK", "EXCHANGEABLE_SPREAD"]

#: The prior's mean is a start where its prior probability below lies in this interval (its CDF there, where the
#: distribution has one): a Normal's 0.5, a Gamma(2, 1)'s 0.59, a LogNormal(0, 1)'s 0.69, a LogNormal(0, 3.3)'s 0.95.
BULK = (0.05, 0.95)


def _in_bulk(fn, value: torch.Tensor) -> bool:
    try:
        q = fn.cdf(value)
    except (NotImplementedError, ValueError, RuntimeError):  # no CDF, or none at this value: the mean stands
        return True
    return bool(((q >= BULK[0]) & (q <= BULK[1])).all()) if torch.isfinite(q).all() else True


def _median(site) -> torch.Tensor:
    """The prior's median where its inverse CDF gives one in the support, else the median of 15 prior draws."""
    fn = site["fn"]
    try:
        value = fn.icdf(torch.full_like(fn.mean, 0.5)).detach()
    except (NotImplementedError, ValueError, RuntimeError):  # no inverse CDF: the median of draws
        return init_to_median(site, num_samples=15)
    if not bool(torch.isfinite(value).all()) or not bool(fn.support.check(value).all()):
        return init_to_median(site, num_samples=15)
    value._pyro_custom_init = False
    return value


def init_to_prior_mean(site=None):
    """Pyro init strategy: the prior's mean where it is finite, in the support and in the prior's bulk (the centre a
    user's prior names: 0 for N(0, 10), 178 for N(178, 20)); the prior's median where the mean lies outside its central
    :data:`BULK` (a LogNormal(0, 10)'s mean e^50 has 0.99999971 of the prior below it: its median is 1); else (a
    Cauchy's, a discrete site's) the median of 15 prior draws.  Where
    ``svi``, ``svi-meanfield``, ``bbvi``, ``map`` and ``mle`` start on a user's own program (``Method.user_init``):
    the median of 15 prior draws, the guides' own default, starts a wide prior's site at random about a third of its
    sd from its centre (the median of 15 draws has sd about 0.32 prior sd), where the centre is the one point the user
    named.
    The entries of a plated site are spread about it (:data:`EXCHANGEABLE_SPREAD`).  The defaults that go with it:
    benchmarks/RESULTS.md, "SVI defaults on user models (issue 35)".

    >>> import pyro.distributions as dist
    >>> float(init_to_prior_mean({"fn": dist.Normal(178.0, 20.0), "name": "a", "value": None, "is_observed": False}))
    178.0
    >>> float(init_to_prior_mean({"fn": dist.LogNormal(0.0, 10.0), "name": "a", "value": None, "is_observed": False}))
    1.0
    """
    if site is None:
        return init_to_prior_mean
    try:
        value = site["fn"].mean.detach()
    except NotImplementedError:
        value = None
    if value is None or not bool(torch.isfinite(value).all()) or not bool(site["fn"].support.check(value).all()):
        return init_to_median(site, num_samples=15)
    if not _in_bulk(site["fn"], value):
        return _median(site)
    if any(frame.size > 1 for frame in site.get("cond_indep_stack", ())):  # entries of a plate: exchangeable
        value = _spread_exchangeable(site["fn"], value)
    value._pyro_custom_init = False  # as Pyro's own strategies mark theirs
    return value


#: Where the entries of a site in a ``pyro.plate`` share one prior mean (exchangeable entries: mixture components,
#: group effects), they start spread evenly over this many prior sds either side of it: started equal, they are a
#: saddle point that gradient steps keep symmetric (two mixture components found as one).  Evenly, not at random, so
#: that no two start close (tests/test_user_models.py, the GMM tutorial's model).  A vector site outside any plate (a
#: regression's coefficients, told apart by their columns) starts at the mean itself.
EXCHANGEABLE_SPREAD = 0.2


def _spread_exchangeable(fn, value: torch.Tensor) -> torch.Tensor:
    """``value`` (the prior mean) with its entries spread evenly over +/- :data:`EXCHANGEABLE_SPREAD` prior sds where
    they are all equal and the spread stays in the support (unchanged for one entry, or where the sd is not
    finite)."""
    if value.numel() < 2 or not bool((value == value.reshape(-1)[0]).all()):
        return value
    try:
        sd = fn.stddev.detach()
    except NotImplementedError:
        return value
    offsets = torch.linspace(-1.0, 1.0, value.numel(), dtype=value.dtype, device=value.device).reshape(value.shape)
    spread = value + EXCHANGEABLE_SPREAD * sd * offsets
    if not bool(torch.isfinite(spread).all()) or not bool(fn.support.check(spread).all()):
        return value
    return spread
