r"""Bayes by Backprop: the zoo's SVI step against a hand-written PyTorch loop on the same net and data.

Run on demand (the test suite smoke-tests it with ``--quick`` and never asserts on times)::

    .venv/bin/python benchmarks/bbb_step.py [--quick] [--threads N] [--repeats N] [--seeds 0 1 2 3 4] [--skip-step-timing]

1. **Correctness.**  At identical parameters and identical draws (the same seed replays the guide's
   ``eps`` and the plate's subsample indices), the zoo's default ELBOs (compiled ``Trace_ELBO`` and
   ``TraceMeanField_ELBO``) and the hand-written loss (with the model's default prior scale) agree to float32 rounding, loss and gradients;
   the hand-written loss keeps every constant, so a dropped ``log sqrt(2 pi)`` is a mismatch.  The
   closed-form KL must match the mean of single-draw ``log q - log p`` within 4 standard errors.

2. **One optimisation step** (loss, backward, optimiser step, the float loss returned) on

   * ``regressor``: ``bnn-regressor`` 1-50-50-1 (ReLU), ``noise=0.1`` fixed, n = 1000, full batch;
   * ``classifier``: ``bnn-classifier`` 784-400-400-10 on 8192 synthetic MNIST-shaped points,
     minibatch B = 1024 drawn by the model's own ``plate("data", subsample_size=1024)``.

   Zoo paths are built as :func:`pyro_bdl.fit` builds them (the model's default settings for the
   method, :func:`~pyro_bdl.inference.svi.make_elbo`, ``bbb_guide``, ``make_svi``) and stepped as
   :func:`~pyro_bdl.inference.svi.optimise` steps them (argument validation off after the first
   step).  ``eager`` rows are the path before compilation (``Trace_ELBO`` / ``TraceMeanField_ELBO``
   with Pyro's default validation).  The reference is a plain PyTorch loop: mu, rho leaves,
   w = mu + softplus(rho) eps, the NLL scaled by N / B plus the closed-form KL, ``torch.optim.Adam``.
   The ``floor`` row is the same net as a point estimate (w = mu: the same matrix products, no draw,
   no KL, Adam on mu alone), eager like the hand-written loop: what a BBB step costs beyond the matrix
   products is the distance to it (measured: 0.45-0.50 of the hand step for the regressor, 0.75-0.82
   for the classifier, five runs with ``--threads 1 --repeats 30``).
   All paths are timed interleaved (A, B, C, A, B, C, ...) in one process, so drift in the machine's
   speed hits them alike; the table gives the median over rounds of ms/step, the interquartile
   range, and **ratio = path / hand** from the same rounds.

3. **Time to a target held-out log predictive density** (regressor; 1000 training and 500 test
   points): the zoo's default ``svi`` path (compiled; Adam at lr 0.02, held for half the steps, then
   decaying, and the networks' ``grad_clamp``, none) against the hand-written loop (Adam, lr 0.02),
   and, as a diagnostic, the hand-written loop with the zoo's rate schedule, with and without Pyro's default
   elementwise gradient clamp (``clip_norm=10``).  Every ``EVAL_EVERY`` steps the LPD is estimated from ``EVAL_DRAWS`` draws of q
   (evaluation time excluded; the best possible is about 0.88).  The paths train interleaved.  At
   the end, each path's negative ELBO (the objective all of them minimise: expected NLL from 50 draws
   plus the closed-form KL) says whether a path that is slow to the target also optimises worse.
   A first crossing of a noisy curve from one seed is itself noisy (between seeds, and between two
   paths with the same loss); ``--seeds 0 1 2 3 4`` runs one race per seed (its data, start and draws)
   and prints the median of the per-seed ratios.  ``--skip-step-timing`` runs only the races.

Ratios are the result; absolute milliseconds depend on the machine and its load (printed).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time

import pyro
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.optim.clipped_adam import ClippedAdam

from pyro_bdl.inference import compiled_elbo as jit
from pyro_bdl.inference import get_method
from pyro_bdl.inference.local_reparam import LocalReparam
from pyro_bdl.inference.svi import FINAL_LR_FRACTION, make_elbo, make_svi
from pyro_bdl.models.networks import bbb_guide
from pyro_bdl.registry import get_model

LOSS_RTOL = 1e-4  # loss agreement at identical draws (float32 sums in different orders)
GRAD_RTOL = 1e-3  # relative L2 error of the gradients at identical draws
MC_DRAWS = 200  # draws for the Monte Carlo check of the closed-form KL
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

REGRESSOR = {"label": "regressor 1-50-50-1, n=1000, full batch", "model": "bnn-regressor",
             "options": {"hidden": (50, 50), "noise": 0.1}, "task": "regression", "n": 1000, "d": 1,
             "batch_size": None}
CLASSIFIER = {"label": "classifier 784-400-400-10, N=8192, B=1024 (plate subsampling)", "model": "bnn-classifier",
              "options": {"hidden": (400, 400), "num_classes": 10}, "task": "classification", "n": 8192, "d": 784,
              "batch_size": 1024}
#: A small classifier for the correctness check of the minibatch path.
SMALL_CLASSIFIER = {**CLASSIFIER, "label": "classifier 784-32-10, N=512, B=64 (plate subsampling)",
                    "options": {"hidden": (32,), "num_classes": 10}, "n": 512, "batch_size": 64}
TTT_LR, EVAL_EVERY, EVAL_DRAWS = 0.02, 50, 20
ELBO_NAMES = {"trace": "Trace_ELBO", "meanfield": "TraceMeanField_ELBO"}
METHOD_OF = {"trace": "svi", "meanfield": "svi-meanfield"}


# --------------------------------------------------------------------------- data


def regression_data(n: int, seed: int = 0, noise: float = 0.1):
    """x ~ U(-2, 2), y = sin(2x) + 0.3x + N(0, noise^2): roughly standardised already."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 4.0 - 2.0
    return x, torch.sin(2.0 * x[:, 0]) + 0.3 * x[:, 0] + noise * torch.randn(n, generator=g)


def make_data(config: dict, seed: int = 0):
    if config["task"] == "regression":
        return regression_data(config["n"], seed, config["options"]["noise"])
    g = torch.Generator().manual_seed(seed)  # standard-normal 'pixels' (as if standardised), uniform labels
    return (torch.randn(config["n"], config["d"], generator=g),
            torch.randint(0, config["options"]["num_classes"], (config["n"],), generator=g))


def sizes_of(config: dict) -> list[int]:
    out = 1 if config["task"] == "regression" else config["options"]["num_classes"]
    return [config["d"], *config["options"]["hidden"], out]


def hand_bbb(config: dict, **kwargs) -> "HandBBB":
    """The hand-written loop on ``config``'s net, with the zoo model's prior scale (its default option)."""
    prior_scale = get_model(config["model"]).resolve_options(config["options"])["prior_scale"]
    return HandBBB(sizes_of(config), task=config["task"], noise=config["options"].get("noise"),
                   prior_scale=prior_scale, **kwargs)


# --------------------------------------------------------------------------- the zoo path


def zoo_svi(config: dict, kind: str = "trace", *, eager: bool = False, lr: float = 1e-3, steps: int = 1000, **settings):
    """(model, guide, svi, settings) as ``pyro_bdl.fit(config's model, inference=METHOD_OF[kind])`` builds
    them: the method's defaults, then the model's, then ``settings``; ``eager`` turns compilation off.
    Clears the param store first."""
    pyro.clear_param_store()
    spec = get_model(config["model"])
    method = METHOD_OF[kind]
    s = {**get_method(method).defaults, **spec.inference.method_defaults.get(method, {}), **settings}
    if eager:
        s["jit"] = False
    model = spec.bind(config["options"])
    guide = bbb_guide(model)
    elbo = make_elbo(kind, particles=s["particles"], jit=s["jit"], vectorize=s["vectorize"])
    pair = LocalReparam().wrap(model, guide) if s["local_reparam"] else (model, guide)
    return model, guide, make_svi(*pair, elbo, lr=lr, steps=steps, grad_clamp=s["grad_clamp"], lr_hold=s["lr_hold"]), s


def _network_svi_settings() -> dict:
    """The settings ``pyro_bdl.fit`` resolves for the regressor's ``svi``: the method's, then the model's."""
    return {**get_method("svi").defaults, **get_model(REGRESSOR["model"]).inference.method_defaults.get("svi", {})}


def zoo_params() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The bbb guide's unconstrained (loc, rho) leaves, in layer order (weight, bias, weight, ...)."""
    store = pyro.get_param_store()
    sites = sorted({k[len("bbb."):].rsplit(".", 1)[0] for k in store.keys() if k.startswith("bbb.")},
                   key=lambda s: (int(s.split(".")[0][len("layer"):]), s.endswith("bias")))
    return [(store.get_param(f"bbb.{s}.loc").unconstrained(), store.get_param(f"bbb.{s}.rho").unconstrained())
            for s in sites]


# --------------------------------------------------------------------------- the hand-written loop


class HandBBB:
    """Plain PyTorch Bayes by Backprop with the zoo's normal prior (sd s / sqrt(fan_in) for weights, s
    for biases) and initialisation (mu at a prior draw, sigma = ``init_scale``).  ``kl="analytic"``
    adds the closed-form KL, ``kl="sampled"`` adds log q(w) - log p(w) at the draw (Trace_ELBO's)."""

    def __init__(self, sizes, *, task: str, noise: float | None = None, prior_scale: float = 1.0,
                 init_scale: float = 1e-2, lr: float = 1e-3, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.task, self.noise = task, noise
        self.mus, self.rhos, self.prior_sd = [], [], []
        rho0 = init_scale + math.log(-math.expm1(-init_scale))  # softplus^{-1}
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            for shape, sd in (((fan_out, fan_in), prior_scale / math.sqrt(fan_in)), ((fan_out,), prior_scale)):
                self.mus.append((torch.randn(shape, generator=g) * sd).requires_grad_())
                self.rhos.append(torch.full(shape, rho0).requires_grad_())
                self.prior_sd.append(sd)
        self.optim = torch.optim.Adam(self.mus + self.rhos, lr=lr)

    @staticmethod
    def forward(h: torch.Tensor, ws) -> torch.Tensor:
        layers = len(ws) // 2
        for layer in range(layers):
            h = torch.addmm(ws[2 * layer + 1], h, ws[2 * layer].t())
            if layer < layers - 1:
                h = torch.relu(h)
        return h

    def nll(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Summed negative log-likelihood of the batch, all constants included."""
        if self.task == "regression":
            z = (y - out[:, 0]) / self.noise
            return 0.5 * (z * z).sum() + y.shape[0] * (math.log(self.noise) + LOG_SQRT_2PI)
        return F.cross_entropy(out, y, reduction="sum")

    def kl(self, sigmas, eps=None, ws=None, kind: str = "analytic") -> torch.Tensor:
        total = 0.0
        for mu, s, sp, e, w in zip(self.mus, sigmas, self.prior_sd, eps or self.mus, ws or self.mus):
            if kind == "analytic":  # KL(N(mu, s^2) || N(0, sp^2))
                total = total + (math.log(sp) - torch.log(s) + (s * s + mu * mu) / (2 * sp * sp) - 0.5).sum()
            else:  # log q(w) - log p(w); the log sqrt(2 pi) terms cancel
                total = total + (-0.5 * e * e - torch.log(s) + 0.5 * (w / sp) ** 2 + math.log(sp)).sum()
        return total

    def loss(self, X, y, N: int, eps=None, kl: str = "analytic") -> torch.Tensor:
        """Negative ELBO of a batch (X, y) out of N points: NLL * N / B + KL."""
        sigmas = [F.softplus(r) for r in self.rhos]
        eps = eps if eps is not None else [torch.randn_like(m) for m in self.mus]
        ws = [m + s * e for m, s, e in zip(self.mus, sigmas, eps)]
        return self.nll(self.forward(X, ws), y) * (N / X.shape[0]) + self.kl(sigmas, eps, ws, kl)

    def point_step(self, X, y, batch_size=None) -> float:
        """The floor row: the same net as a point estimate (w = mu, no noise draw, no KL), the same matrix
        products forward and backward, Adam on mu alone."""
        N = X.shape[0]
        X, y = self._batch(X, y, batch_size)
        if not hasattr(self, "point_optim"):
            self.point_optim = torch.optim.Adam(self.mus, lr=self.optim.defaults["lr"])
        self.point_optim.zero_grad(set_to_none=True)
        loss = self.nll(self.forward(X, self.mus), y) * (N / X.shape[0])
        loss.backward()
        self.point_optim.step()
        return loss.item()

    @staticmethod
    def _batch(X, y, batch_size=None):
        """The whole data, or ``batch_size`` rows drawn as ``pyro.plate(subsample_size=...)`` draws them."""
        if batch_size is None:
            return X, y
        idx = torch.randperm(X.shape[0])[:batch_size]
        return X[idx], y[idx]

    def step(self, X, y, batch_size=None, kl: str = "analytic") -> float:
        N = X.shape[0]
        X, y = self._batch(X, y, batch_size)
        self.optim.zero_grad(set_to_none=True)
        loss = self.loss(X, y, N, kl=kl)
        loss.backward()
        self.optim.step()
        return loss.item()


# --------------------------------------------------------------------------- correctness


def check_losses(config: dict = REGRESSOR, seed: int = 0) -> dict:
    """The zoo's default (compiled) ELBOs and the hand-written loss at identical parameters and draws.

    Returns, for ``trace`` (vs hand sampled KL) and ``meanfield`` (vs hand analytic KL): ``zoo``,
    ``hand``, ``loss_rel``, ``grad_rel``; and ``kl_analytic``, ``kl_mc_mean``, ``kl_mc_se``.
    """
    X, y = make_data(config, seed)
    data = {"X": X, "y": y, "batch_size": config["batch_size"]}
    out = {}
    for kind, hand_kl in (("trace", "sampled"), ("meanfield", "analytic")):
        pyro.set_rng_seed(seed)
        model, guide, svi, _ = zoo_svi(config, kind)
        svi.loss_and_grads(model, guide, **data)  # create the parameters (and compile)
        pairs = zoo_params()
        with torch.no_grad():  # spread sigma out, so the draws matter
            g = torch.Generator().manual_seed(seed + 1)
            for _, rho in pairs:
                rho.copy_(torch.log(torch.expm1(0.02 + 0.2 * torch.rand(rho.shape, generator=g))))
        for t in (t for pair in pairs for t in pair):
            t.grad = None
        hand = hand_bbb(config)
        with torch.no_grad():
            for mu, rho, (loc, r) in zip(hand.mus, hand.rhos, pairs):
                mu.copy_(loc)
                rho.copy_(r)

        pyro.set_rng_seed(seed + 2)
        zoo_loss = svi.loss_and_grads(model, guide, **data)
        zoo_grads = [t.grad.detach().clone() for pair in pairs for t in pair]
        pyro.set_rng_seed(seed + 2)  # the same seed replays the same draws: read eps and the subsample
        with torch.no_grad(), poutine.block():
            gtr = poutine.trace(guide).get_trace(**data)
            mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(**data)
        names = [f"layer{i // 2}.{'weight' if i % 2 == 0 else 'bias'}" for i in range(len(pairs))]
        eps = [(gtr.nodes[n]["value"] - loc) / F.softplus(rho) for n, (loc, rho) in zip(names, pairs)]
        idx = mtr.nodes["data"]["value"]
        loss = hand.loss(X[idx], y[idx], X.shape[0], eps=eps, kl=hand_kl)
        loss.backward()
        hand_grads = [t.grad for pair in zip(hand.mus, hand.rhos) for t in pair]
        num = math.sqrt(sum(float(((a - b) ** 2).sum()) for a, b in zip(zoo_grads, hand_grads)))
        den = math.sqrt(sum(float((b ** 2).sum()) for b in hand_grads))
        out[kind] = {"zoo": float(zoo_loss), "hand": loss.item(),
                     "loss_rel": abs(float(zoo_loss) - loss.item()) / abs(loss.item()), "grad_rel": num / den}

    with torch.no_grad():  # E_q[log q - log p] = KL
        sigmas = [F.softplus(r) for r in hand.rhos]
        g = torch.Generator().manual_seed(seed + 3)
        draws = []
        for _ in range(MC_DRAWS):
            e = [torch.randn(m.shape, generator=g) for m in hand.mus]
            draws.append(float(hand.kl(sigmas, e, [m + s * z for m, s, z in zip(hand.mus, sigmas, e)], "sampled")))
        out["kl_analytic"] = float(hand.kl(sigmas))
    out["kl_mc_mean"] = statistics.fmean(draws)
    out["kl_mc_se"] = statistics.stdev(draws) / math.sqrt(len(draws))
    pyro.clear_param_store()
    return out


def print_correctness(config: dict, res: dict) -> bool:
    ok = True
    print(f"  {config['label']}")
    for kind, label in (("trace", "compiled Trace_ELBO          vs hand sampled-KL "),
                        ("meanfield", "compiled TraceMeanField_ELBO vs hand analytic-KL")):
        r = res[kind]
        good = r["loss_rel"] < LOSS_RTOL and r["grad_rel"] < GRAD_RTOL
        ok &= good
        print(f"    {label}: zoo {r['zoo']:.6e} hand {r['hand']:.6e}  loss rel.err {r['loss_rel']:.1e} "
              f"(tol {LOSS_RTOL:.0e})  grad rel.err {r['grad_rel']:.1e} (tol {GRAD_RTOL:.0e})  "
              f"{'OK' if good else 'MISMATCH'}")
    z = (res["kl_mc_mean"] - res["kl_analytic"]) / res["kl_mc_se"]
    ok &= abs(z) < 4
    print(f"    closed-form KL {res['kl_analytic']:.4f} vs mean of {MC_DRAWS} single-draw KLs "
          f"{res['kl_mc_mean']:.4f} +- {res['kl_mc_se']:.4f} (z = {z:+.2f})  {'OK' if abs(z) < 4 else 'MISMATCH'}")
    return ok


# --------------------------------------------------------------------------- per-step timing


def _zoo_path(config, data, kind, *, eager=False, **settings):
    """A zoo path's step function and param-store state (each path gets its own store, swapped in
    outside the timed region). Stepped as ``optimise`` steps: validated first, unchecked after."""
    _, _, svi, s = zoo_svi(config, kind, eager=eager, **settings)
    svi.step(**data)  # first step: parameters created, graph compiled
    unchecked = contextlib.nullcontext if eager else (lambda: pyro.validation_enabled(False))

    def step():
        with unchecked():
            return svi.step(**data)
    return step, pyro.get_param_store().get_state()


def time_config(config: dict, repeats: int, inner: int, warmup: int, lrt: bool = True, seed: int = 0) -> list[dict]:
    """Interleaved timing of one configuration; returns one row per path."""
    X, y = make_data(config, seed)
    bs = config["batch_size"]
    data = {"X": X, "y": y, "batch_size": bs}
    paths = {}
    for kind in ("trace", "meanfield"):
        pyro.set_rng_seed(seed)
        paths[f"zoo {METHOD_OF[kind]} default (compiled)"] = _zoo_path(config, data, kind)
    for kind in ("trace", "meanfield"):
        paths[f"zoo {METHOD_OF[kind]} eager (before)"] = _zoo_path(config, data, kind, eager=True)
    if lrt:
        paths["zoo svi-meanfield + local_reparam"] = _zoo_path(config, data, "meanfield", local_reparam=True)
    hand_a, hand_s = hand_bbb(config, seed=seed), hand_bbb(config, seed=seed)
    paths["hand BBB, analytic KL (reference)"] = (lambda: hand_a.step(X, y, bs, "analytic"), None)
    paths["hand BBB, sampled KL"] = (lambda: hand_s.step(X, y, bs, "sampled"), None)
    hand_p = hand_bbb(config, seed=seed)
    paths["hand point net (floor: no draw, no KL)"] = (lambda: hand_p.point_step(X, y, bs), None)

    def run(name, steps):
        fn, state = paths[name]
        if state is not None:
            pyro.get_param_store().set_state(state)
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        return (time.perf_counter() - start) / steps * 1e3

    for name in paths:
        run(name, warmup)
    times = {name: [] for name in paths}
    for _ in range(repeats):
        for name in paths:
            times[name].append(run(name, inner))
    pyro.clear_param_store()
    ref = statistics.median(times["hand BBB, analytic KL (reference)"])
    rows = []
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [ts[0]] * 3
        rows.append({"path": name, "ms": statistics.median(ts), "iqr": q[2] - q[0],
                     "ratio": statistics.median(ts) / ref})
    return rows


def print_rows(config: dict, rows: list[dict], repeats: int, inner: int) -> None:
    print(f"\n{config['label']}  [{repeats} interleaved rounds x {inner} step(s)]")
    print(f"  {'path':<40} {'median ms/step':>14} {'iqr ms':>8} {'ratio to hand':>14}")
    for r in rows:
        print(f"  {r['path']:<40} {r['ms']:14.3f} {r['iqr']:8.3f} {r['ratio']:14.2f}")
    for r in rows:
        if r["path"].startswith("zoo"):
            print(f"  ratio zoo/hand [{config['model']}, {r['path'][4:]}] = {r['ratio']:.2f}")


# --------------------------------------------------------------------------- time to target


@torch.no_grad()
def test_lpd(pairs, Xte, yte, noise: float, draws: int = EVAL_DRAWS, seed: int = 123) -> float:
    """Held-out log predictive density per point, log-mean-exp over ``draws`` weight draws of q."""
    g = torch.Generator().manual_seed(seed)
    logps = []
    for _ in range(draws):
        ws = [loc + F.softplus(rho) * torch.randn(loc.shape, generator=g) for loc, rho in pairs]
        z = (yte - HandBBB.forward(Xte, ws)[:, 0]) / noise
        logps.append(-0.5 * z * z - math.log(noise) - LOG_SQRT_2PI)
    return float((torch.logsumexp(torch.stack(logps), 0) - math.log(draws)).mean())


def negative_elbo(pairs, X, y, noise: float, prior_sd, draws: int = 50, seed: int = 7) -> float:
    """The regression objective every path minimises, estimated the same way for all: the expected
    NLL of the training data over ``draws`` draws of q plus the closed-form KL(q || p)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sigmas = [F.softplus(rho) for _, rho in pairs]
        kl = sum(float((math.log(sp) - torch.log(s) + (s * s + m * m) / (2 * sp * sp) - 0.5).sum())
                 for (m, _), s, sp in zip(pairs, sigmas, prior_sd))
        nll = 0.0
        for _ in range(draws):
            ws = [m + s * torch.randn(m.shape, generator=g) for (m, _), s in zip(pairs, sigmas)]
            z = (y - HandBBB.forward(X, ws)[:, 0]) / noise
            nll += float(0.5 * (z * z).sum() + y.shape[0] * (math.log(noise) + LOG_SQRT_2PI)) / draws
    return nll + kl


def zoo_schedule_adam(params, max_steps: int, clip_norm: float) -> ClippedAdam:
    """Pyro's ClippedAdam (a torch optimiser) with the rate schedule of the zoo's networks (``make_svi``
    with the regressor's ``lr_hold``): ``TTT_LR`` held for that fraction of ``max_steps``, then decaying
    to ``FINAL_LR_FRACTION`` of it."""
    hold = int(_network_svi_settings()["lr_hold"] * max_steps)
    optim = ClippedAdam(params, lr=TTT_LR, clip_norm=clip_norm, lrd=1.0)
    lrd, step, count = FINAL_LR_FRACTION ** (1.0 / max(max_steps - hold, 1)), optim.step, [0]

    def scheduled_step(*args, **kwargs):
        count[0] += 1
        if count[0] > hold:  # ClippedAdam multiplies the rate by lrd at the start of each step
            for group in optim.param_groups:
                group["lrd"] = lrd
        return step(*args, **kwargs)

    optim.step = scheduled_step
    return optim


class _Trainer:
    """One time-to-target path on the regression problem: "zoo", "hand", "hand+zoo-optim" or "...-noclip"."""

    def __init__(self, path: str, Xtr, ytr, max_steps: int, seed: int = 0):
        self.path, self.steps, self.seconds, self.chunk_ms = path, 0, 0.0, []
        self.best, self.last, self.finite, self.done = -math.inf, float("nan"), True, False
        start = time.perf_counter()
        if path == "zoo":  # the only path that uses Pyro's global param store
            self._step, _ = _zoo_path(REGRESSOR, {"X": Xtr, "y": ytr}, "trace", lr=TTT_LR, steps=max_steps)
            self.steps = 1  # _zoo_path took the first step (the compilation), counted in the clock
        else:
            hand = hand_bbb(REGRESSOR, lr=TTT_LR, seed=seed)
            if path.startswith("hand+zoo-optim"):  # the zoo's rate schedule, with Pyro's default clamp or none
                hand.optim = zoo_schedule_adam(hand.mus + hand.rhos, max_steps, 1e30 if "noclip" in path else 10.0)
            self.hand = hand
            self._step = lambda: hand.step(Xtr, ytr)
        self.seconds = time.perf_counter() - start

    def advance(self, k: int) -> None:
        if k <= 0:  # at the step cap already (e.g. --max-steps 1: the first step was taken when set up)
            return
        start = time.perf_counter()
        for _ in range(k):
            self.steps += 1
            if not math.isfinite(self._step()):
                self.finite = False
                break
        elapsed = time.perf_counter() - start
        self.seconds += elapsed
        self.chunk_ms.append(elapsed / k * 1e3)

    def pairs(self):
        return zoo_params() if self.path == "zoo" else list(zip(self.hand.mus, self.hand.rhos))


def time_to_target(targets, max_steps: int, paths=("zoo", "hand", "hand+zoo-optim", "hand+zoo-optim-noclip"),
                   seed: int = 0) -> dict:
    """Train the paths interleaved, ``EVAL_EVERY`` steps each in turn; per path and target, the first
    evaluation at which the held-out LPD exceeds the target: (step, training seconds), or None."""
    noise = REGRESSOR["options"]["noise"]
    Xtr, ytr = regression_data(REGRESSOR["n"], seed, noise)
    Xte, yte = regression_data(500, seed + 1000, noise)
    pyro.set_rng_seed(seed)
    trainers = [_Trainer(p, Xtr, ytr, max_steps, seed) for p in paths]
    reached = {p: {t: None for t in targets} for p in paths}
    while any(tr.finite and not tr.done for tr in trainers):
        for tr in (tr for tr in trainers if tr.finite and not tr.done):
            tr.advance(min(EVAL_EVERY - tr.steps % EVAL_EVERY, max_steps - tr.steps))
            if tr.finite:
                tr.last = test_lpd(tr.pairs(), Xte, yte, noise)
                tr.best = max(tr.best, tr.last)
                for t in targets:
                    if reached[tr.path][t] is None and tr.last > t:
                        reached[tr.path][t] = (tr.steps, tr.seconds)
            tr.done = tr.steps >= max_steps or all(v is not None for v in reached[tr.path].values())
    prior_sd = hand_bbb(REGRESSOR).prior_sd
    final = {tr.path: negative_elbo(tr.pairs(), Xtr, ytr, noise, prior_sd) for tr in trainers}
    pyro.clear_param_store()
    return {tr.path: {"reached": reached[tr.path], "steps": tr.steps, "seconds": tr.seconds, "best": tr.best,
                      "last": tr.last, "median_ms": statistics.median(tr.chunk_ms) if tr.chunk_ms else math.nan,
                      "neg_elbo": final[tr.path]}
            for tr in trainers}


def print_time_to_target(targets, max_steps: int, seeds=(0,)) -> None:
    """The time-to-target table of each seed (data, initialisation and draws), then, for several seeds,
    the median over them of the per-seed ratio zoo/hand at each target."""
    ratios = {t: [] for t in targets}
    for seed in seeds:
        for t, r in _time_to_target_table(targets, max_steps, seed).items():
            ratios[t].append(r)
    if len(seeds) > 1:
        print(f"\n== time to target over seeds {', '.join(map(str, seeds))}: median of the per-seed ratios ==")
        for t, rs in ratios.items():
            got = [r for r in rs if r is not None]
            per_seed = ", ".join("n/a" if r is None else f"{r:.2f}" for r in rs)
            median = f"{statistics.median(got):.2f}" if got else "n/a"
            print(f"  ratio zoo/hand [time to lpd > {t:.2f}, median of {len(got)} seeds] = {median}  (per seed: {per_seed})")


def _time_to_target_table(targets, max_steps: int, seed: int) -> dict:
    """Print one seed's time-to-target table; return {target: ratio zoo/hand of the seconds, or None}."""
    labels = {"zoo": "zoo svi default (compiled Trace_ELBO, Adam with the zoo's rate schedule, the networks' grad_clamp)",
              "hand": "hand BBB (analytic KL, Adam)",
              "hand+zoo-optim": "diagnostic: hand BBB + ClippedAdam with the zoo's rate schedule and clip_norm 10 (Pyro's default)",
              "hand+zoo-optim-noclip": "diagnostic: the same without the gradient clamp"}
    print(f"\n== time to held-out LPD > target (regressor, seed {seed}, lr {TTT_LR}, cap {max_steps} steps, evaluated "
          f"every {EVAL_EVERY} steps from {EVAL_DRAWS} draws; best possible about 0.88) ==")
    results = time_to_target(targets, max_steps, tuple(labels), seed=seed)
    print(f"  {'lpd >':>7}" + "".join(f"  {path + ': step':>27} {'seconds':>8}" for path in labels))
    for t in targets:
        cells = "".join(f"  {v[0]:>27d} {v[1]:8.2f}" if v else f"  {'not reached':>36}"
                        for v in (results[path]["reached"][t] for path in labels))
        print(f"  {t:7.2f}" + cells)
    for path, r in results.items():
        print(f"  {path:<21} = {labels[path]}: {r['steps']} steps, {r['seconds']:.2f} s of training (median "
              f"{r['median_ms']:.2f} ms/step), best lpd {r['best']:.3f}, last {r['last']:.3f}, "
              f"final -ELBO {r['neg_elbo']:.0f}")
    ratios = {}
    for t in targets:
        z, h = results["zoo"]["reached"][t], results["hand"]["reached"][t]
        ratios[t] = z[1] / h[1] if z and h else None
        if z and h:
            print(f"  ratio zoo/hand [time to lpd > {t:.2f}] = {z[1] / h[1]:.2f}  (steps {z[0]} vs {h[0]})")
        else:
            missing = " and ".join(p for p, v in (("zoo", z), ("hand", h)) if not v)
            print(f"  ratio zoo/hand [time to lpd > {t:.2f}] = n/a ({missing} not reached in {max_steps} steps)")
    return ratios


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, help="interleaved rounds (default 30 regressor, 10 classifier; --quick 3)")
    parser.add_argument("--quick", action="store_true", help="a few rounds and a short time-to-target cap")
    parser.add_argument("--targets", type=float, nargs="+", default=[0.6, 0.7, 0.8, 0.85],
                        help="held-out LPDs per point to reach (the best possible is about 0.88)")
    parser.add_argument("--threads", type=int, help="torch threads (default: the CPUs this process may use)")
    parser.add_argument("--max-steps", type=int, help="time-to-target step cap (default 6000; --quick 300)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="time to target: one run per seed (data, start, draws) and the median ratio (default: 0)")
    parser.add_argument("--skip-step-timing", action="store_true", help="only the correctness check and time to target")
    parser.add_argument("--optimize-graph", action="store_true",
                        help="run the compiled ELBO's graph with TorchScript's optimisations (jit.OPTIMIZE_GRAPH)")
    args = parser.parse_args(argv)
    jit.OPTIMIZE_GRAPH = args.optimize_graph

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(args.threads or cpus)
    print("BBB step benchmark: pyro_bdl zoo SVI vs hand-written PyTorch Bayes by Backprop")
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, pyro {pyro.__version__}, "
          f"torch threads {torch.get_num_threads()} (cpus available {cpus}), compiled graph optimised: {jit.OPTIMIZE_GRAPH}")
    _print_load(cpus, "start")

    print("\n== correctness at identical parameters and draws ==")
    ok = print_correctness(REGRESSOR, check_losses(REGRESSOR))
    ok &= print_correctness(SMALL_CLASSIFIER, check_losses(SMALL_CLASSIFIER))

    if not args.skip_step_timing:
        print("\n== one optimisation step (loss + backward + optimiser step); ratio = path / hand analytic KL ==")
        repeats, inner = args.repeats or (3 if args.quick else 30), 5 if args.quick else 20
        print_rows(REGRESSOR, time_config(REGRESSOR, repeats, inner, warmup=inner), repeats, inner)
        repeats = args.repeats or (3 if args.quick else 10)
        print_rows(CLASSIFIER, time_config(CLASSIFIER, repeats, 1, warmup=2 if args.quick else 3), repeats, 1)

    print_time_to_target(args.targets, args.max_steps or (300 if args.quick else 6000), args.seeds)
    _print_load(cpus, "end")
    if not ok:
        print("\nCORRECTNESS CHECK FAILED")
    return 0 if ok else 1


def _print_load(cpus: int, when: str) -> None:
    if hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
        busy = "  (busy: other processes share the CPUs; absolute times are inflated)" if load > cpus - 0.5 else ""
        print(f"load average (1 min) at {when}: {load:.2f} on {cpus} cpus{busy}")


if __name__ == "__main__":
    sys.exit(main())
