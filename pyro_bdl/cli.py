"""Command line: ``pyro-bdl list | describe | fit | predict | sample | active-learn | bandit | compare | bench uci``
(a thin layer over the Python API).

Bad input (unknown model, method or option; a CSV with NaN, a missing column, an empty
file; labels out of range) prints ``pyro-bdl: error: ...`` naming the problem and exits 2,
with nothing written.  Ctrl-C during ``fit`` keeps the work done in ``OUT/checkpoint.pt``
(exit 130); the same command run again resumes from it.  ``fit`` refuses an ``--out`` directory that
already holds a fit unless given ``--force``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

from pyro_bdl.data.embedded import EMBEDDED, split_dataset
from pyro_bdl.data.images import is_image_file, load_images
from pyro_bdl.data.table import load_csv
from pyro_bdl.data.task import Task
from pyro_bdl.fit import fit
from pyro_bdl.inference import METHODS
from pyro_bdl.inference.method import processes_methods
from pyro_bdl.inference.parallel.devices import resolve_device
from pyro_bdl.inference.parallel.processes import current_group, leave
from pyro_bdl.posterior.amortised import image_grid, simulate, square_side
from pyro_bdl.posterior.evaluation import evaluate_fit
from pyro_bdl.registry import get_model, list_models
from pyro_bdl.storage.files import atomic_write, atomic_write_text
from pyro_bdl.storage.interrupts import handling, raise_interrupt
from pyro_bdl.storage.paths import OutputPathError, check_out_dir, check_out_file, remove_stale
from pyro_bdl.store import load_fit, write_fit
from pyro_bdl.workflows.active_learning import compare_acquisitions, plot_learning_curves
from pyro_bdl.workflows.bandit import Agent, compare_agents, plot_regret, regret_table
from pyro_bdl.data.reward_files import load_reward_table
from pyro_bdl.workflows.compare import compare
from pyro_bdl.workflows.comparison import check_report_folder
from pyro_bdl.bench.uci import DEFAULT_METHODS as UCI_METHODS, entries_text, split_entries
from pyro_bdl.bench.uci import default_root, run_uci

__all__ = ["main", "parse_key_values"]

#: Where ``fit`` keeps its progress inside the output directory until the fit completes.
CHECKPOINT = "checkpoint.pt"


def _cmd_list(args) -> None:
    print("Models (pyro-bdl describe MODEL for details):")
    for spec in list_models():
        print(f"  {spec.name:<10} {spec.summary}")
        methods = ", ".join(n if spec.runs_as(n) == n else f"{n} (runs {spec.runs_as(n)})" for n in spec.methods)
        print(f"  {'':<10} methods: {methods}; default data: {spec.default_data}")
    print("\nInference methods:")
    for m in METHODS.values():
        stands = f" (what '{m.answers_for}' runs on the models it suits)" if m.answers_for else ""
        print(f"  {m.name:<14} {m.summary}{stands}")
    print("\nEmbedded data sets (use as --data NAME):")
    for name, emb in EMBEDDED.items():
        print(f"  {name:<10} {emb.doc} [target: {emb.target}]")


def _cmd_describe(args) -> None:
    spec = get_model(args.model)
    print(f"{spec.name}: {spec.summary}\n")
    print(spec.math + "\n")
    if spec.notes:
        print(spec.notes + "\n")
    print("Options (--option KEY=VALUE):")
    for key, opt in spec.options.items():
        print(f"  {key} = {opt.default!r}: {opt.doc}" + (f" ({opt.domain.describe()})" if opt.domain else ""))
    print(f"\nSample sites (default options): {', '.join(spec.sites()) or '(none global)'}")
    if spec.data.local_latents:
        print(f"Local latents (one per row): {', '.join(spec.data.local_latents)}")
    if spec.inference.guides:
        generic = "" if "amortised" in spec.inference.traits else " (the generic normal, mvn and meanfield work too)"
        print(f"Model guides (--guide NAME): {', '.join(spec.inference.guides)}{generic}")
    print(f"Default data: {spec.default_data}")
    print("\nInference methods and their default settings:")
    for name in spec.methods:
        runs = spec.runs_as(name)  # svi on a model with its own amortised guide: the minibatch loop
        merged = {**METHODS[runs].defaults, **spec.inference.method_defaults.get(runs, {})}
        if not spec.minibatches:
            merged.pop("batch_size", None)  # refused for a model that does not subsample its data
        defaults = ", ".join(f"{k}={v}" for k, v in merged.items())
        if runs in spec.inference.default_guides:
            defaults += f", guide={spec.inference.default_guides[runs]}"
        print(f"  {name:<14} " + (f"runs {runs}: " if runs != name else "") + defaults)


def parse_key_values(pairs, flag: str = "--option") -> dict:
    """``["KEY=VALUE", ...]`` -> ``{KEY: VALUE}`` (text, stripped; the value may hold ``=``).  The one reader
    of ``--option`` / ``--set`` pairs, shared by the benchmarks' settings.  Values stay text:
    :func:`pyro_bdl.fit` reads numbers and flags (``Method.resolve_settings``, ``ModelSpec.resolve_options``).

    >>> parse_key_values(["steps=100", "hidden = 50,50"], "--set")
    {'steps': '100', 'hidden': '50,50'}
    >>> parse_key_values(["steps"], "--set")
    Traceback (most recent call last):
    ...
    ValueError: --set takes KEY=VALUE, got 'steps'
    """
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _cmd_fit(args) -> int | None:
    spec = get_model(args.model)
    if args.inference is None:  # NUTS where it suits, else the first method that does (an amortised model's)
        args.inference = spec.default_method
    resolve_device(args.device)  # a device this machine lacks fails before any work
    if args.nproc is not None:
        return _launch(args)
    group = current_group()
    if group.main:
        check_out_dir(args.out, force=args.force)  # an unwritable path or an existing fit fails before any work
    options = parse_key_values(args.option, "--option")
    spec.resolve_options(options)  # unknown options fail before any work
    dataset = spec.load_data(args.data or spec.default_data, args.target)
    settings = {k: getattr(args, k) for k in ("steps", "samples", "warmup", "chains", "lr", "particles", "batch_size")}
    settings.update(parse_key_values(args.set, "--set"))  # text: fit reads numbers and flags (Method.resolve_settings)
    # a held-out fifth by default for the networks and for models with their own held-out evaluation (the VAE)
    test_fraction = args.test_fraction if args.test_fraction is not None else (
        0.2 if spec.data.standardize or spec.hooks.evaluate is not None else 0.0)
    test = None
    if test_fraction > 0:
        dataset, test = split_dataset(dataset, test_fraction, seed=args.seed, stratify=spec.data.task.stratified)
    checkpoint = Path(args.out) / CHECKPOINT
    if checkpoint.exists():
        print(f"resuming from {checkpoint}", file=sys.stderr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fit(spec.name, dataset, inference=args.inference, guide=args.guide, options=options,
                         seed=args.seed, progress=not args.no_progress, checkpoint=checkpoint, device=args.device,
                         threads=args.threads, **settings)
        except KeyboardInterrupt:
            if checkpoint.exists():
                raise KeyboardInterrupt(f"progress is saved in {checkpoint}; rerun the same command to resume") from None
            raise
    for w in caught:
        if issubclass(w.category, UserWarning) and "pyro_bdl" in str(w.filename) or "Convergence" in w.category.__name__:
            print(f"warning: {w.message}", file=sys.stderr)
    if not group.main:  # process 0 writes the fit directory and reports
        return None
    if test is not None:
        result.heldout = {"fraction": test_fraction, **evaluate_fit(result, test)}
    files = write_fit(result, args.out, test, plots=not args.no_plots)
    if args.force:  # the replaced fit's files must not outlive it
        remove_stale(args.out, files)
    summary = result.summary()
    print(summary.head(12).to_string() + (f"\n... {len(summary) - 12} more rows in summary.csv" if len(summary) > 12 else ""))
    extra = result.diagnostics.headline() if result.diagnostics is not None else {}
    extra.update(result.report)  # what the model reports of itself
    extra.update({f"test_{k}" if not k.startswith("test") else k: v
                  for k, v in (result.heldout or {}).items() if k != "fraction"})
    if extra:
        print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in extra.items()))
    print(f"{spec.name} / {result.method}: {result.record.wall_seconds:.1f} s; wrote {', '.join(files)} to {args.out}")


def _launch(args) -> int:
    """``fit ... --nproc N``: the same command in N processes started by ``torchrun`` (its exit status)."""
    method = METHODS[get_model(args.model).runs_as(args.inference)] if args.inference in METHODS else None
    if args.nproc < 1:
        raise ValueError(f"--nproc must be at least 1, got {args.nproc}")
    if method is not None and method.processes is None:
        raise ValueError(f"inference '{args.inference}' does not run on several processes; those that do: "
                         f"{', '.join(processes_methods())}")
    if method is not None and method.processes == "data" and not get_model(args.model).minibatches:
        raise ValueError(f"model '{args.model}' has no batch_size argument to split its data by: "
                         f"'{args.inference}' cannot run data-parallel on it; drop --nproc")
    if current_group().distributed:
        raise ValueError("--nproc inside a torchrun launch: the processes are already started; drop --nproc")
    check_out_dir(args.out, force=args.force)
    argv = list(sys.argv[1:] if args.argv is None else args.argv)
    keep, skip = [], False
    for i, token in enumerate(argv):  # the same command without --nproc
        if skip:
            skip = False
        elif token == "--nproc":
            skip = True
        elif not token.startswith("--nproc="):
            keep.append(token)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
               "-m", "pyro_bdl.cli", *keep]
    return subprocess.run(command, check=False).returncode


def _cmd_predict(args) -> None:
    check_out_file(args.out)
    result = load_fit(args.fit_dir)
    features = result.record.feature_names
    dataset = load_images(args.data) if is_image_file(args.data) else load_csv(args.data, target=None, features=features)
    table = result.predict(dataset, prob=args.prob)
    atomic_write_text(args.out, table.to_csv(index=False))
    print(f"wrote {len(table)} predictions ({', '.join(table.columns)}) to {args.out}")


def _run_folder(args, what: str) -> Path:
    """``--out`` for a workflow's run: refused if it holds a fit, or a finished run (its ``history.csv``) unless
    ``--force``; its checkpoints of an unfinished run are what the same command resumes from."""
    check_out_dir(args.out, force=args.force)
    out = Path(args.out)
    if (out / "history.csv").exists() and not args.force:
        raise OutputPathError(f"--out {out}: already holds {what} (history.csv); choose another directory, or pass "
                              "--force to replace it")
    return out


def _write_figure(ax, path: Path) -> None:
    """The axes' figure written to ``path`` as a PNG (all or nothing), then closed."""
    import matplotlib.pyplot as plt

    atomic_write(path, lambda where: ax.figure.savefig(where, format="png", dpi=120, bbox_inches="tight"))
    plt.close(ax.figure)


def _method_settings(items, require_method: bool) -> tuple[dict, dict]:
    """``--set`` as (settings for every method, {method: its own}): ``KEY=VALUE`` or ``METHOD.KEY=VALUE``
    (only the second where ``require_method``)."""
    common, per_method = {}, {}
    for key, value in parse_key_values(items, "--set").items():
        method, sep, name = key.partition(".")
        if (sep and not name) or (require_method and not sep):
            raise ValueError(f"--set takes {'' if require_method else 'KEY=VALUE or '}METHOD.KEY=VALUE (e.g. "
                             f"svi.steps=2000), got {key}={value}")
        if sep:
            per_method.setdefault(method, {})[name] = value
        else:
            common[key] = value
    return common, per_method


def _cmd_active_learn(args) -> None:
    spec = get_model(args.model)
    out = _run_folder(args, "an active-learning run")
    options = parse_key_values(args.option, "--option")
    spec.resolve_options(options)
    settings = parse_key_values(args.set, "--set")
    pool = spec.load_data(args.data or spec.default_data, args.target)
    if args.test is not None:
        test = spec.load_data(args.test, args.target)
    else:
        pool, test = split_dataset(pool, args.test_fraction, seed=args.seed, stratify=spec.data.task.stratified)
    regression = spec.data.task is Task.REGRESSION
    acquisitions = (args.acquisition or ("variance,random" if regression else "bald,random")).split(",")
    history = compare_acquisitions(
        spec.name, pool, args.inference, acquisitions, seeds=range(args.seed, args.seed + args.seeds),
        progress=not args.no_progress, test=test, initial=args.initial, batch=args.batch, rounds=args.rounds,
        batch_mode=args.batch_mode, options=options, checkpoint=out / "checkpoint-{acquisition}-{seed}.jsonl",
        workers=args.jobs, **settings)
    atomic_write_text(out / "history.csv", history.to_csv(index=False))
    metric = "rmse" if regression else "accuracy"
    ax = plot_learning_curves(history, metric)
    ax.set_title(f"{spec.name} / {args.inference}: {len(test)} test rows")
    _write_figure(ax, out / "learning_curve.png")
    last = history[history["round"] == history["round"].max()].groupby("acquisition", sort=False)[metric]
    for name, values in last:
        print(f"{name}: {metric} {values.mean():.4g} (over {len(values)} seeds) at {int(history['labelled'].max())} "
              f"labels")
    print(f"wrote history.csv, learning_curve.png to {out}")


def _cmd_bandit(args) -> None:
    """Run every agent of ``--agents`` on the reward table of ``--data`` (:mod:`pyro_bdl.workflows.bandit`)."""
    spec = get_model(args.model)
    out = _run_folder(args, "a bandit run")
    options = parse_key_values(args.option, "--option")
    spec.resolve_options(options)
    common, per_method = _method_settings(args.set, require_method=False)
    agents = [Agent.parse(a) for a in args.agents.split(",") if a.strip()]
    agents = [Agent(a.inference, a.policy, a.epsilon, per_method.get(a.inference, {})) for a in agents]
    table = load_reward_table(args.data)
    try:
        history = compare_agents(spec.name, table, agents, seeds=range(args.seed, args.seed + args.seeds),
                                 workers=args.jobs, progress=not args.no_progress, interactions=args.interactions,
                                 buffer=args.buffer, update_every=args.update_every, options=options,
                                 checkpoint=out / "checkpoint-{agent}-{seed}.jsonl", **common)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"the finished blocks of steps are kept in {out}/checkpoint-*.jsonl; the same "
                                "command resumes from them") from None
    atomic_write_text(out / "history.csv", history.to_csv(index=False))
    ax = plot_regret(history)
    ax.set_title(f"{table.name}: {spec.name}, {args.interactions} steps")
    _write_figure(ax, out / "regret.png")
    for agent, row in regret_table(history).iterrows():
        print(f"{agent}: cumulative regret {row['mean']:.4g} (over {args.seeds} seed(s)) after {int(row['steps'])} "
              f"steps")
    print(f"wrote history.csv, regret.png to {out}")


def _cmd_compare(args) -> None:
    """Fit each method of ``--methods`` and write the comparison's report (:mod:`pyro_bdl.workflows.compare`)."""
    spec = get_model(args.model)
    check_report_folder(args.out, force=args.force)  # before any work
    options = parse_key_values(args.option, "--option")
    spec.resolve_options(options)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    _, settings = _method_settings(args.set, require_method=True)
    dataset = spec.load_data(args.data or spec.default_data, args.target)
    test = None
    if args.test_fraction:
        dataset, test = split_dataset(dataset, args.test_fraction, seed=args.seed, stratify=spec.data.task.stratified)
    result = compare(spec.name, dataset, methods, test=test, settings=settings, options=options, seed=args.seed,
                     progress=not args.no_progress)
    files = result.write(args.out, force=args.force)
    print(result.summary.to_string(index=False))
    print(f"reference: {result.reference}; wrote {', '.join(files)} to {args.out}")


def _cmd_bench_uci(args) -> None:
    """The UCI regression table (:mod:`pyro_bdl.bench.uci`): every split a fit per method, resumable."""
    root = args.root or default_root()
    if root is None:
        raise ValueError("no UCI folder: give --root (the folder holding bostonHousing, concrete, ...) or set "
                         "$PYRO_BDL_UCI")
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()] if args.datasets else None
    methods = split_entries(args.methods)
    command = "pyro-bdl " + " ".join(args.argv if args.argv is not None else sys.argv[1:])
    try:
        jobs = args.jobs if args.jobs == "auto" else int(args.jobs)
    except ValueError:
        raise ValueError(f"--jobs takes a number of processes or auto, got {args.jobs!r}") from None
    run_uci(root, args.out, datasets, methods, args.splits, jobs=jobs, seed=args.seed,
            progress=not args.no_progress, force=args.force, command=command, report_only=args.report_only)
    report = (Path(args.out) / "uci.md").read_text()
    print(report.split("## Goals")[1].split("\n## ")[0].strip())  # the goals, counted
    print(f"wrote uci.md, uci.csv, uci.png and rows.csv to {args.out}")


def _add_bench_parser(sub) -> None:
    """``pyro-bdl bench``'s arguments: one sub-command per published table."""
    bench = sub.add_parser("bench", help="reproduce a paper's table (uci: the UCI regression benchmark)")
    tables = bench.add_subparsers(dest="table", required=True)
    p = tables.add_parser("uci", help="the UCI regression table: every method on every split, beside the published "
                                      "columns (uci.md, uci.csv, uci.png, rows.csv)")
    p.add_argument("--root", help="folder holding the data set folders (default: $PYRO_BDL_UCI, else "
                                  "../shared/data/uci when present)")
    p.add_argument("--datasets", help="comma-separated folder names (default: all under --root)")
    p.add_argument("--methods", default=entries_text(UCI_METHODS),
                   help=f"comma-separated methods (default {entries_text(UCI_METHODS)}); with settings or model "
                        "options after ':', separate them by ';': 'svi;mc-dropout:mask=weight;map:likelihood="
                        "heteroscedastic'")
    p.add_argument("--splits", type=int, help="the first N splits of each set (default: all, 20; 5 for protein)")
    p.add_argument("--jobs", default="auto", help="fits in parallel processes, one torch thread each (default auto: "
                                                  "one per core)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder; a folder of an earlier run goes on where it stopped")
    p.add_argument("--force", action="store_true", help="write into a folder that holds other files")
    p.add_argument("--report-only", action="store_true", help="no fits: rewrite uci.md, uci.csv and uci.png from the "
                                                               "rows the folder holds (after a run was stopped)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=_cmd_bench_uci)


SAMPLE_FORMATS = (".npz", ".csv", ".png")


def _cmd_sample(args) -> None:
    """New rows from a fitted model's prior (its ``size`` argument): an NPZ file with the draws (``x``) and the
    likelihood's means (``mean``), a CSV of the draws under the fit's feature names (what ``predict`` reads), or
    for square images a PNG grid of the means."""
    import numpy as np

    check_out_file(args.out)
    suffix = Path(args.out).suffix.lower()
    if suffix not in SAMPLE_FORMATS:
        raise ValueError(f"--out {args.out}: unknown format '{suffix}'; write one of {', '.join(SAMPLE_FORMATS)}")
    result = load_fit(args.fit_dir)
    if result.spec.data.size is None:
        raise ValueError(f"model '{result.spec.name}' cannot simulate new rows without inputs (it has no size argument)")
    if args.num < 1:
        raise ValueError(f"--num must be at least 1, got {args.num}")
    drawn = simulate(result, args.num, seed=args.seed)
    out = Path(args.out)
    if out.suffix.lower() == ".png":
        import math

        import matplotlib.pyplot as plt


        side = square_side(drawn["mean"].shape[-1])
        if side is None:
            raise ValueError("a PNG needs square images; write an .npz file instead")
        cols = math.ceil(math.sqrt(args.num))
        fig, ax = plt.subplots(figsize=(6, 6 * math.ceil(args.num / cols) / cols))
        image_grid(ax, drawn["mean"].numpy(), side, cols)
        atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
        plt.close(fig)
    elif suffix == ".csv":
        import pandas as pd

        table = pd.DataFrame(drawn["x"].numpy(), columns=result.record.feature_names)
        atomic_write_text(out, table.to_csv(index=False))
    else:
        def write(tmp):
            with open(tmp, "wb") as f:  # a file object: np.savez adds no suffix
                np.savez(f, **{k: v.numpy() for k, v in drawn.items()})

        atomic_write(out, write)
    print(f"wrote {args.num} new rows from the prior of {args.fit_dir} to {args.out}")


def _add_active_learn_parser(sub) -> None:
    p = sub.add_parser("active-learn", help="label a pool batch by batch, the rows chosen by the posterior (BALD, ...)")
    p.add_argument("model")
    p.add_argument("--data", help="the pool: a CSV file (its --target column revealed only when a row is acquired) "
                                  "or an embedded data set name (default: the model's own)")
    p.add_argument("--target", help="the label column of the CSV files")
    p.add_argument("--test", help="held-out CSV with labels (default: --test-fraction of the pool)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held out from the pool when no --test (0.2)")
    p.add_argument("--inference", "-i", default="mc-dropout", help="inference method (default mc-dropout)")
    p.add_argument("--acquisition", help="comma-separated acquisitions (default bald,random; for a regression "
                                         "variance,random): bald, entropy, variation-ratios, mean-std, variance, "
                                         "epistemic-variance, random")
    p.add_argument("--initial", type=int, default=20, help="rows labelled first (balanced over classes; 20)")
    p.add_argument("--batch", type=int, default=10, help="rows acquired per round (10)")
    p.add_argument("--rounds", type=int, default=10, help="acquisition rounds (10)")
    p.add_argument("--batch-mode", default="top", help="top (the highest scores) or stochastic (sampled in "
                                                      "proportion to them)")
    p.add_argument("--seeds", type=int, default=1, help="runs per acquisition, seeds --seed, --seed + 1, ... (1)")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side in this many processes, one torch thread "
                                                       "each (1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="model option (repeatable)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="inference setting, e.g. --set steps=1000")
    p.add_argument("--out", required=True, help="output directory (history.csv, learning_curve.png)")
    p.add_argument("--force", action="store_true", help="write into an --out directory that holds a fit")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(run=_cmd_active_learn)


def _add_bandit_parser(sub) -> None:
    p = sub.add_parser("bandit", help="a contextual bandit: Thompson sampling on the posterior against greedy agents")
    p.add_argument("model", help="the reward model: a zoo regressor (pyro-bdl list)")
    p.add_argument("--data", required=True, help="the reward table: the UCI Mushroom file (agaricus-lepiota.data) or "
                                                 "an .npz with contexts, rewards (and probabilities)")
    p.add_argument("--agents", default="svi,map:greedy,map:epsilon=0.05",
                   help="comma-separated METHOD[:thompson|:greedy|:epsilon=P] (default svi,map:greedy,"
                        "map:epsilon=0.05)")
    p.add_argument("--interactions", type=int, default=50_000, help="bandit steps (50000)")
    p.add_argument("--buffer", type=int, default=4096, help="the most recent interactions a refit sees (4096)")
    p.add_argument("--update-every", type=int, default=1000, help="refit every this many steps, after the "
                                                                  "doubling from step 16 (1000)")
    p.add_argument("--seeds", type=int, default=1, help="runs per agent, seeds --seed, --seed + 1, ... (1)")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side in this many processes (1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="model option (repeatable)")
    p.add_argument("--set", action="append", metavar="[METHOD.]KEY=VALUE",
                   help="refit setting for every agent, or for one method's (svi.samples=100)")
    p.add_argument("--out", required=True, help="output directory (history.csv, regret.png)")
    p.add_argument("--force", action="store_true", help="write into an --out directory that holds a run")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(run=_cmd_bandit)


def _add_compare_parser(sub) -> None:
    """``pyro-bdl compare``'s arguments."""
    p = sub.add_parser("compare", help="which inference method: fit several and compare them with a reference "
                                       "posterior (report.md, marginals.png, table.csv)")
    p.add_argument("model")
    p.add_argument("--data", help="CSV file or embedded data set name (default: the model's own)")
    p.add_argument("--target", help="target column of a CSV file")
    p.add_argument("--methods", default="nuts,svi,laplace,map", help="comma-separated methods (nuts,svi,laplace,map)")
    p.add_argument("--test-fraction", type=float, default=0.0,
                   help="hold out this fraction for held-out metrics (default 0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="model option (repeatable)")
    p.add_argument("--set", action="append", metavar="METHOD.KEY=VALUE",
                   help="a method's setting, e.g. --set svi.steps=2000 (repeatable)")
    p.add_argument("--out", required=True, help="output directory (must be empty or new, unless --force)")
    p.add_argument("--force", action="store_true", help="replace what --out holds")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(run=_cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyro-bdl", description="A Bayesian deep learning model zoo on Pyro.")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="models, inference methods and embedded data sets").set_defaults(run=_cmd_list)

    p = sub.add_parser("describe", help="a model's math, options and sample sites")
    p.add_argument("model")
    p.set_defaults(run=_cmd_describe)

    p = sub.add_parser("fit", help="fit a model and write posterior.nc, summary.csv, metrics.json and plots")
    p.add_argument("model")
    p.add_argument("--inference", "-i", help="inference method (default: nuts, or the first that suits the model)")
    p.add_argument("--data", help="CSV file or embedded data set name (default: the model's own)")
    p.add_argument("--target", help="target column of a CSV file")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="model option (repeatable)")
    p.add_argument("--guide", help="guide for SVI methods (normal, mvn, meanfield, or a model guide)")
    p.add_argument("--steps", type=int, help="optimisation steps (SVI, MAP, MLE, importance proposal)")
    p.add_argument("--samples", type=int, help="posterior draws per chain")
    p.add_argument("--warmup", type=int, help="MCMC warm-up steps per chain")
    p.add_argument("--chains", type=int, help="MCMC chains")
    p.add_argument("--lr", type=float, help="learning rate")
    p.add_argument("--particles", type=int, help="ELBO particles per step")
    p.add_argument("--batch-size", type=int, help="minibatch size (networks; default: full batch)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any other inference setting, e.g. --set members=10 or --set p=0.1 (repeatable)")
    p.add_argument("--test-fraction", type=float,
                   help="hold out this fraction for metrics (default 0.2 for networks, 0 otherwise)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--no-plots", action="store_true", help="write the records alone, no figures")
    p.add_argument("--device", default="cpu", help="where the fit runs: cpu (default), cuda, cuda:N, mps")
    p.add_argument("--threads", default="auto",
                   help="torch threads per process: auto (default: one unless the model's operations are large "
                        "and cores are free) or a number")
    p.add_argument("--nproc", type=int,
                   help="run in N processes on this machine, started by torchrun (data-parallel SVI, MAP, MLE, "
                        "MC dropout, amortised SVI; ensemble members and NUTS/HMC chains split); inside a torchrun "
                        "launch leave it out")
    p.add_argument("--force", action="store_true",
                   help="replace the fit an --out directory already holds (without it, such a directory is refused)")
    p.set_defaults(run=_cmd_fit)

    p = sub.add_parser("predict", help="posterior predictive for new rows")
    p.add_argument("fit_dir", help="directory written by `pyro-bdl fit`")
    p.add_argument("--data", required=True, help="CSV with the fit's feature columns, or an IDX / NPZ image file")
    p.add_argument("--out", required=True, help="output CSV")
    p.add_argument("--prob", type=float, default=0.94, help="interval probability (default 0.94)")
    p.set_defaults(run=_cmd_predict)

    p = sub.add_parser("sample", help="new rows (images) from a fitted model's prior")
    p.add_argument("fit_dir", help="directory written by `pyro-bdl fit`")
    p.add_argument("--num", type=int, default=64, help="how many (default 64)")
    p.add_argument("--out", required=True,
                   help="output file: .npz (draws x and means), .csv (draws, one row each) "
                        "or .png (a grid of the means)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=_cmd_sample)

    _add_active_learn_parser(sub)

    _add_bandit_parser(sub)

    _add_compare_parser(sub)
    _add_bench_parser(sub)
    return parser


def _files_only_backend() -> None:
    """Figures go to files, never a window: matplotlib's Agg backend, set without importing matplotlib where it is
    not imported yet (``list`` and ``describe`` need none of it; it loads when a fit writes its plots)."""
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use("Agg")
    else:
        os.environ["MPLBACKEND"] = "Agg"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = argv
    _files_only_backend()
    try:
        with handling(signal.SIGTERM, raise_interrupt):  # SIGTERM as Ctrl-C: a fit saves its checkpoint
            status = args.run(args)
        if status:
            return int(status)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"pyro-bdl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"pyro-bdl: interrupted; {exc or 'nothing was written'}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`pyro-bdl describe blr | head`): stop quietly, as cat does
        import io
        import os

        try:  # no second error when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        return 141
    finally:
        leave()  # the process group of a torchrun launch, if this command joined one
    return 0


if __name__ == "__main__":
    sys.exit(main())
