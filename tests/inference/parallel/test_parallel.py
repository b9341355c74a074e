"""Where a fit runs: threads, devices and the processes of a torchrun launch (pyro_bdl.inference.parallel).

The two-process checks start two processes joined by gloo on the loopback interface, as torchrun would, and
compare with one process on the same seed: data-parallel SVI on a network and an ensemble must agree to float
reassociation; NUTS chains split over the processes are the blocks one process runs; the VAE's local latents are
drawn by the process that holds their row, so there the agreement is statistical.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from torch.overrides import TorchFunctionMode

import pyro_bdl
from pyro_bdl.cli import main
from pyro_bdl.inference import get_method
from pyro_bdl.inference.parallel import choose_threads, resolve_device
from pyro_bdl.inference.parallel.threads import resolve_threads
from pyro_bdl.inference.parallel.processes import ProcessGroup, my_share, shard_sizes

RUNS = {  # name -> (model, method, settings)
    "svi": ("bnn-regressor", "svi", {"steps": 30, "samples": 5, "batch_size": 32}),
    "ensemble": ("bnn-regressor", "ensemble", {"steps": 20, "members": 3}),
    "nuts": ("blr", "nuts", {"samples": 30, "warmup": 30, "chains": 2}),
    "vae": ("vae", "svi-amortised", {"epochs": 3, "is_samples": 5}),
    "svgp": ("gp", "svi", {"steps": 30, "samples": 5, "batch_size": 32,
                           "options": {"approximation": "svgp", "inducing": 10}}),
}

def run_all(runs: dict) -> dict:
    """Every run of ``runs`` (name -> (model, method, settings)) at seed 3: ``"name.site"`` -> its draws, and
    ``"name.losses"``."""
    saved = {}
    for name, (model, method, settings) in runs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = pyro_bdl.fit(model, inference=method, progress=False, seed=3, **settings)
        saved.update({f"{name}.{k}": v.cpu() for k, v in r.samples.items()})
        if r.losses is not None:
            saved[f"{name}.losses"] = torch.as_tensor(r.losses)
    return saved


SCRIPT = """
import json, os, sys, torch
sys.path.insert(0, sys.argv[3])
torch.set_num_threads(1)
from test_parallel import run_all
torch.save(run_all(json.loads(sys.argv[1])), f"{sys.argv[2]}.{os.environ['RANK']}.pt")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    """The runs of RUNS in one process, and in two joined by gloo (each process's result)."""
    tmp = tmp_path_factory.mktemp("processes")
    script = tmp / "run.py"
    script.write_text(SCRIPT)
    args = [sys.executable, str(script), json.dumps(RUNS), str(tmp / "two"), os.path.dirname(__file__)]
    base = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    port = _free_port()
    two = [subprocess.Popen(args, env={**base, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
                                       "RANK": str(r), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"}) for r in range(2)]
    try:
        one = run_all(RUNS)  # the one-process runs here, while the two run
    finally:
        codes = [p.wait(timeout=300) for p in two]
    assert codes == [0, 0]
    return one, [torch.load(tmp / f"two.{r}.pt", weights_only=True) for r in range(2)]


def test_every_process_returns_the_same_result(one_and_two):
    _, (rank0, rank1) = one_and_two
    assert rank0.keys() == rank1.keys()
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key


def test_data_parallel_svi_is_the_one_process_run(one_and_two):
    # the same global batches and guide draws: only the order of float32 additions differs (the all-reduce sums two
    # half-batch gradients), relative 1e-7 per operation; 30 Adam steps amplify it to about 1e-6 of the loss
    one, (two, _) = one_and_two
    losses1, losses2 = one["svi.losses"], two["svi.losses"]
    assert torch.allclose(losses1, losses2, rtol=1e-5)
    for key in [k for k in one if k.startswith("svi.") and k != "svi.losses"]:
        assert torch.allclose(one[key], two[key], atol=1e-5, rtol=1e-4), key


def test_data_parallel_svgp_is_the_one_process_run(one_and_two):
    """The sparse GP's minibatches sharded over two processes, the inducing inputs' gradients summed with the
    rest: the one-process run's losses and draws, to the order of the additions."""
    one, (two, _) = one_and_two
    assert torch.allclose(one["svgp.losses"], two["svgp.losses"], rtol=1e-5)
    for key in [k for k in one if k.startswith("svgp.") and k != "svgp.losses"]:
        assert torch.allclose(one[key], two[key], atol=1e-5, rtol=1e-4), key


def test_ensemble_members_split_over_processes_are_the_one_process_members(one_and_two):
    one, (two, _) = one_and_two  # a member draws from its own seed: the same whichever process fits it
    for key in [k for k in one if k.startswith("ensemble.")]:
        assert torch.equal(one[key], two[key]), key


def test_vae_agrees_with_one_process_in_distribution(one_and_two):
    one, (two, _) = one_and_two
    last1, last2 = one["vae.losses"][-20:], two["vae.losses"][-20:]
    # the losses of the last 20 minibatches (still falling: their spread overstates the noise, a conservative
    # scale); measured: the means differ by 166 nats of about 44,400, four standard errors are 420
    spread = float(torch.cat([last1, last2]).std())
    assert abs(float(last1.mean() - last2.mean())) < 4 * spread / 20 ** 0.5


def test_nuts_chains_split_over_processes_are_the_blocks_one_process_runs(one_and_two, monkeypatch):
    import pyro_bdl.inference.mcmc.zoo as zoo

    _, (two, _) = one_and_two
    name, (model, method, settings) = "nuts", RUNS["nuts"]
    blocks = []
    for rank in range(2):  # each process's block: its chains from the launch's seed plus its first chain
        monkeypatch.setattr(zoo, "current_group", lambda rank=rank: ProcessGroup(rank=rank, world=2))
        monkeypatch.setattr(zoo, "gather_chains", lambda done, group: done)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            blocks.append(pyro_bdl.fit(model, inference=method, progress=False, seed=3, **settings).samples)
    for site in blocks[0]:
        assert torch.equal(torch.cat([b[site] for b in blocks]), two[f"nuts.{site}"]), site


def test_shards_and_shares():
    assert shard_sizes(10, 4) == [3, 3, 2, 2] and sum(shard_sizes(1797, 2)) == 1797
    assert [list(my_share(5, ProcessGroup(rank=r, world=2))) for r in range(2)] == [[0, 1, 2], [3, 4]]


def test_threads_chosen_from_the_work():
    assert choose_threads(5e3, cores=8, load=0.0) == 1  # a small net: one thread
    assert choose_threads(4e7, cores=8, load=0.0) == 4
    assert choose_threads(4e7, cores=2, load=3.0) == 1  # a busy machine
    assert choose_threads(1e9, cores=8, load=0.0, processes=2) == 4  # cores shared by the launch's processes
    with pytest.raises(ValueError, match="threads"):
        pyro_bdl.fit("blr", inference="map", threads="many", progress=False, steps=2000)
    for bad in (0, 2.5, True, "1.5"):
        with pytest.raises(ValueError, match="threads"):
            resolve_threads(bad, 0.0)
    assert resolve_threads(" 3", 0.0) == 3 and resolve_threads("auto", 0.0) == 1


@pytest.mark.slow
def test_metrics_say_where_the_fit_ran(tmp_path):
    assert main(["fit", "blr", "-i", "map", "--steps", "2000", "--out", str(tmp_path / "f"), "--no-progress",
                 "--threads", "1"]) == 0
    metrics = json.loads((tmp_path / "f" / "metrics.json").read_text())
    assert (metrics["device"], metrics["threads"], metrics["processes"]) == ("cpu", 1, 1)


def test_device_cpu_is_the_default():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run: its loss has not settled, which is not what is checked here
        a = pyro_bdl.fit("blr", inference="map", progress=False, steps=200)
        b = pyro_bdl.fit("blr", inference="map", progress=False, steps=200, device="cpu")
    assert all(torch.equal(a.samples[k], b.samples[k]) for k in a.samples)
    assert a.predict(torch.zeros(3, 3)).equals(b.predict(torch.zeros(3, 3)))


@pytest.mark.parametrize("device, message", [("tpu", "unknown device"), ("cuda:7", "not available")])
def test_a_device_that_is_not_there(device, message):
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    with pytest.raises(ValueError, match=message):
        resolve_device(device)


@pytest.mark.parametrize("argv, message", [
    (["--nproc", "0"], "--nproc must be at least 1"),
    (["--nproc", "2", "-i", "laplace"], "does not run on several processes"),
    (["--device", "cuda:9"], "not available"),
    (["--nproc", "2", "-i", "svi"], "no batch_size argument"),  # blr: refused before any process starts
])
def test_cli_refuses_bad_launches(tmp_path, capsys, argv, message):
    out = tmp_path / "fit"
    assert main(["fit", "blr", "--out", str(out), "--no-progress", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.eye, torch.randn, torch.rand,
             torch.randint, torch.randperm, torch.linspace, torch.tensor, torch.as_tensor}


class _FactorySpy(TorchFunctionMode):
    """Records the lines of pyro_bdl that make a tensor without saying on which device (a stand-in for a GPU:
    such a tensor lands on the CPU whatever the data's device)."""

    def __init__(self):
        super().__init__()
        self.root, self.found = os.path.dirname(pyro_bdl.__file__), set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None and not (args and isinstance(args[0], torch.Tensor)):
            frame, in_module = sys._getframe(1), False
            while frame is not None and f"{os.sep}torch{os.sep}" in frame.f_code.co_filename:
                in_module |= f"nn{os.sep}modules" in frame.f_code.co_filename
                frame = frame.f_back
            if in_module:  # a network built on the CPU, moved to the data's device by nn.image_networks.registered
                return func(*args, **kwargs)
            # inference/compile/ is the CPU's speed path (Fusion.fuse runs an accelerator's steps op by op)
            if frame is not None and frame.f_code.co_filename.startswith(self.root) and \
                    f"inference{os.sep}compile{os.sep}" not in frame.f_code.co_filename:
                self.found.add(f"{os.path.relpath(frame.f_code.co_filename, self.root)}:{frame.f_lineno}")
        return func(*args, **kwargs)


def _device_cases() -> list:
    """From the registry: every model with its default method, and every method on the first model it suits;
    NUTS and HMC on the networks left out (minutes at the quick settings; their sampler runs on blr)."""
    from pyro_bdl.inference import METHODS
    from pyro_bdl.registry import list_models

    slow = {spec.name for spec in list_models() if "network" in spec.inference.traits}
    cases = {(spec.name, spec.runs_as(spec.default_method)) for spec in list_models()}
    for name in METHODS:
        suited = [spec.name for spec in list_models() if name in spec.methods and spec.runs_as(name) == name]
        if suited and not any(method == name for _, method in cases):
            cases.add((suited[0], name))
    return sorted((model, method) for model, method in cases
                  if not (model in slow and get_method(method).family == "mcmc"))


@pytest.mark.parametrize("model, method", _device_cases())
def test_the_engine_makes_no_tensor_on_a_fixed_device(model, method):
    from pyro_bdl.data.embedded import load

    data = load(pyro_bdl.get_model(model).default_data, None)
    # where tensors are made depends neither on how many rows nor on how wide the net (the cost of the full sizes:
    # benchmarks/RESULTS.md, "The test suite")
    data = dataclasses.replace(data, X=data.X[:300], y=None if data.y is None else data.y[:300])
    options = {"hidden": "5"} if "hidden" in pyro_bdl.get_model(model).options else None
    spy = _FactorySpy()
    with spy, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyro_bdl.fit(model, data, inference=method, options=options, progress=False, **get_method(method).quick)
    assert not spy.found, f"tensors made without a device at {sorted(spy.found)}"


def test_the_kl_warmup_factor_is_made_on_the_datas_device():
    """The KL warm-up's factor (an input of every step) takes the data's device and dtype, not a fixed one."""
    from pyro_bdl.inference.amortised import KLWarmup

    from pyro_bdl.data.embedded import load

    data, spy = load("digits-01", None), _FactorySpy()
    with spy, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyro_bdl.fit("vae", data, inference="svi-amortised", progress=False, kl_warmup=1, epochs=2,
                     options={"latent_dim": 2, "hidden": 8})
    assert not spy.found, f"tensors made without a device at {sorted(spy.found)}"
    factor = KLWarmup(4, like=torch.zeros(3, dtype=torch.float64)).factor
    assert factor.dtype == torch.float64 and float(factor) == 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine: the CUDA path is checked "
                    "where one exists (benchmarks/gpu_check.py ran it on an H200, benchmarks/RESULTS.md)")
@pytest.mark.parametrize("model, method", [("bnn-regressor", "svi"), ("vae", "svi-amortised"), ("blr", "nuts")])
def test_a_gpu_fit_loads_and_predicts_on_the_cpu(tmp_path, model, method):
    from pyro_bdl.store import load_fit, write_fit

    result = pyro_bdl.fit(model, inference=method, progress=False, device="cuda", **get_method(method).quick)
    assert {v.device.type for v in (*result.samples.values(), *result.params.values())} == {"cuda"}
    write_fit(result, tmp_path / "fit")
    loaded = load_fit(tmp_path / "fit")
    assert all(v.device.type == "cpu" for v in loaded.samples.values())


_INTERRUPT = {"at": None, "calls": 0}


def _interruptible(y):
    """A model that raises KeyboardInterrupt at its ``_INTERRUPT["at"]``-th call: inside an SVI step, after the
    guide has drawn, as Ctrl-C arrives while a process of a launch waits on the all-reduce."""
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    _INTERRUPT["calls"] += 1
    if _INTERRUPT["calls"] == _INTERRUPT["at"]:
        raise KeyboardInterrupt
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def test_an_interrupt_inside_a_step_resumes_to_the_uninterrupted_run(tmp_path):
    y = torch.linspace(-1.0, 3.0, 20)
    settings = {"inference": "svi", "steps": 60, "samples": 20, "progress": False, "seed": 4}
    _INTERRUPT.update(at=None, calls=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = pyro_bdl.fit(_interruptible, {"y": y}, **settings)
        _INTERRUPT.update(at=40, calls=0)  # the model runs a few times before the first step: well inside the run
        with pytest.raises(KeyboardInterrupt):
            pyro_bdl.fit(_interruptible, {"y": y}, checkpoint=tmp_path / "ck.pt", **settings)
        _INTERRUPT.update(at=None, calls=0)
        resumed = pyro_bdl.fit(_interruptible, {"y": y}, checkpoint=tmp_path / "ck.pt", **settings)
    assert np.array_equal(whole.losses, resumed.losses)
    assert torch.equal(whole.samples["mu"], resumed.samples["mu"])


@pytest.mark.slow
def test_cli_nproc_writes_one_fit_directory_that_loads_on_one_process(tmp_path):
    from pyro_bdl.store import load_fit

    out = tmp_path / "fit"
    done = subprocess.run([sys.executable, "-m", "pyro_bdl.cli", "fit", "bnn-regressor", "-i", "svi", "--steps", "40",
                           "--batch-size", "32", "--nproc", "2", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "metrics.json").read_text())["processes"] == 2
    assert not list(out.glob("checkpoint*"))  # process 0 removed its checkpoint; the other process wrote none
    loaded = load_fit(out)
    assert len(loaded.predict(torch.zeros(4, 1))) == 4
