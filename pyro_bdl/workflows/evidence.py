r"""Model selection by the evidence: the log marginal likelihood :math:`\log p(y)` of a fit's data under its model.

.. math::

    p(y) = \int p(y \mid \theta)\, p(\theta)\, d\theta

rewards a model for predicting the data it saw, and penalises it for the prior volume it spreads over data it did
not see (MacKay's Occam's razor): among models of the same data, a higher evidence is a better model, Bayes
factors are differences of log evidences.  A fit gives it where its method or its model does:

* the method's estimate, which the method records in its typed outputs (:attr:`pyro_bdl.result.FitResult.log_evidence`,
  declared in words as its outputs' ``EVIDENCE``, :class:`~pyro_bdl.inference.outputs.MethodInfo`): ``laplace`` (the Laplace approximation at the mode, exact for
  a Gaussian posterior), ``laplace-ggn`` (the GGN Laplace marginal likelihood of a network, the noise held at
  its MAP), ``importance`` (the mean importance weight, unbiased for :math:`p(y)`, its log within about
  :math:`\sqrt{1/\mathrm{ESS} - 1/S}` for :math:`S` draws);
* the model's closed form, which the model declares as its
  :attr:`~pyro_bdl.registry.PostFit.exact_evidence`: ``blr`` with a known noise, ``coin``.

Every method works in the units the model works in: a model fitted in standardised units (the networks: their
``fit.standardizer``) has the evidence of its standardised targets :math:`\tilde y = (y - m_y)/s_y`, and that of
the data in their own units is :math:`\log p(y) = \log p(\tilde y) - n \log s_y` (the Jacobian of the map, held
fixed at the training data's :math:`m_y, s_y`), which :func:`evidence` returns; so a network's evidence and one of a
model fitted in the data's units are of the same data.  PSIS-LOO (:func:`pyro_bdl.compare_loo`) is the other way to
rank fits, one that every method with posterior draws gives.

Example
-------
>>> import math, pyro_bdl
>>> fit = pyro_bdl.fit("coin", inference="laplace", steps=500, progress=False)
>>> exact, laplace = evidence(fit, "exact"), evidence(fit, "method")
>>> fit.report["heads"], fit.report["tosses"]    # uniform prior: log p(y) = log B(1 + 8, 1 + 22)
(8, 30)
>>> abs(exact - (math.lgamma(9) + math.lgamma(23) - math.lgamma(32))) < 1e-9, laplace.source
(True, 'method')
>>> round(exact, 2), round(laplace, 2)    # the Laplace approximation of a Beta in logit(pi): close, not exact
(-19.02, -19.03)
>>> evidence(pyro_bdl.fit("coin", inference="map", steps=300, progress=False), "method")
Traceback (most recent call last):
...
ValueError: the fit by 'map' records no estimate of the evidence; the methods that do, of those that suit model 'coin': ...
"""

from __future__ import annotations

from pyro_bdl.inference.method import METHODS
from pyro_bdl.registry import list_models

__all__ = ["evidence", "LogEvidence", "SOURCES"]

#: Where :func:`evidence` takes the evidence from: ``auto`` (the method's estimate where it records one, else the
#: model's closed form), ``exact`` (the model's closed form) or ``method`` (the method's estimate).
SOURCES = ("auto", "exact", "method")


class LogEvidence(float):
    """A log evidence ``log p(y)`` (natural log, the data's own units): a float that says where it came from.

    Attributes
    ----------
    source : ``"exact"`` (the model's closed form) or ``"method"`` (the inference method's estimate).
    kind : what it is, in words.
    """

    source: str
    kind: str

    def __new__(cls, value: float, source: str, kind: str) -> LogEvidence:
        self = super().__new__(cls, value)
        self.source, self.kind = source, kind
        return self

    def __repr__(self) -> str:
        return f"LogEvidence({float(self)!r}, source={self.source!r})"


def evidence(fit, source: str = "auto") -> LogEvidence:
    """The log evidence ``log p(y)`` of a fit's data under its model, in the data's own units.

    Parameters
    ----------
    fit : a :class:`~pyro_bdl.result.FitResult` (of a zoo model or a user's Pyro program).
    source : ``"auto"`` (the method's estimate where the method records one, else the model's closed form),
        ``"exact"`` (the model's closed form, :attr:`~pyro_bdl.registry.PostFit.exact_evidence`) or ``"method"``
        (the method's estimate, :attr:`fit.log_evidence <pyro_bdl.result.FitResult.log_evidence>`).

    Returns
    -------
    :class:`LogEvidence`, a float (natural log, the sum over the data) with its ``source`` and ``kind``.

    Raises
    ------
    ValueError
        where the source asked for gives none (a method that records no estimate, a model without a closed form, or
        a closed form that the model's options rule out, e.g. an inferred noise), naming what does give one.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    estimate = fit.log_evidence if source != "exact" else None
    if estimate is not None:
        return LogEvidence(float(estimate) + _to_data_units(fit), "method", _method_kind(fit))
    if source == "method":
        raise ValueError(f"the fit by '{fit.method}' records no estimate of the evidence; {_methods_that_do(fit)}")
    spec = fit.spec
    closed_form = spec.hooks.exact_evidence if spec is not None else None
    if closed_form is None:
        model = f"model '{spec.name}'" if spec is not None else "a user's own model"
        raise ValueError(f"no evidence for this fit: the fit by '{fit.method}' records no estimate of it"
                         f" and {model} has no closed form (the zoo models with one: "
                         f"{', '.join(_exact_models()) or 'none'}); {_methods_that_do(fit)}; or rank the fits by "
                         f"PSIS-LOO (pyro_bdl.compare_loo)")
    value = closed_form(**fit.standardized_data, **spec.model_args(fit.record.options))
    return LogEvidence(float(value) + _to_data_units(fit), "exact", f"the closed form of model '{spec.name}'")


def _to_data_units(fit) -> float:
    """``-n log s_y``: what turns a log density of the standardised targets into one of the targets in the data's
    units (0 for a fit in the data's units)."""
    standardizer = fit.standardizer
    if standardizer is None or standardizer.y_sd is None or fit.spec is None or fit.spec.data.target is None:
        return 0.0
    n = fit.data[fit.spec.data.target].numel()
    return n * standardizer.log_density_shift()


def _method_kind(fit) -> str:
    return fit.info.EVIDENCE or f"the estimate that inference '{fit.method}' records"


def _methods_that_do(fit) -> str:
    """Which methods record an estimate (of those that suit the fit's zoo model)."""
    names = [name for name, method in METHODS.items() if method.outputs.EVIDENCE is not None
             and (fit.spec is None or name in fit.spec.methods)]
    of = f", of those that suit model '{fit.spec.name}'" if fit.spec is not None else ""
    return f"the methods that do{of}: {', '.join(names) or 'none'}"


def _exact_models() -> list[str]:
    return [spec.name for spec in list_models() if spec.hooks.exact_evidence is not None]
