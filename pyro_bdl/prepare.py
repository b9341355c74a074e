"""The step every fit starts with: a model and its data made ready to fit.

:func:`prepare` normalises the model (a zoo name, a :class:`~pyro_bdl.registry.ModelSpec` or a Pyro program), loads
and checks its data, binds them to the model's arguments on the fit's device, standardises a zoo model's inputs and
traces the model once (:class:`~pyro_bdl.inference.prototype.Prototype`).  :func:`pyro_bdl.fit` runs it; the
workflows (``compare``, ``sbc``, active learning) and the CLI run it too where they need the model's data as the fit
will see them, so that data are bound in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from pyro_bdl.data.arguments import bind_arguments
from pyro_bdl.data.checks import check_training_data
from pyro_bdl.data.table import DataError, Dataset, as_model_kwargs
from pyro_bdl.data.task import Task
from pyro_bdl.data.transforms import StandardizedModel, Standardizer
from pyro_bdl.inference.parallel.devices import move_to, resolve_device
from pyro_bdl.inference.prototype import Prototype
from pyro_bdl.inference.site_shapes import as_event_dims
from pyro_bdl.registry import ModelSpec, spec_of

__all__ = ["PreparedModel", "prepare"]


@dataclass
class PreparedModel:
    """A model ready to fit: its data bound to its arguments, checked, standardised and on its device, and one
    trace of it.

    Attributes
    ----------
    spec : the zoo model's :class:`~pyro_bdl.registry.ModelSpec`, None for a user's program.
    model : the model with its options bound, called as ``model(**kwargs)``.
    kwargs : its arguments, in the units the model works in (a standardised zoo model's: standardised).
    dataset : the data as a :class:`~pyro_bdl.data.table.Dataset` where they are one (in the data's units), else None.
    options : a zoo model's options, resolved (those the data decide, as the number of classes, filled in).
    standardized : the bound model wrapped in the standardising transform, None when the model works in the data's
        units.
    data : the arguments in the data's units, where the model is standardised (else None: ``kwargs`` are).
    run : the form of ``model`` a method runs, where it is not ``model`` itself (a user's batch dimensions outside
        every plate declared event dimensions: :mod:`pyro_bdl.inference.site_shapes`).
    sites : one trace of ``model(**kwargs)`` (:class:`~pyro_bdl.inference.prototype.Prototype`) that the checks, the
        runner and the result read the model's sites from.
    """

    spec: ModelSpec | None
    model: Callable
    kwargs: dict
    dataset: Dataset | None = None
    options: dict = field(default_factory=dict)
    standardized: StandardizedModel | None = None
    data: dict | None = None
    run: Callable | None = None
    sites: Prototype | None = None

    def __post_init__(self):
        if self.sites is None:
            self.sites = Prototype.of(self.model, self.kwargs)

    @property
    def standardizer(self) -> Standardizer | None:
        return None if self.standardized is None else self.standardized.standardizer

    def answer_model(self, observed: list[str]) -> Callable:
        """The model the fit result predicts with, in the data's units: its observed sites mapped back."""
        return self.model if self.standardized is None else self.standardized.with_sites(observed)


def prepare(model, data=None, *, target: str | None = None, options: dict | None = None,
            device: str | torch.device | None = None, standardize_on=None) -> PreparedModel:
    """The step every fit starts with, and every workflow that needs a model's data as the fit sees them: the
    model normalised (a zoo name, a :class:`~pyro_bdl.registry.ModelSpec` or a Pyro program), its data loaded,
    checked and bound to its arguments on ``device`` (so the standardising transform's statistics are too), a zoo
    model's inputs standardised by the statistics of ``standardize_on`` (n', d) where given, else of the training
    rows, and the model traced once.  ``data``, ``target``, ``options``, ``device`` and ``standardize_on`` are
    :func:`~pyro_bdl.fit`'s.

    >>> import torch
    >>> prepared = prepare("blr", {"X": torch.randn(30, 2), "y": torch.randn(30)})
    >>> prepared.spec.name, sorted(prepared.kwargs), prepared.sites.observed
    ('blr', ['X', 'y'], ['y'])
    """
    device = resolve_device(device)
    options = options or {}
    spec = spec_of(model)
    if spec is not None:
        return _prepare_zoo(spec, spec.default_data if data is None else data, target, options, device,
                            standardize_on)
    if options:
        raise ValueError("options=... are for zoo models; bind your own model's options with functools.partial")
    if not callable(model):
        raise TypeError(f"model must be a zoo model name or a Pyro model callable, not {type(model).__name__}")
    bound, kwargs = bind_arguments(model, data.model_kwargs() if isinstance(data, Dataset) else data)
    kwargs = move_to(kwargs, device)
    sites = Prototype.of(bound, kwargs)
    return PreparedModel(None, bound, kwargs, data if isinstance(data, Dataset) else None,
                         run=as_event_dims(bound, sites.unplated) if sites.unplated else None, sites=sites)


def _prepare_zoo(spec: ModelSpec, data, target, options: dict, device, standardize_on) -> PreparedModel:
    """A zoo model's data loaded, checked and bound, its options those the data decide filled in, its inputs (and a
    regression's target) standardised where the model works in standardised units."""
    dataset = spec.load_data(data, target) if isinstance(data, (str, Path, pd.DataFrame)) else data
    if isinstance(dataset, dict):
        dataset = _arguments_as_dataset(spec, dataset)
    if not isinstance(dataset, Dataset):
        kwargs = move_to(as_model_kwargs(dataset), device)
        return PreparedModel(spec, spec.bind(options), kwargs, None, spec.resolve_options(options))
    dataset = Dataset(dataset.name, dataset.X.to(device), None if dataset.y is None else dataset.y.to(device),
                      dataset.feature_names, dataset.target_name)
    if spec.data.check is not None:
        spec.data.check(dataset)
    regression = spec.data.task is Task.REGRESSION
    # warns about constant columns (the inputs of a supervised model; a generative model of the columns, as the
    # VAEs are, models a constant pixel as data)
    check_training_data(dataset, regression=regression,
                        features=spec.data.task.has_input_features)
    resolved = spec.resolve_options(options)
    if spec.data.infer_options is not None:  # options the data decide, e.g. the number of classes
        resolved.update({k: v for k, v in spec.data.infer_options(dataset).items() if resolved.get(k) is None})
    bound, original = spec.bind(resolved), spec.data_kwargs(dataset)
    if not spec.data.standardize:
        return PreparedModel(spec, bound, original, dataset, resolved)
    standardizer = Standardizer.fit(dataset.X, dataset.y if regression and dataset.y is not None else None,
                                    x_reference=_reference_inputs(standardize_on, dataset))
    standardized = StandardizedModel(bound, standardizer, spec.data.features, spec.data.target)
    return PreparedModel(spec, bound, standardized.standardize(original), dataset, resolved, standardized, original)


def _reference_inputs(inputs, dataset: Dataset) -> torch.Tensor | None:
    """``standardize_on`` as a tensor like ``dataset.X`` (its device and dtype), checked: the same columns."""
    if inputs is None:
        return None
    X = torch.as_tensor(inputs.X if isinstance(inputs, Dataset) else inputs).to(dataset.X)
    if X.dim() != 2 or X.shape[1] != dataset.X.shape[1] or len(X) == 0:
        raise DataError(f"standardize_on must be inputs (rows, {dataset.X.shape[1]}) like the data's, got shape "
                        f"{tuple(X.shape)}")
    return X


def _arguments_as_dataset(spec: ModelSpec, data: dict) -> Dataset:
    """A zoo model's data given as its keyword arguments (``{"X": X, "y": y}``: the names ``pyro-bdl describe``
    gives) as a :class:`Dataset`, so that it is checked, standardised and decides options (the number of classes)
    as a data set is."""
    wanted = {spec.data.features, spec.data.target} - {None}
    given = set(data) - ({spec.data.size} if spec.data.size is not None else set())
    if given != wanted:
        raise ValueError(f"model '{spec.name}' takes its data as {sorted(wanted)} (a dict of those tensors), got "
                         f"{sorted(data)}; or pass a Dataset, a CSV path or an embedded data set's name")
    # a target given as None: the data a workflow simulates the observations of (SBC); fit refuses it
    target = None if spec.data.target is None or data[spec.data.target] is None else _argument_tensor(
        data, spec.data.target)
    if spec.data.features is None:  # the coin: its flips are its data
        X = torch.zeros(0 if target is None else len(target), 0)
    else:
        X = _argument_tensor(data, spec.data.features)
        X = X if X.is_floating_point() else X.float()
        if X.dim() != 2:
            raise DataError(f"argument '{spec.data.features}' must be (rows, features), got shape {tuple(X.shape)}")
    if target is not None and (target.dim() != 1 or len(target) != len(X)):
        raise DataError(f"argument '{spec.data.target}' must be one value per row of '{spec.data.features}' ({len(X)}), got "
                        f"shape {tuple(target.shape)}")
    return Dataset("data", X, target, [f"x{j}" for j in range(X.shape[1])], spec.data.target)


def _argument_tensor(data: dict, name: str) -> torch.Tensor:
    try:
        return torch.as_tensor(data[name])
    except (TypeError, ValueError, RuntimeError) as error:
        raise DataError(f"argument '{name}' must be an array of numbers, got {type(data[name]).__name__}: "
                        f"{error}") from None
