"""The semi-supervised VAE (M2) while it trains: every few epochs, the test accuracy of its classifier q(y | x), the
accuracy of the model's own posterior over the label (argmax_c ELBO_c(x), :func:`models.ss_vae.class_elbos`, what
the unlabelled rows' bound pulls q(y | x) towards) and the mean entropy of q(y | x) (nats; log 10 = 2.30 is uniform).

The zoo's model and guide (``ss_vae``, ``ss_guide``) stepped by Pyro's SVI with TraceEnum_ELBO and Adam at a fixed
rate (no decay, no early stopping), so that the curve shows the objective's course, not the schedule's.  Data as in
``benchmarks/ss_vae.py``: the MNIST 8,000 / 2,000 split, 10 labels per class kept.

    python benchmarks/ss_vae_training.py --aux-weight 0.1 --epochs 30    # MNIST (minutes; one thread)
    python benchmarks/ss_vae_training.py --quick                          # the embedded digits: a smoke run
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings

import pyro
import torch
from pyro.infer import SVI, TraceEnum_ELBO
from ss_vae import MNIST, keep_labels


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(MNIST), help="folder with t10k-images-idx3-ubyte.gz")
    parser.add_argument("--quick", action="store_true", help="the embedded digits, small nets, 2 epochs")
    parser.add_argument("--aux-weight", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--every", type=int, default=5, help="epochs between two rows")
    parser.add_argument("--latent", type=int, default=50)
    parser.add_argument("--hidden", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    import pyro_bdl
    from pyro_bdl.data.embedded import split_dataset
    from pyro_bdl.data.images import mnist_split

    if args.quick:
        train, test = split_dataset(pyro_bdl.load("digits-01"), 0.2, seed=args.seed, stratify=True)
        args.latent, args.hidden, args.epochs, args.every = 4, 32, 2, 1
    else:
        train, test = mnist_split(args.data, seed=args.seed)
    y = keep_labels(train.y, 10, args.seed)
    module = sys.modules[pyro_bdl.get_model("ss-vae").model.__module__]
    C = int(train.y.max()) + 1
    kw = dict(num_classes=C, latent_dim=args.latent, hidden=(args.hidden,), aux_weight=args.aux_weight,
              batch_size=args.batch_size)
    pyro.set_rng_seed(args.seed)
    pyro.clear_param_store()
    svi = SVI(module.ss_vae, module.ss_guide, pyro.optim.Adam({"lr": args.lr}), TraceEnum_ELBO(max_plate_nesting=1))

    from pyro_bdl.nn.image_networks import classifier, registered

    steps = math.ceil(len(y) / args.batch_size)
    print(f"aux_weight {args.aux_weight:g}, lr {args.lr:g}, latent {args.latent}, hidden {args.hidden}, "
          f"{int((y >= 0).sum())} labels among {len(y)} images, {steps} steps per epoch")
    print("| epoch | training loss / row | q(y \\| x) accuracy | argmax_c ELBO_c accuracy | entropy of q(y \\| x) | "
          "seconds |")
    print("|---|---|---|---|---|---|")
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        loss = sum(svi.step(train.X, y, **kw) for _ in range(steps))
        if epoch % args.every and epoch != 1:
            continue
        net = registered("ss_vae.classifier", classifier, train.X.shape[1], C, (args.hidden,))
        with torch.no_grad():
            logits = net(test.X)
            acc = float((logits.argmax(-1) == test.y.long()).double().mean())
            entropy = float(-(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1).mean())
        own = float((module.class_elbos(test.X, **kw).argmax(-1) == test.y.long()).double().mean())
        print(f"| {epoch} | {loss / steps / len(y):.2f} | {acc:.3f} | {own:.3f} | {entropy:.3f} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
