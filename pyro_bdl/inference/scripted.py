r"""A traced ``torch.fx`` graph as one function with no Python between its operations.

The sampler's small steps (a leapfrog step with the model's potential, the merge of a subtree) are a few hundred
operations on tensors of a few dozen numbers, so their time is the per-operation cost of whatever runs them.
:func:`script` simplifies the graph (:mod:`pyro_bdl.inference.graph_folding`), traces it to TorchScript and hands
it to PyTorch's static runtime (``torch._C._jit_to_static_module``), which runs the frozen graph with out-variants
of the operations and a memory plan reused across calls: 0.55-0.65x the time a call of the TorchScript interpreter
on the same simplified steps, about half with the simplification (benchmarks/RESULTS.md, "static runtime").  Where the static runtime is
missing from the installed torch, fails to build, or disagrees with TorchScript on the example, the TorchScript
function is returned.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def step(x, y):
...     return (x * 0.5 + y).exp(), (x - y).sum(-1)
>>> x, y = torch.randn(4, 3), torch.randn(4, 3)
>>> run = script(make_fx(step)(x, y), (x, y))
>>> a, b = run(x, y)
>>> bool(torch.allclose(a, (x * 0.5 + y).exp())), b.shape
(True, torch.Size([4]))
"""

from __future__ import annotations

import warnings

import torch
import torch.fx as fx

from .graph_folding import fold_constants, simplify

__all__ = ["script"]


def script(gm: fx.GraphModule, example: tuple):
    """``gm`` (changed in place: folded and simplified) as a function of the same inputs returning the same
    outputs (a tuple where ``gm`` returns one), run by the static runtime where it builds, else as TorchScript.
    ``example``: inputs of the shapes and dtypes it will be called with."""
    gm = simplify(fold_constants(gm))
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
        first = module(*example)
        module(*example)  # a second call: its memory plan reuses buffers, the first call's outputs must survive
        got = first
    except Exception:  # noqa: BLE001 - an operation it cannot run: TorchScript runs it
        return None
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    if type(want) is not type(got) or len(wants) != len(gots) or not all(_same(a, b) for a, b in zip(wants, gots)):
        return None
    return module


def _same(a, b) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b) or (
        a.is_floating_point() and torch.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)))
