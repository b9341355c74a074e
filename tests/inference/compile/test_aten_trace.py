"""trace_aten: a function's ATen operations on real values as an FX graph, without torch._dynamo."""

import subprocess
import sys
import textwrap

import pytest
import torch

from pyro_bdl.inference.compile.aten_trace import trace_aten


def _value_and_grad(x, w):
    """Rows mapped by vmap, a saved output (exp), a closure constant, a factory, an in-place update, an operation
    returning a tuple, and the gradient by autograd: what a model's batched potential runs."""
    scale = torch.tensor([0.5, 2.0, 1.5])
    x = x.detach().requires_grad_()
    with torch.enable_grad():
        def row(r):
            shifted = torch.zeros_like(r).add_(r * scale)
            biggest, _ = shifted.exp().max(-1)
            return biggest + (shifted * w).sum()

        u = torch.func.vmap(row)(x)
        g, = torch.autograd.grad(u.sum(), x)
    return u.detach(), g


def test_a_traced_gradient_gives_the_eager_values_on_other_inputs():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 3, generator=gen), torch.randn(3, generator=gen)
    gm = trace_aten(_value_and_grad, x, w)
    for _ in range(3):
        x2, w2 = torch.randn(4, 3, generator=gen), torch.randn(3, generator=gen)
        got, want = gm(x2, w2), _value_and_grad(x2, w2)
        for a, b in zip(got, want):
            assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-6)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 2
    assert [n.op for n in gm.graph.nodes].count("get_attr") >= 1  # the closure's scale, copied in
    output = next(n for n in gm.graph.nodes if n.op == "output")
    for node, value in zip(output.args[0], _value_and_grad(x, w)):
        meta = node.meta["val"]
        assert meta.device.type == "meta" and meta.shape == value.shape and meta.dtype == value.dtype


def test_a_constant_is_copied_at_the_trace():
    c = torch.ones(3)
    gm = trace_aten(lambda x: x * c, torch.randn(3))
    c.mul_(5.0)
    assert torch.equal(gm(torch.ones(3)), torch.ones(3))


def test_a_value_taken_around_torch_is_refused_not_kept_as_a_constant():
    """make_fx would keep x's value at the trace as a constant; the graph would be wrong for other x."""
    def f(x):
        y = x * 2.0
        return torch.from_numpy(y.numpy()) + 1.0

    with pytest.raises(RuntimeError, match="outside torch's operations"):
        trace_aten(f, torch.randn(3))


def test_arguments_and_results_must_be_tensors():
    with pytest.raises(TypeError, match="argument 1 is float"):
        trace_aten(lambda x, y: x * y, torch.ones(2), 2.0)
    with pytest.raises(TypeError, match="must return a tensor"):
        trace_aten(lambda x: (x, 3), torch.ones(2))


@pytest.mark.slow
def test_a_nuts_fit_imports_neither_dynamo_nor_inductor(tmp_path):
    """torch._dynamo takes 1.6-2.9 s to import on this machine (benchmarks/history/nuts_speed.md): a traced fit does
    without."""
    code = textwrap.dedent("""
        import sys, pyro_bdl
        pyro_bdl.fit("blr", data="linear", inference="nuts", samples=50, warmup=50, progress=False)
        print(sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules))
    """)
    # run outside the checkout, so that the installed package is imported
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True,
                         cwd=tmp_path)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_changed_graph_runs_as_changed_its_code_generated_once_when_called(monkeypatch):
    """The sampler's steps change their graphs several times before running them: the code is generated at the call
    (or when read), once, and from the graph as it is then."""
    gm = trace_aten(lambda x: x * 3.0, torch.ones(2))
    generated = []
    real = type(gm)._real_recompile if hasattr(type(gm), "_real_recompile") else None
    if real is None:
        pytest.skip("this torch has no lazy graph module")
    monkeypatch.setattr(type(gm), "_real_recompile", lambda self: generated.append(1) or real(self))
    mul = next(n for n in gm.graph.nodes if n.op == "call_function")
    mul.target = torch.ops.aten.add.Tensor
    for _ in range(3):
        gm.recompile()
    assert not generated
    assert torch.equal(gm(torch.ones(2)), torch.full((2,), 4.0))
    assert torch.equal(gm(torch.ones(2)), torch.full((2,), 4.0)) and len(generated) == 1
    assert "add" in gm.code
