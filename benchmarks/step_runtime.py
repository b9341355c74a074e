"""How the zoo NUTS kernel's traced steps run: the same fused leaf and merge (``mcmc.nuts.leaf``,
``mcmc.nuts.merge_subtree`` with the model's potential inlined; each in both its forms: "leaf" with some chains building
and "leaf, all building" with its mask fixed, "merge" and "merge, all active" likewise; one chain runs only the
fixed forms) timed four ways in one process, on several models:

* ``torchscript``: the constant-folded graph traced to TorchScript (the traced path before the static runtime);
* ``+ simplify``: the same after ``graph_folding.simplify`` (numbers as tensors, slice gradients as one cat, ...);
* ``+ static runtime``: that graph run by PyTorch's static runtime, with additions and ``isnan`` as they were
  traced (``scripted.script`` without ``graph_folding._buffered_forms``);
* ``+ buffered forms``: the same with additions as subtractions and ``isnan`` as ``x != x`` (``scripted.script``,
  the default), which the static runtime runs with reused output buffers.

First, why numbers are rewritten: a chain of 50 operations on a (4, 10) tensor with a Python-number operand
(``x * 0.5``, ``x <= 0.0``) against the same with a 0-dim tensor operand, microseconds an operation in TorchScript
and in the static runtime.  Then, per model and step: operations in the graph, microseconds a call (median of
rounds of calls, the ways alternating), and the ratios against ``torchscript``; a line "MISMATCH" where a
way's outputs differ from ``torchscript``'s on the example.  Last, what building the steps costs: per model,
seconds to trace the potential (``make_fx`` of ``vmap(grad_and_value(U))`` as before, against
``aten_trace.trace_aten`` of ``vmap(U)`` and autograd) and each step with it (``make_fx`` of the step calling the
potential's graph, as before, against ``compile.fusion.traced_with``: the step traced by ``trace_aten`` and the
potential's graph spliced in), alternating rounds; and the seconds a new process takes to import ``torch._dynamo``, which ``make_fx`` needs and the traced
path no longer imports.  Nothing is asserted; results: benchmarks/history/nuts_speed.md, "static runtime" and
"buffered forms".

Example: ``python benchmarks/step_runtime.py`` (a few minutes), ``--quick`` (the smoke test).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings


def models(quick: bool) -> dict:
    """name -> (model, data, chains): a user's eight schools, a logistic regression, the zoo's blr and a BNN."""
    import torch
    from compile_threshold import logistic  # the models the other NUTS benchmarks time
    from speed_mcmc import eight_schools

    from pyro_bdl.registry import get_model

    g = torch.Generator().manual_seed(0)
    n = 50 if quick else 1000
    X = torch.randn(n, 10, generator=g)
    y = X @ torch.randn(10, generator=g) + torch.randn(n, generator=g)
    return {
        "eight schools, 4 chains": (eight_schools, {"y": torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]),
                                                    "sigma": torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])},
                                    4),
        f"logistic n={n} d=10, 2 chains": (logistic, {"X": X, "y": (y > 0).float()}, 2),
        f"blr n={n} d=10, 1 chain": (get_model("blr").bind({"noise": 1.0}), {"X": X, "y": y}, 1),
        f"bnn 10-20-1 n={n}, 1 chain": (get_model("bnn-regressor").bind({"hidden": [20]}), {"X": X, "y": y}, 1),
    }


def _steps(model, data, chains):
    """The fused leaf's and merge's FX graphs and example arguments, captured from a short run (by the step each
    fuse call is for, not by the order of the calls)."""
    from pyro_bdl.inference.compile import fusion as fusion_module
    from pyro_bdl.inference.mcmc import nuts
    from pyro_bdl.inference.mcmc.potential import FlatPotential
    from pyro_bdl.inference.mcmc.sampler import sample

    names = {nuts.leaf: "leaf", nuts.merge_subtree: "merge"}
    fixed_names = {nuts.leaf: "leaf, all building", nuts.merge_subtree: "merge, all active"}
    captured, fusing, calls = {}, [], {}
    original_script, original_fuse = fusion_module.script, fusion_module.fuse
    potential = FlatPotential(model, data, compile=False)

    def fuse(step, graph, example, tensors, *, compile, fixed=None, **kwargs):
        fusing.append(fixed_names.get(step) if fixed else names.get(step))
        if step in names:  # both forms of a step share one trace
            calls.setdefault(names[step], (step, example, tensors, potential))
        try:
            return original_fuse(step, graph, example, tensors, compile=compile, fixed=fixed, **kwargs)
        finally:
            fusing.pop()

    def capture(gm, example):
        if fusing and fusing[-1] is not None and fusing[-1] not in captured:
            captured[fusing[-1]] = (copy.deepcopy(gm), example)
        return original_script(gm, example)

    fusion_module.script, fusion_module.fuse = capture, fuse
    try:
        sample(potential, potential.data_tensors(data), chains=chains, warmup=2, samples=2, compile=False)
    finally:
        fusion_module.script, fusion_module.fuse = original_script, original_fuse
    return dict(sorted(captured.items())), calls  # one chain: no masked leaf


def _ways(gm, example) -> dict:
    import torch

    from pyro_bdl.inference.compile import graph_folding
    from pyro_bdl.inference.compile import static_runtime as scripted

    def traced(graph):
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.trace(graph, example, check_trace=False)

    folded = graph_folding.fold_constants(copy.deepcopy(gm))
    simplified = graph_folding.simplify(graph_folding.fold_constants(copy.deepcopy(gm)))
    buffered = graph_folding._buffered_forms
    graph_folding._buffered_forms = lambda graph: None
    try:
        unbuffered = scripted.script(copy.deepcopy(gm), example)
    finally:
        graph_folding._buffered_forms = buffered
    return {"torchscript": (traced(folded), graph_folding.operations(folded)),
            "+ simplify": (traced(simplified), graph_folding.operations(simplified)),
            "+ static runtime": (unbuffered, graph_folding.operations(simplified)),
            "+ buffered forms": (scripted.script(copy.deepcopy(gm), example), graph_folding.operations(simplified))}


def trace_seconds(model: str, calls: dict, rounds: int) -> None:
    """Seconds to trace the potential and each step with it, alternating rounds: the potential through ``make_fx``
    of ``vmap(grad_and_value(U))`` (as before) against ``trace_aten`` of ``vmap(U)`` and autograd
    (``FlatPotential._vmapped``); each step retraced through ``make_fx`` (the step calling the potential's graph)
    against spliced (``compile.fusion.traced_with``)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from pyro_bdl.inference.compile.aten_trace import trace_aten
    from pyro_bdl.inference.compile.fusion import traced_with

    _, first_example, data, potential = next(iter(calls.values()))  # every step of a model shares its potential
    theta = first_example[0].clone()  # (the static runtime's outputs are inference tensors)
    vmapped = torch.func.vmap(torch.func.grad_and_value(potential._potential), in_dims=(0,) + (None,) * len(data))
    ways = {"potential": (lambda: make_fx(vmapped)(theta, *data), lambda: trace_aten(potential._vmapped, theta, *data))}
    for name, (step, example, tensors, _) in calls.items():
        graph, n = potential.graph, len(example)

        def retraced(step=step, example=example, tensors=tensors, graph=graph, n=n):
            return make_fx(lambda *args: step(lambda theta: graph(theta, *args[n:]), *args[:n]))(*example, *tensors)

        def spliced(step=step, example=example, tensors=tensors, graph=graph):
            return traced_with(step, graph, example, tensors)

        ways[name] = (retraced, spliced)
    for name, (before, now) in ways.items():
        seconds = {"make_fx": [], "now": []}
        for _ in range(rounds):
            for way, trace in (("make_fx", before), ("now", now)):
                start = time.perf_counter()
                trace()
                seconds[way].append(time.perf_counter() - start)
        s = {way: statistics.median(t) for way, t in seconds.items()}
        label = "trace_aten" if name == "potential" else "spliced"
        print(f"  {name:9s} traced through make_fx {s['make_fx']:.3f} s, {label} {s['now']:.3f} s")
        print(f"ratio {label}/make_fx [{model}, {name}] = {s['now'] / s['make_fx']:.2f}")


def dynamo_import_seconds() -> float:
    """Seconds to import ``torch._dynamo`` in a new process that has imported torch, pyro and pyro_bdl: what
    ``make_fx`` and ``torch.func.grad_and_value`` cost a process once, and a traced fit no longer does."""
    import subprocess
    import sys

    code = ("import time, torch, pyro, pyro_bdl; t = time.perf_counter(); import torch._dynamo; "
            "print(time.perf_counter() - t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def operand_costs(calls: int, rounds: int) -> None:
    """us an operation: a Python-number operand against a 0-dim tensor operand, TorchScript and static runtime."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    x, half, zero = torch.randn(4, 10), torch.tensor(0.5), torch.tensor(0.0)
    chains = {"x * 0.5": lambda x: _chain(x, lambda y: y * 0.5), "x * c": lambda x: _chain(x, lambda y: y * half),
              "x <= 0.0": lambda x: tuple(x <= 0.0 for _ in range(50)),
              "x <= c": lambda x: tuple(x <= zero for _ in range(50))}
    print(f"{'operation':10s} {'TorchScript us':>15s} {'static us':>10s}")
    us = {}
    for name, f in chains.items():
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(make_fx(f)(x), (x,), check_trace=False)
            static = torch._C._jit_to_static_module(torch.jit.freeze(traced.eval())._c)
        us[name] = [statistics.median(_timed(run, (x,), calls) for _ in range(rounds)) / 50 for run in (traced, static)]
        print(f"{name:10s} {us[name][0]:15.2f} {us[name][1]:10.2f}")
    for number, tensor in (("x * 0.5", "x * c"), ("x <= 0.0", "x <= c")):
        for i, runtime in enumerate(("TorchScript", "static runtime")):
            print(f"ratio number/tensor operand [{number}, {runtime}] = {us[number][i] / us[tensor][i]:.2f}")


def _chain(x, op):
    for _ in range(50):
        x = op(x)
    return x


def _timed(run, example, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run(*example)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small data, few calls (the smoke test)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    calls, rounds = (20, 2) if args.quick else (300, args.rounds)
    operand_costs(calls * 10, rounds)
    print(f"torch {torch.__version__}, threads {args.threads}; us per call: median of {rounds} rounds of {calls} "
          f"calls, the ways alternating")
    columns = ("torchscript", "+ simplify", "+ static runtime", "+ buffered forms")
    print(f"{'model':32s} {'step':18s} " + "".join(f"{w:>26s}" for w in columns))
    traces = {}
    for name, (model, data, chains) in models(args.quick).items():
        steps, traces[name] = _steps(model, data, chains)
        for step, (gm, example) in steps.items():
            ways = _ways(gm, example)
            want = ways["torchscript"][0](*example)
            for way, (run, _) in ways.items():  # the same outputs every way, or the timing means nothing
                if not all(torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-5)
                           for a, b in zip(want, run(*example))):
                    print(f"MISMATCH: {way} [{name}, {step}]")
            times = {way: [] for way in ways}
            for run, _ in ways.values():
                _timed(run, example, max(calls // 10, 2))  # warm: the executors specialise on the first calls
            for _ in range(rounds):
                for way, (run, _) in ways.items():
                    times[way].append(_timed(run, example, calls))
            us = {way: statistics.median(t) for way, t in times.items()}
            print(f"{name:32s} {step:18s} " + "".join(f"{ways[w][1]:6d} ops {us[w]:8.1f} us   " for w in ways))
            for way in list(ways)[1:]:
                print(f"ratio {way}/torchscript [{name}, {step}] = {us[way] / us['torchscript']:.2f}")
            print(f"ratio + buffered forms/+ static runtime [{name}, {step}] = "
                  f"{us['+ buffered forms'] / us['+ static runtime']:.2f}")
    print(f"building the steps: seconds to trace the potential and each step with it, median of {rounds} "
          f"alternating rounds")
    imports = [dynamo_import_seconds() for _ in range(1 if args.quick else 3)]
    print(f"  importing torch._dynamo (make_fx and grad_and_value need it; once a process): "
          f"{' '.join(f'{t:.2f}' for t in imports)} s")
    for name, calls_of_model in traces.items():
        print(name)
        trace_seconds(name, calls_of_model, rounds)


if __name__ == "__main__":
    main()
