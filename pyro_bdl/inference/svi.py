"""Optimisation-based inference: SVI (reparameterised and score-function) and MAP / MLE.

One loop, :func:`optimise`, serves every method here; they differ only in the guide and the
ELBO estimator:

=================  ==========================  ======================================
method             guide                       loss
=================  ==========================  ======================================
``svi``            ``guide`` (default normal)  Trace_ELBO (reparameterised)
``svi-meanfield``  MeanFieldGuide              TraceMeanField_ELBO (analytic KL)
``bbvi``           MeanFieldGuide, no rsample  TraceGraph_ELBO (score function + baseline)
``map``            AutoDelta                   Trace_ELBO = -log p(y, theta)
``mle``            AutoDelta, priors dropped   Trace_ELBO = -log p(y | theta)
=================  ==========================  ======================================

Every method here (and ``mc-dropout`` and ``ensemble``, which train through :func:`optimise`) takes
two optimiser settings, :data:`ADAM_SETTINGS`, passed through to :func:`make_svi` as ``**adam``:
``grad_clamp``, the elementwise gradient clamp (:data:`GRADIENT_CLAMP`; ``inf`` turns it off), and
``lr_hold``, the fraction of the steps at the full rate before it decays (:data:`LR_HOLD`).
``svi`` and ``svi-meanfield`` take three more settings (:func:`make_elbo`): ``jit`` (compile the
ELBO once, :mod:`pyro_bdl.inference.compiled_elbo`; same loss and gradients), ``vectorize`` (``particles``
draws in one vectorised pass instead of a Python loop) and ``local_reparam`` (the local reparameterisation trick for a network's ``dense``
layers, :mod:`pyro_bdl.inference.local_reparam`).
``svi``, ``svi-meanfield`` and ``bbvi`` take ``elbo``, the estimator (:data:`ELBOS`, :func:`choose_elbo`): ``"auto"``
(the default: the method's own in the table above, ``TraceEnum_ELBO`` for a model whose discrete sites are marked for
enumeration), ``"trace"``, ``"meanfield"``, ``"tracegraph"`` or ``"enum"``.  With enumerated sites (which only
``svi`` of these accepts, :mod:`pyro_bdl.inference.enumeration`) the guide is built over the model's other sites,
the enumerated ones hidden from it, and they are summed out in every step, not drawn.
:func:`optimise` validates the distributions' arguments at the first step only.
``map`` and ``mle`` take ``restarts``: that many runs, the first from the usual start and the others from prior draws,
the one that ends at the least loss kept (:func:`best_of_starts`; a multimodal objective such as a Gaussian process's
marginal likelihood in its lengthscales and period).
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import pyro
import pyro.infer
import torch
from pyro import poutine
from pyro.infer import (JitTraceEnum_ELBO, JitTraceGraph_ELBO, Trace_ELBO, TraceEnum_ELBO, TraceGraph_ELBO,
                         TraceMeanField_ELBO)
from pyro.infer.util import torch_item
from tqdm import tqdm

from pyro_bdl.inference.base import Choice, ConvergenceWarning, Draws, as_flag, latent_sites
from pyro_bdl.inference.compiled_elbo import CompiledTrace_ELBO, CompiledTraceMeanField_ELBO
from pyro_bdl.inference.marginal import IWAE_ELBO
from pyro_bdl.inference.enumeration import enumeration_of
from pyro_bdl.inference.callbacks import checkpointed_state, restore_state
from pyro_bdl.inference.diagnose import JudgeLosses
from pyro_bdl.inference.drift import DriftRecord, DriftTracker, drift_record
from pyro_bdl.inference.guides import MeanFieldGuide, drop_priors, make_guide
from pyro_bdl.inference.local_reparam import LocalReparam
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.natural_gradient import EMPTY_GUIDE, NATURAL_STEP, NaturalGradient, linked_sites, natural_step_setting
from pyro_bdl.inference.optim import FastClippedAdam
from pyro_bdl.inference.starts import init_to_prior_mean
from pyro_bdl.inference.symmetry import BreakSymmetry
from pyro_bdl.inference.parallel.data_parallel import DataParallel
from pyro_bdl.inference.parallel.processes import current_group
from pyro_bdl.storage.checkpoint import kept_rng, rng_state, set_rng_state

#: The learning rate decays geometrically to this fraction of ``lr`` over the run, so that the
#: final parameters settle instead of jittering at the optimiser's noise floor.
FINAL_LR_FRACTION = 0.01
#: ... from the first step, or after holding ``lr`` for the fraction ``lr_hold`` of the steps (a setting;
#: the networks' SVI path holds it for half: see :mod:`pyro_bdl.models.networks`).
LR_HOLD = 0.0
#: The default of the ``grad_clamp`` setting: ClippedAdam clamps every gradient entry to
#: [-grad_clamp, grad_clamp] (an elementwise clamp, despite Pyro's name clip_norm; ``inf``: none).  It
#: guards far-off starts.  On networks, whose summed-likelihood gradients are about 1e5, it makes Adam
#: close to sign descent; the networks' SVI path turns it off (see :mod:`pyro_bdl.models.networks`).
GRADIENT_CLAMP = 10.0
#: The optimiser's settings and their defaults, as every optimisation-based method lists them.
ADAM_SETTINGS = {"grad_clamp": GRADIENT_CLAMP, "lr_hold": LR_HOLD}
#: What ``svi``, ``svi-meanfield``, ``bbvi``, ``map`` and ``mle`` use on a user's own program
#: (``Method.user_defaults``): its data in their own units put the answer far from where optimisation starts (an
#: intercept near 9, 25, 40), and Adam moves a parameter about ``lr`` per step at most; the zoo's decay from the first
#: step travels about ``lr * steps / ln(100)`` = 8.6 at 0.02 and 2000 steps, this about 54 before settling at 1% of
#: the rate.
#: Chosen on one generated family of user-style models and checked on another: benchmarks/RESULTS.md, "SVI defaults
#: on user models (issue 35)" (``bbvi``: checked on the second, "bbvi on user models").
USER_DEFAULTS = {"lr": 0.05, "lr_hold": 0.5}


#: Where ``map`` and ``mle`` start a user's program: the prior means, but not a network's symmetric saddle (the all-zero
#: network of zero-mean weight priors: :mod:`pyro_bdl.inference.symmetry`).
POINT_USER_INIT = BreakSymmetry(init_to_prior_mean)


class SVI(pyro.infer.SVI):
    """Pyro's :class:`~pyro.infer.SVI` with a leaner :meth:`step`: the same losses, gradients and updates.

    Pyro's step traces every ``pyro.param`` call of the loss to find the parameters, steps them, then
    gives each a fresh zero gradient that the next backward pass adds into.  Here a loss whose
    parameters cannot change after its first call (``fixed_params``: the compiled ELBOs) is traced
    for them once, and the optimiser clears the gradients (``FastClippedAdam.zero_grad``): it zeroes
    those it keeps in one flat tensor and releases the others (``grad = None``: the next backward pass
    writes them, the same numbers as adding into zeros; a parameter stepped before that gets no
    gradient is stepped with a zero one, as after Pyro's zeroing).  ``tests/inference/test_bbb_path.py`` checks
    that both steps give the same numbers; ``tests/inference/test_pyro_internals.py`` that Pyro's step is still the
    one this copies (:mod:`pyro_bdl.inference.pyro_internals`).
    """

    def __init__(self, model, guide, optim, loss, sync=None):
        super().__init__(model, guide, optim, loss)
        self._elbo = loss
        self._param_names = None  # the loss's parameter names, once known to be fixed
        #: called as ``sync(params, loss) -> loss`` between the backward pass and the update: the data-parallel
        #: gradient all-reduce (:class:`~pyro_bdl.inference.parallel.data_parallel.DataParallel`)
        self.sync = sync

    def step(self, *args, **kwargs) -> float:
        names = self._param_names
        if names is None:
            with poutine.trace(param_only=True) as capture:
                loss = self.loss_and_grads(self.model, self.guide, *args, **kwargs)
            params = [site["value"].unconstrained() for site in capture.trace.nodes.values()]
            if getattr(self._elbo, "fixed_params", False):
                self._param_names = tuple(capture.trace.nodes)
            names = tuple(capture.trace.nodes)
        else:
            loss = self.loss_and_grads(self.model, self.guide, *args, **kwargs)
            store = dict(pyro.get_param_store().named_parameters())  # name -> unconstrained tensor
            params = [store[name] for name in names]
        if self.sync is not None:  # by name: every process lists the parameters in the same order
            loss = self.sync([p for _, p in sorted(zip(names, params), key=lambda pair: pair[0])], loss)
        self.optim(params)
        self.optim.zero_grad(params)
        return torch_item(loss)


def make_svi(model, guide, loss, *, lr: float, steps: int, grad_clamp: float = GRADIENT_CLAMP,
             lr_hold: float = LR_HOLD, sync=None) -> SVI:
    """The SVI object every optimisation-based method steps: ClippedAdam
    (:class:`~pyro_bdl.inference.optim.FastClippedAdam`, its update for all parameters at once) with the
    rate at ``lr`` for the fraction ``lr_hold`` of the ``steps``, then decaying geometrically to
    ``FINAL_LR_FRACTION * lr`` at the last step, and every gradient entry clamped to ``grad_clamp``;
    stepped by a leaner ``SVI.step`` (:class:`SVI`)."""
    if not 0.0 <= float(lr_hold) <= 1.0:
        raise ValueError(f"lr_hold is the fraction of the steps at the full rate, in [0, 1] (1: a constant rate); "
                         f"got {lr_hold}")
    hold = int(float(lr_hold) * steps)
    decay = 1.0 if hold >= steps else FINAL_LR_FRACTION ** (1.0 / (steps - hold))
    optim = FastClippedAdam(lr=lr, lrd=decay, clip_norm=float(grad_clamp), hold=hold)
    return SVI(model, guide, optim, loss, sync)


class Elbo(Choice):
    """The ELBO estimators, by the name the ``elbo`` setting gives them: ``trace`` (Trace_ELBO), ``meanfield``
    (TraceMeanField_ELBO: the KL in closed form where it exists), ``tracegraph`` (TraceGraph_ELBO: score-function
    gradients with the model's dependency graph), ``enum`` (TraceEnum_ELBO: the sites marked for enumeration summed
    out), ``iwae`` (the importance-weighted bound, :class:`~pyro_bdl.inference.marginal.IWAE_ELBO`)."""

    TRACE = "trace"
    MEANFIELD = "meanfield"
    TRACEGRAPH = "tracegraph"
    ENUM = "enum"
    IWAE = "iwae"


#: The one table of ELBO estimators, each (plain, compiled or None).  The zoo compiles ``trace`` and ``meanfield``
#: (:mod:`pyro_bdl.inference.compiled_elbo`), Pyro's JIT ``tracegraph`` and ``enum``; ``iwae`` runs as it is.
ELBOS = {Elbo.TRACE: (Trace_ELBO, CompiledTrace_ELBO), Elbo.MEANFIELD: (TraceMeanField_ELBO, CompiledTraceMeanField_ELBO),
         Elbo.TRACEGRAPH: (TraceGraph_ELBO, JitTraceGraph_ELBO), Elbo.ENUM: (TraceEnum_ELBO, JitTraceEnum_ELBO),
         Elbo.IWAE: (IWAE_ELBO, None)}
#: What the ``elbo`` setting of ``svi``, ``svi-meanfield`` and ``bbvi`` admits besides ``"auto"`` (its default: the
#: method's own, ``enum`` for a model with enumerated sites).
GUIDE_ELBOS = (Elbo.TRACE, Elbo.MEANFIELD, Elbo.TRACEGRAPH, Elbo.ENUM)


def make_elbo(kind: str = "trace", *, particles: int = 1, jit=False, vectorize=False, max_plate_nesting=None):
    """The estimator :data:`ELBOS` names ``kind`` (an :class:`Elbo` or its name) with ``particles`` draws, vectorised
    (one pass with a leading particle dimension) when ``vectorize`` and ``particles > 1``, compiled when ``jit`` (an
    estimator with no compiled form, ``iwae``, is refused compiled); ``max_plate_nesting``: the model's plates, left
    of which enumeration and the particles go (None: Pyro finds it)."""
    if kind not in ELBOS:
        raise ValueError(f"unknown elbo {kind!r}; choose one of: {', '.join(ELBOS)}")
    cls = ELBOS[kind][as_flag(jit)]
    if cls is None:
        raise ValueError(f"elbo {kind!r} has no compiled form: run it with jit=False")
    if cls is IWAE_ELBO:  # K draws per row by construction: its particles are its K
        return IWAE_ELBO(num_particles=int(particles))
    extra = {} if max_plate_nesting is None else {"max_plate_nesting": int(max_plate_nesting)}
    if as_flag(jit) and kind in ("tracegraph", "enum"):  # Pyro's JIT: its tracer's warnings about the model's Python
        extra["ignore_jit_warnings"] = True
    return cls(num_particles=int(particles), vectorize_particles=as_flag(vectorize) and int(particles) > 1, **extra)


def choose_elbo(elbo: str, own: str, enumerated, method: str) -> str:
    """The estimator a run of ``method`` uses: the ``elbo`` setting, where ``"auto"`` is the method's ``own`` or,
    for a model with ``enumerated`` sites, ``"enum"``; a clear error for an unknown name, and for an estimator
    that would draw the enumerated sites instead of summing them out.

    >>> choose_elbo("auto", "trace", [], "svi"), choose_elbo("auto", "trace", ["z"], "svi")
    ('trace', 'enum')
    >>> choose_elbo("renyi", "trace", [], "svi")
    Traceback (most recent call last):
    ...
    ValueError: setting 'elbo' of inference 'svi' must be one of auto, trace, meanfield, tracegraph, enum; got 'renyi'
    """
    if elbo != "auto" and elbo not in GUIDE_ELBOS:
        raise ValueError(f"setting 'elbo' of inference '{method}' must be one of auto, {', '.join(GUIDE_ELBOS)}; got "
                         f"{elbo!r}")
    kind = ("enum" if enumerated else own) if elbo == "auto" else elbo
    if enumerated and kind != "enum":
        raise ValueError(f"elbo='{elbo}' (inference '{method}') cannot sum out the model's enumerated sites "
                         f"({', '.join(enumerated)}): use elbo='enum', or leave it 'auto'")
    return kind


def hiding(model, names):
    """``model`` with the sites ``names`` hidden (``poutine.block``): what a guide over the other sites is built
    on; ``model`` itself where there are none."""
    return poutine.block(model, hide=list(names)) if names else model


def optimise(model, guide, loss, data: dict, *, steps: int, lr: float, progress: bool, desc: str,
             checkpoint=None, checkpoint_every: int = 500, callbacks=(), processes=None, **adam) -> np.ndarray:
    """Run ``steps`` of SVI with ClippedAdam (``adam``: its ``grad_clamp`` and ``lr_hold``, see
    :func:`make_svi`); return the loss trace.

    A non-finite loss stops training with a :class:`~pyro_bdl.ConvergenceWarning`; if the parameters
    themselves went non-finite, they are put back to the last finite ones (saved every
    ``SNAPSHOT_EVERY`` steps), so the fit still has a guide to draw from.  With a
    :class:`~pyro_bdl.storage.checkpoint.Checkpoint`, the parameters, optimiser state and losses are saved
    every ``checkpoint_every`` steps and on Ctrl-C, and a saved run resumes where it stopped.

    ``callbacks``: :class:`~pyro_bdl.inference.callbacks.StepCallback` s, each told about every step before and after
    it is taken (the drift check's :class:`~pyro_bdl.inference.drift.DriftTracker`, a KL warm-up, early stopping,
    which may stop the run), each saved in the checkpoint and restored on resume.
    Under ``torchrun`` (``processes``: the :class:`~pyro_bdl.inference.parallel.processes.ProcessGroup`, default
    the launch's), each process steps on its shard of every minibatch and the gradients are summed before each
    update (:class:`~pyro_bdl.inference.parallel.data_parallel.DataParallel`); process 0 alone shows progress and
    saves checkpoints, every process resumes from them.
    """
    group = current_group() if processes is None else processes
    parallel = DataParallel(group, model, guide, data) if group.distributed else None
    if parallel is not None:  # this process's shard of every global batch; gradients summed before each update
        model, guide, data = parallel.model, parallel.guide, parallel.data
    progress = progress and group.main
    checkpoint = checkpoint if group.main or checkpoint is None else checkpoint.read_only()
    svi = make_svi(model, guide, loss, lr=lr, steps=steps, sync=None if parallel is None else parallel.sync, **adam)
    optim = svi.optim
    callbacks = list(callbacks)
    shown = any(cb.shows_progress for cb in callbacks)  # a callback that writes the bar's postfix itself
    losses = _resume(checkpoint, model, guide, optim, data, callbacks)
    first = len(losses)
    if first and getattr(loss, "fixed_params", False):
        # a compiled loss draws more at its first call (it runs and traces the ELBO) than a replay does: build
        # its graph now, with the random streams put back after, so that the resumed steps draw what the
        # uninterrupted run's steps draw
        with kept_rng():
            loss.differentiable_loss(model, guide, **data)
    snapshot = None  # (step, the parameters) at the last snapshot
    before = None  # the random streams before the step under way (None: between steps)
    with tqdm(total=steps, initial=len(losses), desc=desc, disable=not progress, mininterval=0.5) as bar:
        try:
            for step in range(len(losses), steps):
                # the first step validates the distributions' arguments; later steps skip the checks
                # (a fifth of a small network's step); a NaN loss is still caught below
                unchecked = pyro.validation_enabled(False) if step > first else contextlib.nullcontext()
                for cb in callbacks:
                    cb.before_step(step)
                # the random streams before this step: an interrupt inside it (in a launch, most likely while
                # waiting on the all-reduce) saves these, so the resumed run redraws what the step drew
                before = rng_state() if checkpoint is not None else None
                try:
                    with unchecked:
                        value = svi.step(**data)
                except ValueError as exc:
                    if "invalid values" not in str(exc):
                        raise
                    value = float("nan")
                losses.append(value)
                before = None  # the step is done: the streams as they are now
                if not math.isfinite(value):
                    restored = _restore_if_broken(snapshot)
                    warnings.warn(
                        f"{desc}: the loss became {value} at step {step}; training stopped"
                        + (f" and the parameters were put back to those after {restored} steps" if restored is not None else "")
                        + ". Try a smaller learning rate (--lr).",
                        ConvergenceWarning,
                        stacklevel=2,
                    )
                    break
                if (step - first) % SNAPSHOT_EVERY == 0:  # the parameters after this step, if all finite
                    params = store_values()
                    if _all_finite(params.values()):
                        snapshot = (step + 1, params)
                if not shown and (step % 50 == 0 or step == steps - 1):
                    bar.set_postfix(loss=f"{value:.4g}", refresh=False)
                bar.update()
                rate = optim.lr * optim.lrd ** max(0, step + 1 - optim.hold)  # FastClippedAdam's schedule
                stop = any([cb.after_step(step, losses, bar, rate) for cb in callbacks])  # each told, stop or not
                if checkpoint is not None and (step + 1) % checkpoint_every == 0:
                    _save(checkpoint, optim, losses, callbacks)
                if stop:
                    break
        except KeyboardInterrupt:
            if checkpoint is not None:
                _save(checkpoint, optim, losses, callbacks, rng=before)
            raise
    return np.asarray(losses, dtype=float)


#: How often :func:`optimise` copies the parameters, to fall back on if they go non-finite.
SNAPSHOT_EVERY = 50


def store_values() -> dict:
    """A copy of every parameter in the store, unconstrained."""
    store = pyro.get_param_store()
    return {name: store.get_param(name).unconstrained().detach().clone() for name in store.keys()}


def load_store_values(saved: dict) -> None:
    """Copy ``saved`` (name -> unconstrained value, as :func:`store_values` makes) into the store's parameters."""
    store = pyro.get_param_store()
    with torch.no_grad():
        for name, value in saved.items():
            store.get_param(name).unconstrained().copy_(value)


def _all_finite(params) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in params)


def _restore_if_broken(snapshot) -> int | None:
    """Put the parameters back to ``snapshot`` (taken after a number of steps) if any is non-finite now;
    returns that number of steps, or None if nothing was restored."""
    store = pyro.get_param_store()
    if snapshot is None or _all_finite(store.get_param(name).unconstrained() for name in store.keys()):
        return None
    step, saved = snapshot
    load_store_values(saved)
    return step


def _save(checkpoint, optim, losses, callbacks=(), rng=None) -> None:
    checkpoint.save({
        "losses": torch.tensor(losses, dtype=torch.float64, device="cpu"),  # host-side
        "params": store_values(),
        "optim": optim.get_state(),
        "rng": rng if rng is not None else rng_state(),  # torch, numpy, Python: the minibatches and draws to come
        **checkpointed_state(callbacks),
    })


def _resume(checkpoint, model, guide, optim, data, callbacks=()) -> list:
    """Restore a saved run into the param store and optimiser; returns the losses so far."""
    state = checkpoint.load() if checkpoint is not None else None
    if state is None:
        return []
    with poutine.block(), torch.no_grad():
        guide(**data)  # create the guide's parameters (and the model's own), then overwrite them
        if any(name not in pyro.get_param_store() for name in state["params"]):
            model(**data)
    load_store_values(state["params"])
    optim.set_state(state["optim"])
    restore_state(callbacks, state)
    set_rng_state(state["rng"])
    return state["losses"].tolist()


@torch.no_grad()
def guide_draws(guide, data: dict, names: list[str], num: int) -> dict:
    """``num`` draws of each latent site from the fitted guide, shape (1, num, *site_shape)."""
    collected = {name: [] for name in names}
    for _ in range(num):
        trace = poutine.trace(guide).get_trace(**data)
        for name in names:
            collected[name].append(trace.nodes[name]["value"].detach())
    return {name: torch.stack(values).unsqueeze(0) for name, values in collected.items()}


def _fit(model, data, guide, loss, *, steps, lr, samples, progress, desc, point=False, checkpoint=None,
         batch_size=None, local_reparam=False, hidden=(), natural=None, **adam) -> Draws:
    names = [name for name in latent_sites(model, data) if name not in hidden]  # hidden: summed out, not drawn
    # minibatches: the model subsamples its data plate (and scales the likelihood by N / B)
    train = data if batch_size is None else {**data, "batch_size": int(batch_size)}
    # local reparameterisation changes training only: draws below come from the plain guide
    pair = LocalReparam().wrap(model, guide) if as_flag(local_reparam) else (model, guide)
    if natural is not None:  # the training model records the conjugate statistics each step's update reads
        pair = (natural.wrap(pair[0]), pair[1])
    tracker = DriftTracker(steps)
    losses = optimise(*pair, loss, train, steps=steps, lr=lr, progress=progress, desc=desc, checkpoint=checkpoint,
                      callbacks=[tracker] + ([natural] if natural is not None else []), **adam)
    # is the answer still moving? (pyro_bdl.inference.drift; svi_report decides whether it warns)
    info = drift_record(tracker, model, guide, data, point=point, loss=loss)
    if point:
        with torch.no_grad():
            median = guide.median(**data)
        draws = {name: median[name].detach().reshape((1, 1) + median[name].shape) for name in names}
    else:
        draws = guide_draws(guide, data, names, samples)
    return Draws(draws, losses=losses, guide=guide, info=info)


def _run_reparameterised(kind: str, default_guide: str, desc: str):
    """The runner of ``svi`` (``kind="trace"``) or ``svi-meanfield`` (``"meanfield"``): they differ only
    in the ELBO estimator and the default guide."""

    def run(model, data, *, guide=None, steps, lr, particles, samples, progress, checkpoint=None, batch_size=None,
            init_loc_fn=None, jit=False, vectorize=False, local_reparam=False, elbo="auto", natural_gradient="auto",
            **adam) -> Draws:
        hidden, nesting = enumeration_of(model, data)
        loss = make_elbo(choose_elbo(elbo, kind, hidden, desc), particles=particles, jit=jit, vectorize=vectorize,
                         max_plate_nesting=nesting)
        natural = _natural_gradient(natural_gradient, model, data, desc, own_guide=callable(guide), jit=jit)
        sites = list(hidden) + (list(natural) if natural else [])
        only = natural and not [name for name in latent_sites(model, data) if name not in sites]
        rest = (EMPTY_GUIDE if only else  # natural gradients step every latent site: nothing else to guide
                make_guide(guide or default_guide, hiding(model, sites), init_loc_fn))  # the sites not summed out
        natural = None if not natural else NaturalGradient(natural, rest, natural_step(natural_gradient), lr)
        return _fit(model, data, rest if natural is None else natural.guide, loss, steps=steps, lr=lr, samples=samples,
                    progress=progress, desc=desc, checkpoint=checkpoint, batch_size=batch_size,
                    local_reparam=local_reparam, hidden=hidden, natural=natural, **adam)

    run.__name__ = run.__qualname__ = f"run_{desc.replace('-', '_')}"
    return run


run_svi = _run_reparameterised("trace", "normal", "svi")
run_svi_meanfield = _run_reparameterised("meanfield", "meanfield", "svi-meanfield")


def natural_step(value) -> float:
    step = natural_step_setting(value, "svi")
    return NATURAL_STEP if step is None else step


def _natural_gradient(value, model, data: dict, method: str, *, own_guide: bool, jit) -> dict:
    """The sites natural gradients step (:mod:`pyro_bdl.inference.natural_gradient`): under ``"auto"`` every site
    a data term is conjugate to, unless the user brought a guide or compiles the ELBO (whose replays run no Python
    to record the statistics); a step asked for where it cannot be taken is an error."""
    step = natural_step_setting(value, method)
    if step == 0.0:
        return {}
    sites = linked_sites(model, data)
    if step is None:
        return {} if own_guide or as_flag(jit) else sites
    if not sites:
        raise ValueError(f"natural_gradient={value}: the model has no latent site a data term is conjugate to (a "
                         f"distribution with a LinearGaussianLink, as the sparse GP's inducing values have); leave it "
                         f"'auto'")
    if own_guide or as_flag(jit):
        raise ValueError(f"natural_gradient={value} cannot be used with "
                         f"{'a guide object of your own' if own_guide else 'jit=true (the compiled ELBO)'}: natural gradients "
                         f"bring their own guide of {', '.join(sites)} and read the statistics at every step in Python")
    return sites


def run_bbvi(model, data, *, guide=None, steps, lr, particles, samples, progress, checkpoint=None, batch_size=None,
            init_loc_fn=None, elbo="auto", **adam) -> Draws:
    hidden, nesting = enumeration_of(model, data)
    loss = make_elbo(choose_elbo(elbo, "tracegraph", hidden, "bbvi"), particles=particles, max_plate_nesting=nesting)
    guide = guide if guide is not None else MeanFieldGuide(hiding(model, hidden), reparameterized=False,
                                                           init_loc_fn=init_loc_fn)
    return _fit(model, data, guide, loss, steps=steps, lr=lr, samples=samples, progress=progress, desc="bbvi",
                checkpoint=checkpoint, batch_size=batch_size, hidden=hidden, **adam)


def _point_start(init_loc_fn, model, data: dict):
    """Where a point run starts: ``init_loc_fn``, read against the model first where it is a
    :class:`~pyro_bdl.inference.symmetry.BreakSymmetry` (a user's network is not started at its zero saddle)."""
    return init_loc_fn.prepare(model, data) if isinstance(init_loc_fn, BreakSymmetry) else init_loc_fn


def run_map(model, data, *, steps, lr, progress, checkpoint=None, batch_size=None,
            init_loc_fn=None, restarts=1, **adam) -> Draws:
    def once(start):
        guide = make_guide("delta", model, _point_start(start, model, data))
        return _fit(model, data, guide, Trace_ELBO(), steps=steps, lr=lr, samples=1, progress=progress, desc="map",
                    point=True, checkpoint=checkpoint, batch_size=batch_size, **adam)

    return best_of_starts(once, restarts, init_loc_fn, checkpoint)


def run_mle(model, data, *, steps, lr, progress, checkpoint=None, batch_size=None,
            init_loc_fn=None, restarts=1, **adam) -> Draws:
    flat = drop_priors(model)

    def once(start):
        guide = make_guide("delta", flat, _point_start(start, flat, data))
        return _fit(flat, data, guide, Trace_ELBO(), steps=steps, lr=lr, samples=1, progress=progress, desc="mle",
                    point=True, checkpoint=checkpoint, batch_size=batch_size, **adam)

    return best_of_starts(once, restarts, init_loc_fn, checkpoint)


#: How many of a run's last losses judge where it ended (their mean: one Adam step's jitter averaged out).
FINAL_LOSSES = 10


def best_of_starts(fit_once, restarts: int, init_loc_fn, checkpoint=None) -> Draws:
    """``fit_once(init_loc_fn)`` (a point run's draws) from ``restarts`` starts, each in a fresh param store: the
    first where ``init_loc_fn`` says (None: the guide's own start), the others at draws from the prior
    (``init_to_sample``: another basin of a multimodal objective, as scikit-learn's ``n_restarts_optimizer`` starts
    elsewhere); the run whose mean of its last :data:`FINAL_LOSSES` losses is least is kept, its parameters put back
    in the store, and every start's final loss recorded in its ``info.start_losses``
    (:class:`~pyro_bdl.inference.drift.DriftRecord`)."""
    restarts = int(restarts)
    if restarts < 1:
        raise ValueError(f"restarts is the number of starts, at least 1; got {restarts}")
    if restarts == 1:
        return fit_once(init_loc_fn)
    if checkpoint is not None:
        raise ValueError("restarts > 1 cannot resume from a checkpoint (each start is a run of its own): leave "
                         "checkpoint unset or run one start")
    store = pyro.get_param_store()
    best, best_state, finals = None, None, []
    for k in range(restarts):
        store.clear()
        draws = fit_once(init_loc_fn if k == 0 else pyro.infer.autoguide.init_to_sample)
        losses = np.asarray(draws.losses, dtype=float)
        final = float(np.mean(losses[-FINAL_LOSSES:])) if len(losses) else math.inf
        finals.append(final if math.isfinite(final) else math.inf)
        if best is None or finals[-1] < min(finals[:-1]):
            best, best_state = draws, store.get_state()
    store.set_state(best_state)
    if isinstance(best.info, DriftRecord):
        best.info.start_losses = ", ".join(f"{f:.6g}" for f in finals)
    return best


def _register() -> None:
    common = {"steps": 2000, "lr": 0.02, "particles": 1, "samples": 1000, "batch_size": None, **ADAM_SETTINGS,
              "jit": False, "vectorize": False, "local_reparam": False, "elbo": "auto", "natural_gradient": "auto"}
    point = {"steps": 2000, "lr": 0.02, "batch_size": None, "restarts": 1, **ADAM_SETTINGS}
    for method in (
        Method("svi", "svi", "SVI, Trace_ELBO (TraceEnum_ELBO for enumerated sites), reparameterised gradients "
               "(guide: normal | mvn | meanfield | callable)",
               run_svi, common, refuses=frozenset({"improper-prior"}), takes_guide=True, takes_init=True, quick={"steps": 100, "samples": 50}, processes="data",
               user_defaults=USER_DEFAULTS, user_init=init_to_prior_mean, outputs=DriftRecord),
        Method("svi-meanfield", "svi", "SVI, TraceMeanField_ELBO: mean-field Gaussian guide, analytic KL where it exists",
               run_svi_meanfield, common, refuses=frozenset({"enumerated"}), takes_guide=True, takes_init=True, quick={"steps": 100, "samples": 50},
               processes="data", user_defaults=USER_DEFAULTS, user_init=init_to_prior_mean, outputs=DriftRecord),
        Method("bbvi", "svi", "black-box VI: score-function gradients (TraceGraph_ELBO) with a decaying-average baseline",
               run_bbvi, {"steps": 2000, "lr": 0.02, "particles": 4, "samples": 1000, "batch_size": None, **ADAM_SETTINGS,
                         "elbo": "auto"},
               requires=frozenset({"continuous", "low-dimensional"}), takes_guide=True, takes_init=True,
               quick={"steps": 30, "samples": 50, "particles": 2}, user_defaults=USER_DEFAULTS,
               user_init=init_to_prior_mean, outputs=DriftRecord),
        Method("map", "point", "MAP point estimate (AutoDelta), maximises log p(y, theta)",
               run_map, point, takes_init=True, quick={"steps": 100}, processes="data",
               user_defaults=USER_DEFAULTS, user_init=POINT_USER_INIT, outputs=DriftRecord,
               diagnose=JudgeLosses(point=True)),
        Method("mle", "point", "maximum likelihood (AutoDelta with the priors dropped), maximises log p(y | theta)",
               run_mle, point, refuses=frozenset({"enumerated"}), takes_init=True, quick={"steps": 100},
               processes="data", user_defaults=USER_DEFAULTS, user_init=POINT_USER_INIT, outputs=DriftRecord,
               diagnose=JudgeLosses(point=True, objective=drop_priors)),
    ):
        register_method(method)


_register()
