"""Gaussian process regression (``gp``): the model with its closed-form evidence
(:mod:`~pyro_bdl.models.gp.model`), and the approximation a fit uses by its rows and the rows each method refuses
(:mod:`~pyro_bdl.models.gp.sizes`)."""

from pyro_bdl.models.gp import model  # noqa: F401  (registers the model)
