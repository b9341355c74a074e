"""The semi-supervised VAE (M2) with few labels: test accuracy of its classifier q(y | x) against the same
classifier network trained on the labelled images alone, and against logistic regression on the latent means of a
plain VAE trained on all the images (representation learning).

Data: the MNIST 8,000 / 2,000 split of the official test images (:func:`pyro_bdl.data.images.mnist_split`), with the
labels of ``--per-class`` training images of each class kept (10: 100 labels) and the others hidden (-1).
Kingma et al. (2014) report about 88% (M2, 100 labels, trained on the 50k MNIST training images; not checked against
the paper here); the data here differ (8,000 images), so the numbers are not directly comparable.

Each M2 row also gives the accuracy of the model's own posterior over the label, argmax_c ELBO_c(x)
(:func:`models.ss_vae.class_elbos`): the unlabelled rows' bound pulls q(y | x) towards it.

    python benchmarks/ss_vae.py                 # MNIST (minutes; one thread)
    python benchmarks/ss_vae.py --aux-weights 0.1,10   # M2 at two weights of the classification term
    python benchmarks/ss_vae.py --digits --aux-weights 0.1,10          # the embedded 8x8 digits (seconds)
    python benchmarks/ss_vae.py --quick         # the embedded digits, small nets, few epochs: a smoke run
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def keep_labels(y: torch.Tensor, per_class: int, seed: int = 0) -> torch.Tensor:
    """``y`` with the labels of ``per_class`` rows of each class kept (chosen with ``seed``), -1 elsewhere."""
    g = torch.Generator().manual_seed(seed)
    out = torch.full_like(y, -1.0)
    for c in torch.unique(y):
        rows = (y == c).nonzero().squeeze(-1)
        keep = rows[torch.randperm(len(rows), generator=g)[:per_class]]
        out[keep] = y[keep]
    return out


def classifier_alone(X: torch.Tensor, y: torch.Tensor, hidden: int, steps: int, seed: int = 0):
    """The ss-VAE's classifier network (D-hidden-C, softplus) trained on the labelled rows alone (full batch, Adam
    1e-3, weight decay 1e-4); returns the predict function."""
    from pyro_bdl.nn.image_networks import classifier

    torch.manual_seed(seed)
    net = classifier(X.shape[1], int(y.max()) + 1, (hidden,))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    for _ in range(steps):
        loss = F.cross_entropy(net(X), y.long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return lambda images: net(images).argmax(-1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(MNIST), help="folder with t10k-images-idx3-ubyte.gz")
    parser.add_argument("--quick", action="store_true", help="the embedded digits, small nets, 3 epochs")
    parser.add_argument("--digits", action="store_true", help="the embedded digits (80/20 split), the model's default "
                        "nets (latent 10, 200 hidden), 100 epochs, batch 128")
    parser.add_argument("--per-class", type=int, default=10, help="labels kept per class (10: 100 labels)")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--latent", type=int, default=50)
    parser.add_argument("--hidden", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--aux-weights", default=None, help="M2's aux_weight values, comma-separated (default: the "
                        "model's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    from sklearn.linear_model import LogisticRegression

    import pyro_bdl
    from pyro_bdl.data.embedded import split_dataset
    from pyro_bdl.data.images import mnist_split
    from pyro_bdl.posterior.amortised import evaluate_classifier, latents

    if args.quick or args.digits:
        train, test = split_dataset(pyro_bdl.load("digits-01"), 0.2, seed=args.seed, stratify=True)
        args.latent, args.hidden, args.epochs = (4, 32, 3) if args.quick else (10, 200, 100)
        args.batch_size = args.batch_size if args.quick else 128  # the method's default
        what = f"digits-01{' (quick)' if args.quick else ''}, 80/20 split (seed {args.seed})"
    else:
        train, test = mnist_split(args.data, seed=args.seed)
        what = "MNIST t10k split 8000 / 2000 (seed 0)"
    y = keep_labels(train.y, args.per_class, args.seed)
    labelled = y >= 0
    semi = pyro_bdl.Dataset("semi", train.X, y, train.feature_names, "label")
    print(f"data: {what}; {int(labelled.sum())} labels among {len(train)} training images; test {len(test)}; "
          f"nets {train.X.shape[1]}-{args.hidden}, latent {args.latent}; up to {args.epochs} epochs, batch "
          f"{args.batch_size}")
    print("| classifier | labels used | test accuracy | the model's posterior argmax_c ELBO_c: accuracy | seconds |")
    print("|---|---|---|---|---|")
    options = {"latent_dim": args.latent, "hidden": (args.hidden,)}
    spec = pyro_bdl.get_model("ss-vae")
    class_elbos = sys.modules[spec.model.__module__].class_elbos
    weights = args.aux_weights.split(",") if args.aux_weights else [spec.options["aux_weight"].default]
    for weight in weights:
        start = time.perf_counter()
        fit = pyro_bdl.fit("ss-vae", semi, inference="svi-amortised", options={**options, "aux_weight": float(weight)},
                           epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, progress=False)
        acc = evaluate_classifier(fit, test)["test_accuracy"]
        with fit.own_params():
            own = float((class_elbos(test.X, **fit.model.keywords).argmax(-1) == test.y.long()).double().mean())
        print(f"| ss-vae (M2) q(y \\| x), aux_weight {float(weight):g} | {int(labelled.sum())} + unlabelled images | "
              f"{acc:.3f} | {own:.3f} | {time.perf_counter() - start:.0f} |", flush=True)

    start = time.perf_counter()
    predict = classifier_alone(train.X[labelled], y[labelled], args.hidden, steps=2000 if not args.quick else 50,
                               seed=args.seed)
    with torch.no_grad():
        acc = float((predict(test.X) == test.y.long()).double().mean())
    print(f"| the same network on the labels alone | {int(labelled.sum())} | {acc:.3f} | | "
          f"{time.perf_counter() - start:.0f} |", flush=True)

    start = time.perf_counter()
    vae = pyro_bdl.fit("vae", pyro_bdl.Dataset("all", train.X, None), inference="svi-amortised", options=options,
                       epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, is_samples=10, progress=False)
    codes = latents(vae, train.X[labelled])["z"][0].numpy()
    logistic = LogisticRegression(max_iter=5000).fit(codes, y[labelled].long().numpy())
    acc = float((logistic.predict(latents(vae, test.X)["z"][0].numpy()) == test.y.long().numpy()).mean())
    print(f"| logistic regression on a plain VAE's latent means | {int(labelled.sum())} (+ all images for the VAE) "
          f"| {acc:.3f} | | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
