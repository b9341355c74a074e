"""A reward table read from a file (:func:`load_reward_table`): an ``.npz`` of arrays, or the UCI Mushroom data.

Example
-------
>>> import tempfile, pathlib, numpy as np
>>> path = pathlib.Path(tempfile.mkdtemp()) / "table.npz"
>>> np.savez(path, contexts=np.eye(2), rewards=np.array([[1.0, 0.0], [0.0, 2.0]]))
>>> load_reward_table(path).oracle.tolist()
[0, 1]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pyro_bdl.data.bandit import RewardTable
from pyro_bdl.data.mushroom import load_mushroom
from pyro_bdl.data.table import DataError

__all__ = ["load_reward_table"]


def load_reward_table(path: str | Path) -> RewardTable:
    """A reward table from ``path``: an ``.npz`` file with the arrays ``contexts`` (n, d), ``rewards`` (n, A) or
    (n, A, K) and, with K > 1, ``probabilities`` (n, A, K) (read without unpickling: object arrays are refused);
    any other file is read as the UCI Mushroom data (:func:`~pyro_bdl.data.mushroom.load_mushroom`)."""
    path = Path(path)
    if path.suffix != ".npz":
        return load_mushroom(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as arrays:
            found = {k: arrays[k] for k in arrays.files}
    except ValueError as exc:  # object arrays, or not an npz file
        raise DataError(f"{path}: not a reward table (.npz of numeric arrays): {exc}") from None
    missing = [k for k in ("contexts", "rewards") if k not in found]
    if missing:
        raise DataError(f"{path}: no array {', '.join(missing)} (it holds {', '.join(found) or 'none'})")
    probabilities = found.get("probabilities")
    return RewardTable(path.name, torch.as_tensor(found["contexts"]), torch.as_tensor(found["rewards"]),
                       None if probabilities is None else torch.as_tensor(probabilities))
