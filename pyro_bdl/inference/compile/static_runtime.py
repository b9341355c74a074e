r"""A traced ``torch.fx`` graph as one function with no Python between its operations.

The sampler's small steps (a leapfrog step with the model's potential, the merge of a subtree) are a few hundred
operations on tensors of a few dozen numbers, so their time is the per-operation cost of whatever runs them.
:func:`script` simplifies the graph (:mod:`pyro_bdl.inference.compile.graph_folding`), traces it to TorchScript and hands
it to PyTorch's static runtime (``torch._C._jit_to_static_module``), which runs the frozen graph with out-variants
of the operations and a memory plan reused across calls, in less time a call than the TorchScript interpreter
(benchmarks/history/nuts_speed.md, "static runtime").  Where the static runtime is missing from the installed torch,
fails to build, or disagrees with TorchScript on the example, the TorchScript function is returned.

Example
-------
>>> import torch
>>> from pyro_bdl.inference.compile.aten_trace import trace_aten
>>> def step(x, y):
...     return (x * 0.5 + y).exp(), (x - y).sum(-1)
>>> x, y = torch.randn(4, 3), torch.randn(4, 3)
>>> run = script(trace_aten(step, x, y), (x, y))
>>> a, b = run(x, y)
>>> bool(torch.allclose(a, (x * 0.5 + y).exp())), b.shape
(True, torch.Size([4]))
"""

from __future__ import annotations

import warnings

import torch
import torch.fx as fx

from pyro_bdl.inference.compile.graph_folding import _fold, simplify

__all__ = ["script", "same_outputs"]


def script(gm: fx.GraphModule, example: tuple):
    """``gm`` (changed in place: folded and simplified) as a function of the same inputs returning the same
    outputs (a tuple where ``gm`` returns one), run by the static runtime where it builds, else as TorchScript.
    ``example``: inputs of the shapes and dtypes it will be called with."""
    _fold(gm)  # the constants, then cheaper forms (folding again what they make constant); code generated once
    gm = simplify(gm)
    getattr(gm, "real_recompile", lambda: None)()  # a lazy graph module (aten_trace): its code, before tracing it
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript
        traced = torch.jit.trace(gm, example, check_trace=False)
        want = traced(*example)
        static = _static(traced, example, want)
    return traced if static is None else static


def _static(traced, example, want):
    """The static runtime's module of ``traced``, or None where it is missing, fails or disagrees."""
    to_static = getattr(torch._C, "_jit_to_static_module", None)
    if to_static is None:
        return None
    try:
        module = to_static(torch.jit.freeze(traced.eval())._c)
        got = module(*example)
        module(*example)  # a second call: its memory plan reuses buffers, the first call's outputs must survive
    except Exception:  # noqa: BLE001 - an operation it cannot run: TorchScript runs it
        return None
    return module if type(got) is type(want) and same_outputs(got, want, tolerance=1e-6) else None


def same_outputs(got, want, tolerance: float, by_dtype: dict | None = None) -> bool:
    """Whether two functions' outputs (a tensor or a tuple of them) agree: shapes, dtypes, integers and booleans
    exactly, floating values within ``tolerance`` relative to each value and to the largest finite magnitude of
    its tensor (at least 1; NaN equal to NaN); ``by_dtype``: dtype -> the tolerance for that dtype instead.  The
    tensor's scale counts because a reordered sum errs by the size of its terms, not of its result."""
    gots, wants = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    if len(gots) != len(wants):
        return False
    for a, b in zip(gots, wants):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if a != b:
                return False
        elif a.shape != b.shape or a.dtype != b.dtype or not (
                _close(a, b, (by_dtype or {}).get(a.dtype, tolerance)) if a.is_floating_point()
                else torch.equal(a, b)):
            return False
    return True


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> bool:
    return torch.allclose(a, b, rtol=tolerance, atol=tolerance * _scale(b), equal_nan=True)


def _scale(t: torch.Tensor) -> float:
    """The largest finite magnitude in ``t``, at least 1."""
    finite = t[torch.isfinite(t)]
    return max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
