"""What the zoo's network models share: the Bayes by Backprop guide, where optimisation starts, the settings of
their SVI path, which sites MC dropout drops, and the checks and options the data decide.

A network model registers with ``data=network_data(...)`` and ``inference=NETWORK_INFERENCE`` (see :mod:`pyro_bdl.models.bnn`); the values here are the defaults
chosen on the embedded data and the UCI files, with the measurements in ``benchmarks/RESULTS.md``.

Example
-------
>>> sorted(NETWORK_INFERENCE.traits), NETWORK_INFERENCE.default_guides["svi"], BBB_SETTINGS["svi"]["steps"]
(['continuous', 'network'], 'bbb', 5000)
>>> network_data(classifier=True).task
<Task.CLASSIFICATION: 'classification'>
"""

from __future__ import annotations

import math

import pyro.distributions as dist
import torch

from pyro_bdl.data.table import DataError, check_has_features
from pyro_bdl.inference.guides import MeanFieldGuide
from pyro_bdl.nn.layers import ScaleMixtureNormal
from pyro_bdl.registry import DataContract, InferenceChoices, Task

__all__ = ["bbb_guide", "init_network", "network_data", "NETWORK_INFERENCE", "check_labels", "num_classes", "BBB_SETTINGS",
           "DROPOUT_SETTINGS", "NOISE_INIT", "INIT_PRIOR_SCALE"]

#: The networks' SVI path (``svi``, ``svi-meanfield``): the compiled ELBO (:mod:`pyro_bdl.inference.compiled_elbo`: the
#: eager ELBO's loss and gradients at a fraction of the per-step cost), particles in one vectorised pass, and Adam
#: without the elementwise gradient clamp (summed-likelihood gradients are about 1e5: the clamp at 10 turns Adam
#: into sign descent) for 5000 steps, the rate held for the first half.  Measurements: benchmarks/RESULTS.md,
#: "The networks' SVI path".
BBB_SETTINGS = {method: {"jit": True, "vectorize": True, "grad_clamp": math.inf, "lr_hold": 0.5, "steps": 5000}
                for method in ("svi", "svi-meanfield")}

#: ``mc-dropout`` and ``concrete-dropout`` on the networks: the compiled ELBO (the eager loss and gradients at the same
#: draws, the masks drawn afresh in the graph), about half the time a fit.  Measurements: benchmarks/RESULTS.md, "MC
#: dropout: the compiled ELBO".
DROPOUT_SETTINGS = {method: {"jit": True} for method in ("mc-dropout", "concrete-dropout")}

#: Where optimisation starts the noise sd, in standardised units: small, so the net fits the data
#: before the noise can explain it away (a large start lets SVI settle with sigma explaining the data).
NOISE_INIT = 0.1
#: Optimisation starts the weights at a prior draw with the prior scale s capped at this value.
INIT_PRIOR_SCALE = 2.0


def init_network(site):
    """Pyro init strategy for the networks: weights and biases at a draw from the prior with its scale
    capped at :data:`INIT_PRIOR_SCALE` (random, since a symmetric start would make every hidden unit the
    same; spread biases place the ReLU kinks across the inputs), the noise sd at :data:`NOISE_INIT`.
    A draw from a wide prior (s = 8) starts far from any fit and needs many more steps."""
    from pyro.infer.autoguide import init_to_sample

    name = site["name"]
    if name == "sigma":
        return site["fn"].sample().new_tensor(NOISE_INIT)
    value = init_to_sample(site)
    base = getattr(site["fn"], "base_dist", None)
    if name.startswith("layer") and isinstance(base, dist.Normal):  # the normal prior: cap its scale s
        s = float(base.scale.flatten()[0]) * (math.sqrt(value.shape[-1]) if name.endswith(".weight") else 1.0)
        value = value * min(1.0, INIT_PRIOR_SCALE / s)
    elif name.startswith("layer") and isinstance(base, ScaleMixtureNormal):
        # the scale mixture is not scaled by fan-in, so a draw from it starts a wide layer far from any fit: start as
        # the normal prior does at its capped scale (RESULTS.md, "Bayes by Backprop on MNIST as the paper ran it")
        fan_in = value.shape[-1] if name.endswith(".weight") else 1
        sd = INIT_PRIOR_SCALE / math.sqrt(fan_in) if name.endswith(".weight") else min(base.sigma1, INIT_PRIOR_SCALE)
        value = torch.randn_like(value) * sd
    return value


def bbb_guide(model, init_scale: float = 1e-2):
    """The Bayes by Backprop guide (Blundell et al. 2015): q(w) = N(mu, softplus(rho)^2) per weight,
    mu started at a prior draw (a symmetric start would make every hidden unit the same), sigma
    started small so training begins near a point estimate."""
    return MeanFieldGuide(model, init_scale=init_scale, init_loc_fn=init_network, prefix="bbb")


def hidden_weight(site: str) -> bool:
    """The weight matrices whose inputs are hidden units (layer1.weight, layer2.weight, ...): what MC dropout drops."""
    return site.endswith(".weight") and site != "layer0.weight"


def num_classes(dataset) -> dict:
    """The number of classes the training labels imply: max label + 1."""
    return {"num_classes": int(dataset.y.max()) + 1}


def check_labels(dataset) -> None:
    """Raise unless the target holds class labels 0, 1, ..."""
    y = dataset.y
    if not torch.equal(y, y.round()) or bool((y < 0).any()):
        bad = y[(y != y.round()) | (y < 0)][:5].tolist()
        raise DataError(f"{dataset.name}: class labels in '{dataset.target_name}' must be integers 0, 1, ...; "
                        f"found {', '.join(f'{v:g}' for v in bad)}")


def _check_classification(dataset) -> None:
    check_has_features(dataset)
    check_labels(dataset)


def network_data(classifier: bool = False) -> DataContract:
    """How every network model takes its data: standardised features (and targets, for a regressor); for a
    classifier, the label check and the number of classes taken from the training labels."""
    if classifier:
        return DataContract(task=Task.CLASSIFICATION, standardize=True, check=_check_classification,
                            infer_options=num_classes)
    return DataContract(task=Task.REGRESSION, standardize=True, check=check_has_features)


#: What every network model chooses for inference: the BBB guide and its compiled path, the random start, and the
#: sites MC dropout and concrete dropout drop (the hidden layers' weights).
NETWORK_INFERENCE = InferenceChoices(
    traits=frozenset({"continuous", "network"}), guides={"bbb": bbb_guide},
    default_guides={"svi": "bbb", "svi-meanfield": "bbb"}, method_defaults={**BBB_SETTINGS, **DROPOUT_SETTINGS},
    init_loc_fn=init_network,
    method_kwargs={"mc-dropout": {"dropout_sites": hidden_weight}, "concrete-dropout": {"dropout_sites": hidden_weight}})
