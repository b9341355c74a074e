r"""Is the answer still moving when an optimisation run ends?  The drift check of svi-type and point fits (issue 35).

A loss can look settled while the parameters still travel: Adam moves a parameter by at most about the learning rate
per step, so an intercept far from where optimisation starts is still on its way when a decaying rate has made the
steps, and the changes of the loss, small.  The check compares where the fit was late in the run with where it ended:

* :class:`DriftTracker` keeps the running mean of every optimised parameter (unconstrained) over two windows of the
  run, ``EARLY`` (by default steps 70-80 %) and ``LATE`` (the last 10 %); averaging over a window removes most of
  the optimiser's own jitter (the window means of a parameter that only jitters differ by a small fraction of its
  posterior sd);
* :func:`drift_record` measures the move between the two window means in the answer's own units:

  - a guide with scales (``svi``, ``svi-meanfield``, ``bbvi``, a user's guide): the guide at each window mean is drawn
    ``DRAWS`` times with the same random numbers (so the draws' own noise cancels) and mapped to each latent site's
    unconstrained space; ``drift`` is the largest move of a scalar's mean over its sd in the late window's guide,
    ``drift_sd`` the largest change of a scalar's sd, as ``|log(sd_late / sd_early)|``;
  - a point fit (``map``, ``mle``): ``drift`` is the largest move of an unconstrained parameter in units of
    ``1 / sqrt(H_jj)``, the loss's curvature there at the end (the Laplace sd with the others held fixed); computed
    for up to ``HESSIAN_MAX`` parameters (one Hessian-vector product each), not measured for more.

A scalar counts as still moving when it moved at least ``DRIFT_MIN`` of its sd and went at ``DRIFT_PACE`` or more of
the optimiser's *reach* doing so (:attr:`DriftTracker.reach`, the sum of the learning rates between the windows: a
parameter whose gradient keeps its sign travels about that far, one jittering about its optimum goes nowhere);
:func:`still_moving` reads the record, :func:`pyro_bdl.posterior.diagnostics.svi_report` warns (measurements:
``benchmarks/RESULTS.md``, "SVI defaults on user models (issue 35)").

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
>>> record["drift_at"], record["drift"] > 1.0   # 300 steps at 0.005 from 0 towards 9: still on its way
('mu', True)
"""

from __future__ import annotations

import math

import pyro
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from torch.distributions import biject_to

from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["DriftTracker", "drift_record", "still_moving", "EARLY", "LATE", "DRAWS", "HESSIAN_MAX", "DRIFT_PACE",
           "DRIFT_MIN"]

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
#: An answer is still moving when some scalar of it moved at least ``DRIFT_MIN`` of its own sd between the windows (or
#: its sd changed by that much, as a log ratio) and went at least ``DRIFT_PACE`` of the optimiser's reach doing so
#: (travelling, as a parameter does whose gradient keeps its sign; one jittering about its optimum goes nowhere).
#: Chosen so that no fit of the converged families warns and the too-short ones do: benchmarks/RESULTS.md, "SVI
#: defaults on user models (issue 35)".
DRIFT_PACE = 0.3
DRIFT_MIN = 0.1


def still_moving(record) -> bool:
    """Whether a :func:`drift_record` says the answer was still travelling when the run ended (False where it was
    not measured).

    >>> still_moving({"drift_travelling": 0.8}), still_moving({"drift_travelling": 0.05})
    (True, False)
    """
    value = record.get("drift_travelling", math.nan)
    return bool(math.isfinite(value) and value >= DRIFT_MIN)


def _window(fraction: tuple[float, float], steps: int) -> tuple[int, int]:
    return int(round(fraction[0] * steps)), int(round(fraction[1] * steps))


class DriftTracker:
    """The running means of the param store's unconstrained parameters over the steps of an early and a late window
    of a run of ``steps`` steps; :func:`pyro_bdl.inference.svi.optimise` calls :meth:`update` after every step.

    ``windows``: ``{"early": (first, end), "late": (first, end)}``, step indices (end excluded).
    """

    def __init__(self, steps: int, early: tuple[float, float] = EARLY, late: tuple[float, float] = LATE):
        self.steps = int(steps)
        self.windows = {"early": _window(early, steps), "late": _window(late, steps)}
        self.sums: dict[str, dict[str, torch.Tensor]] = {"early": {}, "late": {}}
        self.counts = {"early": 0, "late": 0}
        #: the sum of the learning rates of the steps between the windows' middles: how far Adam could have moved a
        #: parameter between the two means (a step moves each by about the rate, at most, when its gradient keeps
        #: its sign)
        self.reach = 0.0

    def update(self, step: int, rate: float = math.nan) -> None:
        """Add the parameters after step ``step`` (0-based), taken at learning rate ``rate``, to the window it falls
        in, if any."""
        (a0, a1), (b0, b1) = self.windows["early"], self.windows["late"]
        if (a0 + a1) / 2 <= step < (b0 + b1) / 2:
            self.reach += float(rate)
        for key, (first, end) in self.windows.items():
            if first <= step < end:
                store = pyro.get_param_store()
                sums = self.sums[key]
                with torch.no_grad():
                    for name in store.keys():
                        value = store.get_param(name).unconstrained().detach()
                        if name in sums and sums[name].shape == value.shape:
                            sums[name] += value
                        else:
                            sums[name] = value.clone()
                self.counts[key] += 1

    def means(self, key: str) -> dict[str, torch.Tensor]:
        """Name -> the window's mean of that unconstrained parameter (empty if the window saw no step)."""
        count = self.counts[key]
        return {name: total / count for name, total in self.sums[key].items()} if count else {}

    def measurable(self) -> bool:
        """Whether both windows saw enough steps to compare them."""
        return all(count >= MIN_WINDOW for count in self.counts.values())

    def state(self) -> dict:
        """What a checkpoint keeps of the tracker (a resumed run carries on summing)."""
        return {"sums": {k: {n: v.clone() for n, v in s.items()} for k, s in self.sums.items()},
                "counts": dict(self.counts), "reach": self.reach}

    def load(self, state: dict) -> None:
        self.sums = {k: dict(s) for k, s in state["sums"].items()}
        self.counts = dict(state["counts"])
        self.reach = float(state["reach"])

    def pace(self) -> tuple[float, str | None]:
        """The largest move of an unconstrained parameter entry between the window means over :attr:`reach`, and
        which (``"name[index]"``): near 1, a parameter still goes as fast as the optimiser lets it (its gradient
        kept its sign: travelling, not jittering about an optimum); near 0, it stayed where it was."""
        early, late = self.means("early"), self.means("late")
        worst, worst_at = 0.0, None
        for name in early.keys() & late.keys():
            moved = (late[name] - early[name]).reshape(-1).double().abs()
            if moved.numel():
                j = int(moved.argmax())
                if float(moved[j]) >= worst:
                    worst, worst_at = float(moved[j]), _label(name, j, moved.numel())
        return (worst / self.reach if self.reach > 0 else math.nan), worst_at

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
    with poutine.block(), torch.no_grad():
        trace = poutine.trace(model).get_trace(**data)
    out = {}
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site) or site["infer"].get("is_auxiliary"):
            continue
        try:
            out[name] = biject_to(site["fn"].support)
        except NotImplementedError:  # a discrete site: nothing to measure a move in
            continue
    return out


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


class _Worst:
    """The largest of a measure over the scalars seen, and where: ``drift`` (any pace) and ``travelling`` (among
    the scalars that went at ``DRIFT_PACE`` of the reach or more)."""

    def __init__(self):
        self.values = {"drift": (0.0, None), "drift_sd": (0.0, None), "drift_travelling": (0.0, None)}
        self.travelling_kind = None  # which measure the travelling one is: "drift" (a mean) or "drift_sd"

    def see(self, key: str, name: str, moved: torch.Tensor, pace: torch.Tensor) -> None:
        """``moved``: the scalars' moves (flat) by the measure ``key``; ``pace``: each one's move over the reach."""
        moved = torch.nan_to_num(moved.double(), nan=0.0)  # an sd of 0 in both windows: a point, not moving
        for target, values in ((key, moved), ("drift_travelling", torch.where(pace >= DRIFT_PACE, moved, 0.0))):
            j = int(values.argmax())
            if float(values[j]) > self.values[target][0] or self.values[target][1] is None:
                self.values[target] = (float(values[j]), _label(name, j, values.numel()))
                if target == "drift_travelling":
                    self.travelling_kind = key

    def record(self, keys) -> dict:
        out = {"drift_travelling_kind": self.travelling_kind}
        for key in keys:
            out[key], out[f"{key}_at"] = self.values[key]
        return out


def _guide_drift(tracker: DriftTracker, model, guide, data: dict, draws: int) -> dict:
    supports = _supports(model, data)
    with _with_params(tracker.means("early")):
        early = _guide_moments(guide, data, supports, draws)
    with _with_params(tracker.means("late")):
        late = _guide_moments(guide, data, supports, draws)
    worst, reach = _Worst(), tracker.reach
    for name, (mean_late, sd_late) in late.items():
        if name not in early:
            continue
        mean_early, sd_early = early[name]
        # the pace of a mean is its move over the reach (a guide's location is a parameter Adam steps); that of an sd
        # the move of its log (an autoguide's scale parameter is about log sd where it is small)
        shift, ratio = (mean_late - mean_early).abs(), (sd_late / sd_early).log().abs()
        worst.see("drift", name, shift / sd_late, shift / reach)
        worst.see("drift_sd", name, ratio, torch.nan_to_num(ratio, nan=0.0) / reach)
    return {**worst.record(("drift", "drift_sd", "drift_travelling")), "drift_units": "guide sds"}


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
        diagonal = torch.zeros(tensors[k].numel(), dtype=torch.float64)  # a parameter the loss ignores: flat
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
        return {"drift": math.nan, "drift_at": None, "drift_travelling": math.nan, "drift_travelling_at": None,
                "drift_units": f"not measured (over {HESSIAN_MAX} parameters)"}
    early, late = tracker.means("early"), tracker.means("late")
    worst = _Worst()
    for name, h in curvature.items():
        if name not in early or name not in late:
            continue
        shift = (late[name] - early[name]).reshape(-1).double().abs()
        # AutoDelta names its parameters "AutoDelta.<site>": label the site where there is one
        site = next((s for s in sites if name == s or name.endswith("." + s)), name)
        worst.see("drift", site, shift * h.clamp(min=0.0).sqrt(), shift / tracker.reach)
    return {**worst.record(("drift", "drift_travelling")), "drift_units": "Laplace sds"}


def drift_record(tracker: DriftTracker, model, guide, data: dict, *, point: bool, loss=None,
                 draws: int = DRAWS) -> dict:
    """What the check measured, for ``Draws.info``: ``drift`` (the largest move of the answer between the windows, in
    its own sds; NaN where not measured), ``drift_at`` (the scalar that moved most, e.g. ``"b[1]"``), for a guide with
    scales ``drift_sd`` and ``drift_sd_at`` (the largest ``|log sd ratio|``); ``drift_travelling`` and its ``_at``:
    the largest of those moves among the scalars that went at ``DRIFT_PACE`` or more of the optimiser's reach
    (travelling, not jittering: :func:`still_moving` reads this one), ``drift_travelling_kind`` which measure it is
    (``"drift"``, a mean, or ``"drift_sd"``); ``drift_pace`` and its ``_at``: the largest
    move of an optimised parameter over the reach (:meth:`DriftTracker.pace`); ``drift_units`` and ``drift_window``
    (``"steps 1401-1600 against 1801-2000"``).  ``point``: a point fit (needs ``loss``, the fit's ELBO, for the
    curvature).  The fit's parameters and random streams are as they were after."""
    record = {"drift_window": tracker.describe()}
    if not tracker.measurable():
        return {**record, "drift": math.nan, "drift_at": None, "drift_travelling": math.nan, "drift_travelling_at": None,
                "drift_units": "not measured (run too short or stopped)"}
    record["drift_pace"], record["drift_pace_at"] = tracker.pace()
    with kept_rng():
        if point:
            sites = list(_supports(model, data))
            return {**record, **_point_drift(tracker, model, guide, loss, data, sites)}
        return {**record, **_guide_drift(tracker, model, guide, data, draws)}
