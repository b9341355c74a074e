"""The ResNet whose depth is a discrete latent variable (``adaptive-depth-resnet``): the model
(:mod:`~pyro_bdl.models.adaptive_depth.model`), its networks (:mod:`~pyro_bdl.models.adaptive_depth.networks`),
the test-time decision rules (:mod:`~pyro_bdl.models.adaptive_depth.decisions`), what a fit reports
(:mod:`~pyro_bdl.models.adaptive_depth.report`) and its figures (:mod:`~pyro_bdl.models.adaptive_depth.plots`)."""

from pyro_bdl.models.adaptive_depth import model  # noqa: F401  (registers the model)
