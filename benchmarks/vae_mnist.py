"""The VAE on MNIST: the Pyro tutorial's net (latent 50, 400 hidden, Bernoulli), test ELBO and importance-sampled
log p(x) per image, the IWAE-trained model against the ELBO-trained one, and out-of-domain detection by log p(x).

Data: the official MNIST test images (``shared/data/mnist-t10k``) split 8,000 train / 2,000 test with a fixed
seed (:func:`pyro_bdl.data.images.mnist_split`); the Pyro tutorial's -101 nats test ELBO is after training on the
60k training images, so the numbers are not directly comparable.  Out of domain: the test digits against
uniform noise images, the test digits rotated by 90 degrees, and inverted (1 - pixel); the score is -log p(x)
(IS with ``--ood-samples`` draws) for the VAE, and for contrast the reconstruction error (binary cross-entropy)
of a deterministic autoencoder with the same encoder and decoder trained for as many epochs.

    python benchmarks/vae_mnist.py                     # the full run (minutes; one thread)
    python benchmarks/vae_mnist.py --quick             # the embedded 8x8 digits, tiny nets: a smoke run
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def ood_sets(test: torch.Tensor, seed: int = 0) -> dict:
    """Out-of-domain images made from the test images (n, side * side): noise, rotated, inverted."""
    n, D = test.shape
    side = int(round(D ** 0.5))
    rng = torch.Generator().manual_seed(seed)
    return {"noise": torch.rand(n, D, generator=rng),
            "rotated": torch.rot90(test.reshape(n, side, side), 1, (1, 2)).reshape(n, D).contiguous(),
            "inverted": 1.0 - test}


def train_autoencoder(X: torch.Tensor, latent: int, hidden: int, epochs: int, batch: int, seed: int = 0):
    """A deterministic autoencoder with the VAE's encoder and decoder shapes (softplus MLPs), trained on the
    binary cross-entropy; returns the per-image reconstruction error function."""
    torch.manual_seed(seed)
    D = X.shape[1]
    enc = torch.nn.Sequential(torch.nn.Linear(D, hidden), torch.nn.Softplus(), torch.nn.Linear(hidden, latent))
    dec = torch.nn.Sequential(torch.nn.Linear(latent, hidden), torch.nn.Softplus(), torch.nn.Linear(hidden, D))
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)
    for _ in range(epochs):
        for idx in torch.randperm(len(X)).split(batch):
            loss = F.binary_cross_entropy_with_logits(dec(enc(X[idx])), X[idx], reduction="sum")
            opt.zero_grad()
            loss.backward()
            opt.step()

    @torch.no_grad()
    def error(images):
        return F.binary_cross_entropy_with_logits(dec(enc(images)), images, reduction="none").sum(-1)

    return error


def auroc(inside: torch.Tensor, outside: torch.Tensor) -> float:
    """AUROC of a score that should be higher outside the domain."""
    from sklearn.metrics import roc_auc_score

    scores = torch.cat([inside, outside]).double().numpy()
    return float(roc_auc_score(np.r_[np.zeros(len(inside)), np.ones(len(outside))], scores))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(MNIST), help="folder with t10k-images-idx3-ubyte.gz")
    parser.add_argument("--quick", action="store_true", help="the embedded digits, tiny nets, 3 epochs")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--patience", type=int, default=10)
    parser.add_argument("--latent", type=int, default=50)
    parser.add_argument("--hidden", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--is-samples", type=int, default=1000, help="K for the test log p(x)")
    parser.add_argument("--iwae-particles", type=int, default=5, help="K of the IWAE training bound")
    parser.add_argument("--ood-samples", type=int, default=100, help="K for the out-of-domain scores")
    parser.add_argument("--ood-rows", type=int, default=1000, help="images per out-of-domain comparison")
    parser.add_argument("--skip-iwae", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)

    import pyro_bdl
    from pyro_bdl.data.embedded import split_dataset
    from pyro_bdl.data.images import mnist_split
    from pyro_bdl.posterior.amortised import estimate_rows

    if args.quick:
        train, test = split_dataset(pyro_bdl.load("digits-01"), 0.2, seed=args.seed)
        args.latent, args.hidden, args.epochs, args.is_samples, args.ood_samples, args.ood_rows = 2, 16, 3, 20, 10, 100
        what = "digits-01 (quick)"
    else:
        train, test = mnist_split(args.data, seed=args.seed)
        what = "MNIST t10k split 8000 / 2000 (seed 0)"
    print(f"data: {what}; train {len(train)}, test {len(test)}; net {train.X.shape[1]}-{args.hidden}-{args.latent}, "
          f"Bernoulli; batch {args.batch_size}, lr {args.lr}, up to {args.epochs} epochs (patience {args.patience})")
    options = {"latent_dim": args.latent, "hidden": (args.hidden,), "likelihood": "bernoulli"}
    common = dict(inference="svi-amortised", options=options, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                  patience=args.patience, is_samples=args.is_samples, seed=args.seed, progress=False)
    runs = {"elbo": {}, **({} if args.skip_iwae else {f"iwae (K={args.iwae_particles})": {
        "elbo": "iwae", "particles": args.iwae_particles}})}
    fits = {}
    print("| training | epochs run | test ELBO | test IS log p(x) (K) | gap | rows with IS > ELBO | seconds |")
    print("|---|---|---|---|---|---|---|")
    for label, settings in runs.items():
        start = time.perf_counter()
        fit = fits[label] = pyro_bdl.fit("vae", train, **common, **settings)
        est = estimate_rows(fit, test, args.is_samples)
        print(f"| {label} | {fit.info.epochs_run} | {float(est.elbo.mean()):.2f} | {float(est.log_px.mean()):.2f} "
              f"+- {float(est.log_px.std() / len(est.log_px) ** 0.5):.2f} ({args.is_samples}) | "
              f"{float((est.log_px - est.elbo).mean()):.2f} | {float((est.log_px > est.elbo).double().mean()):.3f} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)

    fit = fits["elbo"]
    rows = test.X[: args.ood_rows]
    error = train_autoencoder(train.X, args.latent, args.hidden, fit.info.epochs_run, args.batch_size, args.seed)
    inside_vae = -estimate_rows(fit, rows, args.ood_samples).log_px
    inside_ae = error(rows)
    print(f"\nOut of domain ({len(rows)} test digits against {len(rows)} images of each kind; AUROC, 1 = perfectly "
          f"separated; VAE: -log p(x), IS with K={args.ood_samples}; autoencoder: reconstruction error):")
    print("| out of domain | VAE -log p(x) | autoencoder error |")
    print("|---|---|---|")
    for kind, images in ood_sets(rows, args.seed).items():
        vae_score = auroc(inside_vae, -estimate_rows(fit, images, args.ood_samples).log_px)
        ae_score = auroc(inside_ae, error(images))
        print(f"| {kind} | {vae_score:.3f} | {ae_score:.3f} |", flush=True)


if __name__ == "__main__":
    main()
