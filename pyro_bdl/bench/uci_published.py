r"""The published UCI regression numbers ``pyro-bdl bench uci`` sets beside its own (from ``shared/REFERENCE.md``).

Each column is one paper's method on the standard protocol (one hidden layer of 50 units, 100 for protein; 20
splits, 5 for protein): test RMSE and average test log-likelihood per point, mean and standard error over the splits
(None where the source gives no error bar).

- ``VI``, ``PBP``, ``MC dropout``: Gal & Ghahramani 2016, Table 1 (arXiv v6, corrected error bars); VI is Graves
  (2011), PBP Hernandez-Lobato & Adams (2015).
- ``MC dropout 2018``: the re-run with a per-split grid search over dropout rate and tau, from the public
  DropoutUncertaintyExps README (no error bars).
- ``Ensemble``: Lakshminarayanan et al. 2017, Table 1 (5 nets; the paper's NLL as LL = -NLL; error bars not kept).

Example
-------
>>> published("yacht")["MC dropout"]
Published(rmse=1.11, rmse_se=0.09, ll=-1.55, ll_se=0.03)
>>> short_name("bostonHousing"), short_name("my-own-set")
('boston', None)
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Published", "COLUMNS", "FOLDERS", "published", "short_name"]


class Published(NamedTuple):
    """One published cell: RMSE and LL, each with its standard error over splits (None if not reported)."""

    rmse: float
    rmse_se: float | None
    ll: float
    ll_se: float | None


#: The published columns, in the table's order.
COLUMNS = ("VI", "PBP", "MC dropout", "MC dropout 2018", "Ensemble")

#: The standard data sets' folder names -> the short names the papers' tables use.
FOLDERS = {"bostonHousing": "boston", "concrete": "concrete", "energy": "energy", "kin8nm": "kin8nm",
           "naval-propulsion-plant": "naval", "power-plant": "power", "protein-tertiary-structure": "protein",
           "wine-quality-red": "wine", "yacht": "yacht"}

# Gal & Ghahramani 2016, Table 1: (RMSE, se) for VI, PBP, MC dropout, then (LL, se) for the same three.
_TABLE1 = {
    "boston": ((4.32, .29), (3.01, .18), (2.97, .19), (-2.90, .07), (-2.57, .09), (-2.46, .06)),
    "concrete": ((7.19, .12), (5.67, .09), (5.23, .12), (-3.39, .02), (-3.16, .02), (-3.04, .02)),
    "energy": ((2.65, .08), (1.80, .05), (1.66, .04), (-2.39, .03), (-2.04, .02), (-1.99, .02)),
    "kin8nm": ((0.10, 0.), (0.10, 0.), (0.10, 0.), (0.90, .01), (0.90, .01), (0.95, .01)),
    "naval": ((0.01, 0.), (0.01, 0.), (0.01, 0.), (3.73, .12), (3.73, .01), (3.80, .01)),
    "power": ((4.33, .04), (4.12, .03), (4.02, .04), (-2.89, .01), (-2.84, .01), (-2.80, .01)),
    "protein": ((4.84, .03), (4.73, .01), (4.36, .01), (-2.99, .01), (-2.97, 0.), (-2.89, 0.)),
    "wine": ((0.65, .01), (0.64, .01), (0.62, .01), (-0.98, .01), (-0.97, .01), (-0.93, .01)),
    "yacht": ((6.89, .67), (1.02, .05), (1.11, .09), (-3.43, .16), (-1.63, .02), (-1.55, .03)),
}
# (RMSE, LL): the 2018 MC dropout re-run, and deep ensembles.
_RERUN = {"boston": (2.90, -2.40), "concrete": (4.82, -2.93), "energy": (0.54, -1.21), "kin8nm": (0.08, 1.14),
          "naval": (0.00, 4.45), "power": (4.01, -2.80), "protein": (4.27, -2.87), "wine": (0.62, -0.93),
          "yacht": (0.67, -1.25)}
_ENSEMBLE = {"boston": (3.28, -2.41), "concrete": (6.03, -3.06), "energy": (2.09, -1.38), "kin8nm": (0.09, 1.20),
             "naval": (0.00, 5.63), "power": (4.11, -2.79), "protein": (4.71, -2.83), "wine": (0.64, -0.94),
             "yacht": (1.58, -1.18)}


def short_name(folder: str) -> str | None:
    """The papers' name of a standard data set's folder, None for any other folder."""
    return FOLDERS.get(folder)


def published(name: str) -> dict[str, Published]:
    """The published columns for a data set (its short name or folder name): column -> :class:`Published`; empty for
    a data set the papers do not have."""
    name = FOLDERS.get(name, name)
    if name not in _TABLE1:
        return {}
    rows = _TABLE1[name]
    out = {column: Published(rows[k][0], rows[k][1], rows[k + 3][0], rows[k + 3][1])
           for k, column in enumerate(COLUMNS[:3])}
    out["MC dropout 2018"] = Published(_RERUN[name][0], None, _RERUN[name][1], None)
    out["Ensemble"] = Published(_ENSEMBLE[name][0], None, _ENSEMBLE[name][1], None)
    return out
