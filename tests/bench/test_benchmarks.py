"""Smoke tests of every script in benchmarks/ and scripts/: each runs in a subprocess with tiny flags and
prints what it promises; bbb_step.py's correctness check holds and has teeth.  A coverage test fails when a
script has no smoke run here.

No timing is asserted anywhere: the benchmarks' numbers are read by people, on demand.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from support.toy_uci import write_uci

from pyro_bdl.bench.uci import run_split

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bbb_step.py"


def run_script(script: str, *args: str, cwd: Path, timeout: float = 300) -> str:
    """Run ``script`` (a path from the repository root) with ``args`` in a subprocess; its stdout."""
    proc = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("bbb_step_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _smoke_run_scripts() -> set[str]:
    """The scripts this file's tests pass to ``run_script`` (read from its syntax tree, not from a list
    that could drift from the tests)."""
    tree = ast.parse(Path(__file__).read_text())
    return {call.args[0].value for test in tree.body if isinstance(test, ast.FunctionDef) and test.name.startswith("test_")
            for call in ast.walk(test) if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "run_script"
            and call.args and isinstance(call.args[0], ast.Constant)}


def test_every_script_has_a_smoke_run():
    scripts = {str(p.relative_to(ROOT)) for folder in ("benchmarks", "scripts") for p in (ROOT / folder).glob("*.py")}
    assert scripts, "no scripts found"
    assert scripts <= _smoke_run_scripts(), f"scripts without a smoke run here: {sorted(scripts - _smoke_run_scripts())}"


@pytest.mark.slow
def test_quick_run_prints_the_ratio_lines(tmp_path):
    # --threads 1: on a shared 2-core machine, 2 threads can be many times slower under load;
    # this keeps the smoke test fast whatever else runs (nothing here is a timing assertion)
    out = run_script("benchmarks/bbb_step.py", "--quick", "--threads", "1", cwd=tmp_path)
    for model in ("bnn-regressor", "bnn-classifier"):
        for path in ("svi default (compiled)", "svi-meanfield default (compiled)", "svi eager (before)",
                     "svi-meanfield eager (before)", "svi-meanfield + local_reparam"):
            assert f"ratio zoo/hand [{model}, {path}] = " in out, out
    assert "ratio zoo/hand [time to lpd > 0.70] = " in out, out
    assert out.count("final -ELBO ") == 4, out  # every time-to-target path reports its objective
    assert out.count("hand point net (floor: no draw, no KL)") == 2, out  # one floor row per network
    assert "MISMATCH" not in out
    assert "torch threads 1" in out and "compiled graph optimised: False" in out


@pytest.mark.slow
def test_time_to_target_over_seeds_prints_one_race_per_seed_and_the_median(tmp_path):
    out = run_script("benchmarks/bbb_step.py", "--quick", "--threads", "1", "--skip-step-timing", "--seeds", "0", "1",
                     "--max-steps", "100", "--targets", "-5", "0.6", cwd=tmp_path)
    assert "ratio zoo/hand [bnn-regressor" not in out  # step timing skipped
    assert "regressor, seed 0," in out and "regressor, seed 1," in out
    # a target every path reaches at its first evaluation (lpd > -5) has a ratio on both seeds
    line = next(line for line in out.splitlines() if "time to lpd > -5.00, median of" in line)
    assert "median of 2 seeds] = " in line and "n/a" not in line, line


def test_floor_step_is_the_point_net_loss_and_leaves_the_sds_alone():
    """The floor row times the same net as a point estimate: its loss is the hand-written loss with the
    noise draw at zero and without the KL, and its steps move mu only."""
    import torch

    bench = _load_benchmark()
    hand = bench.hand_bbb(bench.REGRESSOR, seed=0)
    X, y = bench.regression_data(200, seed=3)
    rhos = [r.detach().clone() for r in hand.rhos]
    with torch.no_grad():
        want = float(hand.loss(X, y, X.shape[0], eps=[torch.zeros_like(m) for m in hand.mus])
                     - hand.kl([torch.nn.functional.softplus(r) for r in hand.rhos]))
    first = hand.point_step(X, y)
    assert abs(first - want) < 1e-4 * abs(want)
    losses = [hand.point_step(X, y) for _ in range(20)]
    assert losses[-1] < first
    assert all(torch.equal(a, b) for a, b in zip(rhos, hand.rhos))


def test_time_to_target_objective_is_the_hand_written_loss_in_expectation():
    """``negative_elbo`` (expected NLL + closed-form KL) at near-zero sds equals the hand-written loss at
    eps = 0, which is then the whole expectation."""
    import torch

    bench = _load_benchmark()
    hand = bench.hand_bbb(bench.REGRESSOR, seed=0)
    with torch.no_grad():
        for rho in hand.rhos:
            rho.fill_(-30.0)
    X, y = bench.regression_data(200, seed=3)
    pairs = list(zip(hand.mus, hand.rhos))
    got = bench.negative_elbo(pairs, X, y, 0.1, hand.prior_sd, draws=3)
    want = float(hand.loss(X, y, X.shape[0], eps=[torch.zeros_like(m) for m in hand.mus]))
    assert abs(got - want) < 1e-4 * abs(want)


@pytest.mark.parametrize("config", ["REGRESSOR", "SMALL_CLASSIFIER"])
def test_zoo_and_hand_written_losses_agree_at_identical_draws(config):
    bench = _load_benchmark()
    res = bench.check_losses(getattr(bench, config))
    for kind in ("trace", "meanfield"):
        r = res[kind]
        assert r["loss_rel"] < bench.LOSS_RTOL, (kind, r)
        assert r["grad_rel"] < bench.GRAD_RTOL, (kind, r)
    # the closed-form KL is the mean of the single-draw estimate log q - log p
    assert abs(res["kl_mc_mean"] - res["kl_analytic"]) < 4 * res["kl_mc_se"], res


def test_the_correctness_check_catches_a_dropped_constant():
    """The check has teeth: a hand-written likelihood without its log sqrt(2 pi) is a mismatch."""
    bench = _load_benchmark()
    bench.LOG_SQRT_2PI = 0.0
    res = bench.check_losses(bench.REGRESSOR)
    assert res["trace"]["loss_rel"] > bench.LOSS_RTOL
    assert res["meanfield"]["loss_rel"] > bench.LOSS_RTOL


@pytest.mark.slow
def test_gradient_clamp_script_runs_a_fit_per_clamp(tmp_path):
    out = run_script("benchmarks/gradient_clamp.py", "--clamps", "inf", "10", "--data", "sine", "--steps", "50",
                     "--set", "lr_hold=0", cwd=tmp_path)
    lines = [line for line in out.splitlines() if line.startswith("clamp")]
    assert [line.split()[1] for line in lines] == ["inf", "10"] and all("gap/data" in line for line in lines)
    assert all(line.endswith("steps=50  lr_hold=0") for line in lines), lines


@pytest.mark.slow
def test_sine_gap_script_parses_specs_and_prints_a_line_per_fit(tmp_path):
    script = SCRIPT.parent / "sine_gap.py"
    spec = importlib.util.spec_from_file_location("sine_gap_benchmark", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.parse_spec("svi:50,50:steps=100:grad_clamp=inf:prior_scale=1.5") == (
        "svi", {"hidden": "50,50", "prior_scale": "1.5"}, {"steps": "100", "grad_clamp": "inf"})
    assert module.parse_spec("mc-dropout:p=0.1") == ("mc-dropout", {}, {"p": "0.1"})
    assert module.parse_spec("svi::activation=tanh") == ("svi", {"activation": "tanh"}, {})  # empty: default widths
    with pytest.raises(ValueError, match="KEY=VALUE"):
        module.parse_spec("svi:8:steps")
    out = run_script("benchmarks/sine_gap.py", "svi:8", "mc-dropout:8,8:p=0.1", "laplace-ggn:8:samples=20", "--steps", "30",
                     "--seeds", "0", "1", cwd=tmp_path)
    lines = [line for line in out.splitlines() if "gap/data" in line]
    assert [line.split()[:3] for line in lines] == [["svi:8", "seed", "0"], ["svi:8", "seed", "1"],
                                                    ["mc-dropout:8,8:p=0.1", "seed", "0"], ["mc-dropout:8,8:p=0.1", "seed", "1"],
                                                    ["laplace-ggn:8:samples=20", "seed", "0"],
                                                    ["laplace-ggn:8:samples=20", "seed", "1"]]


@pytest.mark.slow
def test_compile_threshold_quick_run_prints_a_row_per_member(tmp_path):
    """benchmarks/compile_threshold.py on tiny runs (one process per model and mode): every member of the quick
    family sampled and its ratio printed."""
    out = run_script("benchmarks/compile_threshold.py", "--quick", cwd=tmp_path, timeout=600)
    for member in ("logistic", "hierarchical"):
        assert f"ratio auto/best [{member}" in out, out
    assert "auto's rule on the never-compiled run's steps" in out, out


@pytest.mark.slow
def test_compile_threshold_replays_auto_on_saved_steps(tmp_path):
    """--replay records per-draw steps (tiny runs), saves them, and a second run replays the rule on the saved
    steps at two thresholds: the same per-threshold lines both times."""
    saved = tmp_path / "steps.json"
    first = run_script("benchmarks/compile_threshold.py", "--quick", "--replay", "--save", str(saved), cwd=tmp_path)
    again = run_script("benchmarks/compile_threshold.py", "--replay", "--load", str(saved), "--thresholds", "0",
                       "1000000", cwd=tmp_path)
    assert "recorded logistic" in first and saved.exists()
    for threshold in (0, 1000000):
        assert f"ratio auto/best [threshold {threshold}, F 18 s]" in again, again
    # threshold 0 compiles every run at its first decision, 1e6 none
    assert "compiles at never" not in again.split("--- threshold 1000000")[0]
    assert "compiles at never" in again.split("--- threshold 1000000")[1]


@pytest.mark.slow
def test_step_runtime_quick_run_times_the_ways_that_agree_and_the_traces(tmp_path):
    """benchmarks/step_runtime.py on small data: the operand costs, every model's leaf and merge (with some
    chains building or active; with all: the only forms one chain needs) timed four ways with the same outputs,
    and the two ways of tracing the leaf and merge."""
    out = run_script("benchmarks/step_runtime.py", "--quick", cwd=tmp_path)
    for step in ("leaf", "leaf, all building", "merge", "merge, all active"):
        assert f"ratio + static runtime/torchscript [eight schools, 4 chains, {step}] = " in out, out
        assert f"ratio + buffered forms/+ static runtime [eight schools, 4 chains, {step}] = " in out, out
    for step in ("leaf", "merge"):
        assert f"ratio spliced/make_fx [eight schools, 4 chains, {step}] = " in out, out
    assert "ratio trace_aten/make_fx [eight schools, 4 chains, potential] = " in out, out
    assert "importing torch._dynamo (make_fx and grad_and_value need it; once a process): " in out, out
    assert "ratio + simplify/torchscript [bnn 10-20-1 n=50, 1 chain, leaf, all building] = " in out, out
    assert "ratio number/tensor operand [x * 0.5, static runtime] = " in out, out
    assert "MISMATCH" not in out, out


@pytest.mark.slow
def test_speed_mcmc_quick_run_prints_its_ratios_and_the_means_agree(tmp_path):
    """benchmarks/speed_mcmc.py on tiny runs (zoo against Pyro's NUTS; NumPyro skipped): every ratio line
    is printed and every sampler's blr posterior means lie within Monte Carlo error of the exact ones; the first
    fits in fresh processes run, without importing torch._dynamo."""
    out = run_script("benchmarks/speed_mcmc.py", "--quick", "--skip-numpyro", "--workloads", "blr", "bnn", "fresh",
                     cwd=tmp_path, timeout=600)
    assert "ratio zoo/pyro [blr min ESS/s, zoo, second fit (compile excluded)] = " in out, out
    assert "ratio zoo warm/floor(traced) [bnn time per leapfrog] = " in out, out
    assert "all within 4.5 MC standard errors" in out and "MISMATCH" not in out, out
    for name in ("zoo schools", "zoo demo"):
        assert f"round 1: {name:16s} fit" in out and f"{name:16s} median fit" in out, out
    assert out.count("torch._dynamo imported: False") == 2, out


def _load_sine_gap():
    spec = importlib.util.spec_from_file_location("sine_gap_benchmark", SCRIPT.parent / "sine_gap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_sine_gap_family_mode_fits_each_problem_and_prints_a_table_per_spec(tmp_path):
    from pyro_bdl.models.bnn import IN_BETWEEN

    module = _load_sine_gap()
    method = sorted(IN_BETWEEN)[0]
    entry = IN_BETWEEN[method]
    assert module.parse_spec(f"{method}@in-between") == (method, dict(entry["options"]), dict(entry["settings"]))
    with pytest.raises(ValueError, match="IN_BETWEEN recommends"):
        module.parse_spec("map@in-between")
    proc = subprocess.run([sys.executable, str(SCRIPT.parent / "sine_gap.py"), "--family", "--problems", "0", "5",
                           "--steps", "20", "ensemble", "svi:8"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "gap/data" in line and not line.startswith("|")]
    names = [module.gap_family(0)[i].name for i in (0, 5)]
    assert [(line.split()[0], line.split("seed 0")[1].split("gap/data")[0].strip()) for line in lines] == [
        (spec, name) for spec in ("ensemble", "svi:8") for name in names]
    for spec in ("ensemble", "svi:8"):
        assert f"`{spec}`: passes on " in proc.stdout and " of 2" in proc.stdout
    assert proc.stdout.count("| problem | seed | gap/data | epistemic gap/data |") == 2
    bad = subprocess.run([sys.executable, str(SCRIPT.parent / "sine_gap.py"), "ensemble", "--family", "--problems", "12"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "indices in 0..11" in bad.stderr


@pytest.mark.slow
def test_dropout_variants_script_writes_the_digits_rows(tmp_path):
    """benchmarks/dropout_variants.py at the quick settings: one row per method spec (DropConnect's setting passed
    through), the learned rate per layer for concrete dropout, the table written; a bad spec is refused."""
    out = run_script("benchmarks/dropout_variants.py", "--quick", "--sine", "--methods", "mc-dropout:mask=weight",
                     "concrete-dropout", "--out", str(tmp_path / "digits.md"), cwd=tmp_path)
    rows = [line for line in out.splitlines() if line.startswith("digits ")]
    assert [row.split(":")[0] for row in rows] == ["digits mc-dropout", "digits concrete-dropout"], out
    assert "p 0.05 (fixed)" in rows[0] and "p layer1 0." in rows[1], out
    sine = [line for line in out.splitlines() if line.startswith("sine ")]
    assert len(sine) == 2 and all(0 <= float(line.split("coverage_90 ")[1].split()[0]) <= 1 for line in sine), out
    table = (tmp_path / "digits.md").read_text()
    assert table.count("| `mc-dropout:mask=weight` |") == 2 and table.count("| `concrete-dropout` |") == 2
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks/dropout_variants.py"), "--methods", "mc-dropout:mask"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


@pytest.mark.slow
def test_gradient_variance_script_prints_the_ratio(tmp_path):
    out = run_script("scripts/gradient_variance.py", "--score", "50", "--reparam", "20", cwd=tmp_path)
    assert "variance ratio score / reparam" in out


def _write_idx(path, array) -> None:
    """``array`` (uint8) as a gzipped IDX file, as MNIST ships them."""
    import gzip
    import struct

    import numpy as np

    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def _write_blob_mnist(folder, rows: int) -> None:
    """``rows`` made-up 28x28 images in MNIST's IDX files in ``folder``: 10 classes, each a class-dependent bright
    blob on noise, so that there is something to learn."""
    rng = np.random.default_rng(0)
    labels = np.arange(rows) % 10
    images = rng.integers(0, 60, size=(rows, 28, 28))
    for i, label in enumerate(labels):
        images[i, 2 * label:2 * label + 8, 4:20] = 255
    folder.mkdir()
    _write_idx(folder / "t10k-images-idx3-ubyte.gz", images)
    _write_idx(folder / "t10k-labels-idx1-ubyte.gz", labels)


@pytest.mark.slow
def test_sparse_vd_benchmark_prints_a_line_per_net_and_the_ratios(tmp_path):
    """benchmarks/sparse_vd.py on 200 made-up 28x28 images (10 classes, a class-dependent blob so that there
    is something to learn), one epoch: a line per net, the ratio lines, the paper's reference."""
    _write_blob_mnist(tmp_path / "mnist", 200)
    out = run_script("benchmarks/sparse_vd.py", "--data", str(tmp_path / "mnist"), "--epochs", "2", "--hidden", "20,10",
                     "--batch-size", "50", "--samples", "5", "--timing-rounds", "1", "--timing-epochs", "1", cwd=tmp_path)
    assert "160 train / 40 test" in out, out
    lines = [line for line in out.splitlines() if "s/epoch" in line and not line.startswith("timing")]
    assert [line.split()[0] for line in lines] == ["sparse-vd", "dense", "dense"], out
    assert "before pruning" in lines[0] and "compression" in lines[0] and "s/epoch" in lines[0]
    for name in ("dense BBB", "dense point net"):
        assert f"ratio sparse-vd/{name} [seconds per epoch] = " in out, out
        assert f"difference sparse-vd - {name} [test error, points] = " in out, out
    assert "paper (60k training images): dense 1.64%, sparse VD 1.92% at 68x" in out
    assert "ratio sparse-vd/dense BBB [seconds per epoch, median of 1 rounds in turn] = " in out, out


@pytest.mark.slow
def test_sparse_vd_benchmark_fits_the_convolutional_net(tmp_path):
    import numpy as np

    rng = np.random.default_rng(1)
    (tmp_path / "mnist").mkdir()
    _write_idx(tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz", rng.integers(0, 255, size=(100, 28, 28)))
    _write_idx(tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz", np.arange(100) % 10)
    out = run_script("benchmarks/sparse_vd.py", "--data", str(tmp_path / "mnist"), "--epochs", "1", "--lenet5", "4,8:3:10",
                     "--batch-size", "50", "--samples", "3", cwd=tmp_path)
    line = next(line for line in out.splitlines() if "s/epoch" in line)
    assert line.startswith("sparse-vd-lenet5 4,8:3:10") and "compression" in line, out
    assert "LeNet-5 dense 0.80%, sparse VD 0.75% at 280x" in out


@pytest.mark.slow
def test_vae_speed_quick_run_prints_the_ratio(tmp_path):
    out = run_script("benchmarks/vae_speed.py", "--quick", "--repeats", "2", cwd=tmp_path)
    assert "ratio zoo/hand = " in out and "ratio zoo jit/hand = " in out
    for path in ("zoo ", "zoo jit", "hand"):
        assert f"{path:<8} epoch: median" in out, out


@pytest.mark.slow
def test_vae_mnist_quick_run_prints_both_tables(tmp_path):
    out = run_script("benchmarks/vae_mnist.py", "--quick", cwd=tmp_path)
    assert "| elbo | 3 |" in out and "| iwae (K=5) | 3 |" in out
    for kind in ("noise", "rotated", "inverted"):
        assert f"| {kind} | " in out


@pytest.mark.slow
def test_vae_defaults_quick_run_prints_a_row_of_the_grid(tmp_path):
    out = run_script("benchmarks/vae_defaults.py", "--quick", cwd=tmp_path)
    assert "| data | train rows | lr | epochs : patience |" in out and "| digits-01 | 1437 | 0.001 | 2 : 10 | 0 | 2 |" in out


@pytest.mark.slow
def test_ss_vae_quick_run_prints_the_three_classifiers(tmp_path):
    out = run_script("benchmarks/ss_vae.py", "--quick", cwd=tmp_path)
    assert "| ss-vae (M2) q(y \\| x), aux_weight " in out and " | 100 + unlabelled images | " in out
    assert "| the same network on the labels alone | 100 | " in out and "| logistic regression on a plain VAE" in out


@pytest.mark.slow
def test_ss_vae_curve_quick_run_writes_the_table_and_the_figure(tmp_path):
    out = run_script("benchmarks/ss_vae_curve.py", "--quick", "--seeds", "0", "1", "--out", str(tmp_path), cwd=tmp_path)
    table = (tmp_path / "ss_vae_curve.md").read_text()
    for method in ("M1+M2", "logistic regression on M1's codes", "M2", "the classifier on the labels alone"):
        assert f"| {method} |" in table, table
    assert "| M1+M2 | 200 |" in table and "| M1+M2 | 1,000 |" in table and table in out + "\n"
    rows = (tmp_path / "ss_vae_curve.csv").read_text().splitlines()
    assert rows[0] == "seed,unlabelled,method,test_accuracy,seconds" and len(rows) == 1 + 2 * (1 + 2 * 3 + 1)
    assert (tmp_path / "ss_vae_curve.png").stat().st_size > 10_000
    merged = run_script("benchmarks/ss_vae_curve.py", "--merge", str(tmp_path / "ss_vae_curve.csv"), cwd=tmp_path)
    assert table.split("\n\n", 1)[1] in merged  # the same table from the rows written (runs split over processes)
    # resumed: a seed and size in the CSV are not recomputed (seed 1's rows kept from the first run, seed 1 at 1000
    # dropped and redone)
    kept = [r for r in rows[1:] if not r.startswith("1,1000,")]
    (tmp_path / "ss_vae_curve.csv").write_text("\n".join([rows[0], *kept]) + "\n")
    again = run_script("benchmarks/ss_vae_curve.py", "--quick", "--seeds", "0", "1", "--out", str(tmp_path),
                       cwd=tmp_path)
    assert "(seed 1, 1000 unlabelled)" in again and "(seed 0, 200 unlabelled)" not in again
    redone = (tmp_path / "ss_vae_curve.csv").read_text().splitlines()
    first = [line.split(",")[:4] for line in [rows[0], *kept]]  # seed, size, method and accuracy kept as they were
    assert [line.split(",")[:4] for line in redone[:len(kept) + 1]] == [f[:3] + [str(float(f[3]))] if i else f
                                                                       for i, f in enumerate(first)]
    assert len(redone) == len(rows)


@pytest.mark.slow
def test_ss_vae_training_quick_run_prints_the_curve(tmp_path):
    out = run_script("benchmarks/ss_vae_training.py", "--quick", cwd=tmp_path)
    assert "| epoch | training loss / row | q(y \\| x) accuracy | argmax_c ELBO_c accuracy |" in out
    assert "\n| 2 | " in out, out


@pytest.mark.slow
def test_adaptive_depth_quick_run_prints_its_three_tables(tmp_path):
    out = run_script("benchmarks/adaptive_depth.py", "--quick", "--out", str(tmp_path), cwd=tmp_path)
    assert "| digits | full-depth ResNet (MAP) |" in out and "| noisy digits | adaptive depth, marginal |" in out
    assert "| noisy | misclassified |" in out or "| noisy | correct |" in out
    assert "| score function (tracegraph) |" in out and "relaxed ELBO (T = 0.5)" in out
    assert (tmp_path / "adaptive_depth.png").stat().st_size > 0
    table = (tmp_path / "adaptive_depth.md").read_text()  # table 4: the command line's fit and predict
    assert "| digits | " in table and "noise sd 0.3: mean blocks" in table and "pyro-bdl fit adaptive-depth-resnet" in table


@pytest.mark.slow
def test_import_time_times_both_trees_and_names_no_heavy_module(tmp_path):
    """benchmarks/import_time.py against a reference tree (this one, laid out as installed): a line per version and
    command, the ratios, and no heavy module loaded by `import pyro_bdl` or `pyro-bdl list`."""
    out = run_script("benchmarks/import_time.py", "--repeats", "1", "--reference", str(ROOT), cwd=tmp_path)
    lines = [line for line in out.splitlines() if "median" in line]
    assert len(lines) == 4 and all(line.endswith("heavy modules loaded: none") for line in lines), out
    assert out.count("ratio this tree / reference") == 2


@pytest.mark.slow
def test_threads_benchmark_prints_its_table(tmp_path):
    out = run_script("benchmarks/threads.py", "--quick", cwd=tmp_path)
    assert out.count("| bnn-regressor") == 2 and out.count("| vae") == 2  # alone and beside a busy process


@pytest.mark.slow
def test_data_parallel_benchmark_prints_one_and_two_processes(tmp_path):
    out = run_script("benchmarks/data_parallel.py", "--quick", cwd=tmp_path)
    rows = [line for line in out.splitlines() if line.startswith("| vae") or line.startswith("| bnn")]
    assert [row.split("|")[2].strip() for row in rows] == ["1", "2", "1", "2"]


@pytest.mark.slow
def test_gpu_check_runs_or_says_there_is_no_gpu(tmp_path):
    out = run_script("benchmarks/gpu_check.py", cwd=tmp_path)
    assert "no CUDA GPU" in out or "OK " in out


@pytest.mark.slow
def test_pyro_examples_reference_quick_run_writes_the_summaries(tmp_path):
    """benchmarks/pyro_examples_reference.py on two examples, 2 chains x 30 draws: a line per example, and a JSON
    with Pyro's version, the settings and per site the summaries the tests read (the deterministic site too)."""
    import json

    out = run_script("benchmarks/pyro_examples_reference.py", "--quick", "--models", "fully_pooled", "pumps",
                     "--out", "quick.json", cwd=tmp_path)
    assert "fully_pooled" in out and "pumps" in out and "wrote quick.json" in out, out
    doc = json.loads((tmp_path / "quick.json").read_text())
    assert set(doc["models"]) == {"fully_pooled", "pumps"} and doc["pyro_version"]
    assert doc["models"]["pumps"]["settings"]["chains"] == 2 and doc["models"]["pumps"]["settings"]["samples"] == 30
    sites = doc["models"]["pumps"]["sites"]
    assert set(sites) == {"alpha", "beta", "theta", "expected"}  # "expected" is the pyro.deterministic site
    assert sites["theta"]["shape"] == [10] and sites["alpha"]["shape"] == []
    for key in ("mean", "sd", "ess_mean", "ess_sd", "kurtosis", "r_hat"):
        assert len(sites["expected"][key]) == 10, key
    # expected = theta * hours, draw by draw: so are their means (the deterministic site is computed from the draws)
    hours = [94.3, 15.7, 62.9, 126.0, 5.24, 31.4, 1.05, 1.05, 2.1, 10.5]
    for e, th, t in zip(sites["expected"]["mean"], sites["theta"]["mean"], hours):
        assert math.isclose(e, th * t, rel_tol=1e-4), (e, th, t)


@pytest.mark.slow
def test_pyro_autodelta_reference_writes_its_accuracies(tmp_path):
    """One seed of 20 steps: the fixture's layout (its settings, one accuracy in [0, 1], the test rows)."""
    import json

    out = run_script("benchmarks/pyro_autodelta_reference.py", "--seeds", "1", "--steps", "20", "--out", "q.json",
                     cwd=tmp_path)
    assert "AutoDelta accuracy over 1 seeds" in out and "wrote q.json" in out, out
    doc = json.loads((tmp_path / "q.json").read_text())
    assert doc["settings"]["steps"] == 20 and doc["test_rows"] == 500 and doc["pyro_version"]
    assert len(doc["accuracy"]) == 1 and 0.0 <= doc["accuracy"][0] <= 1.0


@pytest.mark.slow
def test_gp_speed_prints_a_row_per_size(tmp_path):
    """A smoke run at 60 rows: the table's row (GPyTorch's columns say "not installed" where it is absent)."""
    out = run_script("benchmarks/gp_speed.py", "--rows", "60", "--short", "2", "--long", "3", "--sparse-rows", "400",
                     "--batch", "100", "--inducing", "8", "--heldout", "100", "--heldout-steps", "30", cwd=tmp_path)
    assert "| 60 |" in out and "| 400 | 100 | 8 |" in out and "| svgp (svi, minibatch 500) |" in out, out


@pytest.mark.slow
def test_markov_nuts_speed_prints_a_row_and_the_path(tmp_path):
    out = run_script("benchmarks/markov_nuts_speed.py", "--quick", "--programs", "toy_mixture", cwd=tmp_path)
    assert "| toy_mixture |" in out and "toy_mixture: the zoo's sampler ran" in out, out


@pytest.mark.slow
def test_pyro_module_speed_benchmark_prints_both_models_alone_and_busy(tmp_path):
    out = run_script("benchmarks/pyro_module_speed.py", "--quick", cwd=tmp_path)
    rows = [line for line in out.splitlines() if line.startswith("| BayesianRegression") or line.startswith("| BNN")]
    assert [row.split("|")[2].strip() for row in rows] == ["alone", "beside a busy process"] * 2, out


@pytest.mark.slow
def test_svi_defaults_user_quick_run_prints_its_table(tmp_path):
    """benchmarks/svi_defaults_user.py --quick: one small model, svi and map at 300 steps against a small NUTS
    reference: a table row per fit and the false-alarm / hit tally."""
    out = run_script("benchmarks/svi_defaults_user.py", "--quick", cwd=tmp_path)
    rows = [line for line in out.splitlines() if line.startswith("| tune | poisson |")]
    assert [row.split("|")[3].strip() for row in rows] == ["svi", "map"], out
    assert "converged (conv < 0.5): " in out and "off (conv >= 1.0): " in out, out
    # --quick has no svi optimum: its svi fit is left out of the tally, not counted as converged; map's mode is one
    assert "; not counted (no optimum to measure conv from): 1" in out, out
    counted = sum(int(part.split(": ")[1].split(",")[0]) for part in out.strip().splitlines()[-1].split("; ")[:3])
    assert counted == 1, out


@pytest.mark.slow
def test_svi_defaults_user_replays_a_table_with_other_thresholds(tmp_path):
    """--replay tallies printed rows under the drift rule: a row at full pace counts as warned by the drift check
    (whatever its move), one that only jitters does not, until the threshold is lowered below its pace."""
    header = "| family | model | method | settings | seed | err | conv | sd / NUTS sd | drift | running | drifting | t | pace | loss settled | warned | s |"
    rows = ["| check | heights | map | old-300 | 0 | 77.35 | 77.35 |  | 0.03 (sigma) | 0.02 (a) | 0.02 (a) | 0.0 | 1.00 | True | - | 2 |",
            "| tune | rugged | svi | default | 0 | 0.09 | 0.06 | 0.51-1.01 | 0.19 (bA) | 0.00 | 0.19 (bA) | 7.7 | 0.10 | True | - | 21 |"]
    log = tmp_path / "table.md"
    log.write_text("\n".join([header, *rows]) + "\n")
    out = run_script("benchmarks/svi_defaults_user.py", "--replay", str(log), cwd=tmp_path)
    assert "converged (conv < 0.5): 1, warned: 0 (drift check: 0)" in out and "off (conv >= 1.0): 1, warned: 1 (drift check: 1)" in out, out
    out = run_script("benchmarks/svi_defaults_user.py", "--replay", str(log), "--full-pace", "0.05", cwd=tmp_path)
    assert "converged (conv < 0.5): 1, warned: 1 (drift check: 1)" in out, out


@pytest.mark.slow
def test_sbc_quick_run_writes_its_table_and_figures(tmp_path):
    """benchmarks/sbc.py on every case, 2 replications of short fits, L = 9: a row per case and site entry in
    sbc.md and a figure per case."""
    out = run_script("benchmarks/sbc.py", "--quick", "--n", "2", "--draws", "9", "--out", str(tmp_path),
                     "--checkpoints", str(tmp_path / "kept"), cwd=tmp_path)
    text = (tmp_path / "sbc.md").read_text()
    assert "machine: " in text and "CPU cores" in text and "total wall time" in text, text
    for case, entry in [("blr", "w[1]"), ("coin", "pi"), ("eight_schools", "eta[7]"), ("svi_correlated", "b"),
                        ("laplace_skewed", "rate")]:
        assert f"| {case} | " in text and f" | {entry} | " in text, text
        assert (tmp_path / f"sbc_{case}.png").stat().st_size > 0
    assert "| eight_schools | " in text and " | theta" not in text  # the deterministic site is not ranked
    assert "wrote " in out
    assert len((tmp_path / "kept" / "sbc_coin.jsonl").read_text().splitlines()) == 3  # a header and 2 replications


@pytest.mark.slow
def test_active_learning_benchmark_writes_its_table_and_curves(tmp_path):
    rows = np.random.default_rng(0).normal(size=(80, 3))
    rows[:, 2] = rows[:, 0] - 0.5 * rows[:, 1]
    write_uci(tmp_path / "uci" / "toy", data=rows, features="0 1", target="2",
              splits={0: (list(range(60)), list(range(60, 80)))})
    out = run_script("benchmarks/active_learning.py", "--cases", "digits", "uci", "--uci", str(tmp_path / "uci" / "toy"),
                     "--seeds", "1", "--rounds", "1", "--steps", "30", "--samples", "5", "--out", str(tmp_path / "res"),
                     cwd=tmp_path)
    table = (tmp_path / "res" / "active_learning.md").read_text()
    assert "| bald |" in table and "| entropy |" in table and "| variance |" in table, out
    assert (tmp_path / "res" / "active_learning_digits.png").stat().st_size > 1000
    assert not list((tmp_path / "res").glob(".al-*"))  # the runs' checkpoints are gone once they end


@pytest.mark.slow
def test_laplace_calibration_quick_run_writes_its_table_and_diagnosis(tmp_path):
    """benchmarks/laplace_calibration.py on iris with quick settings: a row per method with the calibrated model's
    ECE quantile, the tallies, rows merged across runs, and the diagnosis section."""
    out = run_script("benchmarks/laplace_calibration.py", "--quick", "--sets", "iris", "--methods", "laplace-ggn", "map",
                     "--reps", "20", "--out", str(tmp_path), cwd=tmp_path)
    assert "iris laplace-ggn: accuracy" in out and "wrote " in out, out
    run_script("benchmarks/laplace_calibration.py", "--quick", "--diagnose", "iris", "--out", str(tmp_path), cwd=tmp_path)
    text = (tmp_path / "laplace_calibration.md").read_text()
    assert "| calibrated ECE q95 |" in text and "| iris | 112 / 38 | 3 | 0 | `laplace-ggn` (quick) |" in text, text
    assert "| iris | 112 / 38 | 3 | 0 | `map` (quick) |" in text, text  # kept when the diagnosis run rewrote the file
    assert "- `laplace-ggn`: ECE within the calibrated model's 95% quantile in" in text, text
    assert "; NLL below the MAP's in " in text, text  # the paired difference from map's per-row densities
    assert "## Diagnosis" in text and "the marginal likelihood's prior precision delta = " in text, text
    assert "delta = infinity (the MAP's own predictive" in text, text
    state = json.loads((tmp_path / "laplace_calibration.json").read_text())
    assert {len(r["row_ll"]) for r in state["rows"]} == {38}, state["rows"]


@pytest.mark.slow
def test_compare_examples_quick_run_writes_the_three_reports(tmp_path):
    """benchmarks/compare_examples.py --quick: a report folder per case (blr against exact, the user's eight schools
    and the network against NUTS)."""
    out = run_script("benchmarks/compare_examples.py", "--quick", "--out", str(tmp_path), cwd=tmp_path)
    for case, reference in (("blr", "exact"), ("eight_schools", "nuts"), ("bnn_sine", "nuts")):
        assert f"{case}: reference {reference}" in out, out
        written = {p.name for p in (tmp_path / f"compare_{case}").iterdir()}
        assert {"report.md", "marginals.png", "table.csv", "summary.csv"} <= written, written
    assert "test_ll" in (tmp_path / "compare_bnn_sine" / "summary.csv").read_text()


@pytest.mark.slow
def test_mc_dropout_jit_quick_run_prints_a_row_with_both_fits(tmp_path):
    out = run_script("benchmarks/mc_dropout_jit.py", "--quick", cwd=tmp_path)
    row = next(line for line in out.splitlines() if line.startswith("| friedman-300 |"))
    eager_s, jit_s, ratio, eager_ll, jit_ll = (float(v) for v in row.strip("| \n").split("|")[1:])
    assert min(eager_s, jit_s, ratio) > 0 and math.isfinite(eager_ll) and math.isfinite(jit_ll)


def test_uci_paired_prints_the_paired_differences_and_refuses_an_unknown_column(tmp_path):
    rows = pd.DataFrame({"dataset": ["yacht"] * 6, "split": [0, 1, 2] * 2, "method": ["a"] * 3 + ["b"] * 3,
                         "seed": 0, "rmse": [1.0, 2.0, 3.0, 0.9, 1.8, 3.3], "test_ll": [-1.0, -2.0, -3.0, -0.9, -1.7, -3.1],
                         "seconds": 1.0, "chosen": "", "train_rows": 9, "test_rows": 1})
    rows.to_csv(tmp_path / "rows.csv", index=False)
    out = run_script("benchmarks/uci_paired.py", str(tmp_path), "a", "b", cwd=tmp_path)
    # LL differences +0.1, +0.3, -0.1: mean +0.1, sd 0.2, se 0.2 / sqrt(3) = 0.115; b higher on 2 of 3.
    # RMSE -10 %, -10 %, +10 %: mean -3.3 %, sd 11.5, se 6.7
    assert "| yacht | 3 | +0.100 +- 0.115 | -3.3 % +- 6.7 | 2 of 3 |" in out, out
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/uci_paired.py"), str(tmp_path), "a", "c"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no rows of c; the folder has: a, b" in proc.stderr


@pytest.mark.slow
def test_uci_nuts_cost_prints_a_row_per_set_and_refuses_a_missing_one(tmp_path):
    rows = np.random.default_rng(0).normal(size=(40, 3))
    rows[:, 2] = rows[:, 0] - 0.5 * rows[:, 1]
    write_uci(tmp_path / "uci" / "toy", data=rows, features="0 1", target="2",
              splits={0: (list(range(30)), list(range(30, 40)))})
    out = run_script("benchmarks/uci_nuts_cost.py", "--root", str(tmp_path / "uci"), "--datasets", "toy",
                     "--warmup", "10", "--samples", "5", cwd=tmp_path)
    row = [line for line in out.splitlines() if line.startswith("| toy |")]
    assert len(row) == 1 and row[0].split("|")[2].strip() == "30 x 2", out
    depth, steps = float(row[0].split("|")[4]), float(row[0].split("|")[5])
    assert 1 <= depth <= 10 and 1 <= steps <= 1023  # NUTS's default cap: depth 10, 2^10 - 1 steps
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/uci_nuts_cost.py"), "--root", str(tmp_path / "uci"),
                           "--datasets", "nope"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "nope" in proc.stderr


@pytest.mark.slow
def test_uci_split_diagnosis_refits_the_tables_row_and_refuses_a_tuned_method(tmp_path):
    """The refit is the table's own fit: the same test LL as ``bench uci``'s row for the split."""
    rows = np.random.default_rng(0).normal(size=(40, 3))
    rows[:, 2] = rows[:, 0] - 0.5 * rows[:, 1]
    folder = write_uci(tmp_path / "uci" / "toy", data=rows, features="0 1", target="2",
                       splits={0: (list(range(30)), list(range(30, 40)))})
    entry = "nuts:warmup=20,samples=10"
    want = run_split(folder, 0, entry)["test_ll"]
    out = run_script("benchmarks/uci_split_diagnosis.py", "--root", str(tmp_path / "uci"), "toy", "0", "--method",
                     entry, "--worst", "3", cwd=tmp_path)
    assert f"toy split 0, {entry}: test LL {want:.3f} on 10 points" in out, out
    assert "r_hat" in out and "sigma" in out and "largest R-hat of any coordinate" in out
    points = [line for line in out.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    lls = [float(line.split("|")[5]) for line in points]
    assert len(points) == 3 and lls == sorted(lls)  # the costliest first
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/uci_split_diagnosis.py"), "--root",
                           str(tmp_path / "uci"), "toy", "0", "--method", "mc-dropout"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 2 and "mc-dropout is chosen among candidates" in proc.stderr


@pytest.mark.slow
def test_gp_marginal_likelihood_prints_a_row_per_problem(tmp_path):
    out = run_script("benchmarks/gp_marginal_likelihood.py", "--problems", "1", "--restarts", "2", "--steps", "30",
                     "--rows", "20", cwd=tmp_path)
    assert "| sine n=20 d=1 noise=0.05 |" in out, out


@pytest.mark.slow
def test_gp_natural_gradient_prints_a_row_per_problem(tmp_path):
    out = run_script("benchmarks/gp_natural_gradient.py", "--problems", "1", "--rows", "300", "--steps", "40",
                     "--batch-size", "100", "--inducing", "10", "--steps-list", "off,0.1", cwd=tmp_path)
    row = next(line for line in out.splitlines() if line.startswith("| sine n=300 d=1 noise=0.05 |"))
    cells = row.strip("|").split("|")[1:]
    assert len(cells) == 3 and all(math.isfinite(float(c.split()[0])) for c in cells), row


@pytest.mark.slow
def test_bandit_mushroom_writes_the_regret_table(tmp_path):
    data = tmp_path / "agaricus-lepiota.data"
    data.write_text("".join(f"{'ep'[i % 2]},{'xbs'[i % 3]},{'yn'[i // 3 % 2]}\n" for i in range(30)))
    out = run_script("benchmarks/bandit_mushroom.py", "--data", str(data), "--interactions", "80", "--seeds", "0",
                     "--steps", "20", "--samples", "10", "--update-every", "32", "--hidden", "8", "--jobs", "1",
                     "--every", "40", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert "| svi thompson | 80 |" in out and "| map epsilon-greedy 5% | 80 |" in out, out
    assert (tmp_path / "out" / "regret.png").stat().st_size > 0
    rows = pd.read_csv(tmp_path / "out" / "regret.csv")
    assert len(rows) == 4 * 2 and set(rows["step"]) == {39, 79}


@pytest.mark.slow
def test_bbb_mnist_chooses_the_priors_and_prunes_by_signal_to_noise(tmp_path, monkeypatch):
    """benchmarks/bbb_mnist.py on 300 made-up 28x28 images: the validation table, a row per net and prior with an
    error per pruned fraction, the figure; and its pruning zeroes the requested share of the entries, those of
    lowest |mu| / sigma."""
    _write_blob_mnist(tmp_path / "mnist", 300)
    out = run_script("benchmarks/bbb_mnist.py", "--data", str(tmp_path / "mnist"), "--nets", "16", "--epochs", "2",
                     "--grid-epochs", "1", "--validation", "40", "--batch-size", "60", "--samples", "4",
                     "--out", str(tmp_path / "out"), cwd=tmp_path)
    for prior in ("normal", "scale-mixture"):
        row = next(line for line in out.splitlines() if line.startswith(f"| 2 x 16 | {prior} |"))
        assert len(row.strip("|").split("|")) == 9, row
    assert "Chosen: normal: " in out and (tmp_path / "out" / "snr.png").stat().st_size > 0
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bbb_mnist_benchmark", ROOT / "benchmarks" / "bbb_mnist.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    import dataclasses

    @dataclasses.dataclass
    class Fit:
        samples: dict
        report: dict

    snr = {"w": torch.arange(10.0).reshape(2, 5), "b": torch.arange(10.0, 15.0)}
    half = bench.pruned(Fit({"w": torch.ones(1, 3, 2, 5), "b": torch.ones(1, 3, 5)}, {}), snr, 0.6)
    assert half.samples["w"][0, 0].flatten().tolist() == [0.0] * 9 + [1.0]  # the 9 of 15 lowest: all in w
    assert half.samples["b"][0, 2].tolist() == [1.0] * 5
