r"""``svi-amortised``: minibatch SVI for a model that brings its own amortised guide (an encoder network).

The model's rows are split once into training and validation rows (``validation``: the fraction held out,
from the fit's seed).  Training runs :func:`~pyro_bdl.inference.svi.optimise` (the zoo's Adam, checkpoints and
resume) for ``epochs`` x ceil(n_train / ``batch_size``) steps (``epochs`` unset, the default: enough epochs for
:data:`MIN_STEPS` steps, at least 100), each on a random minibatch that the model
subsamples (``pyro.plate(..., subsample_size=batch_size)``, the likelihood scaled by n_train / B), with the loss
chosen by ``elbo``:

=============  ==========================================================================================
``trace``      Trace_ELBO, reparameterised (default), compiled unless ``jit=false``; ``particles`` draws
``iwae``       the importance-weighted bound with K = ``particles`` (:class:`~pyro_bdl.inference.marginal.IWAE_ELBO`)
``enum``       TraceEnum_ELBO: discrete latents the guide marks for enumeration are summed out exactly
``tracegraph`` TraceGraph_ELBO: score-function gradients for latents that cannot be reparameterised
=============  ==========================================================================================

After every epoch the validation ELBO per row is computed (:func:`validation_elbo`: one draw per row, a fixed
seed; with ``enum`` the training loss itself, so enumerated latents are summed out, not drawn); training stops
when it has not improved for ``patience`` epochs (unset, the default: the epochs of :data:`PATIENCE_STEPS` steps,
at least 10), and the parameters of the best epoch are kept.  The
progress bar shows the running training ELBO and the validation ELBO per row.  Every latent of such a model is
local to a row (trait ``amortised``): there are no posterior draws, and the learned parameters (decoder and
encoder) are returned to be saved with the fit.  ``is_samples`` is K of the fit's importance-sampled
log p(x), read by the model's report.

``kl_warmup`` (epochs; 0, the default: none) anneals the KL term (Bowman et al. 2016; Sønderby et al. 2016): the
model's ``anneal`` argument, which scales its latents' log p(z) and log q(z | x) (``poutine.scale``), rises
linearly as (t + 1) / T over the first T = ``kl_warmup`` x steps-per-epoch steps t, then stays at 1 (Pyro needs
a scale > 0, hence not from 0 exactly).  The validation ELBO is the unannealed one, and early stopping counts
epochs from the end of the warm-up.  A model takes the warm-up by having an ``anneal`` argument (the zoo's ``vae``).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import numpy as np
import pyro
import torch
from pyro.infer import TraceEnum_ELBO

from pyro_bdl.inference.base import Draws, as_flag
from pyro_bdl.inference.callbacks import StepCallback
from pyro_bdl.inference.marginal import estimate, plate_nesting
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.outputs import MethodInfo
from pyro_bdl.inference.svi import ADAM_SETTINGS, Elbo, load_store_values, make_elbo, optimise, store_values
from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["run_svi_amortised", "AMORTISED_ELBOS", "make_loss", "validation_elbo", "EarlyStopping", "KLWarmup", "MIN_STEPS",
           "PATIENCE_STEPS", "budget"]

#: What the ``elbo`` setting of ``svi-amortised`` admits (estimators of :data:`~pyro_bdl.inference.svi.ELBOS`).
AMORTISED_ELBOS = (Elbo.TRACE, Elbo.IWAE, Elbo.ENUM, Elbo.TRACEGRAPH)
#: The default training budget and early-stopping patience, in optimiser steps: a small data set has few steps per
#: epoch, and 100 epochs / patience 10 stopped the digits' VAE 1.3-1.6 nats short (benchmarks/RESULTS.md, "VAE
#: defaults").
MIN_STEPS, PATIENCE_STEPS = 10_000, 1_000


def budget(epochs, patience, steps_per_epoch: int) -> tuple[int, int]:
    """``(epochs, patience)``: the settings, or where unset (None) the epochs of :data:`MIN_STEPS` steps (at least
    100) and of :data:`PATIENCE_STEPS` steps (at least 10).

    >>> budget(None, None, 11), budget(None, None, 57), budget(5, 2, 11)
    ((910, 91), (176, 18), (5, 2))
    """
    epochs = max(100, math.ceil(MIN_STEPS / steps_per_epoch)) if epochs is None else int(epochs)
    patience = max(10, math.ceil(PATIENCE_STEPS / steps_per_epoch)) if patience is None else int(patience)
    return epochs, patience


def make_loss(elbo: str, particles: int, jit=False, plates: int | None = None):
    """The training loss named by the ``elbo`` setting, with ``particles`` draws; ``jit``: the compiled
    Trace_ELBO (:mod:`pyro_bdl.inference.compiled_elbo`, the same loss and gradients); ``plates``: the model's plate
    nesting, for enumeration (None: Pyro guesses it, with a log message)."""
    if elbo not in AMORTISED_ELBOS:
        raise ValueError(f"setting 'elbo' of inference 'svi-amortised' must be one of {', '.join(AMORTISED_ELBOS)}, "
                         f"got {elbo!r}")
    particles = int(particles)
    # compiled: the zoo's Trace_ELBO only (the others run as Pyro has them)
    return make_elbo(elbo, particles=particles, jit=as_flag(jit) and elbo == Elbo.TRACE, vectorize=particles > 1,
                     max_plate_nesting=plates if elbo == Elbo.ENUM else None)


def validation_elbo(model, guide, data: dict, loss=None) -> float:
    """The ELBO per row of ``data`` (a fixed seed; the caller's random streams are left as they were): with an
    enumerating ``loss`` (TraceEnum_ELBO) that loss itself, whose enumerated latents are summed out exactly as in
    training; else one draw per row from the guide (:func:`~pyro_bdl.inference.marginal.estimate`)."""
    if not isinstance(loss, TraceEnum_ELBO):
        return float(estimate(model, guide, data, particles=1).elbo.mean())
    n = next(v.shape[0] for v in data.values() if isinstance(v, torch.Tensor) and v.dim())
    with kept_rng(), torch.no_grad():
        pyro.set_rng_seed(0)
        return -float(loss.loss(model, guide, **data)) / n


def _rows(data: dict, index: torch.Tensor, n: int) -> dict:
    return {k: v[index] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == n else v for k, v in data.items()}


class KLWarmup(StepCallback):
    """The KL warm-up factor ``anneal`` (a 0-dim tensor, an input of the compiled loss) set before every step:
    (t + 1) / ``steps`` at step t, 1 from step ``steps`` - 1 on.

    >>> w = KLWarmup(4); [w.at(t) for t in range(6)]
    [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    >>> w.before_step(1); float(w.factor)
    0.5
    """

    def __init__(self, steps: float, like: torch.Tensor | None = None):
        if not float(steps) > 0:
            raise ValueError(f"the KL warm-up needs a positive number of steps, got {steps}")
        like = torch.empty(()) if like is None else like  # one of the data's tensors: their device and float dtype
        dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
        self.steps, self.factor = float(steps), torch.ones((), dtype=dtype, device=like.device)

    def at(self, step: int) -> float:
        return min(1.0, (step + 1) / self.steps)

    def before_step(self, step: int) -> None:
        self.factor.fill_(self.at(step))


def _takes_anneal(model) -> bool:
    try:
        return "anneal" in inspect.signature(model).parameters
    except (TypeError, ValueError):
        return False


class EarlyStopping(StepCallback):
    """The callback :func:`~pyro_bdl.inference.svi.optimise` calls after every step: at each epoch's end it records
    the running training ELBO per row and the validation ELBO per row, keeps the best epoch's parameters and
    stops after ``patience`` epochs without improvement counted after the first ``warmup`` epochs (no validation
    rows: it only records)."""

    def __init__(self, model, guide, validation: dict | None, steps_per_epoch: int, rows: int, patience: int,
                 loss=None, warmup: float = 0):
        self.model, self.guide, self.validation, self.loss = model, guide, validation, loss
        self.steps_per_epoch, self.rows, self.patience, self.warmup = steps_per_epoch, rows, patience, warmup
        self.train, self.valid = [], []
        self.best, self.best_epoch, self.bad, self.best_params = -math.inf, 0, 0, None

    key = "monitor"
    shows_progress = True

    def after_step(self, step: int, losses: list, bar, rate: float) -> bool:
        if (step + 1) % self.steps_per_epoch:
            return False
        epoch = (step + 1) // self.steps_per_epoch
        self.train.append(-float(np.mean(losses[-self.steps_per_epoch:])) / self.rows)
        postfix = {"epoch": epoch, "elbo/row": f"{self.train[-1]:.2f}"}
        if self.validation is not None:
            value = validation_elbo(self.model, self.guide, self.validation, self.loss)
            self.valid.append(value)
            postfix["validation"] = f"{value:.2f}"
            if value > self.best:
                self.best, self.best_epoch, self.bad, self.best_params = value, epoch, 0, store_values()
            elif epoch > self.warmup:
                self.bad += 1
        bar.set_postfix(postfix, refresh=False)
        return self.validation is not None and self.bad >= self.patience

    def state(self) -> dict:
        return {"train": torch.tensor(self.train, dtype=torch.float64), "valid": torch.tensor(self.valid, dtype=torch.float64),
                "best": self.best, "best_epoch": self.best_epoch, "bad": self.bad,
                "best_params": self.best_params or {}}

    def load(self, state: dict) -> None:
        self.train, self.valid = state["train"].tolist(), state["valid"].tolist()
        self.best, self.best_epoch, self.bad = float(state["best"]), int(state["best_epoch"]), int(state["bad"])
        self.best_params = state["best_params"] or None


@dataclass
class AmortisedInfo(MethodInfo):
    """What ``svi-amortised`` returns beside its (empty) draws: the minibatch run's bookkeeping.

    Attributes
    ----------
    training_rows, validation_rows : the rows trained on and held out for early stopping (0: none held out).
    epochs, patience : the settings the run had (``patience`` None: no early stopping).
    epochs_run : the epochs run (fewer than ``epochs`` when stopped early).
    steps_per_epoch : minibatch steps per epoch.
    elbo_history : ``{"train": [...], "validation": [...]}``, the ELBO per row after each epoch.
    validation_elbo, best_epoch, stopped_early : with rows held out: the best validation ELBO per row, the epoch it
        came at (whose parameters the fit keeps), and whether the run stopped before ``epochs``.
    """

    training_rows: int = 0
    validation_rows: int = 0
    epochs: int = 0
    patience: int | None = None
    epochs_run: int = 0
    steps_per_epoch: int = 0
    elbo_history: dict | None = None
    validation_elbo: float | None = None
    best_epoch: int | None = None
    stopped_early: bool | None = None


def run_svi_amortised(model, data, *, guide=None, progress, checkpoint=None, elbo, particles, epochs, batch_size, lr,
                      validation, patience, is_samples, kl_warmup=0, jit=False, **adam) -> Draws:
    if guide is None or isinstance(guide, str) or not callable(guide):
        raise ValueError("inference 'svi-amortised' needs the model's own amortised guide (an encoder): a zoo model "
                         "with trait 'amortised' names it (ModelSpec.inference.guides), or pass a guide callable")
    loss = make_loss(elbo, particles, jit, plates=plate_nesting(model, guide, data) if elbo == "enum" else None)
    if not 0.0 <= float(validation) < 1.0:
        raise ValueError(f"setting 'validation' is the fraction of rows held out, in [0, 1); got {validation}")
    n = next(v.shape[0] for v in data.values() if isinstance(v, torch.Tensor) and v.dim())
    first = next(v for v in data.values() if isinstance(v, torch.Tensor) and v.dim())
    order = torch.randperm(n, device=first.device)
    held = int(round(float(validation) * n)) if n > 1 else 0
    valid_index, train_index = order[:held].sort().values, order[held:].sort().values
    train = _rows(data, train_index, n) if held else data
    rows = len(train_index)
    batch = None if batch_size is None or int(batch_size) >= rows else int(batch_size)
    steps_per_epoch = 1 if batch is None else math.ceil(rows / batch)
    epochs, patience = budget(epochs, patience, steps_per_epoch)
    if not float(kl_warmup) >= 0:
        raise ValueError(f"setting 'kl_warmup' is a number of epochs >= 0; got {kl_warmup}")
    callbacks = []
    if float(kl_warmup) > 0:
        if not _takes_anneal(model):
            raise ValueError("setting 'kl_warmup' needs a model that takes the warm-up factor as an argument 'anneal' "
                             "(scaling its latents' log p(z) and log q(z | x)), as the zoo's VAE does")
        schedule = KLWarmup(float(kl_warmup) * steps_per_epoch, like=first)
        train, callbacks = {**train, "anneal": schedule.factor}, [schedule]
    monitor = EarlyStopping(model, guide, _rows(data, valid_index, n) if held else None, steps_per_epoch, rows,
                            int(patience), loss, warmup=float(kl_warmup))
    losses = optimise(model, guide, loss, {**train, "batch_size": batch}, steps=int(epochs) * steps_per_epoch, lr=lr,
                      progress=progress, desc="svi-amortised", checkpoint=checkpoint, callbacks=[*callbacks, monitor],
                      **adam)
    if monitor.best_params is not None:
        load_store_values(monitor.best_params)
    store = pyro.get_param_store()
    params = {name: store[name].detach().clone() for name in store.keys()}
    info = AmortisedInfo(rows, held, epochs, patience, len(monitor.train), steps_per_epoch,
                         {"train": monitor.train, "validation": monitor.valid})
    if held:
        info.validation_elbo, info.best_epoch = monitor.best, monitor.best_epoch
        info.stopped_early = len(monitor.train) < int(epochs)
    return Draws({}, losses=losses, guide=guide, info=info, params=params)


def _register() -> None:
    # Adam at 1e-3 on minibatches of 128 (Pyro's VAE tutorial: 1e-3, batch 256; the vae's own default is 3e-3), no
    # elementwise gradient clamp (the summed likelihood's gradients are large: a clamp makes Adam sign descent), held
    # for half the run; epochs and patience unset: from the steps per epoch (budget)
    # The compiled Trace_ELBO: an MNIST epoch 1.08x a hand-written PyTorch VAE's, eager 1.18x
    # (benchmarks/RESULTS.md, "VAE").
    defaults = {"elbo": "trace", "particles": 1, "epochs": None, "batch_size": 128, "lr": 1e-3, "validation": 0.1,
                "patience": None, "is_samples": 1000, "kl_warmup": 0, "jit": True, **ADAM_SETTINGS, "grad_clamp": math.inf,
                "lr_hold": 0.5}
    register_method(Method(
        "svi-amortised", "svi", "minibatch SVI of a model with its own amortised guide (an encoder): ELBO (trace), "
        "IWAE, enum or tracegraph; validation early stopping", run_svi_amortised, defaults,
        requires=frozenset({"amortised"}), takes_guide=True, quick={"epochs": 2, "is_samples": 10}, processes="data",
        answers_for="svi", outputs=AmortisedInfo))


_register()
