"""Interrupted fits resume from their checkpoint without losing the work done."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_bdl
from pyro_bdl.storage.checkpoint import Checkpoint


class Interrupter:
    """A model that raises KeyboardInterrupt (as Ctrl-C would) on its ``at``-th call."""

    def __init__(self, at: int | None):
        self.at, self.calls = at, 0

    def __call__(self, y=None):
        self.calls += 1
        if self.at is not None and self.calls == self.at:
            raise KeyboardInterrupt
        mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


Y = torch.linspace(1.0, 3.0, 20)


@pytest.mark.slow
def test_svi_resumes_after_ctrl_c(tmp_path):
    ck = tmp_path / "svi.ckpt"
    first = Interrupter(at=1300)
    with pytest.raises(KeyboardInterrupt):
        pyro_bdl.fit(first, {"y": Y}, inference="svi", progress=False, steps=2000, samples=500, checkpoint=ck)
    saved = torch.load(ck, weights_only=True)["state"]
    done = len(saved["losses"])
    assert 600 <= done < 2000  # the steps before Ctrl-C are kept (the model runs more than once per step)

    second = Interrupter(at=None)
    result = pyro_bdl.fit(second, {"y": Y}, inference="svi", progress=False, steps=2000, samples=500, checkpoint=ck)
    assert len(result.losses) == 2000
    assert torch.allclose(torch.tensor(result.losses[:done]), saved["losses"])
    assert second.calls < 2 * (2000 - done) + 600  # only the remaining steps were run (plus draws)
    exact_mean = float(Y.sum()) / (20 + 0.01)
    assert abs(float(result.posterior_mean("mu")) - exact_mean) < 4.5 / math.sqrt(20) / math.sqrt(500) + 0.02
    assert not ck.exists()  # cleared once the fit completed


def test_mcmc_keeps_finished_chains(tmp_path):
    ck = tmp_path / "mcmc.ckpt"
    first = Interrupter(at=None)
    # count the calls of one chain, then interrupt the second chain half way
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="only one chain"):
        pyro_bdl.fit(first, {"y": Y}, inference="nuts", progress=False, samples=100, warmup=100, chains=1, kernel="pyro")
    per_chain = first.calls
    second = Interrupter(at=per_chain + per_chain // 2)
    with pytest.raises(KeyboardInterrupt):
        pyro_bdl.fit(second, {"y": Y}, inference="nuts", progress=False, samples=100, warmup=100, chains=2,
                     checkpoint=ck, kernel="pyro")
    chain0 = torch.load(ck, weights_only=True)["state"]["chains"][0]["samples"]["mu"]
    third = Interrupter(at=None)
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="MCMC diagnostics"):  # 2 x 100 draws
        result = pyro_bdl.fit(third, {"y": Y}, inference="nuts", progress=False, samples=100, warmup=100, chains=2,
                              checkpoint=ck, kernel="pyro")
    assert torch.equal(result.samples["mu"][0], chain0)
    assert third.calls < 1.5 * per_chain  # chain 0 was not run again


def test_checkpoint_of_another_run_is_refused(tmp_path):
    path = tmp_path / "x.ckpt"
    Checkpoint(path, "run-a").save({"losses": torch.zeros(3)})
    with pytest.raises(ValueError, match="different run"):
        Checkpoint(path, "run-b").load()


@pytest.mark.slow
def test_cli_interrupt_then_resume(tmp_path, capsys, monkeypatch):
    from pyro_bdl.cli import main
    from pyro_bdl.inference import svi

    out = tmp_path / "run"
    real_step = pyro.infer.SVI.step
    calls = {"n": 0}

    def flaky_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 700:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(svi.SVI, "step", flaky_step)
    args = ["fit", "blr", "--inference", "svi", "--steps", "1000", "--out", str(out), "--no-progress"]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "rerun the same command to resume" in err
    assert (out / "checkpoint.pt").exists() and not (out / "posterior.nc").exists()
    assert main(args) == 0
    assert "resuming from" in capsys.readouterr().err
    assert (out / "posterior.nc").exists() and not (out / "checkpoint.pt").exists()
    assert calls["n"] < 700 + 400  # the second run did only the remaining steps
