r"""The UCI Mushroom data (Schlimmer 1987) as the contextual bandit of Blundell et al. (2015, section 5.3).

``agaricus-lepiota.data``: comma-separated, no header; column 0 the class (``e`` edible, ``p`` poisonous), columns
1-22 categorical attributes coded by one letter each (``?`` a missing value, kept as a value of its own).  Each
attribute is one-hot coded over the values seen in the file (117 binary features for the full file).

The bandit: two actions, ``eat`` and ``pass``.  Eating an edible mushroom pays ``+5``; eating a poisonous one pays
``+5`` or ``-35`` with equal probability (expected ``-15``); passing pays ``0``.  The oracle eats exactly the
edible ones, so an agent's expected regret is 5 for passing an edible mushroom and 15 for eating a poisonous one.

Example
-------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "agaricus-lepiota.data"
>>> _ = path.write_text("p,x,s\ne,x,y\ne,b,?\n")
>>> table = load_mushroom(path)
>>> table.contexts.shape, table.feature_names[:3], table.action_names
(torch.Size([3, 5]), ['a1=b', 'a1=x', 'a2=?'], ['eat', 'pass'])
>>> table.expected.tolist()
[[-15.0, 0.0], [5.0, 0.0], [5.0, 0.0]]
"""

from __future__ import annotations

from pathlib import Path

import torch

from pyro_bdl.data.bandit import RewardTable
from pyro_bdl.data.table import DataError

__all__ = ["load_mushroom", "EAT_EDIBLE", "EAT_POISONOUS", "PASS"]

#: Eating an edible mushroom pays this.
EAT_EDIBLE = 5.0
#: Eating a poisonous one pays one of these, with equal probability.
EAT_POISONOUS = (5.0, -35.0)
#: Passing pays this.
PASS = 0.0

#: The attributes' names, columns 1-22 of the file (agaricus-lepiota.names).
ATTRIBUTES = ("cap-shape", "cap-surface", "cap-color", "bruises", "odor", "gill-attachment", "gill-spacing",
              "gill-size", "gill-color", "stalk-shape", "stalk-root", "stalk-surface-above-ring",
              "stalk-surface-below-ring", "stalk-color-above-ring", "stalk-color-below-ring", "veil-type",
              "veil-color", "ring-number", "ring-type", "spore-print-color", "population", "habitat")


def load_mushroom(path: str | Path) -> RewardTable:
    """The mushroom bandit read from ``path`` (the module's docstring gives the layout and the rewards).

    Attribute columns are named by :data:`ATTRIBUTES` when the file has all 22 of them, else ``a1``, ``a2``, ...;
    a feature is ``attribute=value``.  A missing or empty file, rows of unequal length, a class other than ``e`` or
    ``p``, or a value longer than one letter is a :class:`~pyro_bdl.data.table.DataError` naming the line.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file (the UCI Mushroom data, agaricus-lepiota.data)")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if rows and len(cells) != len(rows[0]):
            raise DataError(f"{path}, line {number}: {len(cells)} columns, the first row has {len(rows[0])}")
        if cells[0] not in ("e", "p"):
            raise DataError(f"{path}, line {number}: the class (column 0) must be 'e' or 'p', got {cells[0]!r}")
        long = next((c for c in cells[1:] if len(c) != 1), None)
        if long is not None:
            raise DataError(f"{path}, line {number}: attributes are coded by one letter each, got {long!r}")
        rows.append(cells)
    if not rows:
        raise DataError(f"{path}: the file is empty")
    if len(rows[0]) < 2:
        raise DataError(f"{path}: no attribute columns after the class")
    names = list(ATTRIBUTES) if len(rows[0]) == 1 + len(ATTRIBUTES) else [f"a{j}" for j in range(1, len(rows[0]))]
    columns, features = [], []
    for j, name in enumerate(names, start=1):
        values = sorted({r[j] for r in rows})
        columns += [[1.0 if r[j] == v else 0.0 for r in rows] for v in values]
        features += [f"{name}={v}" for v in values]
    contexts = torch.tensor(columns).T.contiguous()
    poisonous = torch.tensor([r[0] == "p" for r in rows])
    n = len(rows)
    rewards = torch.zeros(n, 2, 2)
    rewards[:, 0] = torch.where(poisonous.unsqueeze(-1), torch.tensor(EAT_POISONOUS), torch.tensor(EAT_EDIBLE))
    rewards[:, 1] = PASS
    probabilities = torch.full((n, 2, 2), 0.5)
    return RewardTable(f"mushroom ({path.name})", contexts, rewards, probabilities, features, ["eat", "pass"])
