"""Checks on what the tool reads and writes before any work: CSV text, output paths, training data.

Every check raises a :class:`~pyro_bdl.data.DataError` (a ``ValueError``; the command line prints it and
exits 2) naming the file or path and the problem, or warns (:class:`DataWarning`) about data that can be
fitted but probably should not be as it is.

Example
-------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "dup.csv"
>>> _ = path.write_text("x0,x0,y\\n1,2,3\\n")
>>> csv_text(path)
Traceback (most recent call last):
...
pyro_bdl.data.DataError: ...dup.csv: the header repeats the column name 'x0' (columns 1 and 2)
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from pathlib import Path

import torch

from .data import DataError

__all__ = ["DataWarning", "FitDirectoryError", "OutputPathError", "csv_text", "check_out_dir", "check_out_file",
           "check_training_data", "FIT_FILES", "ALL_FIT_FILES", "remove_stale"]

#: The files whose presence marks a directory as holding a fit (``pyro-bdl fit --out``).
FIT_FILES = ("posterior.nc", "metrics.json")
#: Every file a fit may write (:func:`pyro_bdl.store.write_fit` and its plots): what ``--force`` replaces.
ALL_FIT_FILES = FIT_FILES + ("summary.csv", "params.pt", "loss.png", "trace.png", "posterior.png", "predictive.png",
                             "reliability.png")


class DataWarning(UserWarning):
    """Data that can be fitted but probably should not be as it is (a constant column)."""


class FitDirectoryError(DataError):
    """A fit directory (``pyro-bdl fit --out``) that is missing a file or holds one that cannot be read."""


class OutputPathError(DataError):
    """An output path that cannot be written: a file where a directory is wanted, no permission, an existing fit."""


def csv_text(path: str | Path) -> str:
    """The text of a comma-separated file with a header row, checked: UTF-8 (a byte-order mark is accepted and
    dropped), a header of distinct, non-empty names, every row as long as the header.  Raises
    :class:`~pyro_bdl.data.DataError` naming the file, the row and the problem."""
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


def check_out_dir(path: str | Path, force: bool = False) -> None:
    """Refuse an output directory ``path`` that cannot be written: an existing file, a path under a file, a
    directory without write permission, or (unless ``force``) a directory that already holds a fit."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"--out {path}: is an existing file, not a directory")
    _check_writable(path, "--out")
    held = [name for name in FIT_FILES if (path / name).exists()]
    if held and not force:
        raise OutputPathError(f"--out {path}: already holds a fit ({', '.join(held)}); choose another directory, "
                              "or pass --force to replace it")


def remove_stale(out_dir: str | Path, written: list[str]) -> list[str]:
    """After ``--force``: remove the files of the replaced fit that the new one did not write (a sampler's
    ``trace.png`` after an optimiser's fit, its ``params.pt``); returns their names."""
    stale = [name for name in ALL_FIT_FILES if name not in written and (Path(out_dir) / name).exists()]
    for name in stale:
        (Path(out_dir) / name).unlink()
    return stale


def check_out_file(path: str | Path) -> None:
    """Refuse an output file ``path`` that cannot be written: a directory, a path under a file, no permission."""
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"--out {path}: is a directory; give a file name")
    _check_writable(path.parent, "--out", path)


def _check_writable(path: Path, flag: str, named: Path | None = None) -> None:
    """``path`` (a directory, made if missing) can be created and written: its nearest existing ancestor is
    a directory with write permission (or ``path`` itself exists and is writable)."""
    named = named or path
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise OutputPathError(f"{flag} {named}: {probe} is a file, so nothing can be created under it")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} {named}: no permission to write in {probe}")


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
                      stacklevel=3)
    X = dataset.X
    if features and X.ndim == 2 and X.shape[0] > 1 and X.shape[1] > 0:
        constant = torch.nonzero((X == X[0]).all(dim=0)).flatten().tolist()
        if constant:
            names = [dataset.feature_names[i] if i < len(dataset.feature_names) else str(i) for i in constant]
            shown = ", ".join(map(repr, names[:5])) + (" ..." if len(names) > 5 else "")
            warnings.warn(f"{name}: feature column(s) {shown} are constant and carry no information", DataWarning,
                          stacklevel=3)
