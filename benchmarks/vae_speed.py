"""One training epoch of the zoo's VAE (``svi-amortised``) against a hand-written PyTorch VAE: the same MLP
(D-400-2x50 encoder, 50-400-D decoder, softplus), Bernoulli likelihood, data, batch size and Adam at 1e-3.

The two are timed in turns (interleaved, so that load from other jobs hits both alike) and the median of the
repeats is compared: ``ratio zoo/hand = ...`` (target <= 1.1), and the same with the compiled Trace_ELBO
(``--set jit=true``, the default; each timed epoch compiles the loss afresh, so on tiny data, ``--quick``, the
compiled epoch is mostly compilation).  The zoo's epoch is its runner
(:func:`pyro_bdl.inference.amortised.run_svi_amortised` with ``epochs=1``, no validation): a minibatch is
subsampled by the model's plate, the loss is Pyro's Trace_ELBO; the hand-written epoch runs a permutation
of the rows through ``F.binary_cross_entropy_with_logits`` plus the analytic KL.

    python benchmarks/vae_speed.py                        # MNIST 8,000 training images (shared/data)
    python benchmarks/vae_speed.py --quick                # random images, small: a smoke run
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def hand_epoch(X: torch.Tensor, enc, dec, opt, batch: int, latent: int) -> float:
    """One pass over a permutation of X: the negative ELBO summed over the data, by minibatches (scaled n / B)."""
    n = len(X)
    total = 0.0
    for idx in torch.randperm(n).split(batch):
        x = X[idx]
        h = enc(x)
        loc, scale = h[:, :latent], F.softplus(h[:, latent:]) + 1e-4
        z = loc + scale * torch.randn_like(loc)
        nll = F.binary_cross_entropy_with_logits(dec(z), x, reduction="sum")
        kl = 0.5 * (loc**2 + scale**2 - 1).sum() - scale.log().sum()
        loss = (nll + kl) * (n / len(idx))
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += float(loss.detach())
    return total


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(MNIST), help="folder with t10k-images-idx3-ubyte.gz")
    parser.add_argument("--quick", action="store_true", help="random 16x16 images, 512 rows, small nets")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    import pyro

    import pyro_bdl
    from pyro_bdl.data.images import mnist_split
    from pyro_bdl.inference.amortised import run_svi_amortised

    if args.quick:
        X, latent, hidden, what = torch.rand(512, 256), 8, 32, "random 512 x 16x16"
    else:
        X, latent, hidden, what = mnist_split(args.data)[0].X, 50, 400, "MNIST t10k, 8000 training images"
    spec = pyro_bdl.get_model("vae")
    options = {"latent_dim": latent, "hidden": (hidden,), "data_dim": X.shape[1]}
    model = spec.bind(options)
    guide = spec.inference.guides["encoder"](model)

    def zoo(jit: bool) -> float:
        pyro.clear_param_store()
        start = time.perf_counter()
        run_svi_amortised(model, {"x": X}, guide=guide, progress=False, elbo="trace", particles=1, epochs=1,
                          batch_size=args.batch_size, lr=1e-3, validation=0.0, patience=1, is_samples=1,
                          grad_clamp=math.inf, lr_hold=0.5, jit=jit)
        return time.perf_counter() - start

    def hand() -> float:
        D = X.shape[1]
        enc = torch.nn.Sequential(torch.nn.Linear(D, hidden), torch.nn.Softplus(), torch.nn.Linear(hidden, 2 * latent))
        dec = torch.nn.Sequential(torch.nn.Linear(latent, hidden), torch.nn.Softplus(), torch.nn.Linear(hidden, D))
        opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)
        start = time.perf_counter()
        hand_epoch(X, enc, dec, opt, args.batch_size, latent)
        return time.perf_counter() - start

    zoo(False), zoo(True), hand()  # warm-up: first calls build the networks and Pyro's traces
    runs = {"zoo": lambda: zoo(False), "zoo jit": lambda: zoo(True), "hand": hand}
    times = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            times[name].append(run())
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"data: {what}; batch {args.batch_size}; net D-{hidden}-{latent}; torch threads {torch.get_num_threads()}")
    for name, t in times.items():
        print(f"{name:<8} epoch: median {median[name]:.3f} s over {args.repeats} ({', '.join(f'{s:.3f}' for s in t)})")
    print(f"ratio zoo/hand = {median['zoo'] / median['hand']:.3f} (target <= 1.1; default settings, eager Trace_ELBO)")
    print(f"ratio zoo jit/hand = {median['zoo jit'] / median['hand']:.3f} (setting jit=true: the compiled Trace_ELBO)")


if __name__ == "__main__":
    main()
