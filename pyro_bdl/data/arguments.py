"""A user's data as the keyword arguments the engine hands a Pyro model, converted once, bound by name.

A Pyro program takes its data as arguments: ``model(sigma, y=None)``, ``model(x, obs)``, ``model(data)``.  A user
has them as tensors, NumPy arrays, pandas Series or a DataFrame, in a dict by name or a tuple by position.
:func:`bind_arguments` turns any of these into

- ``kwargs``: one dict, argument name -> value, every array a tensor (floating arrays in torch's default dtype, as
  the model's parameters are; integers as ``int64``, booleans as ``bool``; Python numbers, strings and None as
  they are), and
- ``model``: the program the engine calls as ``model(**kwargs)``: the user's own function where that is how it
  is called, else a :class:`BoundModel` that passes the positional arguments by position and gives back the
  names the engine cannot pass as keywords.

The engine hands the data to Pyro's inference calls as keywords (``SVI.step(**kwargs)``, whose loss is
``loss(model, guide, *args, **kwargs)``), so an argument called ``model`` or ``guide`` (Pyro's eight schools
example has ``conditioned_model(model, sigma, y)``) would clash: its key in ``kwargs`` is renamed
(``model`` -> ``model_``) and :class:`BoundModel` gives the model its own name back.

Forms of ``data``: a dict (argument name -> value), a pandas DataFrame (each column an argument), a tuple or list
(positional arguments), a single tensor or array (the first argument), or None (no arguments).  What cannot be
converted is a :class:`~pyro_bdl.data.table.DataError` naming the argument.

Example
-------
>>> import numpy as np, pandas as pd
>>> def model(model, sigma, y=None): ...
>>> bound, kwargs = bind_arguments(model, (np.array([1, 2]), pd.Series([15.0, 10.0])))
>>> sorted(kwargs), kwargs["sigma"].dtype
(['model_', 'sigma'], torch.float32)
>>> bound.call_names()
{'model_': 'model', 'sigma': 'sigma', 'y': 'y'}
"""

from __future__ import annotations

import functools
import inspect
import numbers
from typing import Any, Callable

import numpy as np
import torch

from pyro_bdl.data.table import DataError

__all__ = ["BoundModel", "bind_arguments", "binding_of", "rebind", "as_argument", "RESERVED"]

#: Names the engine's calls take themselves, beside the model's keyword arguments (Pyro's ELBOs take
#: ``loss(model, guide, *args, **kwargs)``): a model argument of one of these names is passed under another key.
RESERVED = frozenset({"model", "guide"})


class BoundModel(functools.partial):
    """``model(**kwargs)`` for a program that takes some arguments by position or by a reserved name.

    A :class:`functools.partial` of :func:`_call` (so a cache keyed on the function and its arguments, such as
    the sampler's potential cache, sees two bindings of one model as the same): ``positional`` lists the keys
    passed by position, in order; ``renamed`` maps a key to the keyword the model takes.  Its signature is the
    engine's keys, keyword-only, so ``inspect.signature`` reads what the engine may pass (``batch_size``).
    """

    def __new__(cls, model: Callable, positional: tuple, renamed: tuple, signature: inspect.Signature):
        bound = super().__new__(cls, _call, model, positional, renamed)
        bound.__signature__ = signature
        functools.update_wrapper(bound, model, assigned=("__module__", "__name__", "__qualname__", "__doc__"),
                                 updated=())
        return bound

    @property
    def model(self) -> Callable:
        """The user's program."""
        return self.args[0]

    def call_names(self) -> dict:
        """Key in ``kwargs`` -> the argument of the program it fills (its name; a key passed by position keeps its
        key, e.g. ``args_0`` for the first value of ``*args``)."""
        renamed = dict(self.args[2])
        return {key: renamed.get(key, key) for key, p in self.__signature__.parameters.items()
                if p.kind is not p.VAR_KEYWORD}


def binding_of(model: Callable) -> dict:
    """How ``model`` takes the engine's keys, JSON-safe: ``{"positional": [keys], "renamed": {key: name}}`` (both
    empty for a program called with its own keywords); :func:`rebind` makes the same model again."""
    if not isinstance(model, BoundModel):
        return {"positional": [], "renamed": {}}
    return {"positional": list(model.args[1]), "renamed": dict(model.args[2])}


def rebind(model: Callable, keys, binding: dict) -> Callable:
    """The program ``model`` taking the engine's ``keys`` as :func:`binding_of` recorded (a fit read back from
    its files)."""
    positional, renamed = tuple(binding.get("positional", ())), tuple(binding.get("renamed", {}).items())
    if not positional and not renamed:
        return model
    extra = [p for p in _parameters(model).values() if p.kind is p.VAR_KEYWORD]
    signature = inspect.Signature([inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in keys] + extra)
    return BoundModel(model, positional, renamed, signature)


def _call(model, positional: tuple, renamed: tuple, **kwargs):
    args = [kwargs.pop(key) for key in positional if key in kwargs]
    names = dict(renamed)
    return model(*args, **{names.get(k, k): v for k, v in kwargs.items()})


def bind_arguments(model: Callable, data) -> tuple[Callable, dict]:
    """``(model the engine calls with keywords, its keyword arguments)`` for ``data`` in any of the module's forms.

    A :class:`BoundModel` given again (a fit's model, to predict on new data) binds with its own names.
    """
    if isinstance(model, BoundModel):  # new data for a fitted model: the user's names, the fit's binding
        _, kwargs = bind_arguments(model.model, data)
        keys = {v: k for k, v in dict(model.args[2]).items()}
        return model, {keys.get(name, name): value for name, value in kwargs.items()}
    parameters = _parameters(model)
    given = _given_by_name(data, parameters)
    positional_only = [name for name, p in parameters.items()
                       if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL) and name in given]
    clashing = [name for name in given if name in RESERVED]
    kwargs = {name: as_argument(name, value) for name, value in given.items()}
    if not positional_only and not clashing:
        return model, kwargs
    keys = {name: _free_key(name, given) if name in RESERVED else name for name in given}
    positional = tuple(keys[name] for name in positional_only)
    renamed = tuple((keys[name], name) for name in given if keys[name] != name)
    signature = inspect.Signature(
        [inspect.Parameter(keys.get(name, name), inspect.Parameter.KEYWORD_ONLY, default=p.default)
         for name, p in parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or name in given]
        + [p for p in parameters.values() if p.kind is p.VAR_KEYWORD])
    bound = BoundModel(model, positional, renamed, signature)
    return bound, {keys[name]: value for name, value in kwargs.items()}


def _parameters(model: Callable) -> dict:
    """The program's parameters by name (a module's: its ``forward``'s; an empty dict where no signature can be
    read)."""
    try:
        return dict(inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model).parameters)
    except (TypeError, ValueError):
        return {}


def _given_by_name(data, parameters: dict) -> dict:
    """``data`` as argument name -> value (not yet converted): positional values named by the signature, those
    beyond its named parameters by its ``*args`` (``args_0``, ...)."""
    if data is None:
        return {}
    if isinstance(data, dict):
        return dict(data)
    if _is_frame(data):
        return {str(column): data[column] for column in data.columns}
    values = tuple(data) if isinstance(data, (tuple, list)) else (data,)
    named = [name for name, p in parameters.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((name for name, p in parameters.items() if p.kind is p.VAR_POSITIONAL), None)
    if len(values) > len(named) and star is None:
        raise DataError(f"the model takes {len(named)} positional argument(s) ({', '.join(named) or 'none'}); "
                        f"data gives {len(values)}")
    given = dict(zip(named, values))
    given.update({f"{star}_{i}": v for i, v in enumerate(values[len(named):])})
    if star is not None and len(values) > len(named):  # the extra values are *args: the model takes them by position
        parameters.update({f"{star}_{i}": inspect.Parameter(f"{star}_{i}", inspect.Parameter.POSITIONAL_ONLY)
                           for i in range(len(values) - len(named))})
        parameters.pop(star)
    return given


def _free_key(name: str, given: dict) -> str:
    key = name + "_"
    while key in given:
        key += "_"
    return key


def _is_frame(value) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "columns")


def as_argument(name: str, value: Any):
    """One argument as the model takes it: arrays (NumPy, pandas, nested lists of numbers) as tensors, floating ones
    in torch's default dtype; tensors, Python numbers, strings, None and other objects as they are; NumPy
    scalars as Python numbers.  A :class:`~pyro_bdl.data.table.DataError` names an array that is not numbers.

    >>> as_argument("y", [1.0, 2.5]).dtype, as_argument("n", np.int64(3))
    (torch.float32, 3)
    """
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, (str, bool, numbers.Number)):
        return value
    if hasattr(value, "to_numpy") and hasattr(value, "dtype") or _is_frame(value):  # pandas Series / DataFrame
        value = _pandas_array(name, value)
    elif isinstance(value, (list, tuple)):
        if any(isinstance(v, torch.Tensor) for v in value):  # a list of tensors: the model's own structure
            return value
        try:
            value = np.asarray(value)
        except ValueError:  # ragged: not an array, pass it as it is
            return value
        if value.dtype == object:
            return list(value)
    if not isinstance(value, np.ndarray):
        return value
    return _tensor(name, value)


def _pandas_array(name: str, value) -> np.ndarray:
    kinds = [str(value.dtype)] if hasattr(value, "dtype") and not _is_frame(value) else [str(d) for d in value.dtypes]
    bad = [k for k in kinds if k in ("category", "object", "str") or k.startswith(("string", "datetime"))]
    if bad:
        raise DataError(f"argument '{name}' is a pandas column of {bad[0]} values, not numbers: encode it first "
                        f"(e.g. series.cat.codes or pd.get_dummies)")
    array = value.to_numpy()
    if array.dtype == object:  # a nullable column with missing values, or mixed types
        raise DataError(f"argument '{name}' holds values that are not numbers (missing values in a nullable "
                        f"column? fill or drop them)")
    return array


def _tensor(name: str, array: np.ndarray) -> torch.Tensor:
    if array.dtype == bool:
        return torch.tensor(array, dtype=torch.bool)
    if np.issubdtype(array.dtype, np.integer):
        return torch.tensor(array, dtype=torch.int64)
    if np.issubdtype(array.dtype, np.floating):
        return torch.tensor(array, dtype=torch.get_default_dtype())
    raise DataError(f"argument '{name}' is an array of {array.dtype}, not numbers")
