"""Regenerate tests/support/fixtures/pyro_examples_reference.json: Pyro's own ``MCMC(NUTS(model))``, run long, on each
example of tests/support/pyro_example_models.py (``--set ported``: of tests/support/ported_programs.py, into
ported_programs_reference.json), summarised per latent (and deterministic) site and element: posterior
mean, sd, the ESS of each (ArviZ's ``ess`` methods "mean" and "sd"), kurtosis (for the Monte Carlo error of an
sd) and r_hat, with the number of divergent transitions, Pyro's version, the seed and the settings.

The chains run one after another in this process (seeds ``seed + chain``), so the result does not depend on
multiprocessing; run it under ``nice`` on a shared machine.  Mixtures are summarised after their ``relabel``
(components ordered by location), the same map the tests apply to their own draws.

    python benchmarks/pyro_examples_reference.py                       # the fixture (4 chains x 2000 after 1000)
    python benchmarks/pyro_examples_reference.py --quick --out q.json  # a smoke run: 2 chains x 30 draws
    python benchmarks/pyro_examples_reference.py --models pumps gmm    # only these (merged into --out)
    python benchmarks/pyro_examples_reference.py --set ported          # the ported programs (issue 53)

Each model's entry records the settings it was run with (a slow model may be run shorter, with --models and
--samples / --warmup).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import arviz as az
import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer import MCMC, NUTS, Predictive
from pyro.infer.inspect import site_is_deterministic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.ported_programs import PORTED  # noqa: E402
from support.pyro_example_models import EXAMPLES, as_pyro_call  # noqa: E402

FIXTURES = ROOT / "tests" / "support" / "fixtures"
#: --set: the examples and the fixture they are written to
SETS = {"examples": (EXAMPLES, FIXTURES / "pyro_examples_reference.json"),
        "ported": (PORTED, FIXTURES / "ported_programs_reference.json")}


def deterministic_sites(model, args, kwargs, at: dict) -> list[str]:
    """The sites of one trace of the model that are deterministic functions of its latents (``pyro.deterministic``
    and the sites a reparameterisation handler rebuilds), traced at the latent values ``at`` (a posterior draw: a
    prior draw of NumPyro's GP example makes a kernel matrix no Cholesky factor survives)."""
    trace = poutine.trace(poutine.condition(model, data=at)).get_trace(*args, **kwargs)
    return [name for name, site in trace.nodes.items() if site["type"] == "sample" and site_is_deterministic(site)]


def run_chain(example, args, kwargs, seed: int, samples: int, warmup: int) -> tuple[dict, int]:
    """One chain of Pyro's NUTS: its draws ``{site: (samples, *shape)}`` (latent and deterministic sites) and its
    number of divergent transitions."""
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    model = example.reference_model or example.model
    mcmc = MCMC(NUTS(model, **example.nuts), num_samples=samples, warmup_steps=warmup, num_chains=1,
                disable_progbar=True)
    mcmc.run(*args, **kwargs)
    draws = {k: v.detach() for k, v in mcmc.get_samples().items()}
    extra = deterministic_sites(model, args, kwargs, {k: v[-1] for k, v in draws.items()}) + list(example.derived)
    if extra:
        det = Predictive(model, posterior_samples=draws, return_sites=extra, parallel=False)(*args, **kwargs)
        draws.update({k: v.detach() for k, v in det.items()})  # (samples, *shape)
    divergences = int(sum(len(v) for v in mcmc.diagnostics()["divergences"].values()))
    return draws, divergences


def summarise(chains: dict[str, np.ndarray]) -> dict:
    """Per site, per element (flattened): mean, sd, ESS of the mean and of the sd, kurtosis, r_hat."""
    out = {}
    for site, value in chains.items():
        c, n = value.shape[:2]
        flat = value.reshape(c, n, -1).astype(np.float64)
        pooled = flat.reshape(c * n, -1)
        centred = pooled - pooled.mean(0)
        kurtosis = (centred ** 4).mean(0) / np.maximum((centred ** 2).mean(0) ** 2, 1e-300)
        out[site] = {
            "shape": list(value.shape[2:]),
            "mean": pooled.mean(0).tolist(),
            "sd": pooled.std(0, ddof=1).tolist(),
            "ess_mean": [float(az.ess(flat[:, :, j], method="mean")) for j in range(flat.shape[2])],
            "ess_sd": [float(az.ess(flat[:, :, j], method="sd")) for j in range(flat.shape[2])],
            "kurtosis": kurtosis.tolist(),
            "r_hat": [float(az.rhat(flat[:, :, j])) for j in range(flat.shape[2])],
        }
    return out


def reference(example, chains: int, samples: int, warmup: int, seed: int) -> dict:
    """The reference entry of one example: its summaries, divergences and run time."""
    args, kwargs = as_pyro_call(example.data())
    start = time.perf_counter()
    runs = [run_chain(example, args, kwargs, seed + c, samples, warmup) for c in range(chains)]
    seconds = time.perf_counter() - start
    stacked = {site: np.stack([r[0][site].numpy() for r in runs]) for site in runs[0][0]}
    if example.relabel is not None:
        stacked = example.relabel(stacked)
    entry = {"source": example.source, "seconds": round(seconds, 1), "divergences": sum(r[1] for r in runs),
             "sites": summarise(stacked)}
    if example.reference_model is not None:
        entry["sampled"] = "the same posterior non-centred (poutine.reparam with LocScaleReparam(centered=0.0))"
    return entry


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", choices=sorted(SETS), default="examples",
                        help="Pyro's examples (tests/support/pyro_example_models.py) or the ported programs of issue 53")
    parser.add_argument("--models", nargs="*", help="the examples to run (default: every reference entry); "
                                                     "merged into --out when it exists")
    parser.add_argument("--quick", action="store_true", help="2 chains x 30 draws after 30: a smoke run")
    parser.add_argument("--out", type=Path, default=None, help="the JSON written (default: the set's fixture; "
                                                             "with --quick, pyro_examples_reference_quick.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.chains, args.samples, args.warmup = 2, 30, 30
    examples, fixture = SETS[args.set]
    out = args.out or (Path(f"{fixture.stem}_quick.json") if args.quick else fixture)
    torch.set_num_threads(1)
    pyro.enable_validation(True)
    names = args.models or sorted({e.reference_name for e in examples.values()})
    doc = json.loads(out.read_text()) if out.exists() and args.models else {"models": {}}
    doc.update({"pyro_version": pyro.__version__, "torch_version": torch.__version__,
                "kernel": "pyro.infer.NUTS defaults (target_accept_prob 0.8, diagonal mass matrix adapted, "
                          "max_tree_depth 10); chain c seeded seed + c, the chains run one after another",
                "command": f"nice -n 19 python benchmarks/pyro_examples_reference.py --set {args.set} [--models ...] "
                           "[--chains C --samples S --warmup W]"})
    for name in names:
        entry = reference(examples[name], args.chains, args.samples, args.warmup, args.seed)
        entry["settings"] = {"chains": args.chains, "samples": args.samples, "warmup": args.warmup, "seed": args.seed,
                             "date": datetime.date.today().isoformat()}
        doc["models"][name] = entry
        worst_rhat = np.nanmax([np.nanmax(s["r_hat"]) for s in entry["sites"].values()])  # NaN: a constant entry
        least_ess = min(min(s["ess_mean"]) for s in entry["sites"].values())
        print(f"{name:32s} {entry['seconds']:8.1f} s  divergences {entry['divergences']:4d}  "
              f"max r_hat {worst_rhat:.3f}  min ESS {least_ess:7.0f}", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        partial.write_text(json.dumps(doc, indent=1) + "\n")  # after every model: a long run keeps what it has done
        partial.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
