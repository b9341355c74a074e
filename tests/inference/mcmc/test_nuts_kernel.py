"""The zoo's NUTS / HMC sampler (pyro_bdl.inference.mcmc: sampler, nuts, hmc, adaptation, dynamics) and flat potential
(potential.py).

Statistical checks use Monte Carlo error, never tuned numbers: a mean estimated from draws of
effective sample size ESS (ArviZ's bulk ESS, measured) has standard error sd / sqrt(ESS); checks allow
K = 4.5 standard errors (two-sided probability below 1e-5 per check for a correct sampler).  Two
samplers agree when their means differ by less than K * sqrt(se_1^2 + se_2^2).
"""

from __future__ import annotations

import functools
import math
import warnings

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from support.problems import PROBLEMS, SCHOOLS_SIGMA, SCHOOLS_Y

import pyro_bdl
from pyro_bdl.inference.mcmc import dynamics
from pyro_bdl.inference.mcmc import sampler as sampler_module
from pyro_bdl.inference.mcmc.dynamics import fuse_with, fusion_of
from pyro_bdl.inference.mcmc.potential import FlatPotential, PotentialCompileWarning, flat_potential
from pyro_bdl.inference.mcmc.sampler import sample
from pyro_bdl.inference.mcmc.zoo import run_zoo_mcmc
from pyro_bdl.registry import get_model

K = 4.5


def _run(model, data, *, chains=2, warmup=300, samples=500, seed=0, potential=None, **settings):
    """Constrained draws site -> (chains, draws, *shape) as float64 numpy, and the sampler's output."""
    potential = potential or FlatPotential(model, data, compile=False)
    settings.setdefault("compile", False)
    out = sample(potential, potential.data_tensors(data), chains=chains, warmup=warmup, samples=samples,
                 seed=seed, **settings)
    return {k: v.double().numpy() for k, v in potential.unpack(out.theta).items()}, out


def _flat(draws):
    return draws.reshape(draws.shape[0], draws.shape[1], -1)


def _mean_se(draws):
    """Per-coordinate mean and its Monte Carlo standard error sd / sqrt(bulk ESS)."""
    flat = _flat(draws)
    ess = np.array([float(az.ess(flat[:, :, j])) for j in range(flat.shape[2])])
    return flat.mean((0, 1)), flat.std((0, 1), ddof=1) / np.sqrt(ess)


def _check_exact(draws, exact):
    for site, (mean, sd) in exact.items():
        est, se = _mean_se(draws[site])
        sd = sd.double().numpy().reshape(-1)
        tol = K * se * sd / np.maximum(_flat(draws[site]).std((0, 1), ddof=1), 1e-12)  # exact sd in the se
        err = np.abs(est - mean.double().numpy().reshape(-1))
        assert np.all(err < tol), f"{site}: mean {est} vs exact {mean}, |err| {err} >= tol {tol}"
        est_sd = _flat(draws[site]).std((0, 1), ddof=1)
        ess = (sd / se) ** 2
        assert np.all(np.abs(est_sd - sd) < K * sd / np.sqrt(2 * ess)), f"{site}: sd {est_sd} vs exact {sd}"


def _zoo_problem(name):
    data, options = PROBLEMS[name]()
    spec = get_model(name)
    kwargs = spec.data_kwargs(data)
    return spec.bind(options), kwargs, spec.hooks.exact_posterior(**kwargs, **options)


@pytest.mark.parametrize("name", ["blr", "coin"])
@pytest.mark.parametrize("settings", [{"kernel": "nuts"}, {"kernel": "hmc"}, {"kernel": "nuts", "full_mass": True}],
                         ids=["nuts", "hmc", "nuts-dense"])
def test_recovers_exact_posterior(name, settings):
    model, data, exact = _zoo_problem(name)
    draws, out = _run(model, data, **settings)
    _check_exact(draws, exact)
    assert out.stats["diverging"].sum() == 0


def test_same_seed_same_draws_and_stats_in_the_draws_form():
    model, data, _ = _zoo_problem("blr")
    a = _run(model, data, warmup=60, samples=40, seed=3)[1]
    b = _run(model, data, warmup=60, samples=40, seed=3)[1]
    c = _run(model, data, warmup=60, samples=40, seed=4)[1]
    assert torch.equal(a.theta, b.theta) and not torch.equal(a.theta, c.theta)
    assert sorted(a.stats) == ["diverging", "lp", "n_steps", "step_size", "tree_depth"]
    for key, value in a.stats.items():
        assert value.shape == (2, 40) and np.array_equal(value, b.stats[key]), key
    # a tree of depth j takes between 2^(j-1) and 2^j - 1 leapfrog steps
    depth, steps = a.stats["tree_depth"], a.stats["n_steps"]
    assert np.all((steps >= 2 ** (depth - 1)) & (steps <= 2 ** depth - 1))


@pytest.mark.parametrize("kernel", ["nuts", "hmc"])
def test_the_fused_steps_give_the_draws_of_the_same_steps_run_op_by_op(monkeypatch, kernel):
    model, data, _ = _zoo_problem("blr")
    fused = _run(model, data, warmup=60, samples=40, seed=3, kernel=kernel)[1]
    monkeypatch.setattr(dynamics.Dynamics, "fused", lambda self, name, step, example, evaluates=True,
                        compile=None, fixed=None: functools.partial(step, self._grad_and_value))
    op_by_op = _run(model, data, warmup=60, samples=40, seed=3, kernel=kernel)[1]
    assert torch.allclose(fused.theta, op_by_op.theta, atol=1e-4)
    assert np.array_equal(fused.stats["n_steps"], op_by_op.stats["n_steps"])


def test_steps_with_every_chain_building_run_unmasked_in_fewer_operations_and_give_the_same_draws(monkeypatch):
    """While every chain builds, the traced kernel runs its leaf with ``building`` fixed (its masks folded away),
    and while every chain is active its merge with ``active`` fixed, each traced once for both forms; with some
    chains stopped, the masked forms.  The draws equal those of the masked forms alone, bit for bit."""
    from pyro_bdl.inference.compile import fusion as fusion_module
    from pyro_bdl.inference.compile.graph_folding import operations

    model, data, _ = _zoo_problem("blr")
    fusing, counted = [], {}
    script, fuse = fusion_module.script, fusion_module.fuse

    def fusing_step(step, graph, example, tensors, *, compile, fixed=None, **kwargs):
        fusing.append((step.__name__, bool(fixed)))
        try:
            return fuse(step, graph, example, tensors, compile=compile, fixed=fixed, **kwargs)
        finally:
            fusing.pop()

    def counting(gm, example):  # script simplifies gm in place: count what it runs, by the form fused
        runner = script(gm, example)
        if fusing:
            counted[fusing[-1]] = operations(gm)
        return runner

    monkeypatch.setattr(fusion_module, "fuse", fusing_step)
    monkeypatch.setattr(fusion_module, "script", counting)
    potential = FlatPotential(model, data, compile=False)
    both = _run(model, data, chains=3, warmup=60, samples=40, seed=3, potential=potential)[1]
    for step in ("leaf", "merge_subtree"):  # both forms ran, the fixed one smaller
        assert counted[step, True] < counted[step, False]
    fusion = fusion_of(potential)  # start, leaf and merge (two forms, one trace)
    assert len(fusion.steps) == 5 and len(fusion.traces) == 3
    monkeypatch.setattr(fusion_module, "fuse", lambda step, graph, example, tensors, *, compile, fixed=None, **kwargs:
                        fuse(step, graph, example, tensors, compile=compile, fixed={}, **kwargs))  # masked throughout
    masked = _run(model, data, chains=3, warmup=60, samples=40, seed=3)[1]
    assert torch.equal(both.theta, masked.theta)
    for key, value in both.stats.items():
        assert np.array_equal(value, masked.stats[key]), key


@pytest.mark.slow
def test_compiled_mid_run_by_auto_recovers_the_exact_posterior_with_the_same_draws_twice(monkeypatch):
    model, data, exact = _zoo_problem("blr")
    monkeypatch.setattr(sampler_module, "COMPILE_AFTER_STEPS", 0)  # auto compiles at its decision point
    potential = FlatPotential(model, data, compile=False)
    draws, a = _run(model, data, potential=potential, compile="auto")
    assert {key[1] for key in fusion_of(potential).steps} == {False, True}  # both forms ran
    _, b = _run(model, data, potential=potential, compile="auto")
    assert torch.equal(a.theta, b.theta)
    _check_exact(draws, exact)


def _compile_draw(per_draw, warmup, cap=1023):
    """The draw before which compile="auto" compiles a run with these per-draw steps (None: never)."""
    counted = {0: 0}
    for i in range(len(per_draw)):
        counted[i] = counted[i - 1] + per_draw[i - 1] if i else 0
        if sampler_module.compile_now(i, counted, warmup, len(per_draw), cap):
            return i
    return None


def test_auto_compiles_deep_trees_at_once_and_waits_for_the_mass_matrix_on_shrinking_ones():
    threshold = sampler_module.COMPILE_AFTER_STEPS
    # a BNN's trees: at the depth cap after a few draws; projected at once, as soon as 10 draws show it
    saturated = [20] * 10 + [255] * (2 * threshold // 255)
    assert _compile_draw(saturated, 100, cap=255) == 15
    assert _compile_draw(saturated[:threshold // 255], 10, cap=255) is None  # too short a run to pay
    # hierarchical warm-up: 10x the steps a draw until the mass matrix adapts; under the threshold in all, but
    # projected past 3x it at draw 20 (the old rule compiled here)
    early = math.ceil(threshold / 220)
    shrinking = [early] * 110 + [early // 10] * 890
    assert early * 980 > 3 * threshold and sum(shrinking) < threshold
    assert _compile_draw(shrinking, 500) is None
    # long trees that stay long but under the cap: compiled after the second mass update (draw 150) + 10 draws
    assert _compile_draw([math.ceil(threshold / 400)] * 1000, 500) == 160
    # no mass adaptation (warm-up < 20): one projection at draw min(50, total / 10)
    assert _compile_draw([math.ceil(threshold / 300)] * 400, 10) == 40
    assert _compile_draw([math.ceil(threshold / 3000)] * 400, 10) is None


def constrained_model(y=None, flips=None, labels=None):
    """HalfNormal, Beta and Dirichlet sites, each with its own likelihood."""
    s = pyro.sample("s", dist.HalfNormal(2.0))
    p = pyro.sample("p", dist.Beta(2.0, 2.0))
    w = pyro.sample("w", dist.Dirichlet(torch.ones(3)))
    with pyro.plate("y_plate", len(y)):
        pyro.sample("y", dist.Normal(0.0, s), obs=y)
    with pyro.plate("flips_plate", len(flips)):
        pyro.sample("flips", dist.Bernoulli(p), obs=flips)
    with pyro.plate("labels_plate", len(labels)):
        pyro.sample("labels", dist.Categorical(w), obs=labels)


def _constrained_data():
    g = torch.Generator().manual_seed(0)
    return {"y": 1.5 * torch.randn(8, generator=g), "flips": (torch.rand(12, generator=g) < 0.3).float(),
            "labels": torch.tensor([0, 0, 0, 1, 2, 2, 2, 2, 2, 2])}


@pytest.mark.slow
def test_constrained_sites_recover_the_conjugate_posterior_means():
    data = _constrained_data()
    zoo, _ = _run(constrained_model, data, chains=2, warmup=200, samples=400, seed=1)
    _check_conjugate_means(zoo, data)


def _check_conjugate_means(zoo, data):
    """Beta and Dirichlet are conjugate here: their exact posterior means."""
    assert np.allclose(zoo["w"].sum(-1), 1.0, atol=1e-5) and zoo["s"].min() > 0
    flips, counts = data["flips"], torch.bincount(data["labels"], minlength=3).double()
    p_mean = (2 + flips.sum()) / (4 + len(flips))
    assert abs(zoo["p"].mean() - float(p_mean)) < K * _mean_se(zoo["p"])[1][0]
    w_mean = ((1 + counts) / (3 + counts.sum())).numpy()
    assert np.all(np.abs(zoo["w"].mean((0, 1)) - w_mean) < K * _mean_se(zoo["w"])[1])


@pytest.mark.slow
def test_agrees_with_pyro_nuts_on_constrained_sites():
    from pyro.infer import MCMC, NUTS

    data = _constrained_data()
    zoo, _ = _run(constrained_model, data, chains=2, warmup=300, samples=600, seed=1)
    pyro.set_rng_seed(1)
    mcmc = MCMC(NUTS(constrained_model), num_samples=400, warmup_steps=200, num_chains=1, disable_progbar=True)
    mcmc.run(**data)
    ref = {k: v.double().numpy()[None] for k, v in mcmc.get_samples().items()}
    assert set(zoo) == set(ref) == {"s", "p", "w"}
    for site in zoo:
        assert zoo[site].shape[2:] == ref[site].shape[2:]
        (m1, se1), (m2, se2) = _mean_se(zoo[site]), _mean_se(ref[site])
        assert np.all(np.abs(m1 - m2) < K * np.sqrt(se1**2 + se2**2)), f"{site}: zoo {m1} vs pyro {m2}"
        # and the spread: sds agree within their relative errors 1 / sqrt(2 ESS)
        sd1, sd2 = _flat(zoo[site]).std((0, 1)), _flat(ref[site]).std((0, 1))
        rel = np.sqrt((se1 / sd1) ** 2 / 2 + (se2 / sd2) ** 2 / 2)
        assert np.all(np.abs(sd1 / sd2 - 1) < K * rel), f"{site}: sd zoo {sd1} vs pyro {sd2}"
    _check_conjugate_means(zoo, data)


def eight_schools(y, sigma, centred=True):
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("schools", len(y)):
        if centred:
            theta = pyro.sample("theta", dist.Normal(mu, tau))
        else:
            eta = pyro.sample("eta", dist.Normal(0.0, 1.0))
            theta = mu + tau * eta
        pyro.sample("obs", dist.Normal(theta, sigma), obs=y)


EIGHT_SCHOOLS = {"y": SCHOOLS_Y, "sigma": SCHOOLS_SIGMA}


@pytest.mark.slow
def test_divergences_on_the_funnel_and_not_on_its_non_centred_form():
    """Divergences cluster (a chain stuck at the funnel's neck diverges again and again), so their count varies
    widely between seeds: 3-33 for the centred model in 4 x (300 + 300) draws over six seeds, 35-206 in
    4 x (1000 + 1000) over four (35 at this seed), against 1-2 for the non-centred model: hence the longer runs."""
    runs = {centred: _run(eight_schools, {**EIGHT_SCHOOLS, "centred": centred}, chains=4, warmup=1000, samples=1000,
                          seed=0)[1] for centred in (True, False)}
    centred, non_centred = (int(runs[c].stats["diverging"].sum()) for c in (True, False))
    assert centred >= 20, centred
    assert non_centred <= 0.005 * 4 * 1000 and non_centred * 10 <= centred, (centred, non_centred)


def test_discrete_and_empty_models_are_refused():
    def discrete(y):
        k = pyro.sample("k", dist.Categorical(torch.ones(3) / 3))
        pyro.sample("y", dist.Normal(k.float(), 1.0), obs=y)

    def no_latent(y):
        pyro.sample("y", dist.Normal(0.0, 1.0), obs=y)

    with pytest.raises(ValueError, match="latent site 'k' is discrete"):
        FlatPotential(discrete, {"y": torch.tensor(1.0)})
    with pytest.raises(ValueError, match="no latent sample site"):
        FlatPotential(no_latent, {"y": torch.tensor(1.0)})


@pytest.mark.slow
def python_reading(y):
    """A model that reads a value into Python (``float(mu)``): vmap cannot batch it, so its potential runs a loop."""
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    scale = 1.0 if float(mu) < 1e9 else 2.0
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(mu, scale), obs=y)


def test_a_model_that_reads_values_into_python_falls_back_with_one_warning_and_stays_correct():
    y = torch.randn(30, generator=torch.Generator().manual_seed(1)) + 2.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draws, _ = _run(python_reading, {"y": y}, warmup=150, samples=300)
    ours = [w for w in caught if issubclass(w.category, PotentialCompileWarning)]
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(ours) == 1 and "loop" in str(ours[0].message)
    precision = len(y) + 0.01
    _check_exact(draws, {"mu": (torch.tensor(float(y.sum()) / precision), torch.tensor(precision ** -0.5))})


def test_a_fit_on_a_slower_path_says_so_once_in_its_info_and_shows_no_warning(tmp_path):
    """The user cannot act on the engine's fallback: ``pyro_bdl.fit`` shows no PotentialCompileWarning; its info
    names the slower form and why (also after a reload), and the draws are the exact posterior's all the same."""
    y = torch.randn(30, generator=torch.Generator().manual_seed(1)) + 2.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = pyro_bdl.fit(python_reading, {"y": y}, inference="nuts", samples=300, warmup=150, chains=2,
                           progress=False, seed=0)
    assert not [w for w in caught if issubclass(w.category, PotentialCompileWarning)]
    assert "runs loop" in fit.info.slower_path and "vmap failed" in fit.info.slower_path
    pyro_bdl.write_fit(fit, tmp_path / "fit", plots=False)
    assert pyro_bdl.load_fit(tmp_path / "fit", model=python_reading).info.slower_path == fit.info.slower_path
    precision = len(y) + 0.01
    draws = {"mu": fit.samples["mu"].double().numpy()}
    _check_exact(draws, {"mu": (torch.tensor(float(y.sum()) / precision), torch.tensor(precision ** -0.5))})


@pytest.mark.slow
def test_a_model_reading_its_data_through_numpy_runs_vmapped_with_one_warning_and_new_data_counts():
    """The traced graph would hold the data read around torch as a constant, and a later fit on the shared potential
    (other values, the same shapes) would sample the first data's posterior: the trace is refused instead."""
    def through_numpy(y):
        y = torch.from_numpy(y.numpy())  # the same memory, outside torch's operations
        mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
        with pyro.plate("data", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    precision = 30 + 0.01
    for shift in (2.0, -3.0):  # the second fit shares the first one's potential
        y = torch.randn(30, generator=torch.Generator().manual_seed(1)) + shift
        potential = flat_potential(through_numpy, {"y": y}, 2, compile=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            draws, _ = _run(through_numpy, {"y": y}, warmup=150, samples=300, potential=potential)
        ours = [str(w.message) for w in caught if issubclass(w.category, PotentialCompileWarning)]
        assert len(ours) == (1 if shift > 0 else 0) and all("outside torch's operations" in m for m in ours), ours
        assert potential.mode == "vmap"
        _check_exact(draws, {"mu": (torch.tensor(float(y.sum()) / precision), torch.tensor(precision ** -0.5))})


def test_the_eager_potential_takes_points_made_in_inference_mode():
    """The static runtime's outputs are inference tensors, which autograd refuses to differentiate by: the eager
    forms (vmap and the loop over chains) copy such a point first."""
    data = _constrained_data()
    potential = FlatPotential(constrained_model, data, compile=False)
    tensors = potential.data_tensors(data)
    theta = torch.randn(3, potential.dim, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        frozen = theta.clone()
    assert frozen.is_inference()
    for form in (potential._vmapped, potential._looped):
        for got, want in zip(form(frozen, *tensors), form(theta, *tensors)):
            assert torch.allclose(got, want)


def test_a_coordinate_the_potential_does_not_read_has_a_zero_gradient():
    """A site whose density is masked out and that nothing else reads: autograd finds no path to it (functorch's
    grad gave zeros, and so does the potential)."""
    def model(y):
        pyro.sample("free", dist.Normal(0.0, 1.0).mask(False))
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    def nothing_read(y):
        pyro.sample("free", dist.Normal(0.0, 1.0).mask(False))

    theta = torch.randn(3, 2, generator=torch.Generator().manual_seed(0))
    potential = FlatPotential(model, {"y": torch.tensor(0.5)}, compile=False)
    u, grad = potential.value_and_grad(theta, potential.data_tensors({"y": torch.tensor(0.5)}))
    index = potential.sites.index("free")
    assert potential.mode == "traced" and torch.equal(grad[:, index], torch.zeros(3))
    assert torch.allclose(grad[:, 1 - index], theta[:, 1 - index] - (0.5 - theta[:, 1 - index]))
    flat = FlatPotential(nothing_read, {"y": torch.tensor(0.5)}, compile=False)
    u, grad = flat.value_and_grad(theta[:, :1], flat.data_tensors({"y": torch.tensor(0.5)}))
    assert torch.equal(u, torch.zeros(3)) and torch.equal(grad, torch.zeros(3, 1))


def test_potential_matches_pyro_potential_and_is_shared_across_fits():
    from pyro.infer.mcmc.util import initialize_model

    data = _constrained_data()
    potential = FlatPotential(constrained_model, data, compile=False)
    _, pyro_potential, _, _ = initialize_model(constrained_model, model_kwargs=data)
    theta = torch.randn(3, potential.dim, generator=torch.Generator().manual_seed(0))
    u, grad = potential.value_and_grad(theta, potential.data_tensors(data))
    for c in range(3):
        params = {}
        start = 0
        for name in potential.sites:
            n = potential.sizes[name]
            params[name] = theta[c, start:start + n].reshape(potential.shapes[name][1]).clone().requires_grad_()
            start += n
        value = pyro_potential(params)
        value.backward()
        assert torch.allclose(u[c], value.detach(), rtol=1e-5)
        assert torch.allclose(grad[c], torch.cat([params[n].grad.reshape(-1) for n in potential.sites]), atol=1e-4)
    # the same model and data shapes (new values) share one potential; the values are inputs, not constants
    first = flat_potential(constrained_model, data, 3, compile=False)
    other = {**data, "y": data["y"] + 1.0}
    assert flat_potential(constrained_model, other, 3, compile=False) is first
    first.value_and_grad(theta, first.data_tensors(data))
    u_other, _ = first.value_and_grad(theta, first.data_tensors(other))
    assert torch.allclose(u_other, FlatPotential(constrained_model, other, compile=False)
                          .value_and_grad(theta, first.data_tensors(other))[0])
    # the round trip through constrained space
    assert torch.allclose(potential.pack(potential.unpack(theta)), theta, atol=1e-4)


def test_runner_returns_draws_and_resumes_from_a_checkpoint(tmp_path):
    from pyro_bdl.storage.checkpoint import Checkpoint

    model, data, _ = _zoo_problem("blr")
    saver = Checkpoint(tmp_path / "ck", fingerprint="test")
    pyro.set_rng_seed(0)
    first = run_zoo_mcmc("nuts", model, data, samples=30, warmup=30, chains=1, progress=False, checkpoint=saver)
    assert first.samples["w"].shape == (1, 30, 2) and first.sample_stats["diverging"].shape == (1, 30)
    # a rerun asking for two chains keeps the saved one and runs the second
    both = run_zoo_mcmc("nuts", model, data, samples=30, warmup=30, chains=2, progress=False, checkpoint=saver)
    assert torch.equal(both.samples["w"][0], first.samples["w"][0])
    assert not torch.equal(both.samples["w"][1], first.samples["w"][0])
    assert set(both.info.to_metrics()) == {"mean_accept_prob", "divergences", "slower_path"}


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # 30-draw runs: which kernel ran is what is tested
def test_the_methods_run_the_zoo_kernel_by_default_and_pyro_s_on_request():
    import pyro_bdl

    data, options = PROBLEMS["blr"]()
    zoo = pyro_bdl.fit("blr", data, inference="nuts", options=options, progress=False, samples=30, warmup=30, seed=0)
    again = pyro_bdl.fit("blr", data, inference="nuts", options=options, progress=False, samples=30, warmup=30, seed=0)
    assert zoo.record.settings["kernel"] == "zoo" and torch.equal(zoo.samples["w"], again.samples["w"])
    assert sorted(zoo.sample_stats) == ["diverging", "lp", "n_steps", "step_size", "tree_depth"]
    ref = pyro_bdl.fit("blr", data, inference="hmc", options=options, progress=False, samples=10, warmup=10,
                       chains=1, kernel="pyro")
    assert ref.samples["w"].shape == (1, 10, 2) and "diverging" in ref.sample_stats
    assert "sample_stats" in zoo.to_inference_data().groups()
    with pytest.raises(ValueError, match="'zoo' or 'pyro'"):
        pyro_bdl.fit("blr", data, inference="nuts", options=options, progress=False, kernel="numpyro")


def test_dense_mass_factor_of_an_ill_conditioned_estimate():
    """The momentum factor F (F F^T = M = inverse_mass^-1) of a float32 covariance estimate with condition number
    1e7, where inverting then factorising in float32 fails (a last-layer posterior on collinear features)."""
    from pyro_bdl.inference.mcmc.dynamics import Dynamics

    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(20, 20, generator=gen, dtype=torch.float64))
    cov = q @ torch.diag(torch.logspace(-5, 2, 20, dtype=torch.float64)) @ q.T
    inverse_mass = cov.float().unsqueeze(0)
    dyn = Dynamics.__new__(Dynamics)
    dyn.set_mass(inverse_mass)
    F = dyn._chol_mass.double()[0]
    # the exact factor of the float32 estimate's inverse, in float64: F is it, rounded to float32
    exact = torch.linalg.solve_triangular(torch.linalg.cholesky(inverse_mass[0].double()),
                                          torch.eye(20, dtype=torch.float64), upper=False).mT
    assert torch.allclose(exact @ exact.T @ inverse_mass[0].double(), torch.eye(20, dtype=torch.float64), atol=1e-8)
    assert torch.allclose(F, exact, rtol=1e-6, atol=1e-6 * float(exact.abs().max()))


def _steps_with_evaluations():
    """Steps that call the potential 0, 1 (a leapfrog step; its results returned as they are) and 2 times (the
    second time at a point computed from the first call's results, or at that result itself)."""
    def none(grad_and_value, z, r):
        return z * r, r.sum(-1)

    def leapfrog(grad_and_value, z, r):
        r = r - 0.05 * z
        g, u = grad_and_value(z + 0.1 * r)
        return z + 0.1 * r, r - 0.05 * g, u

    def bare(grad_and_value, z, r):
        return grad_and_value(z)

    def twice(grad_and_value, z, r):
        g1, u1 = grad_and_value(z)
        g2, u2 = grad_and_value(z - 0.1 * g1 + r)
        return g1 + g2, u1 - u2

    def chained(grad_and_value, z, r):  # the second point is the first call's result itself
        g1, u1 = grad_and_value(z)
        g2, u2 = grad_and_value(g1)
        return u2, z + r, 2.0 * u1

    return [none, leapfrog, bare, twice, chained]


@pytest.mark.parametrize("step", _steps_with_evaluations(), ids=lambda step: step.__name__)
def test_a_step_traced_with_the_potential_spliced_in_computes_what_it_does_calling_the_potential(step):
    """The potential's graph is copied in at each call instead of traced again: the same operations as tracing
    the step with the potential called, and the same values on points and data it was not traced with."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pyro_bdl.inference.compile.fusion import traced_with
    from pyro_bdl.inference.compile.graph_folding import operations

    data = _constrained_data()
    potential = FlatPotential(constrained_model, data, compile=False)
    tensors = potential.data_tensors(data)
    g = torch.Generator().manual_seed(0)
    z, r = torch.randn(3, potential.dim, generator=g), torch.randn(3, potential.dim, generator=g)
    potential.value_and_grad(z, tensors)
    graph = potential.graph

    def called(*args):
        return step(lambda theta: graph(theta, *args[2:]), *args[:2])

    spliced = traced_with(step, graph, (z, r), tensors)
    retraced = make_fx(called)(z, r, *tensors)
    retraced.graph.eliminate_dead_code()  # as the splice does: the chained step leaves its second gradient unread
    assert operations(spliced) == operations(retraced)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed + 1)
        other = {**data, "y": data["y"] + torch.randn(data["y"].shape, generator=g)}
        args = (torch.randn(3, potential.dim, generator=g), torch.randn(3, potential.dim, generator=g),
                *potential.data_tensors(other))
        got, want = spliced(*args), called(*args)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.slow
def test_a_compiled_step_reads_data_given_later_as_a_non_contiguous_view_as_its_values():
    """The compiled steps leave out inductor's per-call stride checks (every input contiguous): a later fit on the
    same potential whose data tensor is a strided view of the same values still reads those values."""
    model, data, _ = _zoo_problem("blr")
    potential = FlatPotential(model, data, compile=False)
    X = data["X"]
    strided = torch.empty(X.shape[1], X.shape[0]).T  # the same shape, transposed strides
    strided.copy_(X)
    assert not strided.is_contiguous()
    z = torch.randn(2, potential.dim, generator=torch.Generator().manual_seed(0))

    def step(grad_and_value, z):
        return grad_and_value(z)

    first = fuse_with(potential, "bare", step, (z,), potential.data_tensors(data), compile=True)
    later = fuse_with(potential, "bare", step, (z,), potential.data_tensors({**data, "X": strided}), compile=True)
    for got, want in zip(later(z), first(z)):
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
