"""The model registry: the one place that knows every model of the zoo.

A zoo model is a Pyro model function ``model(X, y=None, **options)`` where ``X`` has shape
``(n, d)`` and ``y`` shape ``(n,)``.  Its :class:`ModelSpec` declares the options (with
defaults), the sample sites, the inference methods that suit it and, for conjugate models,
the exact posterior.

Example
-------
>>> from pyro_bdl.registry import get_model
>>> spec = get_model("coin")
>>> spec.resolve_options({"alpha": "2"})
{'alpha': 2.0, 'beta': 1.0}
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["Option", "ModelSpec", "register", "get_model", "list_models", "takes_minibatches"]


def takes_minibatches(model: Callable) -> bool:
    """Whether ``model`` subsamples its data: it takes a ``batch_size`` argument (as the networks do, for
    ``pyro.plate(..., subsample_size=batch_size)``) or any keyword.  True when no signature can be read
    (the model then decides).

    >>> takes_minibatches(lambda X, y=None, batch_size=None: None), takes_minibatches(lambda X, y=None: None)
    (True, False)
    """
    try:
        params = inspect.signature(model).parameters
    except (TypeError, ValueError):  # no signature to read (some builtins and C callables)
        return True
    return "batch_size" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


@dataclass(frozen=True)
class Option:
    """One model option: its default, what it means, and how a CLI string is parsed."""

    default: Any
    doc: str
    parse: Callable[[str], Any] = float


@dataclass(frozen=True)
class ModelSpec:
    """Everything the engine needs to know about one zoo model.

    Attributes
    ----------
    name : registry name (``pyro-bdl fit NAME``).
    model : the Pyro model, ``model(X, y=None, **options)``.
    summary : one line for ``pyro-bdl list``.
    math : one paragraph of the model's math for ``pyro-bdl describe``.
    options : option name -> :class:`Option`.
    sites : names of the latent sample sites.
    methods : the inference methods that suit the model.
    default_data : name of the embedded data set used when none is given.
    uses_features : False when the model ignores ``X`` except for its length (the coin).
    check_data : raises :class:`pyro_bdl.data.DataError` for data the model cannot take.
    exact_posterior : for conjugate models, ``(X, y, **options) -> {site: (mean, sd)}``.
    report : extra derived quantities for ``metrics.json``, ``(result) -> dict``.
    guides : the model's own guides, name -> ``builder(model) -> guide``; usable by name in
        ``fit(..., guide=NAME)`` next to the generic ones.
    default_guides : inference method -> guide name, overriding the method's default.
    method_defaults : inference method -> settings that override the method's defaults for
        this model (user settings still win).
    task : ``"regression"``, ``"binary"`` or ``"classification"``: how predictions are summarised.
    standardize : fit standardises inputs (and regression targets) on the training data and
        predictions answer in the original units.
    infer_options : ``(dataset) -> {option: value}`` for options left at None that the
        training data decide (e.g. the number of classes).
    init_loc_fn : where optimisation-based methods start (a Pyro init strategy); None keeps
        each guide's default.
    method_kwargs : inference method -> extra runner arguments only the model can supply
        (e.g. which sites MC dropout drops).
    notes : what a user should know in practice (which settings a known behaviour needs), printed
        by ``pyro-bdl describe`` after the math.
    """

    name: str
    model: Callable
    summary: str
    math: str
    options: Mapping[str, Option]
    sites: tuple[str, ...]
    methods: tuple[str, ...]
    default_data: str
    uses_features: bool = True
    check_data: Callable | None = None
    exact_posterior: Callable | None = None
    report: Callable | None = None
    guides: Mapping[str, Callable] = field(default_factory=dict)
    default_guides: Mapping[str, str] = field(default_factory=dict)
    method_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    task: str = "regression"
    standardize: bool = False
    infer_options: Callable | None = None
    init_loc_fn: Callable | None = None
    method_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: str = ""

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
            value = options.get(key, opt.default)
            if isinstance(value, str):
                try:
                    value = opt.parse(value)
                except ValueError as exc:
                    raise ValueError(f"option {key}={value!r} for model '{self.name}': {exc}") from None
            resolved[key] = value
        return resolved

    @property
    def minibatches(self) -> bool:
        """The model subsamples its data (the ``batch_size`` setting applies): :func:`takes_minibatches`."""
        return takes_minibatches(self.model)

    def bind(self, options: Mapping[str, Any] | None = None) -> Callable:
        """The model with its options fixed: ``bound(X, y=None)``."""
        bound = functools.partial(self.model, **self.resolve_options(options))
        functools.update_wrapper(bound, self.model)
        return bound


_REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """Add a model to the zoo (called at import time by each file in ``models/``)."""
    from .inference import METHODS

    bad = [m for m in spec.methods if m not in METHODS]
    if bad:
        raise ValueError(f"model '{spec.name}' declares unknown inference methods {bad}")
    _REGISTRY[spec.name] = spec
    return spec


def _load_zoo() -> None:
    from . import models  # noqa: F401  (importing the package registers every model)


def get_model(name: str) -> ModelSpec:
    """The :class:`ModelSpec` registered as ``name``; a clear error for unknown names."""
    _load_zoo()
    if name not in _REGISTRY:
        raise ValueError(f"unknown model '{name}'; known models: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def list_models() -> list[ModelSpec]:
    """All registered models, sorted by name."""
    _load_zoo()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
