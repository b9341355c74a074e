"""The device a fit runs on: ``"cpu"`` (the default), ``"cuda"``, ``"cuda:1"``, ``"mps"``.

:func:`pyro_bdl.fit` moves the data there (:func:`move_to`) before anything else; the model's and the guide's
parameters are made from the data (the zoo's models and the engine make every tensor on the device of the
tensors they are given), so they follow.  Fits are saved on the CPU, and load on a machine without the device.

Example
-------
>>> resolve_device("cpu")
device(type='cpu')
>>> resolve_device("tpu")
Traceback (most recent call last):
...
ValueError: unknown device 'tpu': use cpu, cuda, cuda:N or mps
"""

from __future__ import annotations

import torch

__all__ = ["move_to", "resolve_device"]


def resolve_device(device) -> torch.device:
    """``device`` (text, a :class:`torch.device` or None for the CPU) as a device this machine has; a
    ``ValueError`` naming what is missing otherwise."""
    if device is None:
        return torch.device("cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device '{device}': use cpu, cuda, cuda:N or mps") from None
    if resolved.type == "cpu":
        return resolved
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device '{device}' is not available: this machine has no CUDA GPU that torch can use "
                             f"(torch {torch.__version__}, torch.cuda.is_available() is False)")
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"device '{device}' is not available: this machine has {count} CUDA GPU(s), "
                             f"cuda:0 to cuda:{count - 1}")
        return resolved
    if resolved.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device '{device}' is not available: torch.backends.mps.is_available() is False")
        return resolved
    raise ValueError(f"unknown device '{device}': use cpu, cuda, cuda:N or mps")


def move_to(value, device: torch.device):
    """``value`` with every tensor in it (in dicts, lists and tuples too) on ``device``; other values as they are."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: move_to(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(move_to(v, device) for v in value)
    return value
