"""pyro-bdl: a Bayesian deep learning model zoo on Pyro.

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

from .arviz_io import to_inference_data
from .data import DataError, Dataset, load_csv
from .datasets import load
from .diagnostics import ConvergenceWarning, compare_loo, compare_methods
from .fit import fit
from .inference import METHODS
from .registry import get_model, list_models
from .result import FitResult
from .store import load_fit
from .validate import DataWarning, FitDirectoryError, OutputPathError

__version__ = "0.1.0"

__all__ = [
    "fit",
    "FitResult",
    "load_fit",
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
    "ConvergenceWarning",
]
