r"""Is the answer still moving when an optimisation run ends?  The drift check of svi-type and point fits (issue 35).

A loss can look settled while the parameters still travel: Adam moves a parameter by at most about the learning rate
per step, so an intercept far from where optimisation starts is still on its way when a decaying rate has made the
steps, and the changes of the loss, small.  The check compares where the fit was late in the run with where it ended:

* :class:`DriftTracker` keeps the running means of every optimised parameter (unconstrained) over ``BATCHES`` batches
  of two windows of the run, ``EARLY`` (by default steps 70-80 %) and ``LATE`` (the last 10 %).  Per parameter entry,
  the move between the windows' means, its standard error from the spread of the batch means (the optimiser's
  jitter), its *t* (move over standard error) and its *pace* (move over the reach: the sum of the learning rates
  between the windows, as far as Adam can take a parameter whose gradient keeps its sign);
* an entry *runs* when it went at ``DRIFT_PACE`` of the reach or more (its gradient kept its sign: the optimiser is
  still carrying it as fast as the rate lets it), and *drifts* when it runs or its move is beyond its jitter (*t* at
  least :func:`t_threshold`: a ``FALSE_ALARM`` chance, over all the entries, for a fit that only jitters);
* :func:`drift_record` measures the answer's move in its own units, the whole (``drift``) and the parts the running
  entries (``drift_running``) and the drifting ones (``drift_travelling``) make.  The answer is still moving
  (:func:`still_moving`) when the running entries moved it visibly (``DRIFT_VISIBLE``) or the drifting ones
  materially (``DRIFT_MIN``).  Units:

  - a guide with scales (``svi``, ``svi-meanfield``, ``bbvi``, a user's guide): the guide is drawn ``DRAWS`` times at
    the early means, the late means, and the early means with the running (drifting) entries moved to their late
    means, with the same random numbers (so the draws' own noise cancels), mapped to each latent site's
    unconstrained space; a scalar's move is that of its mean over its sd in the late window's guide (and of its sd,
    as ``|log ratio|``);
  - a point fit (``map``, ``mle``): a parameter entry's move in units of ``1 / sqrt(H_jj)``, the loss's curvature
    there at the end (the Laplace sd with the others held fixed), for up to ``HESSIAN_MAX`` entries (one
    Hessian-vector product each), not measured for more.

  Both units are those of the fit as it ended: a fit far from its optimum has wide ones (its misfit shows as
  noise), which is why a running entry needs only a visible move.

:func:`pyro_bdl.inference.diagnose.svi_report` warns (measurements: ``benchmarks/RESULTS.md``, "SVI defaults on
user models (issue 35)").

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> from pyro.infer import SVI, Trace_ELBO
>>> from pyro.infer.autoguide import AutoNormal
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
...     with pyro.plate("data", len(y)):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> y = torch.randn(50) + 9.0
>>> pyro.set_rng_seed(0); pyro.clear_param_store()
>>> guide = AutoNormal(model)
>>> svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.005}), Trace_ELBO())
>>> tracker = DriftTracker(300)
>>> for step in range(300):
...     _ = svi.step(y)
...     tracker.update(step, 0.005)
>>> record = drift_record(tracker, model, guide, {"y": y}, point=False)
>>> record.drift_at, record.drift > 1.0   # 300 steps at 0.005 from 0 towards 9: still on its way
('mu', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyro
import torch
from pyro import poutine

from pyro_bdl.inference.callbacks import StepCallback
from pyro_bdl.inference.outputs import MethodInfo
from pyro_bdl.inference.prototype import prototype_of
from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["DriftRecord", "DriftTracker", "drift_record", "still_moving", "t_threshold", "EARLY", "LATE", "BATCHES", "DRAWS",
           "HESSIAN_MAX", "DRIFT_MIN", "DRIFT_PACE", "DRIFT_VISIBLE", "DRIFT_FULL_PACE", "FALSE_ALARM"]

#: The early window, as fractions of the run's steps: late enough that a converged fit is there already, early enough
#: that a fit still travelling has moved measurably by the end.
EARLY = (0.70, 0.80)
#: The late window: the end of the run (a mean over it is the answer with the optimiser's jitter averaged out).
LATE = (0.90, 1.00)
#: Draws of the guide at each window mean (the same random numbers for both: their noise cancels in the difference).
DRAWS = 64
#: A point fit's drift is measured for at most this many unconstrained parameters (one Hessian-vector product each).
HESSIAN_MAX = 200
#: Windows shorter than this many steps (a run shorter than about 100 steps) are too short to average the jitter out.
MIN_WINDOW = 10
#: Each window is cut into up to this many batches, of at least ``BATCH_STEPS`` steps each (longer than the
#: optimiser's memory, about 10 steps for Adam's momentum, so that their means are close to independent); the spread
#: of the batch means is the window mean's standard error.  With fewer than 3 batches (runs under about 750 steps)
#: no *t* is computed, and only the pace tells travel.
BATCHES = 8
BATCH_STEPS = 25
#: An answer is still moving when the running entries (at ``DRIFT_PACE`` of the reach or more) moved some scalar of it
#: by at least ``DRIFT_VISIBLE`` of its own sd, or the drifting ones (running, or moved beyond their jitter: *t* at
#: least :func:`t_threshold`, a ``FALSE_ALARM`` chance for a fit that only jitters) by at least ``DRIFT_MIN`` (a mean;
#: or an sd by that much, as a log ratio).  Converged fits of the two generated families go at most 0.15 of the reach
#: and drift at most 0.2 sd (the optimiser's jitter shrinking with the rate shifts its average a little); fits still
#: on their way go at 0.7 to 1 of it.  Measurements: benchmarks/RESULTS.md, "SVI defaults on user models (issue 35)".
DRIFT_PACE = 0.5
DRIFT_VISIBLE = 0.05
#: An entry going at this much of the reach or more is still on its way whatever its move in its own units (far from
#: the optimum those units are wide): benchmarks/RESULTS.md, "SVI defaults on user models (issue 35)", short runs.
DRIFT_FULL_PACE = 0.9
DRIFT_MIN = 0.3
FALSE_ALARM = 0.01


@dataclass
class DriftRecord(MethodInfo):
    """What the drift check measured at the end of an optimisation run: what ``svi``, ``svi-meanfield``, ``bbvi``,
    ``map`` and ``mle`` return beside their draws (``Draws.info``).  NaN (None for a name) where not measured.

    Attributes
    ----------
    drift_window : the two windows compared, e.g. ``"steps 1401-1600 against 1801-2000"``.
    drift_units : the units of the moves (``"guide sds"``, ``"Laplace sds"``, or why nothing was measured).
    drift, drift_at : the largest move of the answer between the windows, in its own sds, and the scalar that moved
        most (e.g. ``"b[1]"``).
    drift_sd, drift_sd_at : a guide with scales: the largest ``|log sd ratio|`` between the windows, and where.
    drift_running, drift_running_at, drift_running_kind : the largest move the running entries (at ``DRIFT_PACE``
        of the reach or more) make, where, and of what (``"drift"``: a mean, ``"drift_sd"``: an sd).
    drift_travelling, drift_travelling_at, drift_travelling_kind : the same for the drifting entries (running, or
        moved beyond their jitter).
    drift_pace, drift_pace_at : the largest pace of an optimised parameter entry (its move over the reach), and
        which (:meth:`DriftTracker.moves`).
    drift_t, drift_t_at : the largest *t* (move over standard error) of an entry, and which.
    start_losses : ``map`` / ``mle`` with ``restarts`` > 1: each start's final loss (the mean of its last losses), in
        the order run, e.g. ``"41.23, 41.23, 57.90"``; the fit is the least's.  None: one start.
    """

    drift_window: str | None = None
    drift_units: str | None = None
    drift: float = math.nan
    drift_at: str | None = None
    drift_sd: float = math.nan
    drift_sd_at: str | None = None
    drift_running: float = math.nan
    drift_running_at: str | None = None
    drift_running_kind: str | None = None
    drift_travelling: float = math.nan
    drift_travelling_at: str | None = None
    drift_travelling_kind: str | None = None
    drift_pace: float = math.nan
    drift_pace_at: str | None = None
    drift_t: float = math.nan
    drift_t_at: str | None = None
    start_losses: str | None = None


def t_threshold(entries: int, batches: int = BATCHES) -> float:
    """The *t* beyond which an entry's move counts as travel: Student's t with the degrees of freedom of two windows
    of ``batches`` batches, at the two-sided ``FALSE_ALARM / entries`` level (Bonferroni over the entries).

    >>> round(t_threshold(10), 1), round(t_threshold(10_000), 1)
    (4.1, 8.2)
    """
    from scipy.stats import t as student

    return float(student.ppf(1.0 - FALSE_ALARM / (2 * max(int(entries), 1)), df=2 * (batches - 1)))


def still_moving(record: DriftRecord) -> bool:
    """Whether a :func:`drift_record` says the answer was still on its way when the run ended (False where it was
    not measured): its running entries moved it visibly, or its drifting ones materially, or an entry went at the
    optimiser's full pace (``DRIFT_FULL_PACE``).

    >>> still_moving(DriftRecord(drift_running=0.08, drift_travelling=0.08)), still_moving(DriftRecord(drift_travelling=0.2))
    (True, False)
    """
    running, drifting, pace = record.drift_running, record.drift_travelling, record.drift_pace
    return bool(math.isfinite(running) and running >= DRIFT_VISIBLE or math.isfinite(drifting) and drifting >= DRIFT_MIN
                or math.isfinite(pace) and pace >= DRIFT_FULL_PACE)


def _window(fraction: tuple[float, float], steps: int) -> tuple[int, int]:
    return int(round(fraction[0] * steps)), int(round(fraction[1] * steps))


class DriftTracker(StepCallback):
    """The running means of the param store's unconstrained parameters over the ``BATCHES`` batches of an early and
    a late window of a run of ``steps`` steps: a :class:`~pyro_bdl.inference.callbacks.StepCallback` of
    :func:`pyro_bdl.inference.svi.optimise`, which :meth:`update` s it after every step (its state checkpointed).

    ``windows``: ``{"early": (first, end), "late": (first, end)}``, step indices (end excluded).
    """

    def __init__(self, steps: int, early: tuple[float, float] = EARLY, late: tuple[float, float] = LATE):
        self.steps = int(steps)
        self.windows = {"early": _window(early, steps), "late": _window(late, steps)}
        shortest = min(end - first for first, end in self.windows.values())
        #: batches per window: up to BATCHES, each of BATCH_STEPS steps or more
        self.batches = max(1, min(BATCHES, shortest // BATCH_STEPS))
        self.sums: dict[str, list[dict[str, torch.Tensor]]] = {k: [{} for _ in range(self.batches)]
                                                                for k in self.windows}
        self.counts = {k: [0] * self.batches for k in self.windows}
        #: the sum of the learning rates of the steps between the windows' middles: how far Adam could have moved a
        #: parameter between the two means (a step moves each by about the rate, at most, when its gradient keeps
        #: its sign)
        self.reach = 0.0

    key = "drift"

    def after_step(self, step: int, losses: list, bar, rate: float) -> bool:
        self.update(step, rate)
        return False

    def update(self, step: int, rate: float = math.nan) -> None:
        """Add the parameters after step ``step`` (0-based), taken at learning rate ``rate``, to the batch of the
        window it falls in, if any."""
        (a0, a1), (b0, b1) = self.windows["early"], self.windows["late"]
        if (a0 + a1) / 2 <= step < (b0 + b1) / 2:
            self.reach += float(rate)
        for key, (first, end) in self.windows.items():
            if first <= step < end:
                batch = (step - first) * self.batches // (end - first)
                store, sums = pyro.get_param_store(), self.sums[key][batch]
                with torch.no_grad():
                    for name in store.keys():
                        value = store.get_param(name).unconstrained().detach()
                        if name in sums and sums[name].shape == value.shape:
                            sums[name] += value
                        else:
                            sums[name] = value.clone()
                self.counts[key][batch] += 1

    def batch_means(self, key: str) -> list[dict[str, torch.Tensor]]:
        """The window's batches that saw a step: name -> the batch's mean of that unconstrained parameter."""
        return [{name: total / count for name, total in sums.items()}
                for sums, count in zip(self.sums[key], self.counts[key]) if count]

    def means(self, key: str) -> dict[str, torch.Tensor]:
        """Name -> the window's mean of that unconstrained parameter (empty if the window saw no step)."""
        count = sum(self.counts[key])
        if not count:
            return {}
        names = set().union(*(sums.keys() for sums in self.sums[key]))
        return {name: sum(s[name] for s in self.sums[key] if name in s) / count for name in names}

    def measurable(self) -> bool:
        """Whether both windows saw enough steps, in every batch, to compare them."""
        return all(sum(c) >= MIN_WINDOW and all(c) for c in self.counts.values())

    def moves(self) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Name -> (move, t, pace) of each unconstrained entry between the window means, flat float64: the move,
        over its standard error from the batch means (the window means' jitter; t is 0 with fewer than 3 batches),
        over the :attr:`reach`."""
        early, late = self.means("early"), self.means("late")
        spread = {}
        for key in self.windows if self.batches >= 3 else ():
            batches = self.batch_means(key)
            for name in early.keys() & late.keys():
                values = torch.stack([b[name].reshape(-1).double() for b in batches if name in b])
                spread[name] = spread.get(name, 0.0) + values.var(0) / len(values)
        out = {}
        for name in sorted(early.keys() & late.keys()):
            move = (late[name] - early[name]).reshape(-1).double()
            if name in spread:  # no spread (a deterministic fit gone still): no move is 0, any other infinite
                noise = spread[name].sqrt()
                t = torch.where(noise > 0, move.abs() / noise.clamp(min=1e-300),
                                torch.where(move == 0, 0.0, math.inf).double())
            else:
                t = torch.zeros_like(move)
            out[name] = (move, t, move.abs() / self.reach)
        return out

    def state(self) -> dict:
        """What a checkpoint keeps of the tracker (a resumed run carries on summing)."""
        return {"sums": {k: [{n: v.clone() for n, v in s.items()} for s in batches] for k, batches in self.sums.items()},
                "counts": {k: list(c) for k, c in self.counts.items()}, "reach": self.reach}

    def load(self, state: dict) -> None:
        self.sums = {k: [dict(s) for s in batches] for k, batches in state["sums"].items()}
        self.counts = {k: list(c) for k, c in state["counts"].items()}
        self.reach = float(state["reach"])

    def describe(self) -> str:
        (a0, a1), (b0, b1) = self.windows["early"], self.windows["late"]
        return f"steps {a0 + 1}-{a1} against {b0 + 1}-{b1}"


def _with_params(values: dict):
    """A context that loads ``values`` (name -> unconstrained) into the store and puts the current ones back after."""
    store = pyro.get_param_store()

    class _Swap:
        def __enter__(self):
            self.saved = {}
            with torch.no_grad():
                for name, value in values.items():
                    if name in store:
                        param = store.get_param(name).unconstrained()
                        self.saved[name] = param.detach().clone()
                        param.copy_(value)
            return self

        def __exit__(self, *exc):
            with torch.no_grad():
                for name, value in self.saved.items():
                    store.get_param(name).unconstrained().copy_(value)
            return False

    return _Swap()


def _supports(model, data: dict) -> dict:
    """Latent site -> the bijection from its unconstrained space (only sites with one)."""
    return prototype_of(model, data).supports


@torch.no_grad()
def _guide_moments(guide, data: dict, supports: dict, draws: int) -> dict:
    """Site -> (mean, sd) of the guide's draws in the site's unconstrained space, flattened; the same random numbers
    at every call (a fixed seed, the fit's streams put back after)."""
    collected: dict[str, list] = {}
    with kept_rng():
        torch.manual_seed(20_351)
        for _ in range(draws):
            trace = poutine.trace(guide).get_trace(**data)
            for name, transform in supports.items():
                if name in trace.nodes and trace.nodes[name]["type"] == "sample":
                    collected.setdefault(name, []).append(transform.inv(trace.nodes[name]["value"].detach()).reshape(-1))
    out = {}
    for name, values in collected.items():
        stacked = torch.stack(values).double()
        out[name] = (stacked.mean(0), stacked.std(0))
    return out


def _label(name: str, index: int, size: int) -> str:
    return name if size == 1 else f"{name}[{index}]"


def _masks(moves: dict, batches: int) -> dict[str, dict[str, torch.Tensor]]:
    """``{"running": ..., "travelling": ...}``, each name -> a mask of entries: those at ``DRIFT_PACE`` of the reach
    or more, and those or the ones moved beyond their jitter (*t* at least :func:`t_threshold` of all the entries)."""
    threshold = t_threshold(sum(move.numel() for move, _, _ in moves.values()), batches)
    running = {name: pace >= DRIFT_PACE for name, (_, _, pace) in moves.items()}
    return {"running": running,
            "travelling": {name: (t >= threshold) | running[name] for name, (_, t, _) in moves.items()}}


def _largest(values: dict[str, torch.Tensor]) -> tuple[float, str | None]:
    """The largest entry of name -> flat tensor, and where (``"name[index]"``); NaN entries count as 0."""
    best, at = 0.0, None
    for name, v in values.items():
        v = torch.nan_to_num(v.double(), nan=0.0)
        if v.numel():
            j = int(v.argmax())
            if at is None or float(v[j]) > best:
                best, at = float(v[j]), _label(name, j, v.numel())
    return best, at


def _guide_drift(tracker: DriftTracker, model, guide, data: dict, draws: int) -> dict:
    supports, moves = _supports(model, data), tracker.moves()
    early_means, masks = tracker.means("early"), _masks(moves, tracker.batches)
    params = {"early": early_means, "late": tracker.means("late")}
    for kind, mask in masks.items():  # the early means with the masked entries moved to the late means
        params[kind] = {n: v + (mask[n].reshape(v.shape) * moves[n][0].reshape(v.shape)).to(v.dtype) if n in mask else v
                        for n, v in early_means.items()}
    answers = {}
    for key, values in params.items():
        with _with_params(values):
            answers[key] = _guide_moments(guide, data, supports, draws)
    record = {"drift_units": "guide sds"}
    for kind, key in (("late", "drift"), ("running", "drift_running"), ("travelling", "drift_travelling")):
        loc, scale = {}, {}
        for name, (mean_late, sd_late) in answers["late"].items():
            if name in answers["early"] and name in answers[kind]:
                (mean_early, sd_early), (mean, sd) = answers["early"][name], answers[kind][name]
                loc[name], scale[name] = (mean - mean_early).abs() / sd_late, (sd / sd_early).log().abs()
        (moved, at), (changed, sd_at) = _largest(loc), _largest(scale)
        if kind == "late":
            record["drift"], record["drift_at"], record["drift_sd"], record["drift_sd_at"] = moved, at, changed, sd_at
        else:
            record[key], record[f"{key}_at"], record[f"{key}_kind"] = (
                (moved, at, "drift") if moved >= changed else (changed, sd_at, "drift_sd"))
    return record


def _curvature(loss, model, guide, data: dict) -> dict | None:
    """Name -> the diagonal of the loss's Hessian in each optimised parameter's unconstrained entries, flattened
    (None for more than ``HESSIAN_MAX`` entries)."""
    with poutine.trace(param_only=True) as capture:
        value = loss.differentiable_loss(model, guide, **data)
    params = {name: site["value"].unconstrained() for name, site in capture.trace.nodes.items()}
    if sum(p.numel() for p in params.values()) > HESSIAN_MAX:
        return None
    tensors = list(params.values())
    grads = torch.autograd.grad(value, tensors, create_graph=True, allow_unused=True)
    out = {}
    for k, (name, g) in enumerate(zip(params, grads)):
        diagonal = torch.zeros(tensors[k].numel(), dtype=torch.float64, device=tensors[k].device)  # a parameter the loss ignores: flat
        if g is not None and g.requires_grad:
            flat = g.reshape(-1)
            for i in range(flat.numel()):
                (row,) = torch.autograd.grad(flat[i], tensors[k], retain_graph=True, allow_unused=True)
                diagonal[i] = 0.0 if row is None else float(row.reshape(-1)[i])
        out[name] = diagonal
    return out


def _point_drift(tracker: DriftTracker, model, guide, loss, data: dict, sites) -> dict:
    curvature = _curvature(loss, model, guide, data)
    if curvature is None:
        return {"drift_units": f"not measured (over {HESSIAN_MAX} parameters)"}
    moves = {n: m for n, m in tracker.moves().items() if n in curvature}
    masks = _masks(moves, tracker.batches)
    # AutoDelta names its parameters "AutoDelta.<site>": label the site where there is one
    label = {n: next((s for s in sites if n == s or n.endswith("." + s)), n) for n in moves}
    shift = {n: move.abs() * curvature[n].clamp(min=0.0).sqrt() for n, (move, _, _) in moves.items()}
    record = {"drift_units": "Laplace sds"}
    record["drift"], record["drift_at"] = _largest({label[n]: v for n, v in shift.items()})
    for kind, mask in masks.items():
        key = f"drift_{kind}"
        record[key], record[f"{key}_at"] = _largest({label[n]: shift[n] * mask[n] for n in moves})
        record[f"{key}_kind"] = "drift"
    return record


def drift_record(tracker: DriftTracker, model, guide, data: dict, *, point: bool, loss=None,
                 draws: int = DRAWS) -> DriftRecord:
    """What the check measured, for ``Draws.info``: ``drift`` (the largest move of the answer between the windows, in
    its own sds; NaN where not measured), ``drift_at`` (the scalar that moved most, e.g. ``"b[1]"``), for a guide with
    scales ``drift_sd`` and ``drift_sd_at`` (the largest ``|log sd ratio|``); ``drift_running``,
    ``drift_travelling`` and their ``_at`` and ``_kind`` (``"drift"``, a mean, or ``"drift_sd"``): the largest move
    the running entries make, and the drifting ones (:func:`still_moving` reads these two); ``drift_pace``, ``drift_t`` and their ``_at``: the
    largest pace and *t* of an optimised parameter entry (:meth:`DriftTracker.moves`); ``drift_units`` and ``drift_window``
    (``"steps 1401-1600 against 1801-2000"``).  ``point``: a point fit (needs ``loss``, the fit's ELBO, for the
    curvature).  The fit's parameters and random streams are as they were after."""
    record = {"drift_window": tracker.describe()}
    if not tracker.measurable():
        return DriftRecord(**record, drift_units="not measured (run too short or stopped)")
    moves = tracker.moves()
    record["drift_pace"], record["drift_pace_at"] = _largest({n: pace for n, (_, _, pace) in moves.items()})
    record["drift_t"], record["drift_t_at"] = _largest({n: t for n, (_, t, _) in moves.items()})
    with kept_rng():
        if point:
            sites = list(_supports(model, data))
            return DriftRecord(**record, **_point_drift(tracker, model, guide, loss, data, sites))
        return DriftRecord(**record, **_guide_drift(tracker, model, guide, data, draws))
