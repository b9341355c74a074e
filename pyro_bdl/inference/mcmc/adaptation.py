r"""The warm-up of the zoo's sampler: Stan's adaptation of step size and mass matrix, per chain, and the initial points.

Dual averaging of the step size towards ``target_accept`` (gamma 0.05, t0 10, kappa 0.75), and the inverse mass
matrix (diagonal, or dense with ``full_mass``) estimated from the draws of windows of doubling length between an
initial buffer of 75 and a final one of 50 draws (15 % / 10 % of a short warm-up), regularised towards 1e-3 I as
Stan does; after each window the step size is found again (Hoffman & Gelman's heuristic) and dual averaging
restarts.  Each chain adapts its own step size and mass matrix.  :class:`WarmUp` runs it draw by draw for the
sampling loop (:mod:`pyro_bdl.inference.mcmc.sampler`), its state saved with the sampler's.

Example
-------
>>> adaptation_windows(200)  # mass-matrix windows (first, last draw)
[(75, 99), (100, 149)]
>>> import torch
>>> averaging = DualAveraging(torch.ones(2, dtype=torch.float64), target=0.8)
>>> step = averaging.update(torch.tensor([0.95, 0.3], dtype=torch.float64))  # larger where accepted more
>>> bool(step[0] > step[1])
True
"""

from __future__ import annotations

import math

import torch

from pyro_bdl.inference.mcmc.dynamics import energy_error, select

__all__ = ["WarmUp", "adaptation_windows", "DualAveraging", "MassWindow", "reasonable_step_size", "initial_points"]


def adaptation_windows(warmup: int) -> list[tuple[int, int]]:
    """Stan's slow (mass matrix) windows as (first, last) warm-up iterations, both included.

    >>> adaptation_windows(500)
    [(75, 99), (100, 149), (150, 249), (250, 449)]
    """
    if warmup < 20:
        return []
    start, end, window = 75, 50, 25
    if start + end + window > warmup:
        start, end = int(0.15 * warmup), int(0.1 * warmup)
        window = warmup - start - end
    windows, first, last_start = [], start, warmup - end
    while first < last_start:
        size = window
        if 3 * size <= last_start - first:
            window = 2 * size
        else:
            size = last_start - first
        windows.append((first, first + size - 1))
        first += size
    return windows


class DualAveraging:
    """Nesterov dual averaging of log step size (Hoffman & Gelman 2014, section 3.2), per chain."""

    def __init__(self, step_size, target):
        self.target = target
        self.restart(step_size)

    def restart(self, step_size):
        self.mu = torch.log(10 * step_size)
        self.t = 0
        self.h_bar = torch.zeros_like(step_size)
        self.x_bar = torch.zeros_like(step_size)

    def update(self, accept):
        """-> the step size for the next warm-up draw."""
        self.t += 1
        eta = 1.0 / (self.t + 10)
        self.h_bar = (1 - eta) * self.h_bar + eta * (self.target - accept)
        log_step = self.mu - math.sqrt(self.t) / 0.05 * self.h_bar
        weight = self.t ** -0.75
        self.x_bar = weight * log_step + (1 - weight) * self.x_bar
        return torch.exp(log_step)

    def final(self):
        return torch.exp(self.x_bar)

    def state(self) -> dict:
        return {"mu": self.mu, "t": self.t, "h_bar": self.h_bar, "x_bar": self.x_bar}

    def load(self, state: dict) -> None:
        self.mu, self.t, self.h_bar, self.x_bar = state["mu"], int(state["t"]), state["h_bar"], state["x_bar"]


def reasonable_step_size(dyn, z, u, g, step_size, generator):
    """Hoffman & Gelman's heuristic, per chain: double (or halve) the step until the acceptance of one
    leapfrog step crosses 0.8 (Pyro's and Stan's threshold)."""
    threshold = math.log(0.8)

    def log_accept(step):
        r = dyn.momentum(generator, z)
        zn, rn, un, gn = dyn.leapfrog(z, r, g, step.unsqueeze(-1).to(z.dtype))
        return -energy_error(dyn.inverse_mass, un, rn, u + dyn.kinetic(r))

    direction = torch.where(log_accept(step_size) > threshold, 2.0, 0.5).to(step_size.dtype)
    searching = torch.ones_like(step_size, dtype=torch.bool)
    for _ in range(100):
        trial = torch.where(searching, step_size * direction, step_size)
        still = torch.where(log_accept(trial) > threshold, 2.0, 0.5).to(step_size.dtype) == direction
        step_size = trial
        searching &= still & (step_size > 1e-10) & (step_size < 1e10)
        if not bool(searching.any()):
            break
    return step_size


class MassWindow:
    """Welford estimate of the draws' covariance (or variance) in one window, per chain."""

    def __init__(self, chains, dim, dense, device=None):
        self.dense, self.n = dense, 0
        self.mean = torch.zeros(chains, dim, dtype=torch.float64, device=device)
        self.m2 = torch.zeros((chains, dim, dim) if dense else (chains, dim), dtype=torch.float64, device=device)

    def add(self, z):
        z = z.double()
        self.n += 1
        delta = z - self.mean
        self.mean += delta / self.n
        delta2 = z - self.mean
        self.m2 += delta.unsqueeze(-1) * delta2.unsqueeze(-2) if self.dense else delta * delta2

    def state(self) -> dict:
        return {"dense": self.dense, "n": self.n, "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_state(cls, state: dict | None):
        if state is None:
            return None
        window = cls.__new__(cls)
        window.dense, window.n = bool(state["dense"]), int(state["n"])
        window.mean, window.m2 = state["mean"], state["m2"]
        return window

    def inverse_mass(self, dtype):
        """Stan's regularised estimate: n/(n+5) cov + 1e-3 * 5/(n+5) I."""
        n = self.n
        cov = self.m2 / max(n - 1, 1)
        shrink = 1e-3 * 5.0 / (n + 5.0)
        if self.dense:
            eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
            return (n / (n + 5.0) * cov + shrink * eye).to(dtype)
        return (n / (n + 5.0) * cov + shrink).to(dtype)


def initial_points(dyn, chains, dim, dtype, generator, tries=100):
    """Uniform(-2, 2) in unconstrained space (Pyro's init_to_uniform), redrawn where U or its gradient
    is not finite."""
    z = torch.rand(chains, dim, generator=generator, dtype=dtype, device=generator.device) * 4 - 2
    for _ in range(tries):
        u, g = dyn.value_and_grad(z)
        bad = ~(torch.isfinite(u) & torch.isfinite(g).all(-1))
        if not bool(bad.any()):
            return z, u, g
        z = select(bad, torch.rand(chains, dim, generator=generator, dtype=dtype, device=generator.device) * 4 - 2, z)
    raise ValueError(f"no initial point with a finite potential and gradient in {tries} draws from "
                     "Uniform(-2, 2) in unconstrained space: check the model's log density")


class WarmUp:
    """Stan's warm-up of ``warmup`` draws for ``chains`` chains in ``dim`` coordinates of ``dtype``, draw by draw:
    the step size by dual averaging from ``step_size`` (chains,) towards ``target_accept``, the mass matrix (dense
    or diagonal) from the draws of each window (:func:`adaptation_windows`)."""

    def __init__(self, warmup: int, chains: int, dim: int, dtype, dense: bool, step_size, target_accept: float):
        self.warmup, self.chains, self.dim, self.dtype, self.dense = warmup, chains, dim, dtype, dense
        self.averaging = DualAveraging(step_size, target_accept)
        self.windows = {last: first for first, last in adaptation_windows(warmup)}
        self.window_firsts = set(self.windows.values())
        self.mass_window = None

    def adapt(self, i: int, dyn, z, u, g, accept, generator):
        """After warm-up draw ``i`` (at ``z``, ``u``, ``g``, with acceptance statistics ``accept`` (chains,)):
        the mass matrix set on ``dyn`` where a window ends; -> the step size for the next draw (chains,)."""
        step_size = self.averaging.update(accept)
        if i in self.window_firsts:
            self.mass_window = MassWindow(self.chains, self.dim, self.dense, device=z.device)
        if self.mass_window is not None:
            self.mass_window.add(z)
        if i in self.windows:
            dyn.set_mass(self.mass_window.inverse_mass(self.dtype))
            self.mass_window = None
            step_size = reasonable_step_size(dyn, z, u, g, step_size, generator)
            self.averaging.restart(step_size)
        if i == self.warmup - 1:
            step_size = self.averaging.final()
        return step_size

    def state(self) -> dict:
        """What a checkpoint keeps (tensors and numbers): ``averaging`` and ``mass_window``."""
        return {"averaging": self.averaging.state(),
                "mass_window": None if self.mass_window is None else self.mass_window.state()}

    def load(self, state: dict) -> None:
        """Goes on from :meth:`state` (a dict holding at least its keys)."""
        self.averaging.load(state["averaging"])
        self.mass_window = MassWindow.from_state(state["mass_window"])
