"""M1+M2 (Kingma et al. 2014's best semi-supervised model) against M2, the classifier on the labels alone and
logistic regression on a VAE's codes, over seeds and over the number of unlabelled images.

Per seed s: the MNIST 8,000 / 2,000 split of the official test images with seed s
(:func:`pyro_bdl.data.images.mnist_split`), 10 labels per class kept (100 labels), and for each size U of
``--unlabelled`` the first U of the other 7,900 training images (a fixed random order) as the unlabelled rows:

- **M1+M2**: a plain VAE (M1, its KL term annealed over the first ``--m1-kl-warmup`` epochs) fitted on the 100 + U
  images, their codes (the means of q(z1 | x),
  :func:`pyro_bdl.posterior.amortised.codes`) restricted to the active units (``active_units``: variance of the
  means over the images above 0.01, Burda et al. 2016), and ``ss-vae`` with ``likelihood=gaussian`` on the codes; a test image is
  classified by q(y | z1) at its code;
- **logistic regression on the codes** of the same M1, fitted on the 100 labelled codes;
- **M2** (``ss-vae`` on the pixels, the model's defaults and the same training length), at the largest U only
  unless ``--m2-every``;
- **the classifier alone**: the ss-VAE's classifier network trained on the 100 labelled images
  (benchmarks/ss_vae.py's ``classifier_alone``).

Kingma et al. (2014, Table 1, 100 labels, 50,000 unlabelled images): M2 11.97% error, M1+M2 3.33%.  The data here
differ (at most 7,900 unlabelled images, drawn from the official test set): the curve over U measures what the
unlabelled images are worth.

    python benchmarks/ss_vae_curve.py --out benchmarks/results      # MNIST, seeds 0-2, one thread (hours)
    python benchmarks/ss_vae_curve.py --quick --out /tmp/q          # the embedded digits: a smoke run

With ``--out``, the rows are saved after each seed and size; run the same command again after an interruption and
the finished ones are kept.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ss_vae import MNIST, classifier_alone, keep_labels  # noqa: E402  (the same label selection and baseline)

COLUMNS = ["seed", "unlabelled", "method", "test_accuracy", "seconds"]
#: The table's methods, in its order (the rows named "active units" count M1's units, not an accuracy).
METHODS = ("the classifier on the labels alone", "logistic regression on M1's codes", "M2", "M1+M2")


def subset(train, labels: torch.Tensor, unlabelled: int, seed: int):
    """The labelled rows and the first ``unlabelled`` of the others (a random order from ``seed``) as one data set
    whose unknown labels are -1."""
    import pyro_bdl

    known = (labels >= 0).nonzero().squeeze(-1)
    others = (labels < 0).nonzero().squeeze(-1)
    others = others[torch.randperm(len(others), generator=torch.Generator().manual_seed(seed))[:unlabelled]]
    rows = torch.cat([known, others])
    return pyro_bdl.Dataset("semi", train.X[rows], labels[rows], train.feature_names, "label")


def m1_m2(semi, test, args, seed: int) -> dict:
    """Fit M1 on the images of ``semi``, M2 on their active codes; test accuracy of M1+M2 and of logistic regression
    on the same codes."""
    from sklearn.linear_model import LogisticRegression

    import pyro_bdl
    from pyro_bdl.posterior.amortised import active_units, codes, evaluate_classifier

    start = time.perf_counter()
    m1 = pyro_bdl.fit("vae", pyro_bdl.Dataset("images", semi.X, None), inference="svi", seed=seed, progress=False,
                      options={"latent_dim": args.m1_latent, "hidden": tuple(args.m1_hidden)}, epochs=args.m1_epochs,
                      kl_warmup=args.m1_kl_warmup)
    units = active_units(m1, semi)
    if not len(units):  # a VAE fitted for a few steps, or collapsed: every unit, said
        print(f"M1 has no active unit (seed {seed}, {len(semi)} images): M2 runs on all its units", flush=True)
        units = None
    train_codes, test_codes = codes(m1, semi, units), codes(m1, test, units)
    m1_seconds = time.perf_counter() - start
    known = semi.y >= 0
    logistic = LogisticRegression(max_iter=5000).fit(train_codes.X[known].numpy(), semi.y[known].long().numpy())
    out = {"logistic regression on M1's codes": (float((logistic.predict(test_codes.X.numpy()) == test.y.long().numpy())
                                                        .mean()), m1_seconds)}
    start = time.perf_counter()
    m2 = pyro_bdl.fit("ss-vae", train_codes, inference="svi", seed=seed, progress=False, epochs=args.m2_epochs,
                      options={"likelihood": "gaussian", "latent_dim": args.m2_latent, "hidden": tuple(args.m2_hidden),
                               "aux_weight": args.aux_weight})
    out["M1+M2"] = (evaluate_classifier(m2, test_codes)["test_accuracy"], m1_seconds + time.perf_counter() - start)
    out["active units"] = (train_codes.X.shape[1], 0.0)
    return out


def m2_pixels(semi, test, args, seed: int) -> tuple[float, float]:
    """M2 on the pixels (``ss-vae``, benchmarks/ss_vae.py's nets: ``--pixels-hidden``, ``--pixels-latent``,
    ``--pixels-epochs``; its default aux_weight): test accuracy of q(y | x) and seconds."""
    import pyro_bdl
    from pyro_bdl.posterior.amortised import evaluate_classifier

    start = time.perf_counter()
    m2 = pyro_bdl.fit("ss-vae", semi, inference="svi", seed=seed, progress=False, epochs=args.pixels_epochs,
                      options={"hidden": tuple(args.pixels_hidden), "latent_dim": args.pixels_latent})
    return evaluate_classifier(m2, test)["test_accuracy"], time.perf_counter() - start


def data(args, seed: int):
    """``(train, test)``: the MNIST split of ``seed``, or the embedded digits (80/20) with ``--quick``."""
    import pyro_bdl
    from pyro_bdl.data.embedded import split_dataset
    from pyro_bdl.data.images import mnist_split

    if args.quick:
        return split_dataset(pyro_bdl.load("digits-01"), 0.2, seed=seed, stratify=True)
    return mnist_split(args.data, seed=seed)


def run(args, done: list[dict] | None = None, save=None) -> list[dict]:
    """Every (seed, unlabelled size, method) row, in order.  ``done``: rows of an interrupted run (a seed's and
    size's rows are not recomputed); ``save(rows)`` is called after each seed and size."""
    rows = list(done or [])
    for seed in args.seeds:
        train, test = data(args, seed)
        labels = keep_labels(train.y, args.per_class, seed)
        if not args.no_alone and not any(r["seed"] == seed and r["unlabelled"] == 0 for r in rows):
            start = time.perf_counter()
            alone = classifier_alone(train.X[labels >= 0], labels[labels >= 0], args.m1_hidden[0],
                                     steps=args.alone_steps, seed=seed)
            with torch.no_grad():
                accuracy = float((alone(test.X) == test.y.long()).double().mean())
            rows.append({"seed": seed, "unlabelled": 0, "method": "the classifier on the labels alone",
                         "test_accuracy": accuracy, "seconds": time.perf_counter() - start})
        for size in args.unlabelled:
            if any(r["seed"] == seed and r["unlabelled"] == size for r in rows):
                continue  # done before the run was interrupted
            semi = subset(train, labels, size, seed)
            for method, (value, seconds) in m1_m2(semi, test, args, seed).items():
                rows.append({"seed": seed, "unlabelled": size, "method": method, "test_accuracy": value,
                             "seconds": seconds})
            if args.m2_every or size == args.m2_at:
                value, seconds = m2_pixels(semi, test, args, seed)
                rows.append({"seed": seed, "unlabelled": size, "method": "M2", "test_accuracy": value,
                             "seconds": seconds})
            print(" ".join(f"{r['method']}={r['test_accuracy']:.3f}" for r in rows if r["seed"] == seed
                           and r["unlabelled"] == size), f"(seed {seed}, {size} unlabelled)", flush=True)
            if save is not None:
                save(rows)
    return rows


def write_rows(rows: list[dict], path: Path) -> None:
    """The rows as CSV, written whole to a temporary file and moved into place (never half-written)."""
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def read_rows(paths) -> list[dict]:
    """The rows of earlier runs' CSV files, in order."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            rows += [{"seed": int(r["seed"]), "unlabelled": int(r["unlabelled"]), "method": r["method"],
                      "test_accuracy": float(r["test_accuracy"]), "seconds": float(r["seconds"])} for r in csv.DictReader(f)]
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per method and unlabelled size, the mean +- standard error of the test accuracy over the seeds."""
    lines = ["| method | unlabelled images | test accuracy (mean +- se) | per seed | seconds (mean) |",
             "|---|---|---|---|---|"]
    order = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(dict.fromkeys((r["method"], r["unlabelled"]) for r in rows if r["method"] in order),
                  key=lambda key: (order[key[0]], key[1]))
    for method, size in keys:
        values = np.array([r["test_accuracy"] for r in rows if (r["method"], r["unlabelled"]) == (method, size)])
        seconds = [r["seconds"] for r in rows if (r["method"], r["unlabelled"]) == (method, size)]
        seconds = np.nanmean(seconds) if not np.isnan(seconds).all() else float("nan")  # nan: not recorded
        se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
        lines.append(f"| {method} | {size:,} | {values.mean():.3f} +- {se:.3f} | "
                     f"{', '.join(f'{v:.3f}' for v in values)} | {seconds:.0f} |")
    units = [r["test_accuracy"] for r in rows if r["method"] == "active units"]
    if units:
        lines.append(f"\nM1's active units, per seed and size in order: {', '.join(str(int(u)) for u in units)}")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Test accuracy against the number of unlabelled images: M1+M2 and logistic regression on the codes (mean and
    standard error over the seeds), M2 at its sizes, the classifier alone as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for method, marker in (("M1+M2", "o-"), ("logistic regression on M1's codes", "s--"), ("M2", "^")):
        sizes = sorted({r["unlabelled"] for r in rows if r["method"] == method})
        if not sizes:
            continue
        stats = [np.array([r["test_accuracy"] for r in rows if r["method"] == method and r["unlabelled"] == s])
                 for s in sizes]
        ax.errorbar(sizes, [v.mean() for v in stats], [v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0
                                                       for v in stats], fmt=marker, capsize=3, label=method)
    alone = [r["test_accuracy"] for r in rows if r["method"] == "the classifier on the labels alone"]
    ax.axhline(np.mean(alone), color="grey", ls=":", label="the classifier on the 100 labels alone")
    ax.set(xscale="log", xlabel="unlabelled images", ylabel="test accuracy", title="100 labels: what unlabelled "
           "images are worth (mean +- se over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(MNIST), help="folder with t10k-images-idx3-ubyte.gz")
    parser.add_argument("--quick", action="store_true", help="the embedded digits, small nets, few epochs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--unlabelled", type=int, nargs="+", default=[1000, 2000, 4000, 7900])
    parser.add_argument("--m2-at", type=int, default=7900, help="the unlabelled size at which M2 on the pixels runs")
    parser.add_argument("--no-alone", action="store_true", help="leave out the classifier on the labels alone")
    parser.add_argument("--merge", nargs="+", default=None, metavar="CSV",
                        help="no fits: the table and figure of the rows in these CSV files (runs split over processes)")
    parser.add_argument("--per-class", type=int, default=10, help="labels kept per class (10: 100 labels)")
    parser.add_argument("--m1-epochs", type=int, default=300, help="at most (the method stops early on its "
                        "held-out rows)")
    parser.add_argument("--m1-latent", type=int, default=50)
    # 20: M1+M2 0.857 against 0.841 without, 3 seeds (benchmarks/results/ss_vae_curve.md)
    parser.add_argument("--m1-kl-warmup", type=int, default=20, help="M1's KL warm-up, epochs (svi's kl_warmup)")
    # two layers of 600 (the paper's M1): better codes than one of 400 (benchmarks/RESULTS.md, "M1+M2")
    parser.add_argument("--m1-hidden", type=int, nargs="+", default=[600, 600])
    parser.add_argument("--m2-epochs", type=int, default=100)
    parser.add_argument("--m2-latent", type=int, default=50)
    parser.add_argument("--m2-hidden", type=int, nargs="+", default=[500])
    parser.add_argument("--aux-weight", type=float, default=10.0, help="M1+M2's (the model's default)")
    parser.add_argument("--pixels-epochs", type=int, default=50, help="M2 on the pixels (benchmarks/ss_vae.py's)")
    parser.add_argument("--pixels-latent", type=int, default=50)
    parser.add_argument("--pixels-hidden", type=int, nargs="+", default=[400])
    parser.add_argument("--alone-steps", type=int, default=2000)
    parser.add_argument("--m2-every", action="store_true", help="M2 on the pixels at every size (default: largest)")
    parser.add_argument("--out", default=None, help="folder for ss_vae_curve.{md,csv,png}")
    args = parser.parse_args(argv)
    if args.quick:
        args.unlabelled, args.m1_epochs, args.m2_epochs, args.alone_steps, args.m2_at = [200, 1000], 3, 2, 50, 1000
        args.m1_hidden, args.m2_hidden, args.m1_latent, args.m2_latent = [32], [32], 8, 4
        args.pixels_hidden, args.pixels_latent, args.pixels_epochs = [32], 4, 2
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        rows = read_rows(args.merge)
    else:  # an interrupted run's rows in --out are kept, and its finished seeds and sizes not recomputed
        done = read_rows([out / "ss_vae_curve.csv"]) if out and (out / "ss_vae_curve.csv").exists() else []
        rows = run(args, done, save=(lambda r: write_rows(r, out / "ss_vae_curve.csv")) if out else None)
    text = table(rows)
    header = (f"`python benchmarks/ss_vae_curve.py {' '.join(argv if argv is not None else sys.argv[1:])}` "
              f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.perf_counter() - start:.0f} s)")
    print(header + "\n\n" + text)
    if out:
        (out / "ss_vae_curve.md").write_text(header + "\n\n" + text + "\n")
        write_rows(rows, out / "ss_vae_curve.csv")
        plot(rows, out / "ss_vae_curve.png")


if __name__ == "__main__":
    main()
