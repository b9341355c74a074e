"""A user's program that fails in a linear-algebra step, reported by site and value, not as a raw torch error.

A Gaussian process written by hand builds a kernel matrix from its hyperparameters and factors it (a
``MultivariateNormal``'s Cholesky factor); at some values the matrix is not positive-definite in floating point (a
lengthscale of e^20 makes every entry equal), and torch raises ``linalg.cholesky: ... not positive-definite`` or a
distribution's ``PositiveDefinite`` constraint check fails, from deep inside an optimiser's or a sampler's step.
:func:`named_failures` watches the program's sample sites while a fit runs and turns such an error, where it leaves
the fit, into a :class:`ProgramFailure` that names the last site the program reached, the values of its latent
sites there, and what to change.  Errors the engine handles itself (a slower path tried instead, a divergent
trajectory) never reach it.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def singular(x):
...     var = pyro.sample("var", dist.LogNormal(0.0, 1.0))
...     k = var * torch.ones(3, 3)  # rank one: no Cholesky factor
...     pyro.sample("y", dist.MultivariateNormal(torch.zeros(3), covariance_matrix=k, validate_args=False), obs=x)
>>> try:
...     with named_failures():
...         singular(torch.zeros(3))
... except ProgramFailure as error:
...     print(str(error)[:69])
the model's program failed in a linear-algebra step after its sample
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch
from pyro.poutine.messenger import Messenger

__all__ = ["ProgramFailure", "named_failures", "watching"]

#: The constraints whose failed check is a linear-algebra failure (a matrix that is not what a factorisation needs).
MATRIX_CONSTRAINTS = ("PositiveDefinite", "PositiveSemidefinite", "LowerCholesky", "CorrCholesky")


class ProgramFailure(ValueError):
    """The model's program failed in a linear-algebra step at the values it names."""


class _Sites(Messenger):
    """The latent sample sites the program has reached, in order, with their latest values (references only)."""

    def __init__(self, values: dict | None = None):
        super().__init__()
        self.values: dict = {} if values is None else values

    def _pyro_post_sample(self, msg):
        if msg["type"] == "sample" and not msg["is_observed"] and not msg["name"].startswith("_"):
            self.values.pop(msg["name"], None)
            self.values[msg["name"]] = msg["value"]


def _engine_roots() -> tuple[str, ...]:
    import pyro

    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # pyro_bdl/, above inference/
    return tuple(os.path.realpath(os.path.dirname(module.__file__)) + os.sep for module in (torch, pyro)) + (
        package + os.sep,)


def _generated(name: str) -> bool:
    """A file name of code that torch.fx generated (a traced graph) or Python's own frozen modules."""
    base = os.path.basename(name)
    return base.startswith("<eval_with_key") or base.startswith("<frozen")


def _in_program(error: BaseException) -> bool:
    """Whether the error passed through the model's own code: a frame in a file outside torch, Pyro and this
    package's engine (the zoo's models, in ``pyro_bdl/models``, count as programs)."""
    engine, models = _engine_roots(), os.path.join(os.path.dirname(__file__), os.pardir, "models")
    models = os.path.realpath(models) + os.sep
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        name = name if name.startswith("<") else os.path.realpath(name)
        if name.startswith(models) or not (name.startswith(engine) or name.startswith(sys.prefix) or
                                           name.startswith(sys.base_prefix) or _generated(name)):
            return True
        tb = tb.tb_next
    return False


def _is_linear_algebra(error: BaseException) -> bool:
    if isinstance(error, torch.linalg.LinAlgError):
        return True
    return isinstance(error, ValueError) and any(f"{name}()" in str(error) for name in MATRIX_CONSTRAINTS)


def _shown(value) -> str:
    """A value in a few characters: a scalar's number, else its shape and range (a batched or traced value that
    cannot be read: its shape, or nothing)."""
    try:
        value = value.detach()
        if value.numel() == 1:
            return f"{float(value):.4g}"
        return f"shape {tuple(value.shape)} in [{float(value.min()):.4g}, {float(value.max()):.4g}]"
    except Exception:  # noqa: BLE001 - a value inside vmap or a trace has no number to show
        return "(a value inside a batched run)"


def _message(error: BaseException, sites: dict) -> str:
    first = str(error).strip().splitlines()[0][:200]
    if sites:
        last = next(reversed(sites))
        values = ", ".join(f"{name} = {_shown(value)}" for name, value in list(sites.items())[-6:])
        where = f"after its sample site '{last}', at {values}"
    else:
        where = "before its first latent sample site"
    return (f"the model's program failed in a linear-algebra step {where} (torch: {first}): a matrix it builds from "
            f"these values is not positive-definite in floating point.  Add jitter to the matrix's diagonal "
            f"(K + 1e-6 * I; more for float32 or large scales, or pass float64 data), give the sites that build it "
            f"priors that keep it well-conditioned (a LogNormal(0, 10) reaches e^20, where every entry of a kernel "
            f"matrix is the same), or start the fit elsewhere (init_loc_fn=...)")


#: the site records of the :func:`named_failures` blocks running, innermost last
_ACTIVE: list[dict] = []


def watching():
    """A context that records the program's sites for the innermost :func:`named_failures` block, for a run that
    hides itself from outer handlers (``poutine.block``: the prototype's structural run); nothing outside one."""
    return _Sites(_ACTIVE[-1]) if _ACTIVE else contextlib.nullcontext()


@contextlib.contextmanager
def named_failures():
    """Inside: a linear-algebra failure of the model's program that escapes is re-raised as a
    :class:`ProgramFailure` naming where the program was and at which values (the torch error as its cause)."""
    sites = _Sites()
    _ACTIVE.append(sites.values)
    try:
        with sites:
            yield
    except ProgramFailure:
        raise
    except (RuntimeError, ValueError) as error:
        if not (_is_linear_algebra(error) and _in_program(error)):  # the engine's own algebra reports itself
            raise
        raise ProgramFailure(_message(error, sites.values)) from error
    finally:
        _ACTIVE.pop()
