r"""``pyro-bdl bench uci``: the standard UCI regression table, every split a fit per method, resumable and parallel.

The protocol (Hernandez-Lobato & Adams 2015, as Gal & Ghahramani 2016 and Lakshminarayanan et al. 2017 ran it): on
each train/test split of each data set folder (:mod:`pyro_bdl.data.uci`), the zoo's model for the ``uci`` protocol
(:data:`UCI_MODEL`, its options :func:`uci_options`) with one hidden layer of the folder's ``n_hidden.txt`` units (50; 100
for protein) is fitted by each method at its defaults (or the settings and model options its entry names:
:func:`entry_options`), inputs and targets standardised on the training split
(:func:`~pyro_bdl.fit.fit` does it), and scored on the test split in the data's units
(:func:`~pyro_bdl.posterior.evaluation.evaluate_fit`: RMSE and average log-likelihood per point).

A method in :data:`TUNED` has settings chosen per split as Gal & Ghahramani did: MC dropout's rate and model
precision tau over the folder's grids (``dropout_rates.txt`` x ``tau_values.txt``; tau in the target's units, the
fixed noise sd :math:`1/\sqrt\tau`), each candidate fitted on 80 % of the training split and scored on the other
20 %, the best refitted on the whole training split: the test split never chooses.  A method in :data:`MAX_ROWS`
runs only on data sets of at most that many rows (NUTS: the five small sets).

Each finished fit is a row of ``rows.csv`` in the output folder, written as it ends: an interrupted run keeps them,
and the same command goes on with the fits not yet made.  Ctrl-C or SIGTERM stops a run between two rows: its worker
processes are ended (their fits in progress are lost), the report is written from the rows kept, and the command
exits 130.  ``jobs`` > 1 runs the fits in that many processes (the workflows' one pool,
:mod:`pyro_bdl.inference.parallel.pool`: one torch thread each).  :func:`~pyro_bdl.bench.uci_report.write_report` turns the rows into ``uci.md``,
``uci.csv`` and ``uci.png``.

Example
-------
>>> import tempfile, pathlib, numpy as np
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> folder = root / "line"; folder.mkdir()
>>> rng = np.random.default_rng(0); x = rng.normal(size=(40, 1))
>>> np.savetxt(folder / "data.txt", np.hstack([x, 2 * x + 0.1 * rng.normal(size=(40, 1))]))
>>> _ = (folder / "index_features.txt").write_text("0"); _ = (folder / "index_target.txt").write_text("1")
>>> _ = (folder / "index_train_0.txt").write_text(" ".join(map(str, range(30))))
>>> _ = (folder / "index_test_0.txt").write_text(" ".join(map(str, range(30, 40))))
>>> rows = run_uci(root, root / "out", methods=["map:steps=300"], progress=False)
>>> rows[["dataset", "split", "method"]].values.tolist(), bool(rows["rmse"].iloc[0] < 0.5)
([['line', 0, 'map:steps=300']], True)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from pyro_bdl.data.embedded import split_dataset
from pyro_bdl.data.table import DataError
from pyro_bdl.data.uci import UciProtocol, load_uci, uci_protocol
from pyro_bdl.fit import fit
from pyro_bdl.inference.method import get_method, pyro_names_as_ours
from pyro_bdl.inference.parallel.pool import run_jobs
from pyro_bdl.posterior.evaluation import evaluate_fit
from pyro_bdl.registry import ModelSpec, get_model
from pyro_bdl.storage.files import atomic_write_text
from pyro_bdl.storage.interrupts import handling
from pyro_bdl.storage.paths import OutputPathError
from pyro_bdl.bench.uci_report import machine, write_report

__all__ = ["run_uci", "split_fit", "protocol_options", "method_entry", "entry_options", "split_entries", "entries_text",
           "entry_model", "DEFAULT_METHODS", "TUNED", "MAX_ROWS", "VALIDATION", "ROW_COLUMNS", "default_root", "uci_folders",
           "UCI_MODEL", "uci_model", "uci_options"]

#: The zoo model the protocol fits: Bayesian MLP regression, its options per folder :func:`uci_options`.
UCI_MODEL = "bnn-regressor"


def uci_model() -> ModelSpec:
    """The :class:`~pyro_bdl.registry.ModelSpec` of :data:`UCI_MODEL`."""
    return get_model(UCI_MODEL)


def uci_options(hidden: int, noise: float | None = None) -> dict:
    """The model options of the protocol (Hernandez-Lobato & Adams 2015): one hidden layer of ``hidden`` units, the
    noise sd fixed at ``noise`` (standardised units) or inferred."""
    return {"hidden": (int(hidden),), **({} if noise is None else {"noise": float(noise)})}

#: The methods of the standard table, in its column order.  The ensemble twice: with the model's one noise sd, and
#: with a noise sd per input (the model's heteroscedastic likelihood), as Lakshminarayanan et al. trained theirs;
#: neither is better everywhere (benchmarks/RESULTS.md, "UCI regression: the ensemble's likelihood").
DEFAULT_METHODS = ("svi", "mc-dropout", "ensemble", "ensemble:likelihood=heteroscedastic", "laplace-ggn", "map", "nuts")

#: The fraction of each training split held out to choose a tuned method's settings.
VALIDATION = 0.2

#: Methods that run only on data sets of at most this many rows: NUTS on the five small sets (boston, concrete,
#: energy, wine, yacht: 308-1599 rows), where a fit takes minutes, not hours.
MAX_ROWS = {"nuts": 2000}

#: The columns of ``rows.csv``, one row per fit.
ROW_COLUMNS = ("dataset", "split", "method", "seed", "rmse", "test_ll", "seconds", "chosen", "train_rows",
               "test_rows")

#: Where the standard folders are looked for when no root is given: this environment variable, then these paths.
ROOT_VARIABLE = "PYRO_BDL_UCI"
ROOT_CANDIDATES = ("../shared/data/uci", "shared/data/uci")


def _dropout_grid(protocol: UciProtocol, target_sd: float) -> list[tuple[dict, dict, str]]:
    """MC dropout's candidates: every (rate, tau) of the folder's grids, tau as the fixed noise sd in standardised
    units (the protocol function's ``noise``); a folder without grids gives the method's defaults only."""
    if not protocol.dropout_rates or not protocol.tau_values:
        return [({}, {}, "defaults (the folder has no grids)")]
    return [({"noise": 1 / (math.sqrt(tau) * target_sd)}, {"p": p}, f"p={p:g} tau={tau:g}")
            for p in protocol.dropout_rates for tau in protocol.tau_values]


#: Methods whose settings are chosen per split on a validation part of the training split: method -> a function
#: (the folder's protocol, the training targets' sd) -> candidates (arguments of the model's protocol function beyond
#: the width, method settings, label).
TUNED = {"mc-dropout": _dropout_grid}


def method_entry(entry: str) -> tuple[str, dict]:
    """A methods entry: ``"mc-dropout:mask=weight,steps=500"`` -> ``("mc-dropout", {"mask": "weight", "steps":
    "500"})`` (settings as text, read as the CLI's ``--set``, or the model's ``--option`` where the model has one of
    that name: :func:`entry_options`); a bare name has none.

    >>> method_entry("map:steps=300")
    ('map', {'steps': '300'})
    """
    name, _, rest = entry.partition(":")
    pairs = [kv.split("=", 1) for kv in rest.split(",") if kv]
    if not name or any(len(kv) != 2 or not kv[0] for kv in pairs):
        raise ValueError(f"method entry {entry!r}: a method name, then optional settings KEY=VALUE after ':', "
                         f"separated by ','")
    return name, dict(pairs)


def split_entries(text: str) -> list[str]:
    """The methods entries of a ``--methods`` text: separated by ``,``, or by ``;`` when an entry has settings
    (whose own separator is ``,``).  The inverse of :func:`entries_text`.

    >>> split_entries("svi;map:steps=300,lr=0.01")
    ['svi', 'map:steps=300,lr=0.01']
    """
    return [m.strip() for m in text.split(";" if ":" in text else ",") if m.strip()]


def entries_text(entries: Sequence[str]) -> str:
    """Entries as one ``--methods`` text, readable back by :func:`split_entries`.

    >>> entries_text(["svi", "map:steps=300"])
    'svi;map:steps=300'
    """
    return (";" if any(":" in e for e in entries) else ",").join(entries)


def entry_options(spec: ModelSpec, entry: str) -> tuple[str, dict, dict]:
    """An entry's method, the model options it names (keys the model has, e.g. ``likelihood``) and the method
    settings (the other keys): ``"ensemble:likelihood=heteroscedastic,members=3"`` -> ``("ensemble",
    {"likelihood": "heteroscedastic"}, {"members": "3"})``.  A key unknown to both, or a model option the protocol
    sets for every method (the width), is refused."""
    method, pairs = method_entry(entry)
    options = {k: v for k, v in pairs.items() if k in spec.options}
    settings = {k: v for k, v in pairs.items() if k not in options}
    fixed = sorted(set(options) & set(uci_options(1)))
    if fixed:
        raise ValueError(f"method entry {entry!r}: {', '.join(fixed)} is set by the UCI protocol for every method")
    spec.resolve_options(options)  # a bad value is refused here, before any fit
    runs = get_method(spec.runs_as(method))
    unknown = sorted(set(pyro_names_as_ours(settings)) - set(runs.defaults))
    if unknown:
        raise ValueError(f"method entry {entry!r}: {', '.join(map(repr, unknown))} is neither a setting of "
                         f"{runs.name!r} ({', '.join(runs.defaults)}) nor an option of the model "
                         f"({', '.join(spec.options)})")
    return method, options, settings


def default_root() -> Path | None:
    """The UCI root folder: ``$PYRO_BDL_UCI``, else the first of :data:`ROOT_CANDIDATES` that exists, else None."""
    if os.environ.get(ROOT_VARIABLE):
        return Path(os.environ[ROOT_VARIABLE])
    return next((Path(p) for p in ROOT_CANDIDATES if Path(p).is_dir()), None)


def uci_folders(root: str | Path, datasets: Sequence[str] | None = None) -> list[Path]:
    """The data set folders under ``root`` (those holding ``data.txt``), all or the ``datasets`` named, in that
    order; a :class:`~pyro_bdl.data.table.DataError` naming the ones found for an unknown name."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"UCI root {root}: no such folder (give the folder holding the data set folders)")
    found = sorted(p.name for p in root.iterdir() if (p / "data.txt").is_file())
    if not found:
        raise DataError(f"UCI root {root}: holds no data set folder (a folder with data.txt and index files)")
    names = list(datasets) if datasets else found
    unknown = [n for n in names if n not in found]
    if unknown:
        raise DataError(f"UCI root {root}: no data set {', '.join(map(repr, unknown))}; found: {', '.join(found)}")
    return [root / n for n in names]


def protocol_options(spec: ModelSpec, protocol: UciProtocol, named: dict, **extra) -> dict:
    """The model options of a table fit: the model's options for the UCI ``protocol`` (with a tuned method's
    candidate ``extra``; another model than :data:`UCI_MODEL` has none), then those the method entry names
    (``named``, :func:`entry_options`)."""
    own = uci_options(protocol.hidden, **extra) if spec.name == UCI_MODEL else dict(extra)
    return {**own, **named}


def entry_model(entry: str) -> tuple[ModelSpec, str]:
    """The model an entry fits and the entry without it: ``"gp/map:steps=500"`` -> (the gp's spec, ``"map:steps=500"``);
    an entry that names no model fits :data:`UCI_MODEL`.

    >>> spec, rest = entry_model("gp/map:steps=500"); spec.name, rest
    ('gp', 'map:steps=500')
    """
    head, colon, rest = entry.partition(":")
    if "/" not in head:
        return uci_model(), entry
    model, _, method = head.partition("/")
    return get_model(model), method + colon + rest


def split_fit(spec: ModelSpec, train, method: str, options: dict, settings: dict, seed: int):
    """One fit of ``method`` on ``train`` as the table makes it (one thread, no bar, its convergence warnings held
    back: the table reports the scores): the fit result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit(spec.name, train, inference=method, options=options, seed=seed, progress=False, threads=1,
                   **settings)


def _fit_score(spec: ModelSpec, train, test, method: str, options: dict, settings: dict, seed: int) -> dict:
    """One fit of ``method`` on ``train`` (:func:`split_fit`), scored on ``test``: evaluate_fit's metrics."""
    return evaluate_fit(split_fit(spec, train, method, options, settings, seed), test)


def run_split(folder: str | Path, split: int, entry: str, seed: int = 0) -> dict:
    """The row of one fit: the method of ``entry`` on split ``split`` of ``folder`` (tuned first when it is in
    :data:`TUNED`), with its test RMSE and LL (the data's units), wall seconds and the settings chosen."""
    folder = Path(folder)
    spec, bare = entry_model(entry)
    protocol = uci_protocol(folder)
    method, named, settings = entry_options(spec, bare)
    train, test = load_uci(folder, split)

    def options_for(**extra) -> dict:
        return protocol_options(spec, protocol, named, **extra)

    start = time.perf_counter()
    chosen = ""
    options = options_for()
    if method in TUNED:
        part, held = split_dataset(train, VALIDATION, seed=seed + split)
        candidates = TUNED[method](protocol, float(train.y.double().std(unbiased=False)))
        searched = {k for extra, more, _ in candidates for k in (*extra, *more)}
        if searched & {*named, *settings}:
            raise ValueError(f"method entry {entry!r}: {', '.join(sorted(searched & {*named, *settings}))} is chosen "
                             f"per split by {method}'s search; leave it out of the entry")
        scores = [_fit_score(spec, part, held, method, options_for(**extra), {**settings, **more}, seed)["test_ll"]
                  for extra, more, _ in candidates]
        best = int(np.nanargmax(scores)) if not np.all(np.isnan(scores)) else 0
        extra, more, chosen = candidates[best]
        options, settings = options_for(**extra), {**settings, **more}
    metrics = _fit_score(spec, train, test, method, options, settings, seed)
    return {"dataset": folder.name, "split": int(split), "method": entry, "seed": int(seed),
            "rmse": float(metrics["rmse"]), "test_ll": float(metrics["test_ll"]),
            "seconds": time.perf_counter() - start, "chosen": chosen, "train_rows": len(train),
            "test_rows": len(test)}


def _check_methods(entries: Sequence[str]) -> None:
    if not entries:
        raise ValueError("no methods given")
    for entry in entries:
        spec, bare = entry_model(entry)
        method, _ = method_entry(bare)
        if spec.runs_as(method) not in spec.methods and method not in spec.methods:
            raise ValueError(f"unknown or unsuitable method {method!r} for the UCI protocol's model '{spec.name}'; it "
                             f"supports: {', '.join(spec.methods)}")
        entry_options(spec, bare)


def _tasks(folders: list[Path], entries: Sequence[str], splits: int | None, done: set, seed: int
           ) -> tuple[list[tuple], list[str]]:
    """The fits still to make, as (folder, split, entry, seed), split by split (each split's sets and methods in the
    order given), and notes on the ones a method's row limit skips."""
    tasks, notes = [], []
    for folder in folders:
        count = uci_protocol(folder).splits
        rows = sum(1 for line in (folder / "data.txt").read_text().splitlines() if line.strip())
        for entry in entries:
            limit = MAX_ROWS.get(method_entry(entry_model(entry)[1])[0])
            if limit is not None and rows > limit:
                notes.append(f"{entry} not run on {folder.name}: {rows} rows > {limit}")
                continue
            tasks += [(str(folder), k, entry, seed) for k in range(min(count, splits or count))
                      if (folder.name, k, entry, seed) not in done]
    tasks.sort(key=lambda task: task[1])  # split by split: a run stopped early covers every set alike
    return tasks, notes


def _read_rows(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=list(ROW_COLUMNS))
    rows = pd.read_csv(path, dtype={"chosen": str})
    missing = [c for c in ROW_COLUMNS if c not in rows.columns]
    if missing:
        raise OutputPathError(f"{path}: not a rows file of `pyro-bdl bench uci` (no column {', '.join(missing)})")
    return rows.fillna({"chosen": ""})[list(ROW_COLUMNS)]


def _check_out(out: Path, force: bool) -> None:
    """An output folder is new, empty, or one this command wrote (``rows.csv``: the run goes on); else refused
    unless ``force``."""
    if out.exists() and not out.is_dir():
        raise OutputPathError(f"--out {out}: is an existing file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / "rows.csv").is_file() and not force:
        raise OutputPathError(f"--out {out}: holds files that are not a UCI table's; choose another directory, or "
                              "pass --force to write into it")


def _run_task(task: tuple) -> dict:
    return run_split(*task)


def run_uci(root: str | Path, out: str | Path, datasets: Sequence[str] | None = None,
            methods: Sequence[str] = DEFAULT_METHODS, splits: int | None = None, *, jobs: int | str = 1, seed: int = 0,
            progress: bool = True, force: bool = False, command: str | None = None, report_only: bool = False
            ) -> pd.DataFrame:
    """Fit every method on every split (the first ``splits`` of each set when given) of the UCI folders under
    ``root`` (all, or the ``datasets`` named), keep each fit's row in ``out/rows.csv`` as it ends (a rerun makes
    only the fits missing), write the report of every row ``out`` holds (``uci.md``, ``uci.csv``, ``uci.png``:
    :func:`~pyro_bdl.bench.uci_report.write_report`) and return the rows, one per fit (:data:`ROW_COLUMNS`).
    ``methods`` entries may carry settings (:func:`method_entry`) and name another zoo model than :data:`UCI_MODEL`
    (``gp/map``: :func:`entry_model`).  ``jobs`` processes fit in parallel (``"auto"``:
    one per core, at most one per fit).  ``report_only``: no fit, the report rewritten from the rows kept."""
    if splits is not None and int(splits) < 1:
        raise ValueError(f"splits must be at least 1, got {splits}")
    jobs = (os.cpu_count() or 1) if jobs == "auto" else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer of at least 1 or 'auto', got {jobs!r}")
    _check_methods(methods)
    folders = uci_folders(root, datasets)
    out = Path(out)
    _check_out(out, force)
    rows = _read_rows(out / "rows.csv")
    done = set(zip(rows["dataset"], rows["split"].astype(int), rows["method"], rows["seed"].astype(int)))
    tasks, notes = _tasks(folders, methods, splits, done, seed)
    if report_only:
        if not len(rows):
            raise ValueError(f"--out {out}: holds no fits to report (no rows.csv)")
        _report(out, rows, Path(root), folders, methods, seed)
        return rows
    if not tasks and not len(rows):
        raise ValueError("nothing to fit: " + "; ".join(notes))
    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs, len(tasks)))
    log = _RunLog(out / "runs.json", command, jobs)
    bar = tqdm(total=len(tasks), desc="bench uci", disable=not progress)
    stop = threading.Event()
    try:
        # worker processes: Ctrl-C and SIGTERM set a flag, never raise inside a wait on the pool; one process: as is
        signals = (handling((signal.SIGINT, signal.SIGTERM), lambda signum, frame: stop.set()) if jobs > 1
                   else contextlib.nullcontext())
        with signals, contextlib.closing(run_jobs(_run_task, tasks, jobs, stop=stop)) as results:
            rows = _kept_rows(out, rows, results, log, bar)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"{len(_read_rows(out / 'rows.csv'))} fits kept in {out / 'rows.csv'}; the same "
                                "command goes on") from None
    finally:
        bar.close()
        log.write()
        _report(out, _read_rows(out / "rows.csv"), Path(root), folders, methods, seed)
    return rows


def _report(out: Path, rows: pd.DataFrame, root: Path, folders: list[Path], methods: Sequence[str], seed: int
            ) -> None:
    """The report of every row ``out`` holds, not only this run's: the sets and methods named first, then the
    others the rows have (a run of one set into a folder of nine keeps the nine in ``uci.md``); rows of a set with no
    folder under ``root`` are left out with a note."""
    named = {f.name for f in folders}
    found = {f.name for f in uci_folders(root)}
    others = [d for d in dict.fromkeys(rows["dataset"]) if d not in named]
    shown = [*folders, *(root / d for d in others if d in found)]
    entries = list(dict.fromkeys([*methods, *rows["method"]]))
    notes = _tasks(shown, entries, None, set(), seed)[1]
    notes += [f"rows of {d} kept but not shown: no folder {d} under {root}" for d in others if d not in found]
    write_report(out, rows, {f.name: uci_protocol(f).splits for f in shown}, entries, notes)


def _kept_rows(out: Path, rows: pd.DataFrame, results, log: "_RunLog", bar) -> pd.DataFrame:
    """Each row of ``results`` added to ``rows`` and written to ``out/rows.csv`` as it comes."""
    for row in results:
        rows = pd.concat([rows, pd.DataFrame([row])], ignore_index=True) if len(rows) else pd.DataFrame([row])
        atomic_write_text(out / "rows.csv", rows[list(ROW_COLUMNS)].to_csv(index=False))
        log.fit_done()
        bar.set_postfix_str(f"{row['dataset']} {row['split']} {row['method']}: LL {row['test_ll']:.2f}")
        bar.update()
    return rows


class _RunLog:
    """This run's entry in ``runs.json`` (date, command, machine, wall seconds, fits made), written when the run
    starts and again after each fit, so that a run killed outright still counts its time and fits."""

    def __init__(self, path: Path, command: str | None, jobs: int):
        self.path, self.start, self.fits = path, time.perf_counter(), 0
        self.earlier = json.loads(path.read_text()) if path.is_file() else []
        self.entry = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "command": command or "run_uci(...)", "machine": machine(jobs)}
        self.write()

    def fit_done(self) -> None:
        self.fits += 1
        self.write()

    def write(self) -> None:
        self.entry.update(wall_seconds=round(time.perf_counter() - self.start, 1), fits=self.fits)
        atomic_write_text(self.path, json.dumps([*self.earlier, self.entry], indent=1) + "\n")
