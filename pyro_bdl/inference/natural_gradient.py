r"""Natural gradients for a Gaussian latent site whose data term is conjugate to it (Hensman et al. 2013, section
3.3; Salimbeni, Eleftheriadis & Hensman 2018).

A site :math:`v` (M,) with a Gaussian prior :math:`\mathcal N(m_0, \mathrm{diag}\, s_0^2)` whose data term is, as
a function of :math:`v`, :math:`\sum_i \log\mathcal N(r_i; w_i^\top v, \sigma^2)` (a
:class:`~pyro_bdl.nn.sparse_gp.LinearGaussianLink` on the observed site's distribution, as the sparse GP's
``inducing_values`` have) gets the guide :math:`q(v) = \mathcal N(\Lambda^{-1} h,\ \Lambda^{-1})` held in its
natural parameters, which are not stepped by Adam but, after every step, by

.. math::

    \Lambda \leftarrow (1-\gamma)\,\Lambda + \gamma\,(\Lambda_0 + T), \qquad h \leftarrow (1-\gamma)\, h +
    \gamma\,(h_0 + t),

with :math:`(t, T) = (\tfrac NB\sum_{i\in B} w_i r_i/\sigma^2,\ \tfrac NB\sum_{i\in B} w_i w_i^\top/\sigma^2)` the
step's minibatch statistics at the step's draw of the other sites and :math:`(h_0, \Lambda_0)` the prior's: for a
conjugate term this is exactly a natural-gradient step of size :math:`\gamma` on the ELBO in :math:`q(v)` (the
natural gradient is the statistics less the current parameters), and :math:`\gamma = 1` on all rows jumps to the
optimal :math:`q(v)`.  :math:`\gamma` follows the learning rate's schedule (held, then decayed with it).  The other
sites keep their guide and Adam.  Under ``torchrun`` the processes' statistics are summed before the update.

Example
-------
>>> import torch, pyro, pyro_bdl, warnings
>>> _ = torch.manual_seed(0); X = torch.rand(400, 1); y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(400)
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")  # a short run, which a ConvergenceWarning would say
...     fit = pyro_bdl.fit("gp", {"X": X, "y": y}, inference="svi", options={"approximation": "svgp", "inducing": 20},
...                        steps=300, batch_size=100, samples=50, progress=False)
>>> fit.record.settings["natural_gradient"]
'auto'
>>> sorted(k for k in pyro.get_param_store().keys() if k.startswith("natural"))
['natural.inducing_values.precision', 'natural.inducing_values.shift']
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro.poutine.messenger import Messenger

from pyro_bdl.inference.callbacks import StepCallback
from pyro_bdl.inference.parallel.processes import current_group
from pyro_bdl.inference.prototype import prototype_of

__all__ = ["EMPTY_GUIDE", "NATURAL_STEP", "NaturalGradient", "NaturalGaussianGuide", "linked_sites", "natural_step_setting"]

#: The natural-gradient step :math:`\gamma` (chosen on a generated family of sparse GP regressions against Adam on
#: the same guide: benchmarks/gp_natural_gradient.py, benchmarks/RESULTS.md "Natural gradients").
NATURAL_STEP = 0.1


def natural_step_setting(value, method: str) -> float | None:
    """The ``natural_gradient`` setting read: ``"auto"`` (None: natural gradients where the model has a conjugate
    site), a step in (0, 1], or 0 / ``"off"`` (0.0: none)."""
    if value in ("auto", None):
        return None
    if value in ("off", False):
        return 0.0
    try:
        step = float(value)
    except (TypeError, ValueError):
        step = float("nan")
    if not 0.0 <= step <= 1.0:
        raise ValueError(f"setting 'natural_gradient' of inference '{method}' is a step in (0, 1], 0 or 'off' (none), "
                         f"or 'auto'; got {value!r}")
    return step


def _unwrap(fn):
    while isinstance(fn, dist.Independent):
        fn = fn.base_dist
    return fn


@torch.no_grad()
def linked_sites(model, data: dict) -> dict:
    """``{site: (loc (M,), scale (M,))}``: the latent sites some observed site's distribution names in its ``link``,
    with their Gaussian priors' parameters; ``{}`` where there are none."""
    trace = prototype_of(model, data).trace  # the fit's one look at the model's structure
    found = {}
    for site in trace.nodes.values():
        link = getattr(site.get("fn"), "link", None) if site["type"] == "sample" else None
        if link is None or link.site in found:
            continue
        prior = trace.nodes[link.site]
        base = _unwrap(prior["fn"])
        if not isinstance(base, dist.Normal) or prior["fn"].event_dim != 1:
            raise ValueError(f"natural gradients need site {link.site!r} to have a Normal prior over one event "
                             f"dimension; its prior is {type(prior['fn']).__name__}")
        shape = prior["fn"].event_shape
        found[link.site] = (base.loc.expand(shape).double(), base.scale.expand(shape).double())
    return found


class NaturalGaussianGuide:
    """``rest`` (the guide of every other site) and, for each of ``sites`` (:func:`linked_sites`), :math:`q(v) =
    \\mathcal N(\\Lambda^{-1}h, \\Lambda^{-1})` from the parameters ``natural.{site}.shift`` (:math:`h`, (M,)) and
    ``natural.{site}.precision`` (:math:`\\Lambda`, (M, M)) in Pyro's parameter store, started at the prior; read
    through the store, not ``pyro.param``, so that no optimiser steps them."""

    def __init__(self, sites: dict, rest):
        self.sites, self.rest = sites, rest

    @staticmethod
    def names(site: str) -> tuple[str, str]:
        return f"natural.{site}.shift", f"natural.{site}.precision"

    def natural(self, site: str):
        """``(h, Λ)`` of ``site``, created at its prior the first time."""
        store = pyro.get_param_store()
        shift, precision = self.names(site)
        if shift not in store:
            loc, scale = self.sites[site]
            store[shift] = loc / scale ** 2
            store[precision] = torch.diag(scale ** -2)
        return store[shift].detach(), store[precision].detach()

    def distribution(self, site: str) -> dist.MultivariateNormal:
        h, precision = self.natural(site)
        L = torch.linalg.cholesky(precision)
        return dist.MultivariateNormal(torch.cholesky_solve(h[:, None], L)[:, 0], precision_matrix=precision)

    def __call__(self, *args, **kwargs) -> dict:
        values = dict(self.rest(*args, **kwargs) or {})
        for site in self.sites:
            values[site] = pyro.sample(site, self.distribution(site))
        return values

    def median(self, *args, **kwargs) -> dict:
        values = dict(self.rest.median(*args, **kwargs))
        values.update({site: self.distribution(site).mean for site in self.sites})
        return values


class _EmptyGuide:
    """The guide of no sites (where natural gradients step every latent site)."""

    def __call__(self, *args, **kwargs) -> dict:
        return {}

    def median(self, *args, **kwargs) -> dict:
        return {}


EMPTY_GUIDE = _EmptyGuide()


class _Recorder(Messenger):
    """Collect each linked observed site's statistics while its owner is listening (between the callback's
    before- and after-step)."""

    def __init__(self, owner: "NaturalGradient"):
        super().__init__()
        self.owner = owner

    def _pyro_post_sample(self, msg):  # Messenger's hook after a sample site (see pyro_internals)
        link = getattr(msg["fn"], "link", None)
        if not self.owner.listening or link is None or link.site not in self.owner.guide.sites:
            return
        shift, precision = link.statistics(float(msg["scale"]))
        self.owner.recorded.setdefault(link.site, []).append((shift, precision, link.residual.shape[-1]))


class NaturalGradient(StepCallback):
    """The natural-gradient updates of a fit: its guide (:class:`NaturalGaussianGuide`), the model that records
    the statistics (:meth:`wrap`), and, as the loop's callback, the update after every step (module docstring).
    ``step``: :math:`\\gamma`; ``lr``: the run's learning rate, whose schedule :math:`\\gamma` follows."""

    def __init__(self, sites: dict, rest_guide, step: float, lr: float):
        self.guide = NaturalGaussianGuide(sites, rest_guide)
        self.step, self.lr = float(step), float(lr)
        self.listening, self.recorded = False, {}

    def wrap(self, model):
        return _Recorder(self)(model)

    def before_step(self, step: int) -> None:
        self.listening, self.recorded = True, {}

    @torch.no_grad()
    def after_step(self, step: int, losses: list, bar, rate: float) -> bool:
        self.listening = False
        gamma = self.step * float(rate) / self.lr
        group = current_group()
        for site, runs in self.recorded.items():
            # the mean over the step's particles (each a run of the model), weighted across processes by their rows
            rows = float(sum(r for _, _, r in runs)) / len(runs)
            t = sum(s for s, _, _ in runs) / len(runs) * rows
            T = sum(p for _, p, _ in runs) / len(runs) * rows
            if group.distributed:
                total = torch.cat([t, T.reshape(-1), t.new_tensor([rows])])
                torch.distributed.all_reduce(total)
                M = len(t)
                t, T, rows = total[:M], total[M:M + M * M].reshape(M, M), float(total[-1])
            t, T = t / rows, (T + T.T) / (2 * rows)
            loc, scale = self.guide.sites[site]
            store = pyro.get_param_store()
            shift_name, precision_name = NaturalGaussianGuide.names(site)
            h, precision = store[shift_name], store[precision_name]
            store[shift_name] = (1 - gamma) * h.detach() + gamma * (loc / scale ** 2 + t.to(h))
            store[precision_name] = (1 - gamma) * precision.detach() + gamma * (torch.diag(scale ** -2)
                                                                                 + T.to(precision))
        self.recorded = {}
        return False
