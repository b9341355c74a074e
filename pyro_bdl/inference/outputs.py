"""Typed records: what a method returns beside its draws, and how a fit's checks judged it.

Each method module declares its record beside its runner (:class:`~pyro_bdl.inference.drift.DriftRecord` for the
optimisers, :class:`~pyro_bdl.inference.mcmc.draws.ChainInfo` for the samplers, ...) and each diagnosis its report
(:mod:`pyro_bdl.inference.diagnose`): dataclasses whose documented fields are read by name, never dict keys.

A record's fields are its ``metrics.json`` keys: :meth:`Record.to_metrics` writes them flat, beside the other
records of the fit, and :meth:`Record.from_metrics` reads them back (a field that names another record is
written flat too, and read back from the same keys).  :func:`to_json` is the one conversion to what JSON holds.

Example
-------
>>> from dataclasses import dataclass
>>> @dataclass
... class Demo(Record):
...     ess: float
...     proposal: str | None = None
>>> Demo(12.5, "prior").to_metrics()
{'ess': 12.5, 'proposal': 'prior'}
>>> Demo.from_metrics({"ess": 12.5, "other": 1})
Demo(ess=12.5, proposal=None)
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np
import torch

__all__ = ["Record", "MethodInfo", "to_json", "same_metrics"]


def to_json(value):
    """``value`` as JSON holds it: numbers, text, booleans, None, lists and string-keyed dicts; NumPy scalars and
    0-d tensors as numbers; NaN and infinities as None; any other object as its repr."""
    if isinstance(value, Record):
        return to_json(value.to_metrics())
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.generic) or isinstance(value, torch.Tensor) and value.dim() == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def same_metrics(a: Record | None, b: Record | None) -> bool:
    """Whether two records hold the same values as ``metrics.json`` writes them (NaN and None alike)."""
    return type(a) is type(b) and (a is None or to_json(a) == to_json(b))


@dataclass
class Record:
    """A typed record of a fit, written flat into ``metrics.json`` under its fields' names.

    Subclasses are dataclasses; a field typed as another :class:`Record` is flattened into this one's keys.
    ``HEADLINE`` names the fields a user reads first (``pyro-bdl fit`` prints them).
    """

    HEADLINE: ClassVar[tuple[str, ...]] = ()

    def to_metrics(self) -> dict:
        """The fields, name -> value (a nested record's fields in its place), for ``metrics.json``."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Record):
                out.update(value.to_metrics())
            elif f.name in _nested(type(self)):
                continue  # a nested record that is absent: none of its keys
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_metrics(cls, written: Mapping[str, Any]):
        """The record read back from what :meth:`to_metrics` wrote (other keys ignored; a float field JSON stored as
        null is NaN again; a missing field takes its default, or None)."""
        hints, kwargs = _hints(cls), {}
        for f in dataclasses.fields(cls):
            if f.name in _nested(cls):
                nested = _nested(cls)[f.name]
                kwargs[f.name] = nested.from_metrics(written) if any(
                    g.name in written for g in dataclasses.fields(nested)) else None
                continue
            if f.name not in written:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    kwargs[f.name] = math.nan if _is_float(hints[f.name]) else None
                continue
            value = written[f.name]
            kwargs[f.name] = math.nan if value is None and _is_float(hints[f.name]) else value
        return cls(**kwargs)

    def headline(self) -> dict:
        """The fields a user reads first (``HEADLINE``), nested records' included."""
        out = {name: getattr(self, name) for name in self.HEADLINE}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Record):
                out.update(value.headline())
        return out


@dataclass
class MethodInfo(Record):
    """The base of what a method's runner returns beside its draws (``Draws.info``).

    ``EVIDENCE``: for a method that estimates the log evidence ``log p(y)`` of the data it is given, what kind of
    estimate it is, in words (read by :func:`pyro_bdl.workflows.evidence.evidence`); the value is its
    :meth:`evidence_estimate`.  None: it estimates none.
    """

    EVIDENCE: ClassVar[str | None] = None

    def evidence_estimate(self) -> float | None:
        """The method's estimate of ``log p(y)`` (natural log, the units the model works in), or None."""
        return None


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _is_float(hint) -> bool:
    return hint is float or float in typing.get_args(hint)


def _nested(cls) -> dict:
    """Field name -> record type, for the fields of ``cls`` that hold another record (``X`` or ``X | None``)."""
    out = {}
    for name, hint in _hints(cls).items():
        options = typing.get_args(hint) or (hint,)
        kind = next((o for o in options if isinstance(o, type) and issubclass(o, Record)), None)
        if kind is not None:
            out[name] = kind
    return out
