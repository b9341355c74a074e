r"""The report of ``pyro-bdl bench uci``: the fits' rows summarised per data set and method beside the published
columns (:mod:`pyro_bdl.bench.uci_published`), the goals counted, written as ``uci.md``, ``uci.csv`` and
``uci.png``.

Per data set and method: the mean and standard error over the splits fitted of the test RMSE and average
log-likelihood per point (both in the data's units), the mean wall seconds of a split's fit (tuning included), and how
many splits of the protocol's were fitted.  The goals (issue 32): the zoo's best method above the published MC dropout
log-likelihood, ``svi`` above the published VI column, and ``nuts`` the best log-likelihood of the zoo where it runs;
each counted over the data sets that have the numbers, and said to be partial when fewer splits than the protocol's
were fitted.

Example
-------
>>> rows = pd.DataFrame({"dataset": ["yacht"] * 4, "split": [0, 1, 0, 1], "method": ["svi", "svi", "map", "map"],
...                      "seed": 0, "rmse": [1.0, 1.2, 1.5, 1.3], "test_ll": [-1.5, -1.7, -2.5, -2.1],
...                      "seconds": 10.0, "chosen": "", "train_rows": 277, "test_rows": 31})
>>> table = summarise(rows)
>>> table[["dataset", "method", "splits", "ll", "ll_se"]].round(3).values.tolist()
[['yacht', 'svi', 2, -1.6, 0.1], ['yacht', 'map', 2, -2.3, 0.2]]
>>> goals(table, {"yacht": 20})[1]
'- `svi` above the published VI log-likelihood: 1 of 1 data sets (partial: 2 of 20 splits on yacht)'
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pyro_bdl.storage.files import atomic_write, atomic_write_text
from pyro_bdl.bench.uci_published import COLUMNS, published, short_name

__all__ = ["summarise", "goals", "markdown", "plot", "write_report", "machine"]

#: The methods the goals name: the published MC dropout and VI columns, ours that is compared with VI, and the one
#: expected best where it runs.
REFERENCE_COLUMN, VI_COLUMN, VI_METHOD, BEST_METHOD = "MC dropout", "VI", "svi", "nuts"


def machine(jobs: int = 1) -> str:
    """The machine in one line: cores, architecture, torch's build, processes and the load at the time."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{os.cpu_count()} CPU cores ({platform.machine()}), torch {torch.__version__}, {jobs} process(es) of "
            f"1 thread, load average {load:.1f}")


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (data set, method), in the rows' order: splits fitted, mean and standard error over them of the RMSE and
    the LL, mean seconds a split."""
    def se(values: pd.Series) -> float:
        return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")

    groups = rows.groupby(["dataset", "method"], sort=False)
    return pd.DataFrame([{"dataset": d, "method": m, "splits": len(g), "rmse": g["rmse"].mean(),
                          "rmse_se": se(g["rmse"]), "ll": g["test_ll"].mean(), "ll_se": se(g["test_ll"]),
                          "seconds": g["seconds"].mean()} for (d, m), g in groups])


def _name(dataset: str) -> str:
    return short_name(dataset) or dataset


def _partial(table: pd.DataFrame, names: list[str], counts: dict) -> str:
    """``" (partial: ...)"`` where fewer splits than the protocol's were fitted: the sets by (fitted, protocol's)."""
    groups = {}
    for n in names:
        fitted = int(table.query("dataset == @n")["splits"].min())
        if n in counts and fitted < counts[n]:
            groups.setdefault((fitted, counts[n]), []).append(_name(n))
    parts = [f"{k} of {m} splits on " + (", ".join(sets) if len(sets) <= 3 else f"{len(sets)} sets")
             for (k, m), sets in groups.items()]
    return f" (partial: {'; '.join(parts)})" if parts else ""


def _missed(word: str, sets: list[str], met: list[str]) -> str:
    missed = [_name(n) for n in sets if n not in met]
    return f"; {word} {', '.join(missed)}" if missed else ""


def goals(table: pd.DataFrame, counts: dict, rows: pd.DataFrame | None = None) -> list[str]:
    """The goal lines: how many data sets meet each goal, of those with the numbers; ``counts`` data set -> the
    protocol's split count (a goal counted on fewer splits says so).  With the fits' ``rows``, ``nuts`` is compared
    with the other methods on the splits it ran on alone (paired), else on each method's mean over its own splits."""
    lines = []
    best_sets, met = [], []
    for name, part in table.groupby("dataset", sort=False):
        reference = published(name).get(REFERENCE_COLUMN)
        if reference is not None:
            best_sets.append(name)
            met += [name] if part["ll"].max() > reference.ll else []
    lines.append(f"- the zoo's best method above the published {REFERENCE_COLUMN} log-likelihood: {len(met)} of "
                 f"{len(best_sets)} data sets" + _missed("missed on", best_sets, met) + _partial(table, best_sets, counts))
    vi_sets, vi_met = [], []
    for row in table.query("method == @VI_METHOD").itertuples():
        reference = published(row.dataset).get(VI_COLUMN)
        if reference is not None:
            vi_sets.append(row.dataset)
            vi_met += [row.dataset] if row.ll > reference.ll else []
    lines.append(f"- `{VI_METHOD}` above the published {VI_COLUMN} log-likelihood: {len(vi_met)} of {len(vi_sets)} "
                 f"data sets" + _missed("missed on", vi_sets, vi_met) + _partial(table, vi_sets, counts))
    ran = table.query("method == @BEST_METHOD")["dataset"].tolist()
    best = [n for n in ran if _on_best_splits(table, rows, n).sort_values("ll").iloc[-1]["method"] == BEST_METHOD]
    lines.append(f"- `{BEST_METHOD}` the best log-likelihood of the zoo where it runs: {len(best)} of {len(ran)} data "
                 f"sets" + (f" (each method on the splits `{BEST_METHOD}` ran on)" if rows is not None else "")
                 + _missed("not on", ran, best) + _partial(table.query("method == @BEST_METHOD"), ran, counts))
    return lines


def _on_best_splits(table: pd.DataFrame, rows: pd.DataFrame | None, dataset: str) -> pd.DataFrame:
    """The summary of ``dataset``'s methods over the splits :data:`BEST_METHOD` ran on (from ``rows``), or its
    summary in ``table`` when there are no rows."""
    if rows is None:
        return table.query("dataset == @dataset")
    mine = rows[rows["dataset"] == dataset]
    splits = set(mine.loc[mine["method"] == BEST_METHOD, "split"])
    return summarise(mine[mine["split"].isin(splits)])


def _cell(mean: float, se: float | None, splits: int | None = None, full: int | None = None) -> str:
    if mean is None or not np.isfinite(mean):
        return ""
    text = f"{mean:.3f}" + (f" +- {se:.3f}" if se is not None and np.isfinite(se) else "")
    return text + (f" ({splits}/{full})" if splits is not None and full and splits < full else "")


def _matrix(table: pd.DataFrame, methods: list[str], counts: dict, metric: str) -> list[str]:
    """One Markdown table: a row per data set, our methods' ``metric`` then the published columns."""
    head = ["data set", *[f"`{m}`" for m in methods], *[f"{c} (pub.)" for c in COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in dict.fromkeys(table["dataset"]):
        ours = table.query("dataset == @name").set_index("method")
        cells = [_cell(ours.at[m, metric], ours.at[m, metric + "_se"], int(ours.at[m, "splits"]), counts.get(name))
                 if m in ours.index else "" for m in methods]
        values = [ours.at[m, metric] if m in ours.index else np.nan for m in methods]
        if metric == "ll" and np.isfinite(values).any():
            best = int(np.nanargmax(values))
            cells[best] = f"**{cells[best]}**"
        pub = published(name)
        cells += [_cell(*(pub[c][2:] if metric == "ll" else pub[c][:2])) if c in pub else "" for c in COLUMNS]
        lines.append("| " + " | ".join([_name(name), *cells]) + " |")
    return lines


def markdown(table: pd.DataFrame, rows: pd.DataFrame, methods: list[str], counts: dict, notes: list[str],
             runs: list[dict]) -> str:
    """``uci.md``: the runs (command, date, machine, wall time), the goals, the LL, RMSE and seconds tables, the
    settings tuned per split, and notes."""
    wall = sum(r.get("wall_seconds", 0) for r in runs)
    lines = ["# UCI regression: the zoo's methods on the standard protocol", "",
             "One hidden layer (50 units, 100 for protein), inputs and targets standardised on each training split, "
             "metrics in the data's units; mean +- standard error over the splits fitted ((k/n): k of the protocol's "
             "n splits). Published columns from shared/REFERENCE.md (`pyro_bdl/bench/uci_published.py`). Written "
             "by `pyro-bdl bench uci` (`pyro_bdl/bench/uci.py`).", "",
             f"Runs ({wall / 3600:.2f} h of wall time in all):", ""]
    lines += [f"- {r['date']}: `{r['command']}` ({r['machine']}; {r['wall_seconds']:.0f} s, {r['fits']} fits)"
              for r in runs]
    lines += ["", "## Goals", "", *goals(table, counts, rows), "",
              "## Test log-likelihood per point (higher is better; ours in bold where best)", "",
              *_matrix(table, methods, counts, "ll"), "", "## Test RMSE", "", *_matrix(table, methods, counts, "rmse"),
              "", "## Seconds a split (the fit, and a tuned method's search)", ""]
    seconds = table.pivot(index="dataset", columns="method", values="seconds").reindex(
        columns=[m for m in methods if m in set(table["method"])])
    lines += ["| data set | " + " | ".join(f"`{m}`" for m in seconds.columns) + " |",
              "|" + "---|" * (len(seconds.columns) + 1)]
    lines += [f"| {_name(d)} | " + " | ".join("" if np.isnan(v) else f"{v:.0f}" for v in seconds.loc[d])
              + " |" for d in dict.fromkeys(table["dataset"])]
    tuned = rows[rows["chosen"].astype(str) != ""]
    if len(tuned):
        lines += ["", "## Settings chosen on the validation part (count of splits)", ""]
        for (name, method), group in tuned.groupby(["dataset", "method"], sort=False):
            counts_chosen = group["chosen"].value_counts()
            lines.append(f"- {_name(name)}, `{method}`: "
                         + ", ".join(f"{k} ({v})" for k, v in counts_chosen.items()))
    if notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def plot(table: pd.DataFrame, methods: list[str], path: str | Path) -> None:
    """``uci.png``: per data set, our methods' LL (mean +- se) beside the published columns, the published MC dropout
    LL (the goal) as a dotted line."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(table["dataset"]))
    cols = min(3, len(names))
    nrows = -(-len(names) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        ours = table.query("dataset == @name").set_index("method")
        shown = [m for m in methods if m in ours.index]
        ax.errorbar(range(len(shown)), ours.loc[shown, "ll"], yerr=ours.loc[shown, "ll_se"].fillna(0), fmt="o",
                    color="C0", capsize=3, label="ours")
        pub = published(name)
        labels = [c for c in COLUMNS if c in pub]
        x = np.arange(len(shown), len(shown) + len(labels))
        ax.errorbar(x, [pub[c].ll for c in labels], yerr=[pub[c].ll_se or 0 for c in labels], fmt="s",
                    color="0.5", capsize=3, label="published")
        if REFERENCE_COLUMN in pub:  # the goal's line
            ax.axhline(pub[REFERENCE_COLUMN].ll, color="0.5", ls=":", lw=1)
        ticks = [m.replace(":", "\n").replace(",", "\n") for m in shown]  # an entry's settings below its name
        ax.set_xticks(list(range(len(shown))) + list(x), ticks + labels, rotation=60, ha="right", fontsize=7)
        ax.set_title(_name(name))
        ax.set_ylabel("test LL per point")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


def write_report(out: str | Path, rows: pd.DataFrame, counts: dict, methods: list[str], notes: list[str]) -> None:
    """Write ``uci.csv`` (the summary), ``uci.md`` and ``uci.png`` into ``out`` from the fits' ``rows`` of the data
    sets in ``counts`` (data set -> the protocol's split count); nothing while there are none."""
    out = Path(out)
    rows = rows[rows["dataset"].isin(list(counts))]
    if not len(rows):
        return
    shown = list(dict.fromkeys([*methods, *rows["method"]]))
    table = summarise(rows)
    runs_path = out / "runs.json"
    runs = json.loads(runs_path.read_text()) if runs_path.is_file() else []
    atomic_write_text(out / "uci.csv", table.to_csv(index=False))
    atomic_write_text(out / "uci.md", markdown(table, rows, shown, counts, notes, runs))
    plot(table, shown, out / "uci.png")
