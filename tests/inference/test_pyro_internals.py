"""The private parts of Pyro that pyro-bdl reads (pyro_bdl/inference/pyro_internals.py) are still there.

Each failure names the attribute and the installed Pyro version.  Upgrading Pyro past the declared
range means: run this file, fix what it names in pyro_internals.py, then widen the range.
"""

from __future__ import annotations

from importlib import metadata

import pyro
import pyro.distributions as dist
import pyro.infer.inspect
import pyro.ops.jit
import pytest
import torch
from packaging.requirements import Requirement
from pyro.infer import HMC, MCMC, NUTS, SVI, RandomWalkKernel, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.optim import PyroOptim
from pyro.poutine.messenger import Messenger

from pyro_bdl.inference import pyro_internals
from pyro_bdl.inference import svi as zoo_svi
from pyro_bdl.inference.compiled_elbo import CompiledTrace_ELBO, CompiledTraceMeanField_ELBO
from pyro_bdl.inference.optim import FastClippedAdam
from pyro_bdl.nn.layers import dense

PYRO = f"pyro-ppl {pyro.__version__}"


def _normal_model(y=torch.tensor([0.3, -0.2, 1.1])):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def _after_a_short_run(kernel, hook=None):
    MCMC(kernel, num_samples=3, warmup_steps=3, disable_progbar=True, hook_fn=hook).run()
    return kernel


def _read_during_sampling(kernel, read) -> list:
    """``read(kernel)`` after each post-warmup draw (the kernel's state is cleared when the run ends)."""
    values = []
    _after_a_short_run(kernel, lambda k, params, stage, i: values.append(read(k)) if stage == "Sample" else None)
    return values


def _traced_function():
    function = pyro.ops.jit.trace(lambda x: pyro.param("a", torch.ones(2)) * x, ignore_warnings=True)
    function(torch.ones(2))
    return function


#: An object on which each internal must exist (kernels after a short run: their state is set then).
PROBES = {
    "pyro.ops.jit._hashable_args_kwargs": lambda: pyro.ops.jit,
    "pyro.ops.jit.CompiledFunction._param_names": _traced_function,
    "pyro.ops.jit.CompiledFunction.compiled": _traced_function,
    "pyro.infer.elbo.ELBO._get_traces": Trace_ELBO,
    "pyro.infer.TraceMeanField_ELBO._differentiable_loss_particle": TraceMeanField_ELBO,
    "pyro.infer.NUTS._build_basetree": lambda: NUTS(_normal_model),
    "pyro.infer.HMC._divergences": lambda: _after_a_short_run(HMC(_normal_model, num_steps=3)),
    "pyro.infer.HMC._potential_energy_last": lambda: _after_a_short_run(NUTS(_normal_model)),
    "pyro.infer.HMC._mean_accept_prob": lambda: _after_a_short_run(HMC(_normal_model, num_steps=3)),
    "pyro.infer.RandomWalkKernel._energy_last": lambda: _after_a_short_run(RandomWalkKernel(_normal_model)),
    "pyro.infer.RandomWalkKernel._log_step_size": lambda: _after_a_short_run(RandomWalkKernel(_normal_model)),
    "pyro.optim.PyroOptim._state_waiting_to_be_consumed": lambda: PyroOptim(torch.optim.Adam, {}),
    "pyro.poutine.messenger.Messenger._process_message": lambda: Messenger,
    "pyro.poutine.messenger.Messenger._postprocess_message": lambda: Messenger,
    "pyro.infer.inspect.site_is_deterministic": lambda: pyro.infer.inspect,
    "pyro.infer.SVI.step": lambda: SVI,
}


def test_every_internal_has_a_probe():
    assert sorted(PROBES) == sorted(i.where for i in pyro_internals.INTERNALS)


@pytest.mark.parametrize("internal", pyro_internals.INTERNALS, ids=lambda i: i.where)
def test_installed_pyro_still_has(internal):
    obj = PROBES[internal.where]()
    assert hasattr(obj, internal.name), (
        f"{PYRO} no longer has {internal.where} ({internal.what}); pyro-bdl uses it in {internal.used_by}. "
        f"Checked with pyro-ppl {', '.join(pyro_internals.CHECKED_PYRO_VERSIONS)}: "
        f"update pyro_bdl/inference/pyro_internals.py, or install a version in the declared range."
    )


def test_installed_pyro_is_in_the_declared_range_and_the_range_is_the_checked_one():
    (req,) = [Requirement(r) for r in metadata.requires("pyro-bdl") if Requirement(r).name == "pyro-ppl"]
    assert pyro.__version__ in req.specifier, f"{PYRO} is outside the declared range {req.specifier}"
    for version in pyro_internals.CHECKED_PYRO_VERSIONS:
        assert version in req.specifier, f"checked pyro-ppl {version} is outside the declared range {req.specifier}"
    # the range stops before the next minor version: nothing after the checked ones is admitted but patches
    major, minor = map(int, pyro_internals.CHECKED_PYRO_VERSIONS[-1].split(".")[:2])
    assert f"{major}.{minor + 1}.0" not in req.specifier, f"the declared range {req.specifier} admits an unchecked minor version"


def test_svi_step_is_the_one_pyro_bdl_copies():
    assert pyro_internals.svi_step_fingerprint() == pyro_internals.SVI_STEP_FINGERPRINT, (
        f"{PYRO} changed pyro.infer.SVI.step, which pyro_bdl.inference.svi.SVI.step copies: compare the two, then "
        f"update SVI_STEP_FINGERPRINT in pyro_bdl/inference/pyro_internals.py"
    )


def test_messengers_are_called_through_their_hook_names():
    seen = []

    class Hooks(Messenger):
        def _pyro_sample(self, msg):
            seen.append(("sample", msg["name"]))

        def _pyro_post_sample(self, msg):
            seen.append(("post_sample", msg["name"]))

        def _pyro_dense(self, msg):
            seen.append(("dense", msg["name"]))

    with Hooks():
        W = pyro.sample("W", dist.Normal(torch.zeros(2, 3), 1.0).to_event(2))
        dense(torch.ones(4, 3), W, torch.zeros(2), name="layer1")
    assert seen == [("sample", "W"), ("post_sample", "W"), ("dense", "layer1")], f"{PYRO}: {seen}"


def _state(kernel) -> tuple:
    return (pyro_internals.mean_accept_prob(kernel), pyro_internals.divergence_count(kernel),
            pyro_internals.potential_energy(kernel))


def _check_states(states) -> None:
    assert len(states) == 3
    counts = [divergences for _, divergences, _ in states]  # a running count (3 warmup steps: some diverge)
    assert counts == sorted(counts) and all(isinstance(c, int) and 0 <= c <= 3 for c in counts), (PYRO, states)
    for accept, _, energy in states:
        assert 0.0 <= accept <= 1.0 and torch.isfinite(torch.tensor(energy)), (PYRO, states)


def test_nuts_leapfrog_steps_and_state_are_read():
    kernel, steps = NUTS(_normal_model), []
    pyro_internals.count_nuts_leapfrog_steps(kernel, lambda: steps.append(1))
    _check_states(_read_during_sampling(kernel, _state))
    assert len(steps) >= 6, f"{PYRO}: NUTS no longer calls _build_basetree through the instance ({len(steps)} calls in 6 iterations)"


def test_hmc_state_is_read():
    _check_states(_read_during_sampling(HMC(_normal_model, num_steps=3), _state))


def test_random_walk_state_is_read():
    kernel = RandomWalkKernel(_normal_model)
    _check_states(_read_during_sampling(kernel, _state))
    assert all(s > 0 for s in _read_during_sampling(kernel, pyro_internals.random_walk_step_size))


def test_compiled_graph_replays_the_traced_function():
    function = _traced_function()
    x = torch.tensor([2.0, 3.0])
    assert pyro_internals.compiled_graph(function, (x,), {"scale": 1}) is None  # not traced for these arguments
    graph, names = pyro_internals.compiled_graph(function, (x,), {})
    assert names == ("a",)
    with torch.no_grad():
        pyro.param("a").unconstrained().copy_(torch.tensor([5.0, 7.0]))
    assert torch.equal(graph(pyro.param("a").unconstrained(), x), torch.tensor([10.0, 21.0]))


def test_elbo_particles_give_pyro_own_meanfield_loss():
    guide = AutoNormal(_normal_model)
    guide()
    elbo = TraceMeanField_ELBO(num_particles=2)
    pyro.set_rng_seed(1)
    ours = sum(pyro_internals.meanfield_particle_loss(elbo, m, g) for m, g in pyro_internals.elbo_traces(elbo, _normal_model, guide, (), {}))
    pyro.set_rng_seed(1)
    theirs = elbo.differentiable_loss(_normal_model, guide) * elbo.num_particles
    assert torch.allclose(ours, theirs), (ours, theirs)


def test_deterministic_sites_are_told_from_observed_ones():
    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.deterministic("twice", 2 * mu)
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)

    nodes = pyro.poutine.trace(model).get_trace(torch.tensor(0.5)).nodes
    assert nodes["twice"]["is_observed"] and nodes["obs"]["is_observed"]
    assert [pyro_internals.is_deterministic(nodes[n]) for n in ("mu", "twice", "obs")] == [False, True, False], PYRO


def test_pending_optimiser_state_is_popped_once():
    optim = PyroOptim(torch.optim.Adam, {})
    optim.set_state({"w": {"step": 3}})
    assert pyro_internals.pending_optimiser_state(optim, "w") == {"step": 3}
    assert pyro_internals.pending_optimiser_state(optim, "w") is None


def test_a_missing_internal_is_named_with_the_pyro_version():
    with pytest.raises(pyro_internals.PyroInternalsError, match=rf"pyro-ppl {pyro.__version__} has no '_mean_accept_prob'"):
        pyro_internals.mean_accept_prob(object())


def _private_names(obj, base) -> set:
    """Single-underscore names ``obj``'s class (up to ``base``) or instance defines."""
    own = set().union(*(vars(c) for c in type(obj).__mro__ if c not in base.__mro__), vars(obj))
    return {n for n in own if n.startswith("_") and not n.startswith("__") and n != "_abc_impl"}


@pytest.mark.parametrize("make_ours,make_theirs", [
    (CompiledTrace_ELBO, Trace_ELBO),
    (CompiledTraceMeanField_ELBO, TraceMeanField_ELBO),
    (lambda: FastClippedAdam(lr=0.1), lambda: PyroOptim(torch.optim.Adam, {})),
    (lambda: zoo_svi.SVI(_normal_model, AutoNormal(_normal_model), FastClippedAdam(lr=0.1), Trace_ELBO()),
     lambda: SVI(_normal_model, AutoNormal(_normal_model), pyro.optim.Adam({}), Trace_ELBO())),
], ids=["CompiledTrace_ELBO", "CompiledTraceMeanField_ELBO", "FastClippedAdam", "SVI"])
def test_subclasses_do_not_shadow_pyro_private_names(make_ours, make_theirs):
    ours, theirs = make_ours(), make_theirs()
    base = type(theirs)
    theirs_names = set(dir(base)) | set(vars(theirs))
    ours_only = _private_names(ours, base) - set(vars(theirs))  # set by Pyro's own __init__: not ours
    clash = sorted(ours_only & theirs_names)
    assert not clash, f"{PYRO}'s {base.__name__} now defines {clash}, which pyro-bdl's {type(ours).__name__} also defines"
