"""The model registry: the one place that knows every model of the zoo.

A zoo model is a Pyro program over named data, ``model(**data, **options)``, as NumPyro's and Pyro's
examples write them: the observed values are arguments that may be None (then the program simulates).
Its :class:`ModelSpec` holds its name, program, options (with defaults) and default data, and three parts: a
:class:`DataContract` (which argument takes a data table's feature columns, ``data.features``, e.g. ``X`` of shape
(n, d), None for a model without inputs; which takes the target column, ``data.target``, e.g. ``y`` of shape (n,),
None for an unsupervised model; the :class:`~pyro_bdl.data.task.Task`; its latent variables local to a data point),
:class:`InferenceChoices` (what the model is, ``inference.traits``, from which the inference methods that suit it
follow, :attr:`ModelSpec.methods`; its own guides and settings per method) and :class:`PostFit` (what it makes of a
fit where it has its own answer).  Its math is the model module's docstring, and its sample sites are read from a trace.

Example
-------
>>> from pyro_bdl.registry import get_model
>>> spec = get_model("coin")
>>> spec.resolve_options({"alpha": "2"})
{'alpha': 2.0, 'beta': 1.0}
>>> "bbvi" in spec.methods, spec.data.target
(True, 'y')
>>> plan = resolve(spec, "svi-meanfield")
>>> plan.guide, plan.settings["steps"]
('beta', 3000)
"""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pandas as pd
import pyro

from pyro_bdl.data.embedded import load
from pyro_bdl.data.table import DataError, from_frame
from pyro_bdl.data.task import Task
from pyro_bdl.inference.base import latent_sites, takes_minibatches
from pyro_bdl.inference.method import DEFAULT_METHOD, METHODS, get_method, method_for, pyro_names_as_ours

__all__ = ["Option", "choice", "ModelSpec", "DataContract", "InferenceChoices", "PostFit", "Task", "Plan", "register", "resolve", "get_model", "spec_of", "list_models", "takes_minibatches"]


def choice(name: str, choices) -> Callable[[str], str]:
    """The ``parse`` of an option that takes one of ``choices`` (a clear error naming them otherwise).

    >>> choice("arch", ("mlp", "conv"))("conv")
    'conv'
    """
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {text!r}")
        return text
    return parse


@dataclass(frozen=True)
class Option:
    """One model option: its default, what it means, how a CLI string is parsed, and the values it admits."""

    default: Any
    doc: str
    parse: Callable[[str], Any] = float
    #: the values a numeric option admits (a :class:`pyro_bdl.inference.Domain`); None (the option's value)
    #: is always admitted, as "not set"
    domain: Any = None
    #: how a fit's files record the value, for a value that sets the model's learned parameters (saved in
    #: params.pt, e.g. a feature map's weights): ``value -> JSON-safe`` that the model takes back; None: as is
    on_disk: Callable[[Any], Any] | None = None
    #: passed to the model program (False: an option of what the fit makes of its draws, e.g. a pruning
    #: threshold read by the spec's ``hooks.posterior``, not an argument of the density)
    model_arg: bool = True


@dataclass(frozen=True)
class DataContract:
    """How a data table becomes the model's arguments, and what the data must be.

    Attributes
    ----------
    features : the argument that takes a data table's feature columns, (n, d); None: no inputs.
    target : the argument that takes the target column, (n,); None: an unsupervised model.
    size : the argument that takes the number of rows, for a model without ``features`` (the coin).
    task : what is predicted (:class:`~pyro_bdl.data.task.Task`): how predictions are summarised and data checked.
    standardize : fit standardises inputs (and regression targets) on the training data and predictions answer
        in the original units.
    local_latents : latent sites with one value per data point (a VAE's z): summarised by the fit, not kept as
        posterior draws nor sent to ArviZ.
    missing_target : the value an empty target cell of a file or data frame stands for (a semi-supervised model's
        unknown label: -1); None: empty cells are refused.
    check : raises :class:`~pyro_bdl.data.table.DataError` for data the model cannot take.
    infer_options : ``(dataset) -> {option: value}`` for options left at None that the training data decide (the
        number of classes).
    check_method : ``(dataset, options, method, settings) -> None``, raises for data the model cannot take with this
        :class:`~pyro_bdl.inference.method.Method` (judged by its family, never its name), its resolved options and
        settings: a Gaussian process's sampler on more rows than it can afford.
    """

    features: str | None = "X"
    target: str | None = "y"
    size: str | None = None
    task: Task = Task.REGRESSION
    standardize: bool = False
    local_latents: tuple[str, ...] = ()
    missing_target: float | None = None
    check: Callable | None = None
    infer_options: Callable | None = None
    check_method: Callable | None = None


@dataclass(frozen=True)
class InferenceChoices:
    """What the model is, from which the methods that suit it follow, and what it chooses for them.

    Attributes
    ----------
    traits : matched against each method's ``requires`` (:class:`~pyro_bdl.inference.method.Method`):
        ``continuous`` (every latent continuous), ``low-dimensional`` (few parameters), ``network`` (weights in
        :func:`pyro_bdl.nn.layers.dense`), ``amortised`` (every latent local to a row, inferred by the model's own
        encoder guide; the global unknowns are network parameters, learned).
    guides : the model's own guides, name -> ``builder(model) -> guide``; usable by name in ``fit(..., guide=NAME)``
        next to the generic ones.
    default_guides : inference method -> guide name, overriding the method's default.
    method_defaults : inference method -> settings that override the method's defaults for this model (user
        settings still win).
    method_kwargs : inference method -> extra runner arguments only the model can supply (which sites MC dropout
        drops).
    init_loc_fn : where optimisation-based methods start (a Pyro init strategy); None keeps each guide's default.
    default_method : the method a fit runs when none is named (None: :data:`~pyro_bdl.inference.method.DEFAULT_METHOD`
        where it suits the model, else the first that does), for a model whose default would be slow or poor.

    The keys of ``default_guides``, ``method_defaults`` and ``method_kwargs`` are checked against the method table
    when the model registers (:func:`register`): a misspelt method or setting is an error, not ignored.
    """

    traits: frozenset = frozenset({"continuous"})
    guides: Mapping[str, Callable] = field(default_factory=dict)
    default_guides: Mapping[str, str] = field(default_factory=dict)
    method_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    method_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    init_loc_fn: Callable | None = None
    default_method: str | None = None


@dataclass(frozen=True)
class PostFit:
    """What the model makes of a fit, where the engine's generic answer is not its own (all optional).

    Attributes
    ----------
    exact_posterior : for conjugate models, ``(**data, **options) -> {site: (mean, sd)}``.
    exact_evidence : for models whose evidence is closed-form, ``(**data, **options) -> float``: the log evidence
        :math:`\\log p(y)` (natural log) of the data the model works in (read by
        :func:`pyro_bdl.workflows.evidence.evidence`); a ``ValueError`` naming the problem for options without one
        (``blr`` with an unknown noise).
    posterior : ``(samples, guide, data, options) -> (samples, params)``: the posterior draws the fit keeps, made
        from the method's draws (site -> (chains, draws, *shape)), its fitted guide (None for samplers), the data
        the model saw and the resolved options (sparse VD's pruned weights), and tensors to keep with the fit's
        learned parameters (``params.pt``).
    report : extra derived quantities for ``metrics.json``, ``(result) -> dict``.
    predict : ``(result, model_kwargs) -> DataFrame``, the model's own answer per row (an amortised model answers
        from its networks: log p(x), latent means), instead of the posterior predictive summary.
    evaluate : ``(result, test dataset) -> dict``, the model's own held-out metrics (``test_...``).
    plots : ``(result, out_dir, test) -> [file names]``, the model's own figures, written by the fit (``test``:
        held-out data, or None).
    predictive_model : ``(model, training data) -> model``, what the posterior draws predict through, for a model
        whose predictive conditions on the training rows (a Gaussian process: the program given them); None: the
        model itself.
    point_epistemic : the predictive at one point of the unknowns keeps an epistemic part (``latent_variance``: a
        Gaussian process's latent function integrated out), so a regression's variance acquisitions read a point
        estimate's fit too.
    """

    exact_posterior: Callable | None = None
    exact_evidence: Callable | None = None
    posterior: Callable | None = None
    report: Callable | None = None
    predict: Callable | None = None
    evaluate: Callable | None = None
    plots: Callable | None = None
    predictive_model: Callable | None = None
    point_epistemic: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """Everything the engine needs to know about one zoo model, in four parts.

    Attributes
    ----------
    name : registry name (``pyro-bdl fit NAME``).
    model : the Pyro program, ``model(**data, **options)``; its module's docstring is its math.
    summary : one line for ``pyro-bdl list``.
    options : option name -> :class:`Option`.
    default_data : name of the embedded data set used when none is given.
    data : :class:`DataContract`, how a table becomes the model's arguments.
    inference : :class:`InferenceChoices`, what the model is and what it chooses for the methods.
    hooks : :class:`PostFit`, what the model makes of a fit.
    notes : what a user should know in practice (which settings a known behaviour needs), printed by
        ``pyro-bdl describe`` after the math.
    """

    name: str
    model: Callable
    summary: str
    options: Mapping[str, Option]
    default_data: str
    data: DataContract = DataContract()
    inference: InferenceChoices = InferenceChoices()
    hooks: PostFit = PostFit()
    notes: str = ""

    @property
    def methods(self) -> tuple[str, ...]:
        """The inference methods that suit the model: those whose ``requires`` its traits meet, and the names that
        another answers for on it (``svi`` on a model with its own amortised guide: :func:`method_for`)."""
        traits = self.inference.traits
        return tuple(name for name, method in METHODS.items()
                     if method.suits(traits) or method_for(name, traits).suits(traits))

    def runs_as(self, inference: str) -> str:
        """The method a fit of this model named ``inference`` runs (``svi`` on an amortised model: ``svi-amortised``)."""
        return method_for(inference, self.inference.traits).name

    @property
    def default_method(self) -> str:
        """The method a fit of this model runs when none is named: the model's own choice
        (:attr:`InferenceChoices.default_method`), else :data:`~pyro_bdl.inference.method.DEFAULT_METHOD` where it
        suits the model, else the first that does."""
        if self.inference.default_method is not None:
            return self.inference.default_method
        methods = self.methods
        return DEFAULT_METHOD if DEFAULT_METHOD in methods else methods[0]

    @property
    def math(self) -> str:
        """The model's math: its module's docstring, up to its example."""
        doc = inspect.getdoc(sys.modules[self.model.__module__]) or ""
        return doc.split("\nExample\n-------")[0].strip()

    def load_data(self, source, target: str | None = None):
        """The model's data from ``source``: an embedded set's name, a file (CSV, IDX, NPZ) or a pandas DataFrame.  A
        CSV file or frame needs ``target`` for a model with a target; for one without (the VAE) every column is a
        feature, and a ``target`` named is kept beside them (labels for the plots), not modelled."""
        if isinstance(source, pd.DataFrame):
            if target is None and self.data.target is not None:
                raise DataError(f"model '{self.name}' needs a target: name its column (target=...)")
            return from_frame(source, target, name="data frame", missing_target=self.data.missing_target)
        return load(source, target, needs_target=self.data.target is not None, missing_target=self.data.missing_target)

    def data_kwargs(self, dataset) -> dict:
        """The model's data arguments from a :class:`~pyro_bdl.data.table.Dataset`: its features, target and size
        under the names the model gives them."""
        kwargs = {}
        if self.data.features is not None:
            kwargs[self.data.features] = dataset.X
        if self.data.target is not None:
            kwargs[self.data.target] = dataset.y
        if self.data.size is not None:
            kwargs[self.data.size] = len(dataset)
        return kwargs

    def sites(self, options: Mapping[str, Any] | None = None) -> list[str]:
        """The latent sample sites with these options, read from a trace on the default data (in a param store of
        its own: another model's parameters of the same names, left in the store, do not leak into the trace)."""
        dataset = load(self.default_data)
        resolved = self.resolve_options(options)
        if self.data.infer_options is not None:
            resolved.update({k: v for k, v in self.data.infer_options(dataset).items() if resolved.get(k) is None})
        with pyro.get_param_store().scope():
            sites = latent_sites(functools.partial(self.model, **self.model_args(resolved)), self.data_kwargs(dataset))
        return [s for s in sites if s not in self.data.local_latents]

    def model_args(self, resolved: Mapping[str, Any]) -> dict:
        """The resolved options the model program takes (those not marked ``model_arg=False``)."""
        return {k: v for k, v in resolved.items() if k not in self.options or self.options[k].model_arg}

    def resolve_options(self, options: Mapping[str, Any] | None = None) -> dict:
        """Fill in defaults, parse strings, and reject options the model does not have."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(
                f"unknown option {', '.join(map(repr, unknown))} for model '{self.name}'; "
                f"its options are: {', '.join(self.options) or '(none)'}"
            )
        resolved = {}
        for key, opt in self.options.items():
            value = given = options.get(key, opt.default)
            if isinstance(value, str):
                try:
                    value = opt.parse(value)
                except ValueError as exc:
                    raise ValueError(f"option {key}={value!r} for model '{self.name}': {exc}") from None
            if opt.domain is not None and value is not None:
                value = opt.domain.check(value, f"option '{key}' of model '{self.name}'", given)
            resolved[key] = value
        return resolved

    def options_on_disk(self, options: Mapping[str, Any]) -> dict:
        """The options as a fit's files record them (:attr:`Option.on_disk`)."""
        return {k: self.options[k].on_disk(v) if k in self.options and self.options[k].on_disk else v
                for k, v in options.items()}

    @property
    def minibatches(self) -> bool:
        """The model subsamples its data (the ``batch_size`` setting applies): :func:`takes_minibatches`."""
        return takes_minibatches(self.model)

    def bind(self, options: Mapping[str, Any] | None = None) -> Callable:
        """The model with its options fixed: ``bound(X, y=None)``."""
        bound = functools.partial(self.model, **self.model_args(self.resolve_options(options)))
        functools.update_wrapper(bound, self.model)
        return bound


_REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """Add a model to the zoo (called at import time by each model module in :mod:`pyro_bdl.models`)."""
    if spec.data.features is None and spec.data.size is None and spec.data.target is None:
        raise ValueError(f"model '{spec.name}' takes no data argument (features, target or size)")
    _check_method_keys(spec)
    _REGISTRY[spec.name] = spec
    return spec


def _check_method_keys(spec: ModelSpec) -> None:
    """Every method the model keys a choice on exists and suits it, and its default settings are settings of that
    method in their domains: a misspelt key is an error at registration, not a setting silently ignored.

    >>> register(ModelSpec("demo", lambda X, y=None: None, "", {}, "linear",
    ...                    inference=InferenceChoices(method_defaults={"nust": {"warmup": 10}})))
    Traceback (most recent call last):
    ...
    ValueError: model 'demo' declares method_defaults for 'nust', which is not an inference method; known methods: ...
    """
    choices = spec.inference
    for field_name in ("default_guides", "method_defaults", "method_kwargs"):
        for name in getattr(choices, field_name):
            if name not in METHODS:
                raise ValueError(f"model '{spec.name}' declares {field_name} for '{name}', which is not an inference "
                                 f"method; known methods: {', '.join(METHODS)}")
            if not METHODS[name].suits(choices.traits):
                raise ValueError(f"model '{spec.name}' declares {field_name} for '{name}', a method that does not suit "
                                 f"it (traits: {', '.join(sorted(choices.traits))})")
    if choices.default_method is not None and (choices.default_method not in METHODS or
                                               not METHODS[choices.default_method].suits(choices.traits)):
        raise ValueError(f"model '{spec.name}' declares default_method '{choices.default_method}', which is not an "
                         f"inference method that suits it; its methods: {', '.join(spec.methods)}")
    for name, settings in choices.method_defaults.items():
        try:
            METHODS[name].resolve_settings(settings)
        except ValueError as error:
            raise ValueError(f"model '{spec.name}', method_defaults['{name}']: {error}") from None
    for name, guide in choices.default_guides.items():
        if not METHODS[name].takes_guide:
            raise ValueError(f"model '{spec.name}' declares a default guide for '{name}', which takes no guide")


@dataclass(frozen=True)
class Plan:
    """What a fit will run, resolved before anything runs (:func:`resolve`).

    Attributes
    ----------
    method : the :class:`~pyro_bdl.inference.Method`.
    guide : the guide as asked for, or the model's default for the method (a name, a class, a
        callable, or None: the method's own default).
    settings : every setting of the method, typed (counts are ints, flags bools), defaults filled in.
    """

    method: Any
    guide: Any
    settings: dict

    def runner_kwargs(self, spec: ModelSpec | None, bound: Callable) -> dict:
        """The keyword arguments the runner takes besides the data and the settings."""
        extra = {}
        guide = self.guide
        if self.method.takes_guide:
            if spec is not None and isinstance(guide, str) and guide in spec.inference.guides:
                guide = spec.inference.guides[guide](bound)
            extra["guide"] = guide
        if spec is not None:
            if spec.inference.init_loc_fn is not None and self.method.takes_init:
                extra["init_loc_fn"] = spec.inference.init_loc_fn
            extra.update(spec.inference.method_kwargs.get(self.method.name, {}))
        elif self.method.user_init is not None and self.method.takes_init:  # a user's own program
            extra["init_loc_fn"] = self.method.user_init
        return extra


def resolve(spec: ModelSpec | None, inference: str, guide=None, settings: Mapping[str, Any] | None = None) -> Plan:
    """The method, guide and typed settings a fit of ``spec`` (None: a user's model) will use.

    A pure function: nothing is fitted.  The model's own settings for a method (``method_defaults``) go
    with the method's default guide (given or by name); a user's own program (``spec`` None) gets the method's
    :attr:`~pyro_bdl.inference.method.Method.user_defaults`; the settings given win over both.  Errors name
    the problem: an unknown method, a method that does not suit the model, a guide for a method that
    takes none, an unknown setting or a value outside a setting's domain.
    """
    method = get_method(inference) if spec is None else method_for(inference, spec.inference.traits)
    if guide is not None and not method.takes_guide:
        raise ValueError(f"inference '{inference}' takes no guide")
    if spec is not None and not method.suits(spec.inference.traits):
        missing = ", ".join(sorted(method.requires - spec.inference.traits))
        if not missing:
            raise ValueError(f"model '{spec.name}' does not support inference '{inference}' (it refuses a model "
                             f"that is {', '.join(sorted(method.refuses & spec.inference.traits))}); it supports: "
                             f"{', '.join(spec.methods)}")
        raise ValueError(f"model '{spec.name}' does not support inference '{inference}' (it needs a model that is "
                         f"{missing}); it supports: {', '.join(spec.methods)}")
    given = {k: v for k, v in pyro_names_as_ours(settings or {}).items() if v is not None}
    model_defaults = dict(method.user_defaults) if spec is None else {}  # a user's own program: Method.user_defaults
    if spec is not None:
        default_guide = spec.inference.default_guides.get(method.name)
        if guide is None or guide == default_guide:
            model_defaults = spec.inference.method_defaults.get(method.name, {})
        if guide is None:
            guide = default_guide
    return Plan(method, guide, method.resolve_settings({**model_defaults, **given}))


def get_model(name: str) -> ModelSpec:
    """The :class:`ModelSpec` registered as ``name``; a clear error for unknown names."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown model '{name}'; known models: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def spec_of(model) -> ModelSpec | None:
    """The zoo's :class:`ModelSpec` of ``model`` (a name or a spec), or None for a user's Pyro program (any other
    callable): the one place a fit, a comparison, active learning and SBC tell them apart.  Anything else is a
    ``TypeError``; an unknown name a ``ValueError`` listing the known ones.

    >>> spec_of("blr").name, spec_of(lambda y=None: None)
    ('blr', None)
    """
    if isinstance(model, str):
        return get_model(model)
    if isinstance(model, ModelSpec):
        return model
    if not callable(model):
        raise TypeError(f"model must be a zoo model name or a Pyro model callable, not {type(model).__name__}")
    return None


def list_models() -> list[ModelSpec]:
    """All registered models, sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
