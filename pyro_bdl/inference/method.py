"""The method table: :class:`Method` (a runner, its settings and what a model must be for it), the domains of
numeric settings, and :data:`METHODS`, filled by the method modules that :mod:`pyro_bdl.inference` lists.

A method module declares its methods with :func:`register_method` at import; each declares what a model must be
for it to suit it (``requires``: traits such as ``continuous`` or ``network``, matched against each model's
:attr:`~pyro_bdl.registry.InferenceChoices.traits`) and how its settings are typed.  A fit hands the method one
:class:`~pyro_bdl.inference.base.RunContext` (model, data, progress, checkpoint, the model's extra arguments) and its
settings (:meth:`Method.execute`); every runner has the signature
``run(model, data, *, progress, **extra, **settings) -> Draws``.

Example
-------
>>> m = Method("demo", "point", "a method that does nothing", run=lambda model, data, **kw: None,
...            defaults={"steps": 100, "jit": False})
>>> m.resolve_settings({"steps": "250", "jit": "true"})
{'steps': 250, 'jit': True}
>>> m.resolve_settings({"steps": 0})
Traceback (most recent call last):
...
ValueError: setting 'steps' of inference 'demo' must be a whole number >= 1, got 0
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pyro_bdl.inference.base import Choice, Draws, RunContext, as_flag
from pyro_bdl.inference.diagnose import JudgeLosses
from pyro_bdl.inference.outputs import MethodInfo

__all__ = ["Method", "Family", "Sharing", "METHODS", "DEFAULT_METHOD", "register_method", "get_method", "method_for", "Domain", "SETTING_DOMAINS",
           "processes_methods", "PYRO_NAMES", "pyro_names_as_ours"]


class Family(Choice):
    """What a method's output is: a loss trace (``svi``), one point (``point``), chains (``mcmc``), weighted draws
    (``importance``) or independent members as chains (``ensemble``)."""

    SVI = "svi"
    POINT = "point"
    MCMC = "mcmc"
    IMPORTANCE = "importance"
    ENSEMBLE = "ensemble"

    @property
    def learns_params(self) -> bool:
        """The optimisation-based families, whose loop steps every ``pyro.param`` the loss touches."""
        return self in (Family.SVI, Family.POINT, Family.ENSEMBLE)

    @property
    def correlated_draws(self) -> bool:
        """Draws that are autocorrelated chains (their ESS, not their number, is what they are worth)."""
        return self is Family.MCMC

    @property
    def independent_draws(self) -> bool:
        """Independent draws from a fitted approximation, as many as its ``samples`` setting asks."""
        return self is Family.SVI


class Sharing(Choice):
    """How a method shares its work among the processes of a ``torchrun`` launch (:mod:`pyro_bdl.inference.parallel`):
    ``data`` (each process steps on its shard of every minibatch, the gradients summed) or ``split`` (each process
    runs its block of independent items: ensemble members, MCMC chains, gathered after)."""

    DATA = "data"
    SPLIT = "split"


@dataclass(frozen=True)
class Method:
    """An inference method: name, family, one-line summary, runner, default settings, and what it needs.

    Attributes
    ----------
    family : what its output is, a :class:`Family` (given as its name, e.g. ``"mcmc"``): ``point`` returns one point
        (one draw), not a posterior sample.
    requires : the traits a model must declare for the method to suit it (``continuous``: every latent
        site continuous; ``low-dimensional``: few enough parameters for random-walk, score-function or
        importance-sampling methods; ``network``: weights in :func:`pyro_bdl.nn.layers.dense` layers).
    refuses : the traits that rule the method out.  By default ``improper-prior`` (a prior without a
        normalising constant, e.g. sparse VD's log-uniform: the posterior may not exist, nor a mode, nor
        prior draws; and at a draw its log density, -log|w|, has a gradient 1/w of infinite variance under a
        Normal q), which only ``svi-meanfield`` (the KL in closed form or approximated) and ``mle`` (no
        prior) accept.  And by default ``enumerated`` (a user's model whose discrete latent sites are marked for
        enumeration, :mod:`pyro_bdl.inference.enumeration`), which only the methods that sum them out accept:
        ``nuts`` and ``hmc`` (the marginal potential) and ``svi`` (``TraceEnum_ELBO``).
    takes_guide : accepts a guide (SVI methods).
    takes_init : starts from a point the model may choose (its ``init_loc_fn``).
    resumable : accepts ``checkpoint=...`` (all but importance sampling, which has no long loop).
    quick : settings for a smoke run (seconds on a small model): what the tests and examples use to check
        that the method runs end to end, not that it is accurate.
    user_defaults : settings that replace ``defaults`` when the model is a user's own Pyro program (no zoo spec):
        its data come in their own units, far from where optimisation starts, where the zoo's models are
        standardised and declare their own (:attr:`~pyro_bdl.registry.InferenceChoices.method_defaults`).
    user_init : where optimisation starts on a user's own program (a Pyro ``init_loc_fn``, as a zoo model's
        :attr:`~pyro_bdl.registry.InferenceChoices.init_loc_fn`); None: the guide's own default.
    processes : how the method shares its work among the processes of a ``torchrun`` launch, a :class:`Sharing`
        (given as its name, ``"data"`` or ``"split"``), or None (it runs on one process).
    answers_for : the name of a method this one runs in place of, for a model that this one suits and that one does
        not (``svi-amortised`` answers for ``svi``: SVI of a model with its own amortised guide is the minibatch
        loop); :func:`method_for` looks it up.
    predictive_model : ``(model, params) -> model``, for a method whose draws predict through another function
        than the model itself (``laplace-ggn``: the network linearised at the MAP); ``params`` are the fit's
        saved parameters, where the runner keeps what that function needs (``Draws.params``).  None: the model.
    outputs : the type of what its runner returns beside the draws (``Draws.info``), a
        :class:`~pyro_bdl.inference.outputs.MethodInfo` with documented fields; ``load_fit`` rebuilds it from
        ``metrics.json``.  Its ``EVIDENCE`` says whether (and how) the method estimates the log evidence.
    diagnose : ``fit -> report``, the method's check of its own fit (warnings name what is wrong), from
        :mod:`pyro_bdl.inference.diagnose`; its ``report`` attribute is the report's type.
    """

    name: str
    family: Family
    summary: str
    run: Callable[..., Draws]
    defaults: Mapping[str, Any]
    requires: frozenset = frozenset({"continuous"})
    refuses: frozenset = frozenset({"improper-prior", "enumerated"})
    takes_guide: bool = False
    takes_init: bool = False
    resumable: bool = True
    quick: Mapping[str, Any] = field(default_factory=dict)
    processes: Sharing | None = None
    predictive_model: Callable | None = None
    answers_for: str | None = None
    user_defaults: Mapping[str, Any] = field(default_factory=dict)
    user_init: Callable | None = None
    outputs: type[MethodInfo] = MethodInfo
    diagnose: Callable = JudgeLosses()

    def __post_init__(self):
        unknown = sorted(set(self.user_defaults) - set(self.defaults))
        if unknown:
            raise ValueError(f"method '{self.name}': user_defaults names settings it does not have: {', '.join(unknown)}")
        object.__setattr__(self, "family", Family(self.family))
        if self.processes is not None:
            object.__setattr__(self, "processes", Sharing(self.processes))

    @property
    def point_estimate(self) -> bool:
        """Whether the method returns one point (one draw), not a posterior sample."""
        return self.family is Family.POINT

    @property
    def learns_params(self) -> bool:
        """Whether the method optimises the model's ``pyro.param`` sites (the optimisation-based families, whose loop
        steps every parameter the loss touches); the samplers and importance sampling hold them at their values."""
        return self.family.learns_params

    def execute(self, context: RunContext, settings: Mapping[str, Any]) -> Draws:
        """Run on a :class:`~pyro_bdl.inference.base.RunContext` with resolved ``settings``: the one call every
        fit makes; the runner gets ``(model, data, progress=..., [checkpoint=...], **extra, **settings)``."""
        saver = {"checkpoint": context.checkpoint} if context.checkpoint is not None else {}
        return self.run(context.model, context.data, progress=context.progress, **saver, **context.extra, **settings)

    def suits(self, traits) -> bool:
        """Whether a model with these traits can be fitted with this method."""
        return self.requires <= frozenset(traits) and not self.refuses & frozenset(traits)

    def resolve_settings(self, settings: Mapping[str, Any]) -> dict:
        """Defaults filled in; Pyro's names of the same settings read as ours (:data:`PYRO_NAMES`); unknown settings
        rejected with the list of known ones."""
        settings = pyro_names_as_ours(settings)
        unknown = sorted(k for k, v in settings.items() if k not in self.defaults and v is not None)
        if unknown:
            raise ValueError(
                f"unknown setting {', '.join(map(repr, unknown))} for inference '{self.name}'; "
                f"its settings are: {', '.join(self.defaults)}"
            )
        resolved = dict(self.defaults)
        resolved.update({k: self._typed(k, v) for k, v in settings.items() if v is not None})
        return resolved

    def _typed(self, key: str, value):
        """A numeric setting (its default is a number, or it has a :data:`SETTING_DOMAINS` entry) as that
        number: text such as the CLI's ``--set steps=500`` is read, whole numbers stay whole, and the value
        must lie in the setting's domain; anything else is a clear error."""
        domain = SETTING_DOMAINS.get(key)
        default = self.defaults[key]
        if isinstance(default, bool):
            try:
                return as_flag(value)
            except ValueError as exc:
                raise ValueError(f"setting '{key}' of inference '{self.name}': {exc}") from None
        if domain is None and not isinstance(default, (int, float)):
            return value  # names
        if domain is None:
            domain = Domain(type(default))
        return domain.check(value, f"setting '{key}' of inference '{self.name}'")


@dataclass(frozen=True)
class Domain:
    """The values a numeric setting admits: ``kind`` (``int``: a count, or ``float``) in the interval from
    ``low`` to ``high``, each end included unless ``open_low`` / ``open_high``; infinity only where an
    end is infinite and ``finite`` is False (``grad_clamp=inf`` means no clamp; ``lr=inf`` means nothing)."""

    kind: type
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    open_high: bool = False
    finite: bool = False

    def admits(self, x) -> bool:
        above = x > self.low if self.open_low else x >= self.low
        below = x < self.high if self.open_high else x <= self.high
        return above and below and (math.isfinite(x) or not self.finite)

    def check(self, value, what: str, given=None):
        """``value`` (a number, or text such as ``"500"``) as a number of this kind in this domain; else a
        ``ValueError`` naming ``what``, the value (``given``, the text it was read from, if not ``value``)
        and the domain.

        >>> Domain(float, 0, open_low=True).check("-1", "option 'noise'")
        Traceback (most recent call last):
        ...
        ValueError: option 'noise' must be a number > 0, got '-1'
        """
        number, value = value, value if given is None else given
        if isinstance(number, str):
            try:
                number = float(number.strip())
            except ValueError:
                raise ValueError(f"{what} must be a number, got {value!r}") from None
        if isinstance(number, bool) or not isinstance(number, numbers.Real) or math.isnan(number):
            raise ValueError(f"{what} must be a number, got {value!r}")
        if self.kind is int:  # a count
            if not math.isfinite(number) or number != int(number):
                raise ValueError(f"{what} must be a whole number, got {value!r}")
            number = int(number)
        else:
            number = float(number)
        if not self.admits(number):
            raise ValueError(f"{what} must be {self.describe()}, got {value!r}")
        return number

    def describe(self) -> str:
        """E.g. 'a whole number >= 1', 'a finite number > 0', 'a number in (0, 1)'."""
        noun = "a whole number" if self.kind is int else ("a finite number" if self.finite else "a number")
        if self.high == math.inf:
            return f"{noun} {'>' if self.open_low else '>='} {self.low:g}"
        return f"{noun} in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"


#: What each numeric setting admits, for every method that has it (the one place these are declared;
#: ``batch_size``'s default, None = the whole data, shows no type, so its kind comes from here).
SETTING_DOMAINS: dict[str, Domain] = {
    "steps": Domain(int, 1), "samples": Domain(int, 1), "chains": Domain(int, 1), "warmup": Domain(int, 0),
    "particles": Domain(int, 1), "members": Domain(int, 1), "batch_size": Domain(int, 1),
    "restarts": Domain(int, 1),
    "max_tree_depth": Domain(int, 1),
    "lr": Domain(float, 0, open_low=True, finite=True), "grad_clamp": Domain(float, 0, open_low=True),
    "lr_hold": Domain(float, 0, 1),  # the fraction of the steps at the full rate; 1: a constant rate
    "target_accept": Domain(float, 0, 1, open_low=True, open_high=True),
    "p": Domain(float, 0, 1, open_high=True),  # the dropout probability
    "epochs": Domain(int, 1), "patience": Domain(int, 1), "is_samples": Domain(int, 1),
    "kl_warmup": Domain(float, 0, finite=True),  # epochs over which the KL term's factor rises to 1
    "validation": Domain(float, 0, 1, open_high=True),  # the fraction of rows held out for early stopping
}


#: The method a fit runs when none is named, where it suits the model (a model it does not suit gets the first of
#: its methods in the table's order): NUTS, the reference every other method is checked against.
DEFAULT_METHOD = "nuts"

#: Pyro's (and NumPyro's) names of settings that mean what ours mean: ``MCMC(num_samples=, warmup_steps=,
#: num_chains=)`` (per chain, as ours), ``NUTS(target_accept_prob=, jit_compile=)``, ``Trace_ELBO(num_particles=)``,
#: ``Predictive(num_samples=)`` (draws from a guide).
PYRO_NAMES = {"num_samples": "samples", "warmup_steps": "warmup", "num_warmup": "warmup", "num_chains": "chains",
              "target_accept_prob": "target_accept", "jit_compile": "jit", "num_particles": "particles",
              "num_steps": "steps"}


def pyro_names_as_ours(settings: Mapping[str, Any]) -> dict:
    """``settings`` with Pyro's names (:data:`PYRO_NAMES`) read as ours; both names of one setting are an error.

    >>> pyro_names_as_ours({"num_samples": 500, "warmup_steps": 200})
    {'samples': 500, 'warmup': 200}
    """
    out = {}
    for key, value in settings.items():
        ours = PYRO_NAMES.get(key, key)
        if ours in out and value is not None and out[ours] is not None:
            raise ValueError(f"setting '{ours}' is given twice (as '{ours}' and as Pyro's '{key}' or the reverse)")
        if value is not None or ours not in out:
            out[ours] = value
    return out


#: Every registered method by name, filled as the modules of this package register theirs.
METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add an inference method (called at import time by the module that implements it)."""
    if method.name in METHODS and METHODS[method.name] is not method:
        raise ValueError(f"inference method '{method.name}' is registered twice")
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    """The :class:`Method` called ``name``; a clear error for unknown names."""
    if name not in METHODS:
        raise ValueError(f"unknown inference method '{name}'; known methods: {', '.join(METHODS)}")
    return METHODS[name]


def method_for(name: str, traits) -> Method:
    """The method a fit named ``name`` runs on a model with these ``traits``: ``name``'s own where it suits them,
    else a method that answers for it (:attr:`Method.answers_for`) and suits them, else ``name``'s (whose refusal
    then names the problem)."""
    method = get_method(name)
    if method.suits(traits):
        return method
    return next((m for m in METHODS.values() if m.answers_for == name and m.suits(traits)), method)


def processes_methods() -> list[str]:
    """The methods that share their work among several processes (:attr:`Method.processes` set)."""
    return [name for name, method in METHODS.items() if method.processes is not None]
