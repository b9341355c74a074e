import os

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("PYRO_BDL_SMOKE", "1")

import pyro  # noqa: E402
import torch  # noqa: E402

import pyro_bdl  # noqa: E402,F401  (import once, so ArviZ's notice is filtered)

# One thread: the networks here are small, so a second thread buys little, while on a shared 2-core
# machine it makes every matrix product contend (measured: 5-10x slower fits under load).  It also
# keeps the float results of the seeded fits the same from run to run.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    """Every test starts with an empty param store, validation on and a fixed seed."""
    pyro.clear_param_store()
    pyro.enable_validation(True)
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()


def one_of_each(cases: list[tuple[str, str]]) -> list:
    """``cases`` (model, method pairs of the registry) as pytest params: the fast tier runs a subset in which every
    model and every method appears at least once (each method's first pair, then the first pair of any model not
    yet in one), the others are marked slow (``make test-slow`` runs the whole matrix)."""
    chosen = {next(case for case in cases if case[1] == method) for method in dict.fromkeys(m for _, m in cases)}
    for model in dict.fromkeys(m for m, _ in cases):
        if not any(case[0] == model for case in chosen):
            chosen.add(next(case for case in cases if case[0] == model))
    return [pytest.param(*case, id="-".join(case), marks=() if case in chosen else pytest.mark.slow) for case in cases]
