"""Constant folding and simplification of traced graphs (pyro_bdl.inference.compile.graph_folding) and the static runtime
(pyro_bdl.inference.compile.static_runtime): the changed graph computes what the graph did, on inputs other than those it was
traced with, and leaves random operations, writes into inputs and shape-changing identities alone."""

from __future__ import annotations

import copy
import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_bdl.inference.compile.aten_trace import trace_aten
from pyro_bdl.inference.compile.graph_folding import fold_constants, operations, simplify
from pyro_bdl.inference.compile.static_runtime import script
from pyro_bdl.inference.mcmc.potential import flat_potential
from pyro_bdl.registry import get_model


def test_folded_potential_of_a_zoo_model_gives_the_same_values_and_gradients_with_fewer_operations():
    X, y = torch.randn(50, 3), torch.randn(50)
    model = get_model("blr").bind({"noise": 1.0, "prior_scale": 1.0})
    potential = flat_potential(model, {"X": X, "y": y}, chains=2, compile=False)
    tensors = potential.data_tensors({"X": X, "y": y})
    theta = torch.randn(2, potential.dim)
    potential.value_and_grad(theta, tensors)
    graph = potential.graph
    folded = fold_constants(copy.deepcopy(graph))
    assert operations(folded) < operations(graph)
    for seed in range(3):  # inputs it was not traced with: data and parameters
        torch.manual_seed(seed)
        args = (torch.randn(2, potential.dim), torch.randn(50, 3), torch.randn(50))
        for want, got in zip(graph(*args), folded(*args)):
            assert torch.allclose(want, got, rtol=1e-6, atol=1e-6)


def test_random_operations_are_not_folded():
    gm = trace_aten(lambda x: x + torch.randn(3), torch.zeros(3))
    folded = fold_constants(gm)
    assert not torch.equal(folded(torch.zeros(3)), folded(torch.zeros(3)))


def test_adding_zeros_that_broadcast_is_kept():
    gm = trace_aten(lambda x: x + torch.zeros(2, 3), torch.randn(3))
    assert fold_constants(gm)(torch.ones(3)).shape == (2, 3)


def test_detach_folds_to_its_operand():
    """The traced potential detaches its input and results (autograd runs only at the trace)."""
    gm = trace_aten(lambda x: (x.detach() * 2.0).detach(), torch.randn(3))
    assert torch.ops.aten.detach.default in [n.target for n in gm.graph.nodes]
    folded = fold_constants(gm)
    assert [n.target for n in folded.graph.nodes if n.op == "call_function"] == [torch.ops.aten.mul.Tensor]
    assert torch.equal(folded(torch.ones(3)), torch.full((3,), 2.0))


def test_in_place_operations_are_not_folded():
    def f(x):
        buffer = torch.zeros(3)
        buffer.add_(1.0)
        return x * buffer

    gm = trace_aten(f, torch.randn(3))
    assert torch.equal(fold_constants(gm)(torch.full((3,), 2.0)), torch.full((3,), 2.0))


def test_selections_and_logic_with_constant_masks_fold_to_their_operand():
    """where(true, x, y) -> x, where(false, x, y) -> y, x & true -> x, false | x -> x (bitwise and logical); a mask
    that is not a constant, a constant one that broadcasts the operand to another shape, or integer ones, is kept."""
    def f(x, y, m):
        yes, no = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)
        k = x > 0
        n = (x * 4).long()
        return (torch.where(yes, x, y), torch.where(no, x, y), k & yes, no | k, torch.logical_and(yes, k),
                torch.logical_or(k, no), torch.where(m, x, y), torch.where(torch.ones(2, 3, dtype=torch.bool), x, y),
                n & torch.ones(3, dtype=torch.long))

    gm = trace_aten(f, torch.randn(3), torch.randn(3), torch.tensor([True, False, True]))
    folded = fold_constants(copy.deepcopy(gm))
    assert operations(folded) == 6  # x > 0, where(m, ...), the broadcasting where; x * 4, to long, n & 1 (kept)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        args = (torch.randn(3, generator=g), torch.randn(3, generator=g), torch.rand(3, generator=g) < 0.5)
        for want, got in zip(f(*args), folded(*args)):
            assert want.shape == got.shape and want.dtype == got.dtype and torch.equal(want, got)


def test_the_traced_kernel_gives_the_draws_of_its_unfolded_steps(monkeypatch):
    """The zoo NUTS kernel's traced steps, folded, simplified and run by the static runtime, give the draws the
    same steps give as plain TorchScript."""
    from pyro_bdl.inference.compile import static_runtime as scripted
    from pyro_bdl.inference.mcmc import potential as potential_module
    from pyro_bdl.inference.mcmc.zoo import run_zoo_mcmc

    X, y = torch.randn(40, 2), torch.randn(40)
    model = get_model("blr").bind({"noise": 1.0})

    def draws():
        potential_module._CACHE.clear()
        pyro.set_rng_seed(0)
        return run_zoo_mcmc("nuts", model, {"X": X, "y": y}, samples=30, warmup=30, chains=1, progress=False,
                            jit=False).samples["w"]

    folded = draws()
    monkeypatch.setattr(scripted, "_fold", lambda gm: None)
    monkeypatch.setattr(scripted, "simplify", lambda gm: gm)
    monkeypatch.setattr(scripted, "_static", lambda traced, example, want: None)
    unfolded = draws()
    potential_module._CACHE.clear()
    assert torch.allclose(folded, unfolded, rtol=1e-5, atol=1e-5)


def _targets(gm) -> list:
    return [node.target for node in gm.graph.nodes if node.op == "call_function"]


def _numbers(gm) -> list:
    """Python numbers among the tensor operations' arguments (shape lists and dims aside)."""
    return [a for node in gm.graph.nodes if node.op == "call_function" for a in node.args
            if isinstance(a, float)]


def _agree(gm, f, *inputs):
    want, got = f(*inputs), gm(*inputs)
    wants, gots = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for a, b in zip(wants, gots):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert torch.allclose(a.double(), b.double(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_numbers_become_tensors_of_the_operand_dtype_and_squares_products(dtype):
    def f(x):
        filled = x.masked_fill(x < 0, 7.0) * 2.0
        return (x * 0.5 - 1.0) ** 2 / 3.0, (x <= 0.25) | (x > 2.0), torch.clamp(x, max=0.0), filled

    x = torch.randn(5, dtype=dtype)
    gm = simplify(trace_aten(f, x))
    assert _numbers(gm) == []
    assert torch.ops.aten.pow.Tensor_Scalar not in _targets(gm)
    assert torch.ops.aten.masked_fill.Tensor not in _targets(gm)  # a where: the fill is no output's strides
    for seed in range(3):
        _agree(gm, f, torch.randn(5, dtype=dtype, generator=torch.Generator().manual_seed(seed)))


def test_a_flat_vectors_slice_gradients_become_one_cat_with_zeros_where_no_slice_reads():
    def f(theta):  # coordinates 2 and 6 unread: their gradient is zero
        return (theta[0:2] ** 2).sum() + theta[3:6].exp().sum() + theta[7:].sin().sum()

    grad = torch.func.grad(f)
    theta = torch.randn(9)
    gm = trace_aten(grad, theta)
    assert torch.ops.aten.slice_backward.default in _targets(gm)
    gm = simplify(gm)
    assert torch.ops.aten.slice_backward.default not in _targets(gm)
    assert _targets(gm).count(torch.ops.aten.cat.default) == 1
    _agree(gm, grad, torch.randn(9))


def test_an_in_place_write_into_a_fresh_result_becomes_out_of_place_and_one_into_an_input_is_kept():
    def fresh(x):
        y = x * 2.0
        y.masked_fill_(x < 0, 0.0)
        return y.unsqueeze(-1).sum(-1) + y.exp() + y.exp()

    x = torch.randn(6)
    gm = simplify(trace_aten(fresh, x))
    assert not [t for t in _targets(gm) if t.__name__.split(".")[0].endswith("_")]
    assert _targets(gm).count(torch.ops.aten.exp.default) == 1  # computed once
    assert torch.ops.aten.sum.dim_IntList not in _targets(gm)  # a sum over a size-1 dimension is no sum
    _agree(gm, fresh, torch.randn(6))

    def into_input(x):
        x.mul_(2.0)
        return x + x.exp()

    gm = simplify(trace_aten(into_input, torch.randn(4)))
    assert torch.ops.aten.mul_.Tensor in _targets(gm)
    a = torch.randn(4)
    assert torch.allclose(gm(a.clone()), into_input(a.clone()))


def test_reshapes_that_change_nothing_go_and_an_outputs_strides_are_kept():
    def f(x):  # unsqueeze then a view back, an expand to the same shape: identities
        return (x.unsqueeze(-1).view(3, 4) * 2.0).expand(3, 4) + 1.0

    x = torch.randn(3, 4)
    gm = simplify(trace_aten(f, x))
    assert not {torch.ops.aten.unsqueeze.default, torch.ops.aten.expand.default} & set(_targets(gm))
    _agree(gm, f, torch.randn(3, 4))

    def column(x):  # a sum over a size-1 slice returned as an output: kept, so the output stays contiguous
        return x[:, 1:2].sum(-1)

    gm = simplify(trace_aten(column, x))
    assert torch.ops.aten.sum.dim_IntList in _targets(gm)
    assert gm(torch.randn(3, 4)).is_contiguous()
    _agree(gm, column, torch.randn(3, 4))


def test_a_viewed_masked_fill_becomes_a_where_only_where_its_operands_give_its_layout():
    """A masked fill whose result is viewed (HalfCauchy's log-density, unsqueezed) becomes a where when its input
    and mask are contiguous and of its shape; with a mask that broadcasts, or a transposed input, it stays."""
    def fill(x, mask):
        return x.masked_fill(mask, -math.inf).unsqueeze(-1) * 2.0

    x = torch.randn(4, 3)
    cases = [((x, x < 0), True), ((x, (x < 0)[:1]), False), ((x.T.contiguous().T, x < 0), False)]
    for args, becomes_where in cases:
        gm = simplify(trace_aten(fill, *args))
        assert (torch.ops.aten.where.self in _targets(gm)) == becomes_where
        out = gm(*args)
        assert out.stride() == fill(*args).stride() and torch.equal(out, fill(*args))


def test_additions_and_isnan_take_the_forms_the_static_runtime_buffers_with_the_same_bits():
    """add -> sub of the negated alpha and isnan(x) -> x != x: the same values bit for bit (NaN and infinities
    included), run by the static runtime with reused output buffers, where add and isnan are not (torch 2.13);
    an addition with a boolean stays (sub refuses booleans)."""
    def f(x, y, n, b):
        return x + y, torch.add(x, y, alpha=2), x + 1.5, n + 1, n + b, torch.isnan(x), torch.where(b, n + 1, n)

    def example(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(4, 3, generator=g)
        x[0, 0], x[1, 1], x[2, 2] = math.nan, math.inf, -math.inf
        return x, torch.randn(4, 3, generator=g), torch.randint(0, 9, (4, 3), generator=g), torch.rand(4, 3) < 0.5

    gm = simplify(trace_aten(f, *example(0)))
    targets = _targets(gm)
    adds = [node for node in gm.graph.nodes if node.target is torch.ops.aten.add.Tensor]
    assert torch.ops.aten.isnan.default not in targets and torch.ops.aten.ne.Tensor in targets
    assert len(adds) == 1 and _meta_dtype(adds[0].args[1]) == torch.bool  # n + b
    for seed in range(3):
        args = example(seed + 1)
        for got, want in zip(gm(*args), f(*args)):
            assert got.dtype == want.dtype and _same_bits(got, want)
    if not hasattr(torch._C, "_jit_to_static_module"):
        return
    run = script(trace_aten(f, *example(0)), example(0))
    report = run.benchmark_individual_ops(list(example(0)), {}, 1, 1)
    assert {"aten::sub", "aten::ne"} <= set(report.out_nodes)
    assert report.instances_per_node_type.get("aten::add") == 1  # the boolean one
    plain = torch._C._jit_to_static_module(torch.jit.freeze(torch.jit.trace(trace_aten(f, *example(0)), example(0),
                                                                              check_trace=False).eval())._c)
    assert "aten::add" not in plain.benchmark_individual_ops(list(example(0)), {}, 1, 1).out_nodes


def _meta_dtype(node):
    return node.meta["val"].dtype


def _same_bits(a, b) -> bool:
    """Equal values, NaN where NaN."""
    if not a.is_floating_point():
        return torch.equal(a, b)
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])


def _schools(y, sigma):  # a user's model: HalfCauchy's log-density writes -inf into a fresh tensor in place
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("schools", len(y)):
        eta = pyro.sample("eta", dist.Normal(0.0, 1.0))
        pyro.sample("obs", dist.Normal(mu + tau * eta, sigma), obs=y)


def test_the_simplified_potentials_of_zoo_and_user_models_give_the_same_values_and_gradients():
    X, y = torch.randn(30, 2), torch.randn(30)
    cases = [(get_model("blr").bind({"noise": 1.0}), {"X": X, "y": y}),
             (get_model("bnn-regressor").bind({"hidden": [5]}), {"X": X, "y": y}),
             (_schools, {"y": torch.randn(8) * 10, "sigma": torch.rand(8) * 10 + 5})]
    for model, data in cases:
        potential = flat_potential(model, data, chains=3, compile=False)
        tensors = potential.data_tensors(data)
        potential.value_and_grad(torch.randn(3, potential.dim), tensors)
        graph = potential.graph
        simplified = simplify(fold_constants(copy.deepcopy(graph)))
        assert operations(simplified) < operations(graph)
        run = script(copy.deepcopy(graph), (torch.randn(3, potential.dim), *tensors))
        for seed in range(3):  # points and data it was not traced with
            g = torch.Generator().manual_seed(seed)
            args = (torch.randn(3, potential.dim, generator=g), *(t + 0.1 * torch.randn(t.shape, generator=g)
                                                                   for t in tensors))
            for want, got, ran in zip(graph(*args), simplified(*args), run(*args)):
                assert torch.allclose(want, got, rtol=1e-5, atol=1e-5)
                assert torch.allclose(want, ran, rtol=1e-5, atol=1e-5)


def test_the_static_runtimes_outputs_survive_its_next_call():
    def f(x, y):
        return x * y + 1.0, (x - y).exp().sum(-1)

    x, y = torch.randn(4, 3), torch.randn(4, 3)
    run = script(trace_aten(f, x, y), (x, y))
    if hasattr(torch._C, "_jit_to_static_module"):
        assert isinstance(run, torch._C.StaticModule)
    first = run(x, y)
    kept = tuple(t.clone() for t in first)
    run(torch.randn(4, 3), torch.randn(4, 3))
    assert all(torch.equal(a, b) for a, b in zip(first, kept))
    assert torch.allclose(first[0], x * y + 1.0)


def _logistic(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def _mixture_weights(y):  # Dirichlet and Beta: stick-breaking and logit transforms
    p = pyro.sample("p", dist.Dirichlet(torch.ones(3)))
    c = pyro.sample("c", dist.Beta(2.0, 2.0))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Categorical(probs=c * p + (1 - c) / 3), obs=y)


_X = torch.randn(40, 3, generator=torch.Generator().manual_seed(1))
FUSED_CASES = {
    "logistic": (_logistic, {"X": _X, "y": (_X[:, 0] > 0).float()}),
    "schools": (_schools, {"y": torch.randn(8) * 10, "sigma": torch.rand(8) * 10 + 5}),
    "mixture-weights": (_mixture_weights, {"y": torch.tensor([0, 1, 1, 2, 2, 2])}),
    "blr": (get_model("blr").bind({}), {"X": _X, "y": _X[:, 1]}),
    "bnn-regressor": (get_model("bnn-regressor").bind({"hidden": [4]}), {"X": _X, "y": _X[:, 1]}),
}


@pytest.mark.parametrize("case", sorted(FUSED_CASES))
def test_the_nuts_steps_of_varied_models_fuse_and_run_by_the_static_runtime(case):
    """No model here falls back to op-by-op steps (that warns): every rewrite traces, and the static runtime runs
    what it gives."""
    import warnings

    from pyro_bdl.inference.compile.fastest import PotentialCompileWarning
    from pyro_bdl.inference.mcmc.dynamics import fusion_of
    from pyro_bdl.inference.mcmc.potential import FlatPotential
    from pyro_bdl.inference.mcmc.sampler import sample

    model, data = FUSED_CASES[case]
    potential = FlatPotential(model, data, compile=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PotentialCompileWarning)
        sample(potential, potential.data_tensors(data), chains=2, warmup=3, samples=3, compile=False)
    names = {key[0][0] for key in fusion_of(potential).steps}  # a draw's start, a leaf and a merge (all chains in; some)
    assert {"nuts-start", "nuts-leaf-every", "nuts-merge-every"} <= names <= {
        "nuts-start", "nuts-leaf-every", "nuts-leaf", "nuts-merge-every", "nuts-merge"}
    if hasattr(torch._C, "_jit_to_static_module"):
        assert all(isinstance(f, torch._C.StaticModule) for f in fusion_of(potential).steps.values())


@pytest.mark.slow
def test_inductor_leaves_out_its_stride_checks_only_for_contiguous_inputs_and_outputs_and_caches_on_disk(
        tmp_path, monkeypatch):
    """fusion.inductor: an input that is not contiguous, or an output that is not (it could be fed back in),
    keeps inductor's checks, so a call with other strides fails instead of reading the wrong numbers; the
    compiled graph is found again in inductor's on-disk cache (a tracing context with a shape environment)."""
    from torch._dynamo.utils import counters

    from pyro_bdl.inference.compile.fusion import inductor

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    transposed = torch.randn(4, 3).T

    def step(x, y):
        return (x * y + 1.0,)

    kept = inductor(trace_aten(step, transposed, y), (transposed, y), contiguous=False)
    assert torch.equal(kept(transposed, y)[0], transposed * y + 1.0)
    with pytest.raises(AssertionError):
        kept(x, y)  # contiguous where it was compiled for transposed strides: refused

    def transposing(x, y):
        return ((x * y).T,)

    graph = trace_aten(transposing, x, y)
    kept = inductor(graph, (x, y), contiguous=True)  # a non-contiguous output: checks kept
    with pytest.raises(AssertionError):
        kept(transposed, y)

    hits = counters["inductor"]["fxgraph_cache_hit"]
    fast = inductor(trace_aten(step, x, y), (x, y), contiguous=True)
    assert torch.equal(fast(x, y)[0], x * y + 1.0)
    inductor(trace_aten(step, x, y), (x, y), contiguous=True)
    assert counters["inductor"]["fxgraph_cache_hit"] > hits


def test_forms_agree_within_roundoff_of_their_tensors_scale_and_float32s_ulps_and_not_beyond():
    """check_same (the gate every traced and compiled form passes): a float32 gradient of norm ~1e3 whose element
    near 1 moved by 2e-3, and an energy error moved by 2 ulps of an energy near 2000 (both seen between correct
    forms of a UCI BNN's NUTS leaf), agree; an error of a value's own size does not, nor 2.4e-4 in float64."""
    from pyro_bdl.inference.compile.fastest import check_same
    from pyro_bdl.inference.compile.static_runtime import same_outputs

    grad = torch.tensor([1651.5, -1.4275, 0.0])
    assert same_outputs(grad + torch.tensor([0.0, 2e-3, 0.0]), grad, tolerance=1e-4)
    assert not same_outputs(grad + torch.tensor([0.0, 0.5, 0.0]), grad, tolerance=1e-4)
    with_nan = torch.tensor([math.nan, math.inf, 0.5])  # the scale counts finite values only
    assert same_outputs(with_nan.clone(), with_nan, tolerance=1e-4)
    assert not same_outputs(torch.tensor([math.nan, math.inf, 0.6]), with_nan, tolerance=1e-4)
    check_same((torch.tensor([-0.68506]), grad), (torch.tensor([-0.68530]), grad))
    for wrong in (torch.tensor([-0.60]), torch.tensor([-0.68506], dtype=torch.float64)):
        with pytest.raises(RuntimeError, match="disagrees"):
            check_same(wrong, torch.tensor([-0.68530], dtype=wrong.dtype))


def test_a_step_that_fails_to_compile_runs_traced_with_one_warning_and_gives_the_traced_draws(monkeypatch):
    """Where inductor's form of a fused step fails (or disagrees), the sampler runs the traced form of the same
    step (the static runtime), not the op-by-op one: same draws as compile=False, and a warning saying so."""
    import warnings

    from pyro_bdl.inference.compile import fusion as fusion_module
    from pyro_bdl.inference.compile.fastest import PotentialCompileWarning
    from pyro_bdl.inference.mcmc.potential import FlatPotential
    from pyro_bdl.inference.mcmc.sampler import sample

    model, data = FUSED_CASES["bnn-regressor"]

    def draws(compile):
        potential = FlatPotential(model, data, compile=False)
        return sample(potential, potential.data_tensors(data), chains=2, warmup=10, samples=10, seed=1,
                      compile=compile).theta

    traced = draws(False)

    def no_inductor(*args, **kwargs):
        raise RuntimeError("inductor is out of order")

    op_by_op = []
    unfused = fusion_module._unfused
    monkeypatch.setattr(fusion_module, "inductor", no_inductor)
    monkeypatch.setattr(fusion_module, "_unfused", lambda *a: op_by_op.append(a) or unfused(*a))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fell_back = draws(True)
    ours = [str(w.message) for w in caught if issubclass(w.category, PotentialCompileWarning)]
    assert ours and all("runs traced instead" in m and "out of order" in m for m in ours), ours
    assert not op_by_op
    assert torch.equal(fell_back, traced)
