"""Checks on the data a model is fitted to, before any work: warnings about data that can be fitted but
probably should not be as it is (a constant column).  The checks that refuse data (NaN, a missing column, a CSV
that is not one) raise :class:`~pyro_bdl.data.table.DataError` where the data are read (:mod:`pyro_bdl.data.table`).

Example
-------
>>> import warnings, torch
>>> from pyro_bdl.data.table import Dataset
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     check_training_data(Dataset("d", torch.tensor([[1.0, 2.0], [1.0, 3.0]]), torch.tensor([0.0, 1.0]), ["a", "b"]))
>>> str(caught[0].message)
"d: feature column(s) 'a' are constant and carry no information"
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

__all__ = ["DataWarning", "check_training_data", "outside_stacklevel"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the command line is the user's entry point: a warning of a fit it runs names its line (and it prints the warnings
#: its own module is named in)
_CLI = os.path.join(_PACKAGE, "cli.py")


class DataWarning(UserWarning):
    """Data that can be fitted but probably should not be as it is (a constant column)."""


def outside_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by the caller of this function name the first frame outside
    the package: the user's line, however many of the package's functions lie between (``fit`` or ``prepare`` or a
    workflow); the command line's own module counts as outside (it is where a command's user is)."""
    level, frame = 1, sys._getframe(2)  # 1: the function that warns
    while frame is not None and _inside(os.path.abspath(frame.f_code.co_filename)):
        level, frame = level + 1, frame.f_back
    return level + 1


def _inside(path: str) -> bool:
    return path.startswith(_PACKAGE + os.sep) and path != _CLI


def check_training_data(dataset, regression: bool = True, features: bool = True) -> None:
    """Warn (:class:`DataWarning`) about constant columns of the data a model is fitted to.  A constant target
    is kept, not refused: all heads is a fair coin experiment and all one class a fair classification
    sample (no warning for those: ``regression=False``), but a regression on it has nothing to learn (its
    noise sd collapses towards zero), so the warning says so.  A constant feature column carries no
    information (with standardisation it is centred to zero); ``features=False`` for a model of the columns
    themselves (a VAE's pixels: a constant pixel is data, not an uninformative input)."""
    name = dataset.name
    y = dataset.y
    if regression and y is not None and len(y) > 1 and bool((y == y[0]).all()):
        warnings.warn(f"{name}: the target '{dataset.target_name}' is constant ({float(y[0]):g} in every row); "
                      "a regression on it has nothing to learn (its noise sd collapses towards zero)", DataWarning,
                      stacklevel=outside_stacklevel())
    X = dataset.X
    if features and X.ndim == 2 and X.shape[0] > 1 and X.shape[1] > 0:
        constant = torch.nonzero((X == X[0]).all(dim=0)).flatten().tolist()
        if constant:
            names = [dataset.feature_names[i] if i < len(dataset.feature_names) else str(i) for i in constant]
            shown = ", ".join(map(repr, names[:5])) + (" ..." if len(names) > 5 else "")
            warnings.warn(f"{name}: feature column(s) {shown} are constant and carry no information", DataWarning,
                          stacklevel=outside_stacklevel())
