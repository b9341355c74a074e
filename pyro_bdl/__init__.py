"""pyro-bdl: a Bayesian deep learning model zoo on Pyro.

The faces:

* ``prepare``: a model and its data made ready to fit (the step ``fit`` and the workflows start with).
* ``fit``: the one fit entry point, for zoo models and any Pyro model.
* ``result``: ``FitResult``, what every fit returns.
* ``registry``: the model registry, ``ModelSpec``, and what a fit will use (``resolve``).
* ``store``: a fit directory, written whole and loaded back.
* ``cli``: the ``pyro-bdl`` command line.

The packages, lowest layer first (README, "Layout"): ``data``, ``storage``, ``nn``, ``inference``, ``posterior``,
``workflows``, ``bench`` (the benchmarks' protocols and studies), ``models`` (the zoo, imported last).

>>> import pyro_bdl
>>> result = pyro_bdl.fit("coin", "coin", inference="map", steps=300, progress=False)
>>> result.method
'map'
"""

import warnings

# ArviZ 0.2x announces its 1.x refactor on import (once a day); we pin arviz<1, so the notice is noise.
# The message starts with a newline, and `message` must match from the start: hence the leading \s*.
warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor", category=FutureWarning,
                        module="arviz")
# Pyro's MCMC imports tqdm.auto, which asks for ipywidgets in Jupyter; the text bar works without.
warnings.filterwarnings("ignore", message="IProgress not found")

from pyro_bdl.posterior.inference_data import to_inference_data
from pyro_bdl.data.table import DataError, Dataset, load_csv
from pyro_bdl.data.embedded import load
from pyro_bdl.posterior.diagnostics import compare_loo, compare_methods, rows_log_likelihood
from pyro_bdl.inference.base import ConvergenceWarning
from pyro_bdl.inference.program_errors import ProgramFailure
from pyro_bdl.fit import fit
from pyro_bdl.inference import METHODS
from pyro_bdl.registry import get_model, list_models
from pyro_bdl.result import FitResult
from pyro_bdl.store import load_fit, write_fit
from pyro_bdl.data.checks import DataWarning
from pyro_bdl.storage.paths import FitDirectoryError, OutputPathError

from pyro_bdl.workflows.evidence import evidence
from pyro_bdl.workflows.sbc import sbc
from pyro_bdl.workflows.active_learning import active_learning
from pyro_bdl.workflows.bandit import bandit
from pyro_bdl.workflows.compare import compare

from pyro_bdl import models  # noqa: E402,F401  (last: the zoo registers itself with the engine above)

__version__ = "0.1.0"

__all__ = [
    "fit",
    "FitResult",
    "load_fit",
    "write_fit",
    "to_inference_data",
    "get_model",
    "list_models",
    "METHODS",
    "Dataset",
    "DataError",
    "DataWarning",
    "FitDirectoryError",
    "OutputPathError",
    "load",
    "load_csv",
    "compare_methods",
    "compare_loo",
    "rows_log_likelihood",
    "evidence",
    "ConvergenceWarning",
    "ProgramFailure",
    "sbc",
    "active_learning",
    "bandit",
    "compare",
]
