"""Sparse variational dropout (``sparse-vd``): the model (:mod:`~pyro_bdl.models.sparse_vd.model`) and pruning a
network by its posterior noise (:mod:`~pyro_bdl.models.sparse_vd.pruning`)."""

from pyro_bdl.models.sparse_vd import model  # noqa: F401  (registers the model)
