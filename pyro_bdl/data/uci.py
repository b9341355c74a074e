r"""The UCI regression benchmark layout (the folders of the MC dropout experiments): :func:`load_uci` reads one
train/test split of a folder in original units, :func:`uci_splits` counts its splits, :func:`uci_protocol` reads the
protocol's settings the folder carries (hidden width, epochs, the MC dropout grids).

A folder holds ``data.txt`` (whitespace-separated numbers, one row per line), ``index_features.txt`` and
``index_target.txt`` (0-based columns), ``index_train_K.txt`` and ``index_test_K.txt`` (0-based rows of split K) and,
optionally, ``n_splits.txt``.  Every problem (a missing file, a ragged row, an index out of range, a row in both train
and test) is a :class:`~pyro_bdl.data.table.DataError` naming the file.

Example
-------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "data.txt").write_text("1 2 3\n4 5 6\n7 8 9\n")
>>> _ = (folder / "index_features.txt").write_text("0 1")
>>> _ = (folder / "index_target.txt").write_text("2")
>>> _ = (folder / "index_train_0.txt").write_text("0 1")
>>> _ = (folder / "index_test_0.txt").write_text("2")
>>> uci_splits(folder)
1
>>> train, test = load_uci(folder, 0)
>>> train.X.shape, test.y.tolist()
(torch.Size([2, 2]), [9.0])
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pyro_bdl.data.table import DataError, Dataset

__all__ = ["load_uci", "uci_splits", "UciProtocol", "uci_protocol"]


def _need_file(folder: Path, name: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise DataError(f"{folder}: missing file {name} (expected the UCI benchmark layout: data.txt, "
                        f"index_features.txt, index_target.txt, index_train_K.txt, index_test_K.txt)")
    return path


def _read_indices(path: Path) -> np.ndarray:
    """0-based integer indices, whitespace or newline separated."""
    tokens = path.read_text().split()
    if not tokens:
        raise DataError(f"{path}: holds no indices")
    out = []
    for tok in tokens:
        try:
            value = int(tok)
        except ValueError:
            try:
                as_float = float(tok)
            except ValueError:
                as_float = math.nan
            if not (math.isfinite(as_float) and as_float.is_integer()):
                raise DataError(f"{path}: {tok!r} is not an integer index") from None
            value = int(as_float)
        out.append(value)
    return np.asarray(out, dtype=np.int64)


def _check_range(idx: np.ndarray, size: int, path: Path, what: str) -> None:
    bad = idx[(idx < 0) | (idx >= size)]
    if bad.size:
        shown = ", ".join(map(str, bad[:5].tolist())) + (" ..." if bad.size > 5 else "")
        raise DataError(f"{path}: {bad.size} {what} index(es) out of range ({shown}); data.txt has {size} {what}s "
                        f"(valid: 0..{size - 1})")


def _read_matrix(path: Path) -> np.ndarray:
    """data.txt: whitespace-separated numbers, one row a line, all rows the same length."""
    rows = [line.split() for line in path.read_text().splitlines()]
    rows = [(i + 1, r) for i, r in enumerate(rows) if r]
    if not rows:
        raise DataError(f"{path}: the file is empty")
    width = len(rows[0][1])
    for line_no, r in rows:
        if len(r) != width:
            raise DataError(f"{path}: line {line_no} has {len(r)} value(s), line {rows[0][0]} has {width}")
    flat = [tok for _, r in rows for tok in r]
    try:
        return np.asarray(flat, dtype=np.float64).reshape(len(rows), width)
    except ValueError:
        for k, tok in enumerate(flat):
            try:
                float(tok)
            except ValueError:
                raise DataError(f"{path}: line {rows[k // width][0]} holds {tok!r}, not a number") from None
        raise


def uci_splits(folder: str | Path) -> int:
    """How many train/test splits a UCI benchmark folder has.

    From ``n_splits.txt`` when present, otherwise by counting the ``index_train_K.txt`` files.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such folder (expected a UCI benchmark folder with data.txt and index files)")
    n_file = folder / "n_splits.txt"
    if n_file.is_file():
        text = n_file.read_text().split()
        if len(text) != 1 or not text[0].isdigit() or int(text[0]) < 1:
            raise DataError(f"{n_file}: expected one positive integer, found {' '.join(text)!r}")
        return int(text[0])
    found = [p for p in folder.iterdir() if re.fullmatch(r"index_train_\d+\.txt", p.name)]
    if not found:
        raise DataError(f"{folder}: no splits (neither n_splits.txt nor any index_train_K.txt file)")
    return len(found)


def load_uci(folder: str | Path, split: int = 0) -> tuple[Dataset, Dataset]:
    """Split ``split`` of a UCI regression benchmark folder: (train, test) in ORIGINAL units.

    The folder holds ``data.txt`` (whitespace-separated rows), ``index_features.txt`` and
    ``index_target.txt`` (0-based column indices; exactly one target), and
    ``index_train_K.txt`` / ``index_test_K.txt`` (0-based row indices of split K).  Each part has
    X (n, d) float32 with feature names ``x0`` ... ``x{d-1}`` (in index_features order) and
    y (n,) named ``y``.  Standardise with :class:`~pyro_bdl.data.transforms.Standardizer` fitted on the training part.
    """
    folder = Path(folder)
    n_splits = uci_splits(folder)  # also checks the folder exists
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)):
        raise TypeError(f"split must be an integer, not {type(split).__name__}")
    if not 0 <= split < n_splits:
        raise DataError(f"{folder}: split {split} out of range; there are {n_splits} splits (0..{n_splits - 1})")
    split = int(split)
    data_path = _need_file(folder, "data.txt")
    feat_path = _need_file(folder, "index_features.txt")
    targ_path = _need_file(folder, "index_target.txt")
    train_path = _need_file(folder, f"index_train_{split}.txt")
    test_path = _need_file(folder, f"index_test_{split}.txt")

    data = _read_matrix(data_path)
    n_rows, n_cols = data.shape
    features = _read_indices(feat_path)
    target = _read_indices(targ_path)
    if target.size != 1:
        raise DataError(f"{targ_path}: holds {target.size} indices; expected exactly one target column")
    _check_range(features, n_cols, feat_path, "column")
    _check_range(target, n_cols, targ_path, "column")
    if int(target[0]) in features.tolist():
        raise DataError(f"{feat_path}: lists the target column {int(target[0])} as a feature")
    train = _read_indices(train_path)
    test = _read_indices(test_path)
    _check_range(train, n_rows, train_path, "row")
    _check_range(test, n_rows, test_path, "row")
    both = np.intersect1d(train, test)
    if both.size:
        shown = ", ".join(map(str, both[:5].tolist())) + (" ..." if both.size > 5 else "")
        raise DataError(f"{folder}: split {split} puts {both.size} row(s) in both train and test ({shown})")

    used = np.concatenate([features, target])
    sub = data[:, used]
    bad = ~np.isfinite(sub)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(
            f"{data_path}: {int(bad.sum())} NaN or infinite value(s) in the used columns, first at row "
            f"{int(r)}, column {int(used[c])} (0-based)"
        )

    names = [f"x{i}" for i in range(features.size)]

    def part(rows, label):
        X = torch.tensor(data[np.ix_(rows, features)], dtype=torch.float32)
        y = torch.tensor(data[rows, int(target[0])], dtype=torch.float32)
        return Dataset(f"{folder.name}[split {split}] {label}", X, y, list(names), "y")

    return part(train, "train"), part(test, "test")


@dataclass(frozen=True)
class UciProtocol:
    """The settings of the standard protocol a UCI folder carries (each file optional).

    Attributes
    ----------
    splits : the number of train/test splits (:func:`uci_splits`).
    hidden : ``n_hidden.txt``, the one hidden layer's width (default 50; the protocol's 100 for protein).
    epochs : ``n_epochs.txt``, the published runs' training epochs (None when absent; reported, not used by the zoo,
        whose methods train by their own settings).
    dropout_rates, tau_values : ``dropout_rates.txt`` and ``tau_values.txt``, the grids of dropout rate and model
        precision tau (in the target's original units, 1 / noise variance) searched per split in Gal &
        Ghahramani's experiments (empty when absent).
    """

    splits: int
    hidden: int = 50
    epochs: int | None = None
    dropout_rates: tuple[float, ...] = ()
    tau_values: tuple[float, ...] = ()


def _optional_numbers(folder: Path, name: str, kind=float) -> tuple:
    path = folder / name
    if not path.is_file():
        return ()
    values = []
    for tok in path.read_text().split():
        try:
            value = kind(tok) if kind is float else int(float(tok))
        except ValueError:
            raise DataError(f"{path}: {tok!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise DataError(f"{path}: {tok!r} must be a finite number > 0")
        values.append(value)
    return tuple(values)


def uci_protocol(folder: str | Path) -> UciProtocol:
    """The protocol settings of a UCI benchmark folder (:class:`UciProtocol`); a :class:`DataError` naming the file
    for a malformed one.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "n_splits.txt").write_text("20")
    >>> _ = (folder / "dropout_rates.txt").write_text("0.005 0.01\\n")
    >>> uci_protocol(folder)
    UciProtocol(splits=20, hidden=50, epochs=None, dropout_rates=(0.005, 0.01), tau_values=())
    """
    folder = Path(folder)
    splits = uci_splits(folder)
    single = {}
    for name, key in (("n_hidden.txt", "hidden"), ("n_epochs.txt", "epochs")):
        values = _optional_numbers(folder, name, int)
        if len(values) > 1:
            raise DataError(f"{folder / name}: expected one positive integer, found {len(values)} numbers")
        if values:
            single[key] = values[0]
    return UciProtocol(splits, dropout_rates=_optional_numbers(folder, "dropout_rates.txt"),
                       tau_values=_optional_numbers(folder, "tau_values.txt"), **single)
