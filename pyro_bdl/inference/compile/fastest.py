r"""The fastest working form of a batched function of tensors, checked against the function itself.

:func:`fastest` traces a function (tensors in, a tensor or a tuple of tensors out) to one graph of ATen operations
(:func:`~pyro_bdl.inference.compile.aten_trace.trace_aten`, which needs no ``torch._dynamo``: whatever Python the
function runs, it runs once, at the trace), and runs that graph compiled by ``torch.compile`` (``compile=True``;
seconds to a minute) or as traced (``compile=False``: by the static runtime,
:func:`~pyro_bdl.inference.compile.static_runtime.script`, built in well under a second;
benchmarks/history/nuts_speed.md).  Each form is checked against the function's own outputs on the example; where a
step fails (a function that reads values into Python, say), the next simpler form is used, with one
:class:`PotentialCompileWarning` naming the failure: the traced graph without compiling, then the function itself.

Example
-------
>>> import torch
>>> def value_and_grad(x):
...     x = x.detach().requires_grad_()
...     with torch.enable_grad():
...         u = (x * x).sum(-1)
...         g, = torch.autograd.grad(u.sum(), x)
...     return g, u.detach()
>>> x = torch.randn(3, 2)
>>> form = fastest(value_and_grad, (x,), value_and_grad(x), compile=False)
>>> form.mode, form.graph is not None
('traced', True)
>>> g, u = form.run(x)
>>> bool(torch.allclose(g, 2 * x)), u.shape
(True, torch.Size([3]))
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.fx as fx

from pyro_bdl.inference.compile.aten_trace import trace_aten
from pyro_bdl.inference.compile.static_runtime import same_outputs, script

__all__ = ["fastest", "fell_back", "Form", "PotentialCompileWarning", "check_same", "TOLERANCE", "TOLERANCE_DEFAULT"]


class PotentialCompileWarning(UserWarning):
    """A function (a model's potential, or a sampler's step fused with it) did not compile or trace; a slower
    form is used."""


@dataclass
class Form:
    """What :func:`fastest` found: ``run`` the fastest form that gives the function's outputs, ``graph`` the
    traced ``torch.fx`` graph (None where tracing failed), ``mode`` how ``run`` runs: 'compiled', 'traced', or the
    eager form's name."""

    run: Callable
    graph: fx.GraphModule | None
    mode: str


@contextlib.contextmanager
def torch_quietly():
    """Inductor's first compile in a process imports modules of torch that warn of torch's own deprecated APIs
    (``torch.jit.script_method``, used by ``torch.utils.mkldnn``): nothing a user of this package can act on, held
    back here; every other warning passes."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.script_method` is", DeprecationWarning)
        yield


def fell_back(notes: list | None, message: str, stacklevel: int = 1) -> None:
    """A slower form chosen: ``message`` appended to ``notes`` (where given: the object that keeps the form keeps
    why, for a fit to report however often it is reused) and warned (:class:`PotentialCompileWarning`, which a fit
    holds back and reports in its info instead: :func:`pyro_bdl.inference.mcmc.zoo.run_zoo_mcmc`)."""
    if notes is not None and message not in notes:
        notes.append(message)
    warnings.warn(message, PotentialCompileWarning, stacklevel=stacklevel + 1)


#: How far a traced or compiled form may stray from the eager one, relative to each value and to its tensor's scale
#: (:func:`~pyro_bdl.inference.compile.static_runtime.same_outputs`), by dtype: a few ulps of a float32 energy near
#: 2000, the roundoff of reordered sums (benchmarks/RESULTS.md, "UCI networks: the compiled leaf had been refused").
TOLERANCE = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 1e-2}
#: ... and for any other dtype (float64).
TOLERANCE_DEFAULT = 1e-4


def check_same(got, want) -> None:
    """Raises where a form's outputs differ from the reference's beyond :data:`TOLERANCE` of their dtype."""
    if not same_outputs(got, want, tolerance=TOLERANCE_DEFAULT, by_dtype=TOLERANCE):
        raise RuntimeError("the traced potential disagrees with the eager one")


def fastest(eager, example: tuple, reference, *, compile: bool, mode: str = "eager", what: str = "the function",
            stacklevel: int = 1, notes: list | None = None) -> Form:
    """The fastest form of ``eager`` (tensors in, tensors out) that gives ``reference`` (its outputs on
    ``example``) again on ``example``: compiled (``compile=True``), else traced; see the module docstring.
    ``mode``: the name of ``eager``'s own form (used where tracing fails); ``what``: the function, in the warning;
    ``stacklevel``: the frame the warning names, 1 for the caller of this function; ``notes``: a list the
    warning's message is appended to as well (read by whoever reports the run: :func:`fell_back`)."""
    def fallback(mode, reason):
        fell_back(notes, f"{what} runs {mode}, slower than compiled: {reason}", stacklevel=stacklevel + 2)

    try:
        graph = trace_aten(eager, *example)
        check_same(graph(*example), reference)
    except Exception as error:  # noqa: BLE001
        fallback(mode, f"tracing {what} failed ({type(error).__name__}: {error})")
        return Form(eager, None, mode)
    if not compile:  # the graph's operations run without Python between them
        try:
            scripted = script(copy.deepcopy(graph), example)
            check_same(scripted(*example), reference)
            return Form(scripted, graph, "traced")
        except Exception:  # noqa: BLE001 - the FX graph itself is as correct, a little slower
            return Form(graph, graph, "traced")
    try:
        with torch_quietly():  # torch.compile imports inductor; the compile runs at the first call
            compiled = torch.compile(graph, dynamic=False)
            check_same(compiled(*example), reference)
    except Exception as error:  # noqa: BLE001
        fallback("traced", f"torch.compile failed ({type(error).__name__}: {str(error)[:300]})")
        return Form(graph, graph, "traced")
    return Form(compiled, graph, "compiled")
