r"""Trained feature maps for the Bayesian last layer: a MAP network regressor's hidden layers as ``feature_weights``,
and the options of a model with a fixed feature map (:mod:`pyro_bdl.nn.feature_maps` computes the map).

:func:`train_feature_map` fits ``bnn-regressor`` by MAP and keeps its hidden layers; :func:`feature_map_of` reads them
from such a fit, and :func:`parse_feature_weights` from the command line (inline JSON, a JSON file, or a fit
directory).

Example
-------
>>> phi = train_feature_map("sine", hidden=(4,), steps=50)
>>> phi["activation"], [len(layer["bias"]) for layer in phi["layers"]]
('tanh', [4])
"""

from __future__ import annotations

import json
from pathlib import Path

from pyro_bdl.data.task import Task
from pyro_bdl.fit import fit
from pyro_bdl.inference.method import Domain
from pyro_bdl.nn.feature_maps import parse_widths, weights_on_disk
from pyro_bdl.nn.layers import ACTIVATIONS
from pyro_bdl.registry import Option
from pyro_bdl.store import load_fit

__all__ = ["FEATURE_MAP_OPTIONS", "parse_feature_weights", "feature_map_of", "train_feature_map"]


def parse_feature_weights(text: str):
    """CLI value of ``feature_weights``: ``none``, inline JSON, the path of a JSON file, or the fit
    directory of a point-estimate ``bnn-regressor`` (``pyro-bdl fit bnn-regressor --inference map --out DIR``:
    its hidden layers, as :func:`train_feature_map` returns them)."""
    if text.strip().lower() in ("", "none"):
        return None
    if text.lstrip().startswith("{"):
        return json.loads(text)
    path = Path(text)
    if path.is_dir():
        return feature_map_of(load_fit(path))
    if not path.is_file():
        raise ValueError(f"not inline JSON and no such file or fit directory: {text}")
    return json.loads(path.read_text())


def feature_map_of(net) -> dict:
    """The hidden layers of a fitted point-estimate ``bnn-regressor`` (map or mle) as ``feature_weights``.

    Its output layer is dropped: the Bayesian last layer replaces it.  The net saw inputs standardised on
    its training data, as ``last-layer`` will if fitted on the same data.
    """
    spec = net.spec
    if spec is None or "network" not in spec.inference.traits or spec.data.task is not Task.REGRESSION or not net.point_estimate:
        raise ValueError(f"a trained feature map comes from a point-estimate (map or mle) fit of a network "
                         f"regressor (bnn-regressor); this fit is {net.record.model} "
                         f"with {net.method}")
    options = net.record.options  # a zoo fit's options, defaults filled in
    layers = [{"weight": net.posterior_mean(f"layer{i}.weight").tolist(),
               "bias": net.posterior_mean(f"layer{i}.bias").tolist()} for i in range(len(parse_widths(options["hidden"])))]
    return {"activation": options["activation"], "layers": layers}


def train_feature_map(data, hidden=(50,), activation: str = "tanh", *, target: str | None = None, seed: int = 0,
                      steps: int = 2000, lr: float | None = None, prior_scale: float = 2.0) -> dict:
    """A trained feature map for option ``feature_weights``: the hidden layers of a MAP ``bnn-regressor``.

    Fits ``bnn-regressor`` (widths ``hidden``, ``activation``, normal prior of scale ``prior_scale``, learned
    noise) on ``data`` (anything :func:`pyro_bdl.fit` takes: an embedded name, a CSV path with ``target``, a
    Dataset) with ``inference="map"``, ``steps`` and ``lr``, from ``seed`` (which seeds the global RNGs, as
    every fit does).  Like ``last-layer``'s own fit, the net sees inputs standardised on ``data``; its output
    layer is dropped.  Returns ``{"activation": ..., "layers": [{"weight": [[...]], "bias": [...]}, ...]}``
    of plain floats: JSON-able, so a fit that uses it can be written and loaded back (``json.dump`` it to a
    file for ``pyro-bdl fit last-layer --option feature_weights=FILE``).

    >>> phi = train_feature_map("sine", hidden=(4,), steps=50)
    >>> phi["activation"], [len(layer["bias"]) for layer in phi["layers"]]
    ('tanh', [4])
    """
    widths = parse_widths(hidden)
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{activation}'; choose one of: {', '.join(ACTIVATIONS)}")
    settings = {"steps": steps} if lr is None else {"steps": steps, "lr": lr}
    net = fit("bnn-regressor", data, inference="map", target=target, seed=seed, progress=False,
              options={"hidden": widths, "activation": activation, "prior_scale": prior_scale}, **settings)
    return feature_map_of(net)


def _option_table() -> dict:
    return {
        "hidden": Option(None, "feature-map widths, e.g. 50 or 50,50 (h = the last); default 50 for random features, "
                               "the weights' own with feature_weights", parse_widths),
        "activation": Option(None, f"feature-map activation, one of {', '.join(ACTIVATIONS)}; default tanh for random "
                                   "features, the weights' own with feature_weights", str),
        "feature_seed": Option(0, "seed of the random feature-map weights", int, domain=Domain(int, 0)),
        "feature_scale": Option(2.0, "random features: sd t of the biases; weights have sd t / sqrt(fan_in)",
                                domain=Domain(float, 0, open_low=True, finite=True)),
        "feature_weights": Option(None, "trained or given feature map instead of random features: the --out directory "
                                        "of a map/mle bnn-regressor fit on the same data (its hidden layers), or a JSON "
                                        "file (or inline JSON) {activation, layers: [{weight, bias}, ...]}, e.g. "
                                        "json.dump(train_feature_map(data)); a fit saves the layers in its params.pt",
                                  parse_feature_weights, on_disk=weights_on_disk),
    }


#: The options of a model with a fixed feature map (``pyro-bdl describe last-layer`` lists them).
FEATURE_MAP_OPTIONS = _option_table()
