"""Tables: the :class:`Dataset`, CSV loading with validation, and the checks models ask of data.

A :class:`Dataset` is a feature matrix ``X`` of shape ``(n, d)`` and a target ``y`` of shape
``(n,)`` (``None`` for rows to predict), with the column names they came from.  The embedded data
sets and :func:`pyro_bdl.data.embedded.load` (a name or a path) build on this module; it imports none of them.

Example
-------
>>> import pandas as pd
>>> ds = from_frame(pd.DataFrame({"x": [0.0, 1.0], "y": [1.0, 3.0]}), target="y")
>>> ds.X.shape, ds.y.shape, ds.target_name
(torch.Size([2, 1]), torch.Size([2]), 'y')
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

__all__ = ["DataError", "Dataset", "load_csv", "csv_text", "from_frame", "check_binary", "check_has_features", "nan_check_kwargs"]


class DataError(ValueError):
    """Data that cannot be used, with a message naming the problem."""


@dataclass
class Dataset:
    """Features ``X`` (n, d), target ``y`` (n,) or None, and their names."""

    name: str
    X: torch.Tensor
    y: torch.Tensor | None
    feature_names: list[str] = field(default_factory=list)
    target_name: str | None = None

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def model_kwargs(self) -> dict:
        """Keyword arguments for a model over ``X`` and ``y``: ``{"X": X, "y": y}``."""
        return {"X": self.X, "y": self.y}

    def to_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.X.numpy(), columns=self.feature_names)
        if self.y is not None:
            df[self.target_name] = self.y.numpy()
        return df


def _check_finite(df: pd.DataFrame, source: str) -> None:
    for col in df.columns:
        values = pd.to_numeric(df[col], errors="coerce")
        bad_text = values.isna() & df[col].notna()
        if bad_text.any():
            row = int(np.flatnonzero(bad_text.to_numpy())[0])
            raise DataError(
                f"{source}: column '{col}' is not numeric (row {row + 1} holds {df[col].iloc[row]!r})"
            )
        missing = ~np.isfinite(values.to_numpy(dtype=float))
        if missing.any():
            rows = (np.flatnonzero(missing) + 1).tolist()
            shown = ", ".join(map(str, rows[:5])) + (" ..." if len(rows) > 5 else "")
            raise DataError(
                f"{source}: column '{col}' has {len(rows)} NaN/missing/infinite value(s) at data row(s) {shown}"
            )
        huge = np.abs(values.to_numpy(dtype=float)) > np.finfo(np.float32).max  # would become inf in float32
        if huge.any():
            row = int(np.flatnonzero(huge)[0])
            raise DataError(f"{source}: column '{col}' holds {df[col].iloc[row]!r} at data row {row + 1}, beyond the "
                            f"largest float32 ({np.finfo(np.float32).max:.3g}); rescale the column")


def from_frame(
    df: pd.DataFrame,
    target: str | None,
    name: str = "frame",
    features: list[str] | None = None,
    missing_target: float | None = None,
) -> Dataset:
    """Build a :class:`Dataset` from a data frame, checking it first.

    ``target`` names the target column (None: rows to predict, or a model without a target); ``features``
    defaults to every other column.  ``missing_target``: the value an empty target cell stands for (a
    semi-supervised model's unknown label, -1); None: an empty cell is refused like any other.
    """
    if len(df.columns) == 0 or len(df) == 0:
        raise DataError(f"{name}: has no data rows")
    if target is not None and target not in df.columns:
        raise DataError(
            f"{name}: target column '{target}' not found; columns are: {', '.join(map(str, df.columns))}"
        )
    if features is None:
        features = [c for c in df.columns if c != target]
    else:
        missing = [c for c in features if c not in df.columns]
        if missing:
            raise DataError(f"{name}: feature column(s) {', '.join(map(repr, missing))} not found")
    if target is not None and missing_target is not None:
        df = df.assign(**{target: df[target].fillna(missing_target)})
    used = list(features) + ([target] if target is not None else [])
    _check_finite(df[used], name)
    X = torch.tensor(df[features].to_numpy(dtype=np.float32).reshape(len(df), len(features)))
    y = None if target is None else torch.tensor(df[target].to_numpy(dtype=np.float32))
    return Dataset(name, X, y, [str(c) for c in features], target)


def load_csv(path: str | Path, target: str | None, features: list[str] | None = None,
             missing_target: float | None = None) -> Dataset:
    """Read a CSV file with a header row (:func:`from_frame` the rest); errors name the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file (and not an embedded data set; see `pyro-bdl list`)")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty")
    try:
        df = pd.read_csv(io.StringIO(csv_text(path)))  # the raw text checked first: encoding, header, rows
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty") from None
    except pd.errors.ParserError as exc:
        raise DataError(f"{path}: not a readable CSV file ({exc})") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror})") from None
    return from_frame(df, target, name=str(path), features=features, missing_target=missing_target)


def check_binary(ds: Dataset) -> None:
    """Raise unless the target holds only 0 and 1."""
    values = torch.unique(ds.y)
    bad = [v for v in values.tolist() if v not in (0.0, 1.0)]
    if bad:
        shown = ", ".join(f"{v:g}" for v in bad[:5])
        raise DataError(f"{ds.name}: target '{ds.target_name}' must hold only 0 and 1; found {shown}")


def check_has_features(ds: Dataset) -> None:
    if ds.X.shape[1] == 0:
        raise DataError(f"{ds.name}: the model needs at least one feature column besides the target")


def nan_check_kwargs(kwargs: dict) -> None:
    """Reject NaN or infinite values in any tensor argument of a model."""
    for key, value in kwargs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
            n_bad = int((~torch.isfinite(value)).sum())
            raise DataError(f"argument '{key}' holds {n_bad} NaN or infinite value(s)")
        if isinstance(value, float) and not math.isfinite(value):
            raise DataError(f"argument '{key}' is {value}")


def as_model_kwargs(data) -> dict:
    """A user model's keyword arguments from a :class:`Dataset` (``X``, ``y``), a dict of arguments, or a
    tensor ``X``.  (A zoo model names its own: :meth:`pyro_bdl.registry.ModelSpec.data_kwargs`.)"""
    if isinstance(data, Dataset):
        kwargs = data.model_kwargs()
    elif isinstance(data, dict):
        kwargs = dict(data)
    elif isinstance(data, torch.Tensor):
        kwargs = {"X": data}
    else:
        raise TypeError(f"data must be a Dataset, a dict of model arguments or a tensor, not {type(data).__name__}")
    return kwargs


def csv_text(path: str | Path) -> str:
    """The text of a comma-separated file with a header row, checked: UTF-8 (a byte-order mark is accepted and
    dropped), a header of distinct, non-empty names, every row as long as the header.  Raises
    :class:`~pyro_bdl.data.table.DataError` naming the file, the row and the problem."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
                        "save the file as UTF-8 CSV") from None
    if "\x00" in text:
        raise DataError(f"{path}: holds NUL bytes; not a text CSV file")
    rows = csv.reader(io.StringIO(text))
    try:
        header = next((r for r in rows if r), None)
        if header is None:
            raise DataError(f"{path}: the file is empty")
        names = [h.strip() for h in header]
        for sep, label in ((";", "semicolon"), ("\t", "tab"), ("|", "vertical bar")):
            if len(names) == 1 and sep in header[0]:
                raise DataError(f"{path}: the header is one column {header[0]!r} holding {label}s; pyro-bdl reads "
                                "comma-separated files (convert the file, e.g. in pandas: "
                                f"pd.read_csv(path, sep={sep!r}).to_csv(new_path, index=False))")
        empty = [i + 1 for i, n in enumerate(names) if not n]
        if empty:
            raise DataError(f"{path}: the header has an empty column name (column {empty[0]}); name every column")
        seen = {}
        for i, n in enumerate(names):
            if n in seen:
                raise DataError(f"{path}: the header repeats the column name {n!r} (columns {seen[n] + 1} and {i + 1})")
            seen[n] = i
        for row in rows:
            if row and len(row) != len(header):
                raise DataError(f"{path}: line {rows.line_num} has {len(row)} field(s); the header has {len(header)}")
    except csv.Error as exc:
        raise DataError(f"{path}: not a readable CSV file (line {rows.line_num}: {exc})") from None
    return text
