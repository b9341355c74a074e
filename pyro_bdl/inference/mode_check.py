"""After a point fit: did it stop at a mode, or is it following the density out to the edge of a site's support?

A MAP fit of a centred hierarchical model (``theta_j ~ N(mu, tau)``) has no mode: as ``tau`` goes to 0 with every
``theta_j`` at ``mu`` the joint density grows without bound, and the optimiser follows it for as long as it runs
(partially pooled baseball's concentration ``kappa`` does the same towards infinity).  "Run more steps" is then the
wrong advice.  :func:`running_to_an_edge` finds such sites by two tests, both needed:

* the point is at an edge: closer to a finite bound of the site's support than :data:`EDGE_FRACTION` of the
  prior's typical distance from it (the median over prior draws), or, where the support is unbounded, farther from
  the prior's median than that typical distance divided by :data:`EDGE_FRACTION`;
* the density the fit maximised still rises towards it: its slope along the site's unconstrained coordinate (per
  factor e of a scale), the others held where the optimiser left them, is at least :data:`RISE` nats.

At a mode inside the support the second test fails (the slope is zero there); a point that merely lies far out
in its prior fails the first.  An optimiser crawls along such a ridge (a random walk's step size, whose density
grows as sigma^-T with T steps: benchmarks/RESULTS.md, "Ported programs against Pyro"), so a point nearer the
edge than :data:`NEAR_FRACTION` of the typical distance is judged too, by the slope where it is and
:data:`PROBE` units further on (a factor e^4 = 55 closer to the edge): rising at both, no mode lies ahead worth
stopping at; a mode between the two makes the second slope fall.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
...     tau = pyro.sample("tau", dist.HalfNormal(5.0))
...     with pyro.plate("groups", len(y)):
...         theta = pyro.sample("theta", dist.Normal(mu, tau))
...         pyro.sample("y", dist.Normal(theta, 10.0), obs=y)
>>> y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
>>> collapsed = {"mu": torch.full((1, 1), 4.4), "tau": torch.full((1, 1), 1e-4), "theta": torch.full((1, 1, 8), 4.4)}
>>> running_to_an_edge(model, {"y": y}, collapsed)
[('tau', 0.0)]
>>> spread = {**collapsed, "tau": torch.full((1, 1), 2.0)}
>>> running_to_an_edge(model, {"y": y}, spread)
[]
"""

from __future__ import annotations

import math

import torch
from pyro import poutine
from torch.distributions import biject_to, constraints

from pyro_bdl.inference.prior_draws import prior_draws
from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["running_to_an_edge", "EDGE_FRACTION", "NEAR_FRACTION", "PROBE"]

#: A point this much closer to a bound of its support than the prior's median draw is, is at the edge: a scale's
#: prior (half-Normal, half-Cauchy, exponential) puts about 1% of its mass there or less.
EDGE_FRACTION = 1e-2
#: The least rise of the log density towards an edge (nats per unit of the unconstrained coordinate: a factor e of a
#: scale), absolute and in the curvature's units, read as a slope rather than an optimiser's jitter about a mode; the
#: cases that must and must not warn: tests/inference/test_mode_check.py.
RISE = 0.5
#: A point this much closer to a bound than the prior's median is judged by the slope here and :data:`PROBE` further.
NEAR_FRACTION = 0.25
#: How far along the unconstrained coordinate the second slope of a point near an edge is taken (a factor e^4).
PROBE = 4.0


def _bounds(support) -> tuple[float, float]:
    """The (lower, upper) bounds of a support, -inf / inf where it has none (or they differ by entry)."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    lower = 0.0 if support in (constraints.positive, constraints.nonnegative) else getattr(support, "lower_bound", None)
    upper = getattr(support, "upper_bound", None)
    def as_float(bound, none: float) -> float:  # a bound that differs by entry (a tensor of them): not judged
        single = bound.numel() == 1 if isinstance(bound, torch.Tensor) else isinstance(bound, (int, float))
        return float(bound) if single else none

    return as_float(lower, -math.inf), as_float(upper, math.inf)


def _log_density(model, data: dict, values: dict) -> torch.Tensor:
    return poutine.trace(poutine.condition(model, data=values)).get_trace(**data).log_prob_sum()


@torch.no_grad()
def running_to_an_edge(model, data: dict, samples: dict, objective=None, draws: int = 100) -> list[tuple]:
    """The latent sites of a point fit (``samples``: site -> (1, 1, *shape)) that sit at an edge of their support
    with the density still rising towards it: ``[(site, edge), ...]``, the edge a bound or +/-inf.  ``objective``:
    the model whose log density the fit maximised (default ``model``); the prior is drawn from ``model``, ``draws``
    times, leaving the random streams as they were."""
    first, drawn = prior_draws(model, data, draws)
    with kept_rng():
        latent = set(drawn)
        # the latent sites only: a pyro.deterministic site is observed in the trace, and conditioning on it would
        # hold it at its value while the sites it is computed from move
        values = {site: value.reshape(value.shape[2:]) for site, value in samples.items() if site in latent}
        found = []
        for site, point in values.items():
            node = first.nodes[site]
            if not point.is_floating_point():
                continue
            prior = drawn[site].reshape(draws, -1).double().to(point.device)
            support = node["fn"].support
            flat, near = point.double().reshape(-1), None
            edge = _edge(support, flat, prior, EDGE_FRACTION)
            if edge is None:
                edge = near = _edge(support, flat, prior, NEAR_FRACTION)
            if edge is None:
                continue
            the_model = objective or model
            supports = {name: first.nodes[name]["fn"].support for name in values}
            held = _others_at_their_best(the_model, data, values, site, supports)
            if not _rises(the_model, data, held, site, support, edge):
                continue
            if near is not None:  # not at the edge yet: rising there too, PROBE units on?
                further = {**values, site: _towards(point, support, edge, PROBE)}
                held = _others_at_their_best(the_model, data, further, site, supports)
                if not _rises(the_model, data, held, site, support, edge):
                    continue
            found.append((site, edge))
    return found


def _towards(point: torch.Tensor, support, edge: float, units: float) -> torch.Tensor:
    """``point`` moved ``units`` along its unconstrained coordinate towards ``edge``, every entry together."""
    transform = biject_to(support)
    unconstrained = transform.inv(point)
    up = transform(unconstrained + 1.0)
    closer = (up - edge).abs() < (point - edge).abs() if math.isfinite(edge) else up.abs() > point.abs()
    return transform(unconstrained + units * torch.where(closer, 1.0, -1.0).to(point.dtype)).detach()


def _edge(support, point: torch.Tensor, prior: torch.Tensor, fraction: float) -> float | None:
    """The edge of ``support`` some entry of ``point`` (flat) sits at, judged against the ``prior`` draws
    (draws, entries): nearer a bound than ``fraction`` of the draws' typical distance from it, or, towards an
    unbounded side, farther from their median than their typical spread over ``fraction``; None if none is."""
    lower, upper = _bounds(support)
    for bound in (lower, upper):
        if math.isfinite(bound):
            typical = (prior - bound).abs().median(0).values
            if bool(((point - bound).abs() < fraction * typical).any()):
                return bound
    median = prior.median(0).values
    typical = (prior - median).abs().median(0).values
    far = (point - median).abs() > typical / fraction
    for bound, side in ((lower, point < median), (upper, point > median)):
        if not math.isfinite(bound) and bool((far & side).any()):
            return bound
    return None


def _others_at_their_best(model, data: dict, values: dict, site: str, supports: dict, steps: int = 100) -> dict:
    """``values`` with every floating site but ``site`` moved to the log density's maximum given ``site``'s value
    (L-BFGS in the unconstrained coordinates, at most ``steps`` iterations): where an optimiser that follows a ridge
    would be if it had caught up (it lags on a ridge to an edge, the site of the ridge ahead of the others)."""
    free = [name for name, value in values.items() if name != site and value.is_floating_point()]
    if not free:
        return values
    with torch.enable_grad():
        params = {name: biject_to(supports[name]).inv(values[name]).detach().clone().requires_grad_() for name in free}
        optimiser = torch.optim.LBFGS(list(params.values()), max_iter=steps, line_search_fn="strong_wolfe")

        def current() -> dict:
            return {**values, **{name: biject_to(supports[name])(u) for name, u in params.items()}}

        def closure():
            optimiser.zero_grad()
            loss = -_log_density(model, data, current())
            if loss.requires_grad:
                loss.backward()
            return loss

        before = float(closure().detach())
        optimiser.step(closure)
        after = {name: value.detach() for name, value in current().items()}
    # a step that failed (NaN) or did worse leaves the point as the fit left it
    return after if float(_log_density(model, data, after)) >= -before else values


def _rises(model, data: dict, values: dict, site: str, support, edge: float) -> bool:
    """Whether the log density rises towards ``edge`` as ``site`` moves there along its unconstrained coordinate:
    the directional derivative ``g`` (nats per unit, every entry moved together) at least :data:`RISE` and at
    least :data:`RISE` of the curvature's scale ``sqrt(-h)`` where the density is concave there.  With the other
    sites at their best for this one's value (:func:`_others_at_their_best`), ``g`` is the slope of the density
    maximised over them (the envelope theorem): whether a mode lies ahead or only the edge."""
    transform = biject_to(support)
    point = values[site]
    with torch.enable_grad():
        unconstrained = transform.inv(point).detach().requires_grad_()
        moved = transform(unconstrained + 1.0)
        closer = (moved - edge).abs() < (point - edge).abs() if math.isfinite(edge) else moved.abs() > point.abs()
        direction = torch.where(closer, 1.0, -1.0).to(point.dtype)
        log_p = _log_density(model, data, {**values, site: transform(unconstrained)})
        if not log_p.requires_grad:  # the density does not involve the site (an MLE's prior): flat
            return False
        (grad,) = torch.autograd.grad(log_p, unconstrained, create_graph=True, allow_unused=True)
        if grad is None:
            return False
        g = (grad * direction).sum()
        (hvp,) = torch.autograd.grad(g, unconstrained, allow_unused=True) if g.requires_grad else (None,)
    h = float((hvp * direction).sum()) if hvp is not None else 0.0
    slope = float(g.detach())
    return slope >= RISE and slope >= RISE * math.sqrt(max(-h, 0.0))
