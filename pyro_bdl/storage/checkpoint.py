"""Checkpoints: interrupt a long fit and resume it without losing the work done.

A checkpoint holds tensors, numbers and strings only and is read back with
``torch.load(..., weights_only=True)``: nothing is unpickled.  It carries a fingerprint of
the run (model, method, seed, settings, options, data) and is refused for any other run.
Writes go through a temporary file and a rename, so a checkpoint is never half-written.

Example
-------
>>> import tempfile, pathlib, torch
>>> path = pathlib.Path(tempfile.mkdtemp()) / "run.ckpt"
>>> ck = Checkpoint(path, fingerprint="blr/svi/seed=0")
>>> ck.save({"step": 10, "losses": torch.zeros(10)})
>>> Checkpoint(path, fingerprint="blr/svi/seed=0").load()["step"]
10
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import torch

from pyro_bdl.data.table import DataError
from pyro_bdl.storage.files import atomic_write

__all__ = ["Checkpoint", "fingerprint", "rng_state", "set_rng_state", "kept_rng"]


def fingerprint(**parts) -> str:
    """A short hash of what identifies a run; tensors are hashed by their bytes."""
    h = hashlib.sha256()
    for key in sorted(parts):
        value = parts[key]
        h.update(key.encode())
        if isinstance(value, torch.Tensor):
            h.update(value.detach().cpu().contiguous().numpy().tobytes())
            h.update(str(tuple(value.shape)).encode())
        else:
            h.update(json.dumps(value, sort_keys=True, default=_exact).encode())
    return h.hexdigest()[:16]


def _exact(value):
    """JSON for what JSON cannot hold: a tensor inside a part (e.g. an option's weights) by every value."""
    return value.tolist() if isinstance(value, torch.Tensor) else repr(value)


def rng_state() -> dict:
    """The state of every random stream a run draws from (torch's, numpy's and Python's global generators), as
    tensors, numbers and strings a checkpoint can hold (no pickle): a resumed run goes on drawing exactly what
    the uninterrupted run draws (the minibatches a plate subsamples, the guide's draws, MCMC's momenta).

    >>> state = rng_state(); a = torch.rand(2); set_rng_state(state); torch.equal(a, torch.rand(2))
    True
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    cuda = ({"cuda": torch.stack(torch.cuda.get_rng_state_all())}
            if torch.cuda.is_available() and torch.cuda.is_initialized() else {})
    return {"torch": torch.get_rng_state(), **cuda,
            "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64, device="cpu"),
                       "gauss_next": gauss_next}}


def set_rng_state(state) -> None:
    """Restore what :func:`rng_state` saved (a bare tensor: torch's state alone, as older checkpoints hold)."""
    if isinstance(state, torch.Tensor):
        torch.set_rng_state(state)
        return
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss_next"]))


@contextlib.contextmanager
def kept_rng():
    """Run a block without moving any random stream: the states are put back after it."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


class Checkpoint:
    """One checkpoint file for one run (``fingerprint`` names the run)."""

    def __init__(self, path: str | Path, fingerprint: str, writable: bool = True):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.writable = writable

    def read_only(self) -> Checkpoint:
        """The same checkpoint for a process that resumes from it but leaves saving to another (the processes of a
        data-parallel launch all read process 0's)."""
        return Checkpoint(self.path, self.fingerprint, writable=False)

    def for_process(self, rank: int) -> Checkpoint:
        """A checkpoint of this run's process ``rank`` alone (``NAME.rankR.pt`` beside this one): for work split
        over the processes of a launch (ensemble members, MCMC chains), where each saves what it did."""
        return Checkpoint(self.path.with_name(f"{self.path.stem}.rank{rank}{self.path.suffix}"), self.fingerprint,
                          self.writable)

    def load(self) -> dict | None:
        """The saved state, or None when there is no checkpoint yet."""
        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, weights_only=True)
            if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
                raise ValueError("not a checkpoint of pyro-bdl")
        except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a damaged file
            raise DataError(f"{self.path}: not a readable checkpoint ({type(exc).__name__}: {exc}); delete it "
                            "to start the run afresh") from None
        if state.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"{self.path} is a checkpoint of a different run (model, method, seed, settings or data "
                "differ); delete it, or rerun with the settings that made it"
            )
        return state["state"]

    def save(self, state: dict) -> None:
        if self.writable:
            atomic_write(self.path, lambda tmp: torch.save({"fingerprint": self.fingerprint, "state": state}, tmp))

    def clear(self) -> None:
        if self.writable:
            self.path.unlink(missing_ok=True)
            for part in self.path.parent.glob(f"{self.path.stem}.rank*{self.path.suffix}"):
                part.unlink(missing_ok=True)
