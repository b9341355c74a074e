"""A resumed run ends bit for bit where the uninterrupted run of the same seed ends (issue 19, case 6).

Each test fits once uninterrupted, once interrupted (Ctrl-C at a step: the checkpoint is written then; or an
error that kills the run: only the last periodic checkpoint is left, as after ``kill -9``), resumes the
interrupted run from its checkpoint, and compares draws and losses with ``torch.equal``.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import pyro_bdl
from pyro_bdl.inference import svi as svi_module
from pyro_bdl.inference.mcmc import methods as mcmc_module
from pyro_bdl.inference.mcmc import zoo as zoo_mcmc
from pyro_bdl.storage.checkpoint import kept_rng, rng_state, set_rng_state

pytestmark = pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # short runs: exactness only

SMALL = {"options": {"hidden": "8"}, "progress": False, "seed": 3}


class Killed(Exception):
    """Stands in for kill -9: not a KeyboardInterrupt, so no checkpoint is written on the way out."""


def _interrupt_svi_at(monkeypatch, step: int, error=KeyboardInterrupt):
    real, count = svi_module.SVI.step, {"n": 0}

    def step_then_stop(self, *args, **kwargs):
        count["n"] += 1
        if count["n"] == step:
            raise error()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(svi_module.SVI, "step", step_then_stop)


def _same(a, b) -> None:
    assert a.samples.keys() == b.samples.keys()
    for name in a.samples:
        assert torch.equal(a.samples[name], b.samples[name]), name
    if a.losses is not None:
        assert np.array_equal(np.asarray(a.losses), np.asarray(b.losses), equal_nan=True)


def _resumed(monkeypatch, tmp_path, interrupt, error, **kw):
    ck = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        interrupt(m)
        with pytest.raises(error):
            pyro_bdl.fit("bnn-regressor", "sine", checkpoint=ck, **kw)
    assert ck.exists()
    result = pyro_bdl.fit("bnn-regressor", "sine", checkpoint=ck, **kw)
    assert not ck.exists()
    return result


@pytest.mark.parametrize("method, settings", [
    ("svi", {"steps": 60}),  # the compiled ELBO: its first call after a resume must not move the streams
    ("svi", {"steps": 60, "batch_size": 16}),  # minibatch order
    ("svi-meanfield", {"steps": 60, "batch_size": 16}),
    ("map", {"steps": 60, "batch_size": 16}),
    ("mc-dropout", {"steps": 60, "batch_size": 16}),
    ("ensemble", {"steps": 40, "members": 3, "batch_size": 16}),
])
def test_ctrl_c_then_resume_ends_where_the_uninterrupted_run_ends(method, settings, monkeypatch, tmp_path):
    kw = {**SMALL, "inference": method, **settings}
    reference = pyro_bdl.fit("bnn-regressor", "sine", **kw)
    stop = 97 if method == "ensemble" else 23  # mid-run (the ensemble: in its third member)
    _same(reference, _resumed(monkeypatch, tmp_path, lambda m: _interrupt_svi_at(m, stop), KeyboardInterrupt, **kw))


def test_killed_after_a_periodic_checkpoint_resumes_exactly(monkeypatch, tmp_path):
    kw = {**SMALL, "inference": "svi", "steps": 40, "batch_size": 16}
    monkeypatch.setattr(svi_module.optimise, "__kwdefaults__",
                        {**svi_module.optimise.__kwdefaults__, "checkpoint_every": 10})
    reference = pyro_bdl.fit("bnn-regressor", "sine", **kw)
    _same(reference, _resumed(monkeypatch, tmp_path, lambda m: _interrupt_svi_at(m, 27, Killed), Killed, **kw))


@pytest.mark.slow
def test_pyro_kernel_chains_resume_exactly(monkeypatch, tmp_path):
    kw = {"inference": "nuts", "samples": 30, "warmup": 20, "chains": 3, "kernel": "pyro", "progress": False, "seed": 1}
    reference = pyro_bdl.fit("blr", "linear", **kw)
    real, count = mcmc_module._StatsRecorder.__call__, {"n": 0}

    def record_then_stop(self, *args):
        count["n"] += 1
        if count["n"] == 50 + 35:  # in the second chain's sampling
            raise KeyboardInterrupt
        return real(self, *args)

    ck = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        m.setattr(mcmc_module._StatsRecorder, "__call__", record_then_stop)
        with pytest.raises(KeyboardInterrupt):
            pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw)
    assert ck.exists()  # the first chain
    _same(reference, pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw))


def test_zoo_kernel_rerun_after_an_interrupted_batch_is_exact(monkeypatch, tmp_path):
    kw = {"inference": "nuts", "samples": 30, "warmup": 20, "chains": 2, "progress": False, "seed": 1}
    reference = pyro_bdl.fit("blr", "linear", **kw)
    real = zoo_mcmc.sample

    def sample_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed  # the batch's work is lost, as after kill -9 during it

    ck = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        m.setattr(zoo_mcmc, "sample", sample_then_die)
        with pytest.raises(Killed):
            pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw)
    _same(reference, pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw))


def test_rng_state_round_trips_every_stream():
    state = rng_state()
    drawn = (torch.rand(3), np.random.rand(3), random.random())
    set_rng_state(state)
    assert torch.equal(drawn[0], torch.rand(3)) and np.array_equal(drawn[1], np.random.rand(3))
    assert drawn[2] == random.random()
    set_rng_state(state)
    with kept_rng():  # draws inside do not move the streams
        torch.rand(5), np.random.rand(5), random.random()
    assert torch.equal(drawn[0], torch.rand(3)) and np.array_equal(drawn[1], np.random.rand(3))
    assert drawn[2] == random.random()


def _interrupt_zoo_transition_at(monkeypatch, n: int, error):
    """Raise ``error`` in the zoo sampler's n-th transition (warm-up and sampling counted together)."""
    from pyro_bdl.inference.mcmc import nuts

    real, count = nuts.transition, {"n": 0}

    def transition_then_stop(*args, **kwargs):
        count["n"] += 1
        if count["n"] == n:
            raise error()
        return real(*args, **kwargs)

    monkeypatch.setattr(nuts, "transition", transition_then_stop)


@pytest.mark.parametrize("stop", [12, 37])  # in the warm-up (mass and step-size adaptation), in the sampling
def test_zoo_kernel_ctrl_c_mid_batch_resumes_where_it_stopped(stop, monkeypatch, tmp_path):
    """Ctrl-C inside the batch saves the sampler's state; the rerun goes on from that draw (not from the
    batch's start) and ends with the uninterrupted run's draws and statistics."""
    from pyro_bdl.inference.mcmc import nuts

    kw = {"inference": "nuts", "samples": 30, "warmup": 20, "chains": 2, "progress": False, "seed": 1}
    reference = pyro_bdl.fit("blr", "linear", **kw)
    ck = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        _interrupt_zoo_transition_at(m, stop, KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw)
    assert torch.load(ck, weights_only=True)["state"]["batch"]["iteration"] == stop - 1
    real, seen = nuts.transition, {"n": 0}

    def counting(*args, **kwargs):
        seen["n"] += 1
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(nuts, "transition", counting)
        resumed = pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw)
    assert seen["n"] == 50 - (stop - 1)  # only the draws not yet made
    _same(reference, resumed)
    for key in reference.sample_stats:
        assert np.array_equal(np.asarray(reference.sample_stats[key]), np.asarray(resumed.sample_stats[key])), key


def test_zoo_kernel_killed_after_a_periodic_save_resumes_exactly(monkeypatch, tmp_path):
    from pyro_bdl.inference.mcmc import sampler

    kw = {"inference": "nuts", "samples": 30, "warmup": 20, "chains": 2, "progress": False, "seed": 1}
    reference = pyro_bdl.fit("blr", "linear", **kw)
    monkeypatch.setattr(sampler.sample, "__kwdefaults__", {**sampler.sample.__kwdefaults__, "save_every": 0.0})
    ck = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        _interrupt_zoo_transition_at(m, 41, Killed)  # no save on the way out: the last periodic one
        with pytest.raises(Killed):
            pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw)
    assert torch.load(ck, weights_only=True)["state"]["batch"]["iteration"] == 40
    _same(reference, pyro_bdl.fit("blr", "linear", checkpoint=ck, **kw))


# ---------------------------------------------------------------- kill -9 of the command line at random points

CLI_RUNS = {
    "svi": ["bnn-regressor", "--inference", "svi", "--steps", "2000", "--option", "hidden=8", "--batch-size", "32"],
    "ensemble": ["bnn-regressor", "--inference", "ensemble", "--steps", "300", "--set", "members=4", "--option",
                 "hidden=8"],
    "nuts": ["blr", "--inference", "nuts", "--samples", "300", "--warmup", "200", "--chains", "4", "--set",
             "kernel=pyro"],
}


def _cli(*args, **popen):
    import shutil
    import subprocess
    import sys

    exe = shutil.which("pyro-bdl") or str(Path(sys.executable).with_name("pyro-bdl"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([exe, "fit", *args, "--no-progress"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.slow
@pytest.mark.parametrize("run", CLI_RUNS)
def test_kill_9_at_a_random_point_then_rerun_ends_where_the_uninterrupted_run_ends(run, tmp_path):
    """``kill -9`` once a checkpoint exists, at a random moment after it; the same command again resumes and
    writes the draws the uninterrupted command writes (the random delay is drawn with the test's own seed)."""
    import arviz as az

    args = CLI_RUNS[run]
    reference = tmp_path / "reference"
    assert _cli(*args, "--out", str(reference)).wait(timeout=900) == 0
    out, delay = tmp_path / "killed", np.random.default_rng(sum(map(ord, run))).uniform(0.0, 1.0)
    proc = _cli(*args, "--out", str(out))
    deadline = time.monotonic() + 600
    while not (out / "checkpoint.pt").exists():
        assert proc.poll() is None, "the run ended before it wrote a checkpoint: make it longer"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(delay)
    killed = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert killed, "the run finished before the kill: make it longer"
    assert not (out / "posterior.nc").exists() and (out / "checkpoint.pt").exists()
    resumed = _cli(*args, "--out", str(out))
    assert resumed.wait(timeout=900) == 0
    assert "resuming from" in resumed.stderr.read()
    a, b = az.from_netcdf(str(reference / "posterior.nc")), az.from_netcdf(str(out / "posterior.nc"))
    for name in a.posterior.data_vars:
        assert np.array_equal(a.posterior[name].values, b.posterior[name].values), name
    assert (reference / "summary.csv").read_bytes() == (out / "summary.csv").read_bytes()


@pytest.mark.slow
def test_sigterm_saves_the_checkpoint_and_the_same_command_resumes(tmp_path):
    """SIGTERM (what ``timeout`` and job schedulers send) is handled as Ctrl-C: the fit saves its checkpoint and the
    command exits 130 with nothing else written; the same command again resumes from it and finishes."""
    args = CLI_RUNS["svi"]
    out = tmp_path / "out"
    proc = _cli(*args, "--out", str(out))
    deadline = time.monotonic() + 600
    while not (out / "checkpoint.pt").exists():  # training has begun (the first periodic checkpoint)
        assert proc.poll() is None, "the run ended before it wrote a checkpoint: make it longer"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    assert "progress is saved" in proc.stderr.read()
    assert (out / "checkpoint.pt").exists() and not (out / "posterior.nc").exists()
    resumed = _cli(*args, "--out", str(out))
    assert resumed.wait(timeout=900) == 0
    assert "resuming from" in resumed.stderr.read() and (out / "posterior.nc").exists()
