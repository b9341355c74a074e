"""The VAE's default training budget and learning rate: test log p(x) over a grid, on the set the defaults are
chosen on (the embedded ``digits-01``) and a generated family of others.

Every fit is ``svi-amortised`` at its defaults (the model's: latent 10, 200 hidden, Bernoulli; the method's: batch
128, 10% validation rows, early stopping) except the learning rate and the budget: ``epochs`` (the cap) and
``patience`` (the epochs without a better validation ELBO before stopping) of each ``--budgets`` pair E:P (100:10:
the defaults before this study), and ``kl_warmup``.  The scores: the test rows' importance-sampled log p(x) per row
(K = ``--is-samples``), the test ELBO, the latent coordinates in use (:func:`active_units`), the fit's seconds.

Data (each split into training and test rows with a fixed seed):

* ``digits-01``: the 8x8 digits on [0, 1] (1,437 train / 360 test) -- the set the defaults are chosen on;
* ``digits-noisy``: the same with N(0, 0.15^2) pixel noise, clipped to [0, 1];
* ``mnist-1k`` / ``mnist-4k`` / ``mnist-8k``: the first 1,000 / 4,000 / all 8,000 images of the MNIST 8k training
  split (28x28), tested on 1,000 of its test images (``--mnist``; skipped when the files are missing);
* ``synthetic``: 64 binary pixels from a random known decoder (z ~ N(0, I_2), a 2-32-64 softplus MLP with
  N(0, 1.5^2 / fan-in) weights, Bernoulli), 1,500 train / 500 test; its true log p(x) (IS from the prior, K = 20,000)
  is printed as the ceiling.

    python benchmarks/vae_defaults.py              # the grid (tens of minutes; one thread)
    python benchmarks/vae_defaults.py --quick      # digits only, one tiny cell: a smoke run
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
import warnings
from pathlib import Path

import torch

MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def synthetic(n: int, seed: int = 0):
    """Binary 64-pixel images from a random decoder; returns (images, the decoder's exact log p(x) function)."""
    g = torch.Generator().manual_seed(seed)
    W1, b1 = torch.randn(2, 32, generator=g) * 1.5 / math.sqrt(2), torch.randn(32, generator=g)
    W2, b2 = torch.randn(32, 64, generator=g) * 1.5 / math.sqrt(32), torch.randn(64, generator=g)

    def logits(z):
        return torch.nn.functional.softplus(z @ W1 + b1) @ W2 + b2

    x = torch.bernoulli(torch.sigmoid(logits(torch.randn(n, 2, generator=g))), generator=g)

    def log_px(images, K=20000):
        z = torch.randn(K, 1, 2, generator=torch.Generator().manual_seed(seed + 1))
        out = []
        for chunk in images.split(100):
            ll = torch.distributions.Bernoulli(logits=logits(z)).log_prob(chunk).sum(-1)  # (K, rows)
            out.append(torch.logsumexp(ll, 0) - math.log(K))
        return torch.cat(out)

    return x, log_px


def active_units(fit, test, threshold: float = 0.01) -> int:
    """Latent coordinates in use: those whose q(z | x) mean varies over the test rows (variance > ``threshold``,
    Burda et al. 2016's activity criterion); a coordinate at the prior for every row carries nothing."""
    from pyro_bdl.posterior.amortised import latents

    return int((latents(fit, test)["z"][0].var(0) > threshold).sum())


def data_sets(args):
    import pyro_bdl
    from pyro_bdl.data.embedded import split_dataset
    from pyro_bdl.data.images import mnist_split
    from pyro_bdl.data.table import Dataset

    digits = pyro_bdl.load("digits-01")
    train, test = split_dataset(digits, 0.2, seed=0, stratify=True)
    yield "digits-01", train.X, test.X, None
    if args.quick:
        return
    g = torch.Generator().manual_seed(1)
    yield ("digits-noisy", (train.X + 0.15 * torch.randn(train.X.shape, generator=g)).clamp(0, 1),
           (test.X + 0.15 * torch.randn(test.X.shape, generator=g)).clamp(0, 1), None)
    x, log_px = synthetic(2000)
    yield "synthetic", x[:1500], x[1500:], float(log_px(x[1500:]).mean())
    if Path(args.mnist, "t10k-images-idx3-ubyte.gz").exists():
        mtrain, mtest = mnist_split(args.mnist, seed=0)
        for rows in (1000, 4000, 8000):
            yield f"mnist-{rows // 1000}k", mtrain.X[:rows], mtest.X[:1000], None
    del Dataset


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="digits only, one cell of 2 epochs")
    parser.add_argument("--lrs", default="1e-3,3e-3,1e-2")
    parser.add_argument("--budgets", default="100:10,1000:10,1000:30,1000:100",
                        help="epochs:patience pairs; 'default': both unset (from the steps per epoch)")
    parser.add_argument("--kl-warmups", default="0", help="kl_warmup values (epochs), a third axis of the grid")
    parser.add_argument("--data", default=None, help="only these data sets (comma-separated names)")
    parser.add_argument("--is-samples", type=int, default=200)
    parser.add_argument("--mnist", default=str(MNIST))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    import pyro_bdl
    from pyro_bdl.data.table import Dataset
    from pyro_bdl.posterior.amortised import evaluate

    lrs = [float(v) for v in args.lrs.split(",")]
    budgets = [(None, None) if v == "default" else tuple(int(p) for p in v.split(":")) for v in args.budgets.split(",")]
    warmups = [float(v) for v in args.kl_warmups.split(",")]
    if args.quick:
        lrs, budgets = lrs[:1], budgets[:1]
    print("| data | train rows | lr | epochs : patience | kl_warmup | epochs run | steps run | test log p(x) "
          "| test ELBO | latent coordinates in use | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, train, test, ceiling in data_sets(args):
        if args.data and name not in args.data.split(","):
            continue
        steps_per_epoch = math.ceil(round(0.9 * len(train)) / 128)
        for lr, (epochs, patience), warmup in itertools.product(lrs, budgets, warmups):
            epochs = 2 if args.quick and epochs is not None else epochs
            start = time.perf_counter()
            fit = pyro_bdl.fit("vae", Dataset(name, train, None), inference="svi-amortised", lr=lr, epochs=epochs,
                               patience=patience, kl_warmup=warmup, is_samples=args.is_samples, seed=0, progress=False)
            seconds = time.perf_counter() - start
            scores = evaluate(fit, test)
            run = fit.info.epochs_run
            which = f"{fit.info.epochs} : {fit.info.patience}" + (" (default)" if epochs is None else "")
            print(f"| {name} | {len(train)} | {lr:g} | {which} | {warmup:g} | {run} | "
                  f"{run * steps_per_epoch} | {scores['test_log_px']:.2f} | {scores['test_elbo']:.2f} | "
                  f"{active_units(fit, test)} | {seconds:.0f} |", flush=True)
        if ceiling is not None:
            print(f"| {name} | true decoder | | | | | {ceiling:.2f} | | |", flush=True)


if __name__ == "__main__":
    main()
