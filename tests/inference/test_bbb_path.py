"""The networks' SVI path: compiled ELBOs, vectorised particles, local reparameterisation.

Exact checks (same random draws, same numbers to float rounding) where the claim is an identity;
Monte Carlo checks with stated tolerances (k standard errors) where it is a statement about
expectations or variances.
"""

from __future__ import annotations

import copy
import functools
import math
import warnings

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO

import pyro_bdl
from pyro_bdl.inference.compiled_elbo import CompiledTrace_ELBO, CompiledTraceMeanField_ELBO
from pyro_bdl.inference.concrete_dropout import ConcreteRates
from pyro_bdl.inference.dropout import DropoutGuide, DropoutMessenger, resolve_dropout_sites
from pyro_bdl.inference.local_reparam import LocalReparam
from pyro_bdl.inference.svi import make_elbo
from pyro_bdl.models.bnn import bnn_classifier, bnn_regressor
from pyro_bdl.models.networks import bbb_guide


def _problem(kind: str, n: int = 60, **options):
    g = torch.Generator().manual_seed(1)
    if kind == "regressor":
        X = torch.randn(n, 2, generator=g)
        y = torch.sin(X[:, 0]) + 0.1 * torch.randn(n, generator=g)
        model = functools.partial(bnn_regressor, **{"hidden": (8,), **options})  # noise=None: a latent site
    else:
        X = torch.randn(n, 5, generator=g)
        y = torch.randint(0, 3, (n,), generator=g)
        model = functools.partial(bnn_classifier, hidden=(8,), num_classes=3)
    guide = bbb_guide(model, init_scale=0.1)
    guide(X=X, y=y)  # create the parameters
    return model, guide, {"X": X, "y": y}


def _loss_and_grads(elbo, model, guide, data, seed):
    params = [pyro.param(name).unconstrained() for name in pyro.get_param_store().keys()]
    for p in params:
        p.grad = None
    pyro.set_rng_seed(seed)
    loss = elbo.loss_and_grads(model, guide, **data)
    return loss, [p.grad.clone() for p in params]


ELBO_PAIRS = [  # (eager, compiled, particles): every compiled path make_elbo can build
    (Trace_ELBO, CompiledTrace_ELBO, 1),
    (Trace_ELBO, CompiledTrace_ELBO, 3),  # vectorised particles
    (TraceMeanField_ELBO, CompiledTraceMeanField_ELBO, 1),
    (TraceMeanField_ELBO, CompiledTraceMeanField_ELBO, 3),
]


def _assert_compiled_equals_eager(model, guide, data, eager, compiled, particles):
    vec = {"num_particles": particles, "vectorize_particles": particles > 1}
    fast, slow = compiled(**vec), eager(**vec)
    for elbo in (fast, slow):  # compile; guess max_plate_nesting (which draws)
        elbo.loss_and_grads(model, guide, **data)
    loss_f, grads_f = _loss_and_grads(fast, model, guide, data, seed=5)
    loss_s, grads_s = _loss_and_grads(slow, model, guide, data, seed=5)
    assert loss_f == pytest.approx(loss_s, rel=1e-5)
    for gf, gs in zip(grads_f, grads_s):
        torch.testing.assert_close(gf, gs, rtol=1e-4, atol=1e-4 * float(gs.abs().max()))
    # the graph draws afresh at every call (eps and the subsample indices are not frozen constants)
    assert len({fast.loss_and_grads(model, guide, **data) for _ in range(3)}) == 3


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
@pytest.mark.parametrize("batch_size", [None, 16])
@pytest.mark.parametrize("eager,compiled,particles", ELBO_PAIRS)
def test_compiled_elbo_equals_the_eager_one_at_the_same_draws(kind, batch_size, eager, compiled, particles):
    model, guide, data = _problem(kind)
    data["batch_size"] = batch_size
    _assert_compiled_equals_eager(model, guide, data, eager, compiled, particles)


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
@pytest.mark.parametrize("eager,compiled,particles", [p for p in ELBO_PAIRS if p[0] is Trace_ELBO])  # mean field: below
def test_compiled_elbo_equals_the_eager_one_with_local_reparameterisation(kind, eager, compiled, particles):
    model, guide, data = _problem(kind)
    data["batch_size"] = 16
    lrt_model, lrt_guide = LocalReparam().wrap(model, guide)
    _assert_compiled_equals_eager(lrt_model, lrt_guide, data, eager, compiled, particles)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
@pytest.mark.parametrize("particles", [1, 3])
def test_compiled_mean_field_elbo_with_local_reparameterisation_has_the_eager_expectation(kind, particles):
    """With the analytic KL and local reparameterisation nothing uses the guide's weight draws: the
    traced graph drops them as dead code (eager Pyro still draws them), so the two consume the
    random stream differently and agree in distribution, not draw by draw.  Checked in expectation:
    the mean loss and the mean gradient over 300 calls each, within 4.5 standard errors."""
    model, guide, data = _problem(kind)
    data["batch_size"] = 16
    lrt_model, lrt_guide = LocalReparam().wrap(model, guide)
    vec = {"num_particles": particles, "vectorize_particles": particles > 1}
    draws = 300

    def sample(elbo):
        elbo.loss_and_grads(lrt_model, lrt_guide, **data)  # compile; guess max_plate_nesting
        runs = [_loss_and_grads(elbo, lrt_model, lrt_guide, data, seed=k) for k in range(draws)]
        losses = torch.tensor([loss for loss, _ in runs], dtype=torch.float64)
        grads = torch.stack([torch.cat([g.flatten() for g in gs]) for _, gs in runs]).double()
        return losses, grads

    (loss_f, grad_f), (loss_s, grad_s) = sample(CompiledTraceMeanField_ELBO(**vec)), sample(TraceMeanField_ELBO(**vec))
    se = math.sqrt(float(loss_f.var() + loss_s.var()) / draws)
    assert abs(float(loss_f.mean() - loss_s.mean())) < 4.5 * se
    diff = (grad_f.mean(0) - grad_s.mean(0)).norm()
    assert diff < 4.5 * math.sqrt(float((grad_f.var(0) + grad_s.var(0)).sum()) / draws)
    # not the same draws: the graph really draws differently (else the exact test above would apply)
    assert not torch.equal(loss_f, loss_s)


def _concrete(model, data, sites, mask):
    """concrete dropout's training model: masks at the learned rates, relaxed, and the rates' regulariser."""
    rates = ConcreteRates(model, data, sites, 0.2, mask)

    def train_model(**kwargs):
        learned = rates.values()
        with DropoutMessenger(learned, sites, mask=mask, temperature=0.1):
            out = model(**kwargs)
        pyro.factor(f"{rates.prefix}.regulariser", rates.log_terms(learned))
        return out

    train_model(**data)  # create the rates
    return train_model


@pytest.mark.parametrize("method", ["mc-dropout", "concrete-dropout"])
@pytest.mark.parametrize("mask", ["unit", "weight"])
@pytest.mark.parametrize("batch_size", [None, 16])
def test_compiled_elbo_equals_the_eager_one_under_dropout(method, mask, batch_size):
    """The dropout methods' ``jit``: the training loss under dropout masks (drawn in the graph, fresh at every call;
    concrete dropout's relaxed, at learned rates) and its gradients, compiled, equal the eager ones at the same
    draws."""
    model, _, data = _problem("regressor")
    pyro.clear_param_store()
    sites = resolve_dropout_sites(model, data)
    point = DropoutGuide(model, 0.0, sites)
    point(**data)  # create the parameters
    train = (DropoutMessenger(0.2, sites, mask=mask)(model) if method == "mc-dropout"
             else _concrete(model, data, sites, mask))
    data["batch_size"] = batch_size
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "trying to observe a value outside of inference")  # the factor, traced
        _assert_compiled_equals_eager(train, point, data, Trace_ELBO, CompiledTrace_ELBO, 1)


def test_compiled_elbo_recompiles_for_new_shapes_and_settings():
    model, guide, data = _problem("regressor")
    elbo = CompiledTrace_ELBO()
    elbo.loss_and_grads(model, guide, **data)
    elbo.loss_and_grads(model, guide, X=data["X"][:30], y=data["y"][:30])
    elbo.loss_and_grads(model, guide, **data, batch_size=10)
    assert len(elbo._compiled) == 2  # one per set of tensor shapes (batch_size picks a graph inside one)
    pyro.set_rng_seed(0)
    short = elbo.loss(model, guide, X=data["X"][:30], y=data["y"][:30])
    assert math.isfinite(short)


def test_compiled_elbo_leaves_the_jit_executor_setting_as_it_found_it():
    """The graph runs unoptimised (``OPTIMIZE_GRAPH``), the caller's setting is restored, even on error."""
    from pyro_bdl.inference import compiled_elbo as jit

    model, guide, data = _problem("regressor")
    elbo = CompiledTrace_ELBO()
    seen = []
    original = jit._Compiled._compiled_loss

    def spy(self, *args):
        seen.append(torch._C._get_graph_executor_optimize())
        return original(self, *args)

    for outer in (True, False):
        with torch.jit.optimized_execution(outer):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(jit._Compiled, "_compiled_loss", spy)
                elbo.loss_and_grads(model, guide, **data)
                with pytest.raises(RuntimeError):  # shapes that do not multiply: the error passes through
                    elbo.loss_and_grads(model, guide, X=data["X"][:, :1], y=data["y"])
            assert torch._C._get_graph_executor_optimize() is outer
    assert seen and set(seen) == {jit.OPTIMIZE_GRAPH}


def test_mean_field_factor_log_prob_of_its_own_draw_is_the_normal_density():
    """``_Normal.log_prob`` of the draw it made (computed from eps) equals ``dist.Normal.log_prob``:
    the same value and the same gradients with respect to mu and rho; other values go the generic way."""
    import pyro.distributions as dist
    import torch.nn.functional as F

    from pyro_bdl.inference.guides import _Normal

    g = torch.Generator().manual_seed(3)
    loc = torch.randn(7, 5, generator=g).requires_grad_()
    rho = torch.randn(7, 5, generator=g).requires_grad_()
    torch.manual_seed(0)
    q = _Normal(loc, F.softplus(rho))
    w = q.rsample((2,))
    fast = q.log_prob(w)
    generic = dist.Normal(loc, F.softplus(rho)).log_prob(w)
    assert torch.allclose(fast, generic, rtol=1e-5, atol=1e-5)
    # total derivatives through w = mu + sigma eps (d/dmu is zero: the fast form does not use mu at all)
    grads_fast = torch.autograd.grad(fast.sum(), (loc, rho), allow_unused=True, materialize_grads=True,
                                     retain_graph=True)
    grads_generic = torch.autograd.grad(generic.sum(), (loc, rho))
    for a, b in zip(grads_fast, grads_generic):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4)
    other = w.detach() + 0.5
    assert torch.equal(q.log_prob(other), dist.Normal(loc, F.softplus(rho)).log_prob(other))


def _vectorised_traces(model, guide, data, particles):
    with pyro.plate("particles", particles, dim=-2):
        guide_trace = poutine.trace(guide).get_trace(**data)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(**data)
    return model_trace, guide_trace


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_vectorised_particles_give_the_mean_of_the_per_particle_elbos(kind):
    """One vectorised pass over P draws = the mean of P sequential single-draw ELBOs at those draws."""
    model, guide, data = _problem(kind)
    P = 4
    pyro.set_rng_seed(2)
    model_trace, guide_trace = _vectorised_traces(model, guide, data, P)
    W = model_trace.nodes["layer0.weight"]["value"]
    assert W.shape == (P, 1, 8, data["X"].shape[1])  # particle dim, data-plate slot, (out, in)
    assert model_trace.nodes["y"]["fn"].batch_shape == (P, len(data["y"]))
    pyro.set_rng_seed(2)
    vectorised = Trace_ELBO(num_particles=P, vectorize_particles=True, max_plate_nesting=1).loss(model, guide, **data)
    singles = []
    for p in range(P):  # replay the guide at particle p's draws
        single = poutine.trace(guide).get_trace(**data)
        for name, site in single.nodes.items():
            if site["type"] == "sample":
                site["value"] = guide_trace.nodes[name]["value"][p, 0]
        singles.append(Trace_ELBO().loss(model, poutine.replay(guide, trace=single), **data))
    assert vectorised == pytest.approx(sum(singles) / P, rel=1e-5)


def test_fit_uses_the_compiled_vectorised_path_and_resumes(tmp_path, monkeypatch):
    from pyro_bdl.inference import svi

    ds = pyro_bdl.load("sine")
    kw = dict(inference="svi-meanfield", progress=False, steps=150, samples=20, particles=2, batch_size=32,
              checkpoint=tmp_path / "ck")
    real_step, calls = svi.SVI.step, {"n": 0}

    def flaky_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 100:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(svi.SVI, "step", flaky_step)
    with pytest.raises(KeyboardInterrupt):
        pyro_bdl.fit("bnn-regressor", ds, **kw)
    saved = torch.load(tmp_path / "ck", weights_only=True)["state"]["losses"]
    result = pyro_bdl.fit("bnn-regressor", ds, **kw)
    assert result.record.settings["jit"] and result.record.settings["vectorize"]
    assert result.record.settings["grad_clamp"] == math.inf and result.record.settings["lr_hold"] == 0.5
    assert len(result.losses) == 150 and torch.allclose(torch.tensor(result.losses[:len(saved)]), saved)
    assert calls["n"] < 100 + 60  # only the remaining steps were run
    assert result.losses[-1] < result.losses[0]


def _loglik_draws(model, guide, data, particles):
    model_trace, _ = _vectorised_traces(model, guide, data, particles)
    return model_trace.nodes["y"]["fn"].log_prob(model_trace.nodes["y"]["value"]).sum(-1)  # (P,)


def test_local_reparameterisation_has_the_same_expectation():
    model, guide, data = _problem("regressor", n=100, hidden=(16,), noise=0.3)
    with torch.no_grad():
        for name in pyro.get_param_store().keys():
            if name.endswith(".rho"):  # spread sigma out: the estimators differ more
                pyro.param(name).unconstrained().fill_(math.log(math.expm1(0.3)))
    with torch.no_grad():
        plain = _loglik_draws(model, guide, data, 4000)
        lrt = _loglik_draws(*LocalReparam().wrap(model, guide), data, 4000)
    se = math.sqrt(plain.var() / len(plain) + lrt.var() / len(lrt))
    assert abs(float(plain.mean() - lrt.mean())) < 4.5 * se
    # and the ELBO estimator runs through it, sampled and analytic KL alike
    for elbo in (Trace_ELBO(), TraceMeanField_ELBO(), make_elbo("meanfield", jit=True, particles=3, vectorize=True)):
        assert math.isfinite(elbo.loss_and_grads(*LocalReparam().wrap(model, guide), **data))


def test_local_reparameterisation_lowers_the_gradient_variance():
    """Var of the gradient of the likelihood term w.r.t. the guide's (mu, rho): far lower with LRT."""
    model, guide, data = _problem("regressor", n=100, hidden=(16,), noise=0.3)
    params = [pyro.param(name).unconstrained() for name in pyro.get_param_store().keys()]
    draws = 100

    def grads(m, g):
        out = []
        for _ in range(draws):
            model_trace, _ = _vectorised_traces(m, g, data, 1)
            loglik = model_trace.nodes["y"]["fn"].log_prob(model_trace.nodes["y"]["value"]).sum()
            out.append(torch.cat([t.flatten() for t in torch.autograd.grad(loglik, params)]))
        return torch.stack(out)

    plain, lrt = grads(model, guide), grads(*LocalReparam().wrap(model, guide))
    # the same mean gradient (within 4.5 standard errors, summed over coordinates) ...
    diff = (plain.mean(0) - lrt.mean(0)).norm()
    assert diff < 4.5 * math.sqrt(float((plain.var(0) + lrt.var(0)).sum()) / draws)
    # ... with a much smaller variance (measured: 1-4% of it, seeds 0-2)
    assert float(lrt.var(0).sum()) < 0.2 * float(plain.var(0).sum())


def test_fit_with_local_reparameterisation():
    result = pyro_bdl.fit("bnn-classifier", "digits", inference="svi", progress=False, steps=60, samples=10,
                          batch_size=64, local_reparam="true", options={"hidden": "16"})
    assert result.record.settings["local_reparam"] is True
    assert result.losses[-1] < result.losses[0]
    with pytest.raises(ValueError, match="boolean"):
        pyro_bdl.fit("bnn-classifier", "digits", inference="svi", progress=False, steps=2, local_reparam="maybe")


@pytest.mark.parametrize("clamp", [2.0, math.inf])
def test_fast_clipped_adam_is_pyros_clipped_adam(clamp):
    """The same updates as Pyro's ClippedAdam, with a clamp that bites and with none (inf; Pyro's
    ClippedAdam with a clamp no gradient reaches)."""
    from pyro.optim import ClippedAdam

    from pyro_bdl.inference.optim import FastClippedAdam

    args = {"lr": 0.05, "lrd": 0.99, "clip_norm": clamp}
    g = torch.Generator().manual_seed(0)
    init = [torch.randn(4, 3, generator=g), torch.randn(5, generator=g)]
    grads = [[3 * torch.randn(t.shape, generator=g) for t in init] for _ in range(6)]
    results = []
    for optim in (ClippedAdam({**args, "clip_norm": min(clamp, 1e30)}), FastClippedAdam(**args)):
        pyro.clear_param_store()
        params = [pyro.param(f"p{i}", t.clone()).unconstrained() for i, t in enumerate(init)]
        for k, step_grads in enumerate(grads):
            active = params if k != 2 else params[:1]  # a parameter missing from a step keeps its own count
            for p, gr in zip(active, step_grads):
                p.grad = gr.clone()
            optim(active)
            for p in params:
                p.grad = None
        results.append([p.detach().clone() for p in params])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_grad_clamp_setting_reaches_the_optimiser_and_must_be_positive(monkeypatch):
    from pyro_bdl.inference import svi

    seen = []
    real = svi.make_svi

    def spy(*args, **kwargs):
        seen.append(kwargs["grad_clamp"])
        return real(*args, **kwargs)

    monkeypatch.setattr(svi, "make_svi", spy)
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # a few steps: only the optimiser is read
        for method, extra in (("svi", {"samples": 5}), ("map", {})):
            pyro_bdl.fit("blr", inference=method, progress=False, steps=5, grad_clamp=3.5, **extra)
            pyro_bdl.fit("blr", inference=method, progress=False, steps=5, **extra)
        assert seen == [3.5, svi.GRADIENT_CLAMP] * 2  # the setting, else the default
        seen.clear()
        tiny = {"options": {"hidden": "4"}, "progress": False, "steps": 3, "grad_clamp": 2.5}
        pyro_bdl.fit("bnn-regressor", inference="mc-dropout", samples=2, **tiny)
        pyro_bdl.fit("bnn-regressor", inference="ensemble", members=2, **tiny)
    assert seen == [2.5] * 3  # dropout's training, and each ensemble member's MAP fit
    with pytest.raises(ValueError, match="setting 'grad_clamp' of inference 'svi' must be a number > 0"):
        pyro_bdl.fit("blr", inference="svi", progress=False, steps=5, grad_clamp=0.0)
    with pytest.raises(ValueError, match="gradient clamp must be positive"):  # the optimiser's own check
        svi.make_svi(None, None, None, lr=0.1, steps=5, grad_clamp=0.0)


@pytest.mark.parametrize("lr_hold", [0.0, 0.5])
def test_rate_is_held_for_a_fraction_of_the_steps_then_decays_to_one_percent(lr_hold):
    """make_svi's schedule: lr for the first ``lr_hold`` of the steps, then geometric decay to
    FINAL_LR_FRACTION * lr at the last step; a fraction outside [0, 1] is refused (1: a constant rate,
    tests/inference/test_svi_convergence.py)."""
    from pyro_bdl.inference import svi

    steps, lr = 40, 0.1
    hold = int(lr_hold * steps)
    optim = svi.make_svi(lambda: None, lambda: None, None, lr=lr, steps=steps, lr_hold=lr_hold).optim
    p = torch.zeros(1, requires_grad=True)
    rates = []
    for _ in range(steps):
        p.grad = torch.ones(1)
        optim._step([p])
        rates.append(optim.state[p]["lr"])
    assert rates[:hold] == [lr] * hold
    assert rates[hold] < lr and rates[-1] == pytest.approx(svi.FINAL_LR_FRACTION * lr, rel=1e-9)
    for outside in (-0.1, 1.01):
        with pytest.raises(ValueError, match="lr_hold"):
            svi.make_svi(lambda: None, lambda: None, None, lr=lr, steps=steps, lr_hold=outside)


def test_fast_clipped_adam_resumes_from_pyros_saved_state():
    """A checkpoint written with pyro.optim.ClippedAdam resumes with the same next step."""
    from pyro.optim import ClippedAdam

    from pyro_bdl.inference.optim import FastClippedAdam

    args = {"lr": 0.05, "lrd": 0.99, "clip_norm": 2.0}
    p = pyro.param("p", torch.zeros(3)).unconstrained()
    old = ClippedAdam(args)
    for grad in ([1.0, -3.0, 0.5], [0.2, 0.1, -1.0]):
        p.grad = torch.tensor(grad)
        old([p])
    new = FastClippedAdam(**args)
    new.set_state(copy.deepcopy(old.get_state()))  # as a checkpoint on disk holds it
    start = p.detach().clone()
    p.grad = torch.tensor([0.3, 0.3, 0.3])
    old([p])
    expected = p.detach().clone()
    with torch.no_grad():
        p.copy_(start)
    p.grad = torch.tensor([0.3, 0.3, 0.3])
    new([p])
    torch.testing.assert_close(p.detach(), expected)


@pytest.mark.parametrize("elbo", ["compiled-trace", "compiled-meanfield", "tracegraph"])
@pytest.mark.parametrize("flat", [True, False])
def test_zoo_svi_step_is_pyros_step(elbo, flat, monkeypatch):
    """make_svi's leaner step (parameters looked up once for a compiled ELBO, gradients released or
    zeroed flat) takes exactly pyro.infer.SVI's steps with the same optimiser: same losses, same parameters."""
    from pyro.infer import SVI, TraceGraph_ELBO

    from pyro_bdl.inference import optim as optim_module
    from pyro_bdl.inference.guides import MeanFieldGuide
    from pyro_bdl.inference.svi import make_svi

    if not flat:
        monkeypatch.setattr(optim_module, "FLAT_MEAN_NUMEL", 0)
    losses = {
        "compiled-trace": lambda: CompiledTrace_ELBO(),
        "compiled-meanfield": lambda: CompiledTraceMeanField_ELBO(),
        "tracegraph": lambda: TraceGraph_ELBO(),
    }
    results = []
    for which in ("pyro", "zoo"):
        pyro.clear_param_store()
        pyro.set_rng_seed(3)
        model, guide, data = _problem("regressor")
        if elbo == "tracegraph":
            guide = MeanFieldGuide(model, reparameterized=False)
        data["batch_size"] = 16
        svi = make_svi(model, guide, losses[elbo](), lr=0.01, steps=20)
        if which == "pyro":
            svi = SVI(model, guide, svi.optim, losses[elbo]())
        pyro.set_rng_seed(4)
        trajectory = [svi.step(**data) for _ in range(12)]
        assert (svi.optim._flat is not None) == flat
        results.append((trajectory, {k: v.detach().clone() for k, v in pyro.get_param_store().named_parameters()}))
    (loss_a, params_a), (loss_b, params_b) = results
    assert loss_a == loss_b
    assert params_a.keys() == params_b.keys()
    for name in params_a:
        assert torch.equal(params_a[name], params_b[name]), name


def test_fast_clipped_adam_flat_layout_gives_the_per_parameter_numbers(monkeypatch):
    """Laid out flat or stepped one tensor at a time, the same numbers: also when a parameter misses a
    step (it steps with a zero gradient afterwards, as after Pyro's zeroing) and after a checkpoint."""
    from pyro_bdl.inference import optim as optim_module
    from pyro_bdl.inference.optim import FastClippedAdam

    g = torch.Generator().manual_seed(0)
    init = [torch.randn(4, 3, generator=g), torch.randn(5, generator=g), torch.randn(2, 2, generator=g)]
    grads = [[20 * torch.randn(t.shape, generator=g) for t in init] for _ in range(8)]
    results = []
    for flat_limit in (optim_module.FLAT_MEAN_NUMEL, 0):
        monkeypatch.setattr(optim_module, "FLAT_MEAN_NUMEL", flat_limit)
        pyro.clear_param_store()
        params = [pyro.param(f"p{i}", t.clone()).unconstrained() for i, t in enumerate(init)]
        optim = FastClippedAdam(lr=0.05, lrd=0.99, clip_norm=10.0)
        for k, step_grads in enumerate(grads):
            for i, (p, gr) in enumerate(zip(params, step_grads)):
                if k == 3 and i == 1:  # no gradient this step
                    continue
                if p.grad is None:
                    p.grad = gr.clone()
                else:
                    p.grad += gr  # a backward pass adds into the gradient
            optim(params)
            optim.zero_grad(params)
            if k == 5:  # a checkpoint's round trip
                state = copy.deepcopy(optim.get_state())
                optim = FastClippedAdam(lr=0.05, lrd=0.99, clip_norm=10.0)
                optim.set_state(state)
        assert (optim._flat is not None) == (flat_limit > 0)
        results.append([p.detach().clone() for p in params])
    for a, b in zip(*results):
        assert torch.equal(a, b)
