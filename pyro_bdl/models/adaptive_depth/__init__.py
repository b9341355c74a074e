"""The ResNet whose depth is a discrete latent variable (``adaptive-depth-resnet``): the model
(:mod:`~pyro_bdl.models.adaptive_depth.model`), its networks, the test-time decision rules, what a fit reports and
its figures."""

from pyro_bdl.models.adaptive_depth import model  # noqa: F401  (registers the model)
