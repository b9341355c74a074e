"""Output paths checked before any work, and the files of a fit directory.

Every check raises an :class:`OutputPathError` (a :class:`~pyro_bdl.data.table.DataError`, so a ``ValueError``;
the command line prints it and exits 2) naming the path and the problem.

Example
-------
>>> import tempfile, pathlib
>>> f = pathlib.Path(tempfile.mkdtemp()) / "a-file"
>>> _ = f.write_text("x")
>>> check_out_dir(f)
Traceback (most recent call last):
...
pyro_bdl.storage.paths.OutputPathError: --out ...a-file: is an existing file, not a directory
"""

from __future__ import annotations

import os
from pathlib import Path

from pyro_bdl.data.table import DataError

__all__ = ["FIT_FILES", "ALL_FIT_FILES", "FitDirectoryError", "OutputPathError", "check_out_dir", "check_out_file",
           "remove_stale"]
#: The files whose presence marks a directory as holding a fit (``pyro-bdl fit --out``).
FIT_FILES = ("posterior.nc", "metrics.json")
#: Every file a fit may write (:func:`pyro_bdl.store.write_fit` and its plots): what ``--force`` replaces.
ALL_FIT_FILES = FIT_FILES + ("summary.csv", "params.pt", "loss.png", "trace.png", "posterior.png", "predictive.png",
                             "reliability.png")


class FitDirectoryError(DataError):
    """A fit directory (``pyro-bdl fit --out``) that is missing a file or holds one that cannot be read."""


class OutputPathError(DataError):
    """An output path that cannot be written: a file where a directory is wanted, no permission, an existing fit."""


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
