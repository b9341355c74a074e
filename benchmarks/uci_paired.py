"""Two columns of a ``pyro-bdl bench uci`` table compared split by split: per data set, the mean and standard error of
the paired difference B - A of the test log-likelihood (and of the RMSE, as B / A - 1 in %) over the splits both ran on, and how many splits B
wins.  Pairing removes the split-to-split spread the table's standard errors carry (a hard split is hard for both),
so a difference of a few hundredths shows where the table's columns overlap.

    .venv/bin/python benchmarks/uci_paired.py benchmarks/results/uci ensemble ensemble:likelihood=heteroscedastic

Results: benchmarks/RESULTS.md, "UCI regression: the ensemble's likelihood".
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd


def paired(rows: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Per data set (in the rows' order): the splits both ``a`` and ``b`` ran on, the mean and standard error of
    the differences ``b - a`` in LL and ``b / a - 1`` in RMSE (%), and the count of splits where ``b``'s LL is higher."""
    key = ["dataset", "split", "seed"]
    both = rows[rows["method"] == a].merge(rows[rows["method"] == b], on=key, suffixes=("_a", "_b"))
    out = []
    for name, group in both.groupby("dataset", sort=False):
        ll = group["test_ll_b"] - group["test_ll_a"]
        rmse = 100 * (group["rmse_b"] / group["rmse_a"] - 1)
        out.append({"dataset": name, "splits": len(group), "ll_diff": ll.mean(), "ll_se": _se(ll),
                    "rmse_change": rmse.mean(), "rmse_se": _se(rmse), "b_wins": int((ll > 0).sum())})
    return pd.DataFrame(out)


def _se(values: pd.Series) -> float:
    """The standard error of the mean (NaN for a single value)."""
    return values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else float("nan")


def markdown(table: pd.DataFrame, a: str, b: str) -> str:
    lines = [f"| data set | splits | LL: `{b}` - `{a}` | RMSE: `{b}` / `{a}` - 1 | splits `{b}` has the higher LL |",
             "|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.dataset} | {r.splits} | {r.ll_diff:+.3f} +- {r.ll_se:.3f} | "
                     f"{r.rmse_change:+.1f} % +- {r.rmse_se:.1f} | {r.b_wins} of {r.splits} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a bench uci output folder (holding rows.csv)")
    parser.add_argument("a", help="the first method entry, as in rows.csv")
    parser.add_argument("b", help="the second method entry")
    args = parser.parse_args(argv)
    rows = pd.read_csv(Path(args.folder) / "rows.csv", dtype={"chosen": str})
    missing = [m for m in (args.a, args.b) if m not in set(rows["method"])]
    if missing:
        print(f"uci_paired: no rows of {', '.join(missing)}; the folder has: {', '.join(sorted(set(rows['method'])))}",
              file=sys.stderr)
        return 2
    table = paired(rows, args.a, args.b)
    if table.empty:
        print(f"uci_paired: {args.a} and {args.b} share no split", file=sys.stderr)
        return 2
    print(markdown(table, args.a, args.b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
