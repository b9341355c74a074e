"""The installed package: the zoo ships inside it, and the ArviZ we test against is the range we declare."""

from importlib import metadata
from pathlib import Path

import arviz
from packaging.requirements import Requirement

import pyro_bdl
import pyro_bdl.models


def test_zoo_ships_inside_the_installed_package():
    root = Path(pyro_bdl.__file__).parent
    assert Path(pyro_bdl.models.__file__).parent == root / "models"
    assert "site-packages" in str(root)  # tests run against the non-editable install, not the source tree
    assert {spec.name for spec in pyro_bdl.list_models()} >= {"blr", "coin"}


def test_installed_arviz_is_in_the_declared_range():
    reqs = [Requirement(r) for r in metadata.requires("pyro-bdl")]
    (arviz_req,) = [r for r in reqs if r.name == "arviz"]
    assert arviz.__version__ in arviz_req.specifier, (arviz.__version__, str(arviz_req.specifier))
    # ArviZ 1.x restructured its API (posterior/inference_data.py writes 0.2x's InferenceData): the range must exclude it
    assert not arviz_req.specifier.contains("1.0.0", prereleases=True), str(arviz_req.specifier)
