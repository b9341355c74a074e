"""``pyro-bdl bench uci`` / :mod:`pyro_bdl.bench.uci`: the UCI table on tiny folders in the benchmark's
layout written here (never the shared files), the tuning on the validation part only, resuming, parallel processes,
and refused input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pyro_bdl.cli import main
from pyro_bdl.bench import uci as uci_bench
from pyro_bdl.bench.uci_published import published
from pyro_bdl.bench.uci_report import goals, summarise

#: Short fits: the tests check the workflow, not the methods (those have their own tests).
MAP = "map:steps=150"
DROPOUT = "mc-dropout:steps=150,samples=20"


def write_folder(folder, n=48, splits=2, seed=0, grids=True):
    """A UCI folder: y = sin(2 x0) + x1 / 2 + noise, with ``splits`` random 80/20 splits and (``grids``) the MC
    dropout experiments' grids (2 rates x 2 taus)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    X = rng.normal(size=(n, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] / 2 + 0.1 * rng.normal(size=n)
    np.savetxt(folder / "data.txt", np.column_stack([X, y]))
    (folder / "index_features.txt").write_text("0 1")
    (folder / "index_target.txt").write_text("2")
    (folder / "n_splits.txt").write_text(str(splits))
    for k in range(splits):
        rows = rng.permutation(n)
        (folder / f"index_train_{k}.txt").write_text(" ".join(map(str, rows[: int(0.8 * n)])))
        (folder / f"index_test_{k}.txt").write_text(" ".join(map(str, rows[int(0.8 * n):])))
    if grids:
        (folder / "dropout_rates.txt").write_text("0.01 0.1\n")
        (folder / "tau_values.txt").write_text("10 100\n")
    return folder


@pytest.fixture()
def root(tmp_path):
    write_folder(tmp_path / "uci" / "yacht", seed=0)  # a standard name: the published columns appear
    write_folder(tmp_path / "uci" / "mine", seed=1, splits=3, grids=False)
    return tmp_path / "uci"


@pytest.mark.slow
def test_bench_uci_from_the_command_line_writes_the_table(root, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["bench", "uci", "--root", str(root), "--methods", f"{MAP};{DROPOUT}", "--splits", "2", "--out",
                 str(out), "--no-progress", "--jobs", "1"])
    assert code == 0
    assert "the zoo's best method above the published MC dropout log-likelihood" in capsys.readouterr().out
    rows = pd.read_csv(out / "rows.csv", keep_default_na=False)
    assert len(rows) == 2 * 2 * 2 and set(rows["dataset"]) == {"yacht", "mine"}
    assert np.isfinite(rows[["rmse", "test_ll", "seconds"]].to_numpy(float)).all()
    tuned = rows[rows["method"] == DROPOUT].set_index("dataset")["chosen"]
    assert all(c.startswith("p=") for c in tuned["yacht"]) and all(c.startswith("defaults") for c in tuned["mine"])
    table = pd.read_csv(out / "uci.csv")
    assert set(zip(table["dataset"], table["method"])) == {(d, m) for d in ("yacht", "mine") for m in (MAP, DROPOUT)}
    assert (table["splits"] == 2).all()
    text = (out / "uci.md").read_text()
    assert "MC dropout (pub.)" in text and "| yacht |" in text and "(2/20)" not in text  # written folders: 2 splits
    assert "(2/3)" in text  # mine has 3 splits, 2 fitted: the cell says so
    assert "pyro-bdl bench uci --root" in text and "## Goals" in text
    assert (out / "uci.png").stat().st_size > 10_000
    runs = json.loads((out / "runs.json").read_text())
    assert len(runs) == 1 and runs[0]["fits"] == 8
    # the report of the default methods (whose entries carry settings) reads the same rows
    assert main(["bench", "uci", "--root", str(root), "--out", str(out), "--report-only"]) == 0
    assert all(f"`{m}`" in (out / "uci.md").read_text() for m in (MAP, DROPOUT, *uci_bench.DEFAULT_METHODS))


@pytest.mark.slow
def test_an_interrupted_run_goes_on_and_gives_the_same_table(root, tmp_path, monkeypatch):
    """Each fit's row is kept as it ends; the rerun makes only the missing fits, and the rows equal those of a run
    that was not interrupted (fixed seeds)."""
    whole = uci_bench.run_uci(root, tmp_path / "whole", ["mine"], [MAP], progress=False)
    real, calls = uci_bench.run_split, []

    def stopped_after_two(*task):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(task)
        return real(*task)

    monkeypatch.setattr(uci_bench, "run_split", stopped_after_two)
    with pytest.raises(KeyboardInterrupt, match="2 fits kept"):
        uci_bench.run_uci(root, tmp_path / "cut", ["mine"], [MAP], progress=False)
    assert len(pd.read_csv(tmp_path / "cut" / "rows.csv")) == 2
    monkeypatch.setattr(uci_bench, "run_split", real)
    again = uci_bench.run_uci(root, tmp_path / "cut", ["mine"], [MAP], progress=False)
    runs = json.loads((tmp_path / "cut" / "runs.json").read_text())
    assert [r["fits"] for r in runs] == [2, 1]
    (tmp_path / "cut" / "uci.md").unlink()  # a run killed outright writes no report: --report-only does
    assert main(["bench", "uci", "--root", str(root), "--datasets", "mine", "--methods", MAP, "--out",
                 str(tmp_path / "cut"), "--report-only"]) == 0
    assert "| mine |" in (tmp_path / "cut" / "uci.md").read_text()
    assert len(json.loads((tmp_path / "cut" / "runs.json").read_text())) == 2  # no run logged
    key = ["dataset", "split", "method"]
    assert np.allclose(again.sort_values(key)["test_ll"], whole.sort_values(key)["test_ll"], rtol=1e-6)


@pytest.mark.slow
def test_the_report_covers_every_row_the_folder_holds_not_only_the_runs(root, tmp_path):
    """A run of one set and method into a folder holding another set's rows reports both sets and both methods;
    rows of a set whose folder is not under the root are kept in rows.csv and named in a note."""
    out = tmp_path / "out"
    uci_bench.run_uci(root, out, ["mine"], [MAP], splits=1, progress=False)
    uci_bench.run_uci(root, out, ["yacht"], [DROPOUT], splits=1, progress=False)
    text = (out / "uci.md").read_text()
    assert "| mine |" in text and "| yacht |" in text and f"`{MAP}`" in text and f"`{DROPOUT}`" in text
    table = pd.read_csv(out / "uci.csv")
    assert set(zip(table["dataset"], table["method"])) == {("mine", MAP), ("yacht", DROPOUT)}
    (root / "mine" / "data.txt").rename(root / "mine" / "moved.txt")
    uci_bench.run_uci(root, out, ["yacht"], [DROPOUT], progress=False, report_only=True)
    text = (out / "uci.md").read_text()
    assert "| mine |" not in text and f"rows of mine kept but not shown: no folder mine under {root}" in text
    assert len(pd.read_csv(out / "rows.csv")) == 2


@pytest.mark.slow
def test_a_terminated_parallel_run_keeps_its_rows_writes_its_report_and_goes_on(root, tmp_path):
    """SIGTERM to a run of two worker processes (what a scheduler or ``timeout`` sends): it stops between two rows,
    ends its workers, keeps the rows made, writes the report and exits 130; the same command then makes only the
    fits missing."""
    out = tmp_path / "out"
    args = ["bench", "uci", "--root", str(root), "--datasets", "mine,yacht", "--methods", "map:steps=600",
            "--out", str(out), "--no-progress", "--jobs", "2"]
    code = f"import sys; from pyro_bdl.cli import main; sys.exit(main({args!r}))"
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300
    while not (out / "rows.csv").is_file() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    kept = pd.read_csv(out / "rows.csv")
    assert run.returncode == 130, err
    assert f"{len(kept)} fits kept" in err and 1 <= len(kept) < 5
    assert "| mine |" in (out / "uci.md").read_text() or "| yacht |" in (out / "uci.md").read_text()
    assert main(args[:-2] + ["--jobs", "1"]) == 0
    rows = pd.read_csv(out / "rows.csv")
    assert len(rows) == 5 and not rows.duplicated(["dataset", "split", "method"]).any()


@pytest.mark.slow
def test_a_finished_parallel_run_leaves_nothing_for_the_resource_tracker(root, tmp_path):
    """A run of two worker processes whose fits draw (disabled) progress bars ends without Python's resource tracker
    warning of leaked semaphores at exit: tqdm's default lock, a multiprocessing one made in each worker, was one."""
    args = ["bench", "uci", "--root", str(root), "--datasets", "yacht", "--methods", DROPOUT, "--out",
            str(tmp_path / "out"), "--no-progress", "--jobs", "2"]
    code = f"import sys; from pyro_bdl.cli import main; sys.exit(main({args!r}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    assert len(pd.read_csv(tmp_path / "out" / "rows.csv")) == 2
    assert "resource_tracker" not in run.stderr and "leaked" not in run.stderr, run.stderr


@pytest.mark.slow
def test_parallel_processes_give_the_rows_of_one_process(root, tmp_path):
    one = uci_bench.run_uci(root, tmp_path / "one", ["yacht"], [MAP], progress=False)
    two = uci_bench.run_uci(root, tmp_path / "two", ["yacht"], [MAP], jobs="auto", progress=False)
    processes = min(os.cpu_count() or 1, 2)  # auto: one per core, at most one per fit (2 splits)
    assert f" {processes} process(es)" in json.loads((tmp_path / "two" / "runs.json").read_text())[0]["machine"]
    key = ["split"]
    assert np.allclose(one.sort_values(key)[["rmse", "test_ll"]], two.sort_values(key)[["rmse", "test_ll"]],
                       rtol=1e-6)


def test_tuning_sees_only_the_training_split(root, monkeypatch):
    """Every candidate is fitted on 80 % of the training split and scored on the other 20 %; the test split is
    scored once, by the refit on the whole training split."""
    seen, real = [], uci_bench._fit_score

    def spy(spec, train, test, method, options, settings, seed):
        seen.append((len(train), len(test), options.get("noise"), settings.get("p")))
        return real(spec, train, test, method, options, settings, seed)

    monkeypatch.setattr(uci_bench, "_fit_score", spy)
    row = uci_bench.run_split(root / "yacht", 0, DROPOUT)
    n_train, n_test = row["train_rows"], row["test_rows"]
    assert len(seen) == 2 * 2 + 1
    assert all((a, b) == (n_train - round(0.2 * n_train), round(0.2 * n_train)) for a, b, *_ in seen[:-1])
    assert seen[-1][:2] == (n_train, n_test)
    assert len({(noise, p) for *_, noise, p in seen[:-1]}) == 4  # the whole grid
    p, tau = (float(part.split("=")[1]) for part in row["chosen"].split())
    assert seen[-1][3] == p and seen[-1][2] == pytest.approx(1 / np.sqrt(tau) / row_sd(root / "yacht", 0))


def row_sd(folder, split):
    from pyro_bdl.data.uci import load_uci

    train, _ = load_uci(folder, split)
    return float(train.y.double().std(unbiased=False))


def test_a_method_limited_to_small_sets_is_skipped_with_a_note(root, monkeypatch):
    monkeypatch.setitem(uci_bench.MAX_ROWS, "map", 40)
    tasks, notes = uci_bench._tasks(uci_bench.uci_folders(root), [MAP, DROPOUT], None, set(), 0)
    assert {t[2] for t in tasks} == {DROPOUT} and len(tasks) == 2 + 3
    assert notes == [f"{MAP} not run on mine: 48 rows > 40", f"{MAP} not run on yacht: 48 rows > 40"]


def test_fits_are_made_split_by_split_skipping_the_done_ones(root):
    """A run stopped early covers every set alike: all of split k's fits (sets and methods in the order given) come
    before split k + 1's; fits already in the rows are not made again."""
    done = {("mine", 0, MAP, 0)}
    tasks, _ = uci_bench._tasks(uci_bench.uci_folders(root), [MAP, DROPOUT], None, done, 0)
    names = [(Path(folder).name, split, entry) for folder, split, entry, _ in tasks]
    assert names == [("mine", 0, DROPOUT), ("yacht", 0, MAP), ("yacht", 0, DROPOUT),
                     ("mine", 1, MAP), ("mine", 1, DROPOUT), ("yacht", 1, MAP), ("yacht", 1, DROPOUT),
                     ("mine", 2, MAP), ("mine", 2, DROPOUT)]


def test_goals_count_the_data_sets_that_meet_them():
    reference = published("yacht")
    rows = pd.DataFrame({"dataset": "yacht", "split": [0, 1] * 3, "method": ["svi"] * 2 + ["map"] * 2 + ["nuts"] * 2,
                         "seed": 0, "rmse": 1.0, "seconds": 1.0, "chosen": "", "train_rows": 9, "test_rows": 1,
                         "test_ll": [reference["VI"].ll - 0.1] * 2 + [reference["MC dropout"].ll + 0.1] * 2 + [-9] * 2})
    lines = goals(summarise(rows), {"yacht": 2})
    assert lines[0] == "- the zoo's best method above the published MC dropout log-likelihood: 1 of 1 data sets"
    assert lines[1] == "- `svi` above the published VI log-likelihood: 0 of 1 data sets; missed on yacht"
    assert lines[2] == "- `nuts` the best log-likelihood of the zoo where it runs: 0 of 1 data sets; not on yacht"


def test_nuts_is_compared_on_the_splits_it_ran_on():
    """nuts on split 0 alone is judged against the others' split 0, not their mean over splits it did not run on:
    here map's mean over splits 0-1 (-1.0) is above nuts's -1.5, but on split 0 map has -2."""
    rows = pd.DataFrame({"dataset": "yacht", "split": [0, 1, 0], "method": ["map", "map", "nuts"], "seed": 0,
                         "rmse": 1.0, "seconds": 1.0, "chosen": "", "train_rows": 9, "test_rows": 1,
                         "test_ll": [-2.0, 0.0, -1.5]})
    assert goals(summarise(rows), {"yacht": 2})[2].startswith(
        "- `nuts` the best log-likelihood of the zoo where it runs: 0 of 1 data sets; not on yacht")
    assert goals(summarise(rows), {"yacht": 2}, rows)[2] == (
        "- `nuts` the best log-likelihood of the zoo where it runs: 1 of 1 data sets (each method on the splits "
        "`nuts` ran on) (partial: 1 of 2 splits on yacht)")


@pytest.mark.parametrize("args, message", [
    (["--datasets", "nope"], "no data set 'nope'; found: mine, yacht"),
    (["--methods", "no-such-method"], "unknown inference method 'no-such-method'"),
    (["--methods", "svi-amortised"], "unknown or unsuitable method 'svi-amortised'"),
    (["--splits", "0"], "splits must be at least 1"),
    (["--jobs", "0"], "jobs must be an integer of at least 1 or 'auto', got 0"),
    (["--jobs", "many"], "--jobs takes a number of processes or auto, got 'many'"),
    (["--methods", "map:steps"], "settings KEY=VALUE"),
    (["--methods", "map:nope=1"], "'nope' is neither a setting of 'map'"),
    (["--methods", "map:likelihood=poisson"], "likelihood"),
    (["--methods", "map:hidden=10"], "hidden is set by the UCI protocol for every method"),
    (["--report-only"], "holds no fits to report"),
])
def test_bad_input_is_refused_by_name(root, tmp_path, capsys, args, message):
    code = main(["bench", "uci", "--root", str(root), "--out", str(tmp_path / "out"), "--no-progress", *args])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out" / "rows.csv").exists()


def test_a_run_with_nothing_to_fit_is_refused(root, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(uci_bench.MAX_ROWS, "map", 40)
    assert main(["bench", "uci", "--root", str(root), "--methods", MAP, "--out", str(tmp_path / "o")]) == 2
    assert f"nothing to fit: {MAP} not run on mine: 48 rows > 40" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_missing_root_or_a_foreign_out_folder_is_refused(root, tmp_path, capsys):
    assert main(["bench", "uci", "--root", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "no such folder" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["bench", "uci", "--root", str(root), "--methods", MAP, "--out", str(foreign)]) == 2
    assert "not a UCI table's" in capsys.readouterr().err
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_an_entry_names_model_options_beside_method_settings(root, monkeypatch):
    """``ensemble:likelihood=heteroscedastic,members=2``: the key the model has goes to the model's options (with
    the protocol's width), the others to the method; the row keeps the entry as its method."""
    spec = uci_bench.uci_model()
    assert uci_bench.entry_options(spec, "ensemble:likelihood=heteroscedastic,members=2") == (
        "ensemble", {"likelihood": "heteroscedastic"}, {"members": "2"})
    seen, real = [], uci_bench._fit_score

    def spy(spec, train, test, method, options, settings, seed):
        seen.append((method, options, settings))
        return real(spec, train, test, method, options, settings, seed)

    monkeypatch.setattr(uci_bench, "_fit_score", spy)
    entry = f"{MAP},likelihood=heteroscedastic"
    row = uci_bench.run_split(root / "yacht", 0, entry)
    assert seen == [("map", {"hidden": (50,), "likelihood": "heteroscedastic"}, {"steps": "150"})]
    assert row["method"] == entry and np.isfinite(row["test_ll"])
    plain = uci_bench.run_split(root / "yacht", 0, MAP)
    assert plain["test_ll"] != row["test_ll"]  # the option reached the model: another likelihood, another score


@pytest.mark.parametrize("entry", [f"{DROPOUT},p=0.1", f"{DROPOUT},noise=0.5"])
def test_an_entry_cannot_set_what_a_tuned_method_searches(root, entry):
    with pytest.raises(ValueError, match="is chosen per split by mc-dropout's search"):
        uci_bench.run_split(root / "yacht", 0, entry)


def test_the_protocol_names_its_model_and_gives_options_the_model_takes():
    spec = uci_bench.uci_model()
    assert uci_bench.uci_options(100) == {"hidden": (100,)}
    assert uci_bench.uci_options(50, 0.5) == {"hidden": (50,), "noise": 0.5}
    assert spec.resolve_options(uci_bench.uci_options(50, 0.5))["noise"] == 0.5  # options of the model, checked


def test_an_entry_may_name_another_zoo_model(root, monkeypatch):
    """``gp/map:steps=100,kernel=matern52``: the gp fitted by map (no width: the protocol's options are the network's),
    its kernel an option of the gp; the row keeps the entry; an unknown model or a method the gp does not suit is
    refused by name."""
    seen, real = [], uci_bench._fit_score

    def spy(spec, train, test, method, options, settings, seed):
        seen.append((spec.name, method, options, settings))
        return real(spec, train, test, method, options, settings, seed)

    monkeypatch.setattr(uci_bench, "_fit_score", spy)
    entry = "gp/map:steps=100,lr=0.05,kernel=matern52"
    row = uci_bench.run_split(root / "yacht", 0, entry)
    assert seen == [("gp", "map", {"kernel": "matern52"}, {"steps": "100", "lr": "0.05"})]
    assert row["method"] == entry and np.isfinite(row["test_ll"])
    with pytest.raises(ValueError, match="unknown model 'gpr'"):
        uci_bench._check_methods(["gpr/map"])
    with pytest.raises(ValueError, match="unsuitable method 'mc-dropout' for the UCI protocol's model 'gp'"):
        uci_bench._check_methods(["gp/mc-dropout"])
