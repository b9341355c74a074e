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

import hashlib
import json
from pathlib import Path

import torch

from .files import atomic_write

__all__ = ["Checkpoint", "fingerprint"]


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
            h.update(json.dumps(value, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:16]


class Checkpoint:
    """One checkpoint file for one run (``fingerprint`` names the run)."""

    def __init__(self, path: str | Path, fingerprint: str):
        self.path = Path(path)
        self.fingerprint = fingerprint

    def load(self) -> dict | None:
        """The saved state, or None when there is no checkpoint yet."""
        if not self.path.exists():
            return None
        state = torch.load(self.path, weights_only=True)
        if state.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"{self.path} is a checkpoint of a different run (model, method, seed, settings or data "
                "differ); delete it, or rerun with the settings that made it"
            )
        return state["state"]

    def save(self, state: dict) -> None:
        atomic_write(self.path, lambda tmp: torch.save({"fingerprint": self.fingerprint, "state": state}, tmp))

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
