"""A tiny UCI folder in the layout of Gal's UCI splits (data.txt, index files), for the loader and the
benchmark's smoke test; the real files are never needed by the tests."""

from __future__ import annotations

import numpy as np

# 10 rows: columns 0..2 features (column 1 constant), columns 3 and 4 two candidate targets
R = np.arange(10.0)
DATA = np.column_stack([R, np.full(10, 7.0), R**2, 100 + R, -R])
SPLITS = {0: ([0, 1, 2, 3, 4, 5, 6], [7, 8, 9]), 1: ([9, 8, 7, 6, 5, 4, 3], [0, 1, 2])}


def write_uci(folder, data=DATA, features="0 1 2", target="4", splits=SPLITS, n_splits=True):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.txt").write_text("\n".join("   " + "  ".join(f"{v:.7e}" for v in row) for row in data) + "\n")
    (folder / "index_features.txt").write_text(features.replace(" ", "\n") + "\n")
    (folder / "index_target.txt").write_text(target + "\n")
    for k, (train, test) in splits.items():
        (folder / f"index_train_{k}.txt").write_text("\n".join(map(str, train)) + "\n")
        (folder / f"index_test_{k}.txt").write_text("\n".join(map(str, test)) + "\n")
    if n_splits:
        (folder / "n_splits.txt").write_text(f"{len(splits)}\n")
    return folder
