r"""Discrete latent sites summed out by enumeration: which sites a model enumerates, the traits that makes it, the
marginal log-likelihood per observed row, and the posterior of the enumerated sites.

A latent sample site with discrete support is *enumerated* when the model marks it for enumeration
(``infer={"enumerate": "parallel"}`` or ``"sequential"``, as ``@config_enumerate`` does): a method that fits such
a model sums it out and fits the model's other latents against the marginal density

.. math::

    p(y, \theta) = \sum_z p(y, z, \theta),

the sum taken inside the plates (a mixture's assignment :math:`z_i`, one per row: :math:`\prod_i \sum_k`).
:func:`model_traits` reads from one trace what a user's model is: ``continuous`` (every latent site continuous or
enumerated) and ``enumerated`` (some site is); a discrete latent site that is not marked is an error that says to
mark it.  ``nuts`` and ``hmc`` (their potential marginalises the enumerated sites,
:mod:`pyro_bdl.inference.mcmc.potential`) and ``svi`` (``TraceEnum_ELBO``, the guide over the other sites,
:mod:`pyro_bdl.inference.svi`) fit such a model; the other methods refuse the ``enumerated`` trait
(:attr:`~pyro_bdl.inference.method.Method.refuses`).

The draws hold the continuous latents :math:`\theta_s` only.  :func:`marginal_log_likelihood` gives, per draw and
observed element :math:`y_i`, :math:`\log p(y_i \mid \theta_s, \text{the other observations of its row})` with
the enumerated sites local to the row (in every plate :math:`y_i` is in) summed out: for a mixture,
:math:`\log \sum_k p(z_i = k \mid \theta_s)\, p(y_i \mid z_i = k, \theta_s)`, the pointwise log-likelihood LOO
and WAIC need.  An enumerated site shared by several elements (a global discrete latent) is drawn from its
posterior given :math:`\theta_s` and the data (Pyro's ``infer_discrete``) and conditioned on, as a draw of it.
:func:`discrete_draws` gives those posterior draws (or the most probable values, ``temperature=0``) of every
enumerated site.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> from pyro.infer import config_enumerate
>>> @config_enumerate
... def mixture(y):
...     mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
...     with pyro.plate("rows", len(y)):
...         z = pyro.sample("z", dist.Bernoulli(0.3))
...         pyro.sample("y", dist.Normal(mu + 4.0 * z, 1.0), obs=y)
>>> y = torch.tensor([0.1, 4.2, -0.3])
>>> sorted(model_traits(mixture, {"y": y})), enumerated_sites(mixture, {"y": y})
(['continuous', 'enumerated'], ['z'])
>>> ll = marginal_log_likelihood(mixture, {"mu": torch.zeros(1, 2)}, {"y": y}, ["y"])["y"]  # 1 chain, 2 draws
>>> ll.shape
(1, 2, 3)
>>> by_hand = torch.logsumexp(torch.stack([dist.Normal(0.0, 1.0).log_prob(y) + torch.tensor(0.7).log(),
...                                        dist.Normal(4.0, 1.0).log_prob(y) + torch.tensor(0.3).log()]), 0)
>>> bool(torch.allclose(torch.as_tensor(ll[0, 0]), by_hand))
True
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from pyro import poutine
from pyro.infer import infer_discrete
from pyro.ops.contract import contract_to_tensor
from pyro.ops.packed import unpack
from pyro.poutine.util import site_is_subsample

from pyro_bdl.inference.prototype import ENUMERATED, is_enumerated, is_latent, plate_nesting, prototype_of

__all__ = ["ENUMERATED", "model_traits", "enumerated_sites", "enumeration_of", "is_enumerated", "plate_nesting",
           "enumerating",
           "marginal_log_likelihood", "discrete_draws"]

def enumerated_sites(model, data: dict, strict: bool = True) -> list[str]:
    """The names of the latent sites ``model(**data)`` marks for enumeration (its prototype trace,
    :mod:`pyro_bdl.inference.prototype`).  ``strict``: a discrete latent site that is not marked is a
    ``ValueError`` (else it is left out)."""
    return prototype_of(model, data).enumerated_sites(strict)


def model_traits(model, data: dict) -> frozenset:
    """What a user's model is, from its prototype trace: ``{"continuous"}`` when every latent site is continuous,
    ``{"continuous", "enumerated"}`` when the discrete ones are all marked for enumeration (they are summed out; the
    sites left are continuous); a ``ValueError`` naming a discrete latent site that is not."""
    return prototype_of(model, data).traits


def enumeration_of(model, data: dict) -> tuple[list[str], int | None]:
    """The sites ``model(**data)`` marks for enumeration and, where it has any, its plate nesting (what
    ``TraceEnum_ELBO`` takes as ``max_plate_nesting``): ``([], None)`` for a model without (an unmarked discrete
    site is left out, as :func:`enumerated_sites` with ``strict=False``)."""
    prototype = prototype_of(model, data)
    names = prototype.enumerated
    return names, prototype.plate_nesting if names else None


def _parallel(model, names):
    """``model`` with the sites ``names`` marked for parallel enumeration (a site marked sequential too)."""
    names = frozenset(names)
    return poutine.infer_config(model, lambda site: {"enumerate": "parallel"} if site["name"] in names else {})


def enumerating(model, names, nesting: int):
    """``model`` with its sites ``names`` enumerated in parallel, each over a tensor dim left of the ``nesting``
    plates (``poutine.enum``)."""
    return poutine.enum(_parallel(model, names), first_available_dim=-1 - nesting)


def _ordinal(site) -> frozenset:
    return frozenset(f.name for f in site["cond_indep_stack"] if f.vectorized)


def _component(trace, site: str, sum_dims: set) -> list:
    """The packed log densities linked to ``site``'s through enumerated dims (other than its own): every site
    whose density shares an enumerated dim with it, or with a site already taken."""
    dims = set(trace.nodes[site]["packed"]["unscaled_log_prob"]._pyro_dims) & sum_dims
    others = [(name, s["packed"]["unscaled_log_prob"]) for name, s in trace.nodes.items()
              if s["type"] == "sample" and name != site and not site_is_subsample(s)]
    taken, grew = {}, bool(dims)
    while grew:
        grew = False
        for name, term in others:
            if name not in taken and set(term._pyro_dims) & dims:
                taken[name] = term
                dims |= set(term._pyro_dims) & sum_dims
                grew = True
    return [(name, term) for name, term in others if name in taken]


def _row_marginal(trace, site: str, shape: tuple) -> torch.Tensor:
    """log p(``site``'s value | the rest) per element, shape ``shape``: the enumerated dims of an enumerated
    ``trace`` summed out over the densities linked to the site's, within its plates (the joint with its value, less
    the joint without it)."""
    trace.compute_log_prob()
    trace.pack_tensors()
    sum_dims = set(trace.symbol_to_dim) - set(trace.plate_to_symbol.values())
    own = trace.nodes[site]["packed"]["unscaled_log_prob"]
    target = frozenset(trace.plate_to_symbol[name] for name in _ordinal(trace.nodes[site]))

    def contracted(terms):
        tree = OrderedDict()
        for name, term in terms:
            key = frozenset(trace.plate_to_symbol[p] for p in _ordinal(trace.nodes[name]))
            tree.setdefault(key, []).append(term)
        return unpack(contract_to_tensor(tree, sum_dims, target_ordinal=target), trace.symbol_to_dim)

    if not set(own._pyro_dims) & sum_dims:  # nothing enumerated reaches this site
        value = unpack(own, trace.symbol_to_dim)
    else:
        linked = _component(trace, site, sum_dims)
        value = contracted(linked + [(site, own)])
        if any(trace.nodes[name]["is_observed"] or not is_enumerated(trace.nodes[name]) for name, _ in linked):
            value = value - contracted(linked)  # the other densities' own normaliser (log 1 for priors alone)
    while value.dim() > len(shape):
        value = value.squeeze(0)
    return value.expand(shape)


def _flat_draws(samples: dict, reference, skip) -> tuple[int, int, dict]:
    """(chains, draws, site -> (chains * draws, *shape)) for the latent sites of ``reference`` (a trace) not in
    ``skip``: not the enumerated sites, nor deterministic sites computed from the draws."""
    first = next(iter(samples.values()))
    chains, num = first.shape[:2]
    keep = {name for name, site in reference.nodes.items() if is_latent(site) and name not in skip}
    return chains, num, {k: v.reshape((chains * num,) + tuple(v.shape[2:])) for k, v in samples.items() if k in keep}


@torch.no_grad()
def marginal_log_likelihood(model, samples: dict, data: dict, sites: list[str]) -> dict:
    """Per observed site of ``sites``, log p(y_i | theta_s, the rest of y_i's row) with the enumerated sites local
    to y_i summed out (see the module docstring): numpy arrays (chains, draws, *the site's log-density shape), from
    ``samples`` (site -> (chains, draws, *shape), the continuous latents; draws of enumerated sites are ignored).

    Where no enumerated site is shared by several elements, one enumerated run of ``model(**data)`` is traced to a
    graph of tensor operations (:func:`~pyro_bdl.inference.compile.fastest.fastest`: Pyro's handlers run once)
    and the graph runs on every draw, checked against the eager run at the first and last draws; else (or where
    tracing fails) the model runs once per draw, a shared site drawn from its posterior first."""
    prototype = prototype_of(model, data)
    reference, names = prototype.trace, prototype.enumerated
    nesting = plate_nesting(reference)
    chains, num, flat = _flat_draws(samples, reference, set(names))
    shapes = {s: tuple(reference.nodes[s]["fn"].log_prob(reference.nodes[s]["value"]).shape) for s in sites}
    shared = {s: frozenset(z for z in names if not _ordinal(reference.nodes[z]) >= _ordinal(reference.nodes[s]))
              for s in sites}
    enumerated = enumerating(model, names, nesting)
    if not any(shared.values()):
        rows = _traced_rows(enumerated, sites, shapes, flat, data)
        out = [rows(i) for i in range(chains * num)]
        return {s: torch.stack([o[j] for o in out]).reshape((chains, num) + shapes[s]).cpu().numpy()
                for j, s in enumerate(sites)}
    out = {s: [] for s in sites}
    for i in range(chains * num):
        theta = {k: v[i] for k, v in flat.items()}
        posterior = _posterior_draw(model, names, nesting, theta, data)
        traces = {}
        for s in sites:
            if shared[s] not in traces:
                given = {**theta, **{z: posterior[z] for z in shared[s]}}
                traces[shared[s]] = poutine.trace(poutine.condition(enumerated, data=given)).get_trace(**data)
            out[s].append(_row_marginal(traces[shared[s]], s, shapes[s]))
    return {s: torch.stack(v).reshape((chains, num) + shapes[s]).cpu().numpy() for s, v in out.items()}


def _traced_rows(enumerated, sites: list[str], shapes: dict, flat: dict, data: dict):
    """``i -> (log p(y_i | ...) per element, one tensor per site)`` at draw ``i`` of ``flat`` (site -> (draws,
    *shape)): one conditioned run of the ``enumerated`` model traced to a graph where it traces and gives the eager
    values at the first and last draws, else the eager run itself."""
    from pyro_bdl.inference.compile.fastest import check_same, fastest  # the tracer, when first needed

    keys = list(flat)
    tensor_keys = [k for k, v in data.items() if isinstance(v, torch.Tensor)]
    static = {k: v for k, v in data.items() if k not in tensor_keys}

    def rows(*args):
        theta = dict(zip(keys, args[:len(keys)]))
        given = {**static, **dict(zip(tensor_keys, args[len(keys):]))}
        trace = poutine.trace(poutine.condition(enumerated, data=theta)).get_trace(**given)
        return tuple(_row_marginal(trace, s, shapes[s]) for s in sites)

    def arguments(i):
        return tuple(flat[k][i] for k in keys) + tuple(data[k] for k in tensor_keys)

    last = len(next(iter(flat.values()))) - 1 if flat else 0
    if not flat or last == 0:
        return lambda i: rows(*arguments(i))
    form = fastest(rows, arguments(0), rows(*arguments(0)), compile=False, mode="eager",
                   what="the marginal log-likelihood", stacklevel=3)
    try:
        check_same(form.run(*arguments(last)), rows(*arguments(last)))
    except RuntimeError:  # a branch on a value the trace took one way: the eager run at every draw
        return lambda i: rows(*arguments(i))
    return lambda i: form.run(*arguments(i))


def _posterior_draw(model, names, nesting: int, theta: dict, data: dict, temperature: int = 1) -> dict:
    """One draw of the enumerated sites ``names`` from p(z | theta, data) (``temperature=0``: the most probable
    values), by Pyro's ``infer_discrete``."""
    sampler = infer_discrete(poutine.condition(_parallel(model, names), data=theta), first_available_dim=-1 - nesting,
                             temperature=temperature)
    trace = poutine.trace(sampler).get_trace(**data)
    return {z: trace.nodes[z]["value"] for z in names}


@torch.no_grad()
def discrete_draws(model, samples: dict, data: dict, temperature: int = 1) -> dict:
    """Draws of every enumerated site of ``model(**data)`` from its posterior given each posterior draw of the
    continuous latents (``samples``: site -> (chains, draws, *shape)), site -> tensor (chains, draws, *site_shape);
    ``temperature=0``: the most probable values given each draw instead (Pyro's ``infer_discrete``, Viterbi-like).
    Empty for a model that enumerates nothing."""
    if temperature not in (0, 1):
        raise ValueError(f"temperature must be 1 (posterior draws) or 0 (the most probable values), got {temperature!r}")
    prototype = prototype_of(model, data)
    reference, names = prototype.trace, prototype.enumerated
    if not names:
        return {}
    nesting = plate_nesting(reference)
    chains, num, flat = _flat_draws(samples, reference, set(names))
    draws = [_posterior_draw(model, names, nesting, {k: v[i] for k, v in flat.items()}, data, temperature)
             for i in range(chains * num)]
    return {z: torch.stack([d[z] for d in draws]).reshape((chains, num) + tuple(reference.nodes[z]["value"].shape))
            for z in names}
