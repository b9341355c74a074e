r"""The generalised Gauss-Newton (GGN) Laplace approximation of a network's weights, and its linearised network.

For a network :math:`f(x; \theta)` (the parameter of the likelihood that the model computes from its
:func:`~pyro_bdl.nn.layers.dense` layers: a Normal's mean, a Categorical's logits), with :math:`k` outputs per
data point and :math:`P` weights in :math:`\theta`, the GGN at the MAP :math:`\theta_*` is

.. math::

    G = \sum_{i=1}^n J_i^\top \Lambda_i J_i, \qquad
    J_i = \frac{\partial f(x_i; \theta)}{\partial \theta}\Big|_{\theta_*} \;(k, P), \qquad
    \Lambda_i = -\nabla_f^2 \log p(y_i \mid f)\big|_{f = f(x_i; \theta_*)} \;(k, k),

with :math:`\Lambda_i = 1/\sigma^2` for :math:`\mathcal N(f, \sigma^2)` (:math:`\sigma` held at its MAP value)
and :math:`\Lambda_i = \mathrm{diag}(p_i) - p_i p_i^\top`, :math:`p_i = \mathrm{softmax}(f_i)`, for a
Categorical.  With a Gaussian prior :math:`\mathcal N(\mu_0, P_0^{-1})` (a scalar :math:`P_0 = \delta I` or
the model's own diagonal precision) the Laplace posterior is
:math:`\mathcal N(\theta_*, (G + P_0)^{-1})`, the posterior of the network linearised at :math:`\theta_*`

.. math::

    f_\mathrm{lin}(x; \theta) = f(x; \theta_*) + J(x)\,(\theta - \theta_*)

(Immer et al. 2021), and its log marginal likelihood (laplace-torch's, MacKay's evidence for a GLM) is

.. math::

    \log Z = \log p(y \mid \theta_*) - \tfrac12\big[(\theta_* - \mu_0)^\top P_0 (\theta_* - \mu_0)
             + \log\det(G + P_0) - \log\det P_0\big].

For a scalar prior :math:`\delta`, with the eigenvalues :math:`g_j` of :math:`G`, :math:`\log Z` is maximised
where :math:`\sum_j g_j / (\delta (g_j + \delta)) = \lVert\theta_* - \mu_0\rVert^2` (one root:
:func:`marglik_precision`).  :class:`LinearisedNetwork` answers a model's ``dense`` layers with
:math:`f_\mathrm{lin}` (forward-mode differentiation through the network), so a posterior draw of the
weights predicts through the linearised network wherever the model is run on it.  :func:`linearisations` gives
the network's outputs and Jacobians on any rows of the data, chunk by chunk, and :class:`OnRows` runs a model on
some rows of its data alone (what ``laplace-ggn`` needs to score a prior precision on held-out rows).

Example
-------
>>> import torch, pyro
>>> from pyro_bdl.models.bnn import bnn_regressor
>>> X, y = torch.randn(30, 1), torch.randn(30)
>>> model = lambda X, y=None, batch_size=None: bnn_regressor(X, y, hidden=(4,), noise=0.5, batch_size=batch_size)
>>> data = {"X": X, "y": y}
>>> layers = dense_layers(model, data)
>>> layers, layer_sites(layers[-1:])
(['layer0', 'layer1'], ['layer1.weight', 'layer1.bias'])
>>> point = {k: v for k, v in pyro.poutine.trace(model).get_trace(**data).nodes.items() if k.startswith("layer")}
>>> point = {k: v["value"] for k, v in point.items()}
>>> curvature = ggn(model, data, point, layer_sites(layers))      # 4 + 4 + 4 + 1 weights
>>> curvature.matrix.shape, curvature.outputs, bool(torch.allclose(curvature.matrix, curvature.matrix.T))
(torch.Size([13, 13]), 30, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyro.distributions as dist
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from pyro import poutine
from pyro.poutine.messenger import Messenger
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.util import site_is_subsample

from pyro_bdl.inference.base import observed_sites
from pyro_bdl.inference.starts import init_to_prior_mean
from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["dense_layers", "layer_sites", "LinearisedNetwork", "Curvature", "Linearisation", "ggn", "linearisations",
           "data_rows", "OnRows", "log_marginal_likelihood", "marglik_precision", "model_prior"]

#: Rows of data per Jacobian evaluation, as this many network outputs (rows x outputs per row): bounds the
#: memory of one batched backward pass.
OUTPUTS_PER_CHUNK = 512


class _DenseRecorder(Messenger):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def _pyro_dense(self, msg) -> None:
        self.names.append(msg["name"])


def dense_layers(model, data: dict) -> list[str]:
    """The names of the model's :func:`~pyro_bdl.nn.layers.dense` layers in the order its forward pass runs them
    (``['layer0', 'layer1']``); a clear error for a model that has none.  The model runs once at the centre of its
    priors (:func:`~pyro_bdl.inference.starts.init_to_prior_mean`), moving no random stream: not at a prior draw."""
    recorder = _DenseRecorder()
    with torch.no_grad(), poutine.block(), kept_rng(), recorder:
        InitMessenger(init_to_prior_mean)(model)(**data)
    if not recorder.names:
        raise ValueError("the model runs no dense layer (pyro_bdl.nn.layers.dense): the GGN Laplace needs a network")
    return list(dict.fromkeys(recorder.names))


def layer_sites(layers) -> list[str]:
    """The sample sites of these dense layers, as :func:`pyro_bdl.nn.layers.sample_layers` names them:
    ``NAME.weight`` (out, in) and ``NAME.bias`` (out,) per layer."""
    return [f"{name}.{part}" for name in layers for part in ("weight", "bias")]


class LinearisedNetwork(Messenger):
    r"""Answer a model's ``dense`` layers with the network linearised at ``point`` (site -> value at
    :math:`\theta_*`, every dense layer's weight and bias): with the layers' weights drawn as
    :math:`\theta`, the last layer returns :math:`f(x; \theta_*) + J(x)(\theta - \theta_*)`.

    Each layer computes on dual numbers (``torch.autograd.forward_ad``): primal the network at
    :math:`\theta_*`, tangent the change :math:`\theta - \theta_*`, carried through the activations; the last
    dense layer (the ``L``-th call, ``L`` the number of layers in ``point``) returns primal + tangent.  Weights of
    any batch shape (a plate of posterior draws) broadcast as in :func:`~pyro_bdl.nn.layers.dense`.
    """

    def __init__(self, point: dict):
        super().__init__()
        self.point = point
        self.layers = len({site.rsplit(".", 1)[0] for site in point})
        self._level = None
        self._calls = 0

    def __enter__(self):
        self._level = fwAD.dual_level()
        self._level.__enter__()
        self._calls = 0
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._level.__exit__(*exc)

    def _pyro_dense(self, msg) -> None:
        if msg["done"]:
            return
        h, W, b = msg["args"]
        name = msg["name"]
        if f"{name}.weight" not in self.point:
            raise ValueError(f"dense layer '{name}' has no linearisation point (the fit linearised "
                             f"{', '.join(sorted(self.point))})")
        W0, b0 = self.point[f"{name}.weight"], self.point[f"{name}.bias"]
        # theta as a dual number: primal theta_*, tangent theta - theta_* (broadcast to the draws' shape)
        W = W0 + fwAD.make_dual(torch.zeros_like(W), W - W0)
        b = b0 + fwAD.make_dual(torch.zeros_like(b), b - b0)
        out = F.linear(h, W, b) if W.dim() == 2 else h @ W.transpose(-1, -2) + b.unsqueeze(-2)
        self._calls += 1
        if self._calls == self.layers:  # the network's output: f(x; theta_*) + J(x) (theta - theta_*)
            primal, tangent = fwAD.unpack_dual(out)
            out = primal + tangent if tangent is not None else primal
        msg["value"], msg["done"] = out, True


class OnRows(Messenger):
    """Run a model on the rows ``rows`` (m,) of its subsampled data ``plate`` (of ``size`` rows) alone, each row's
    likelihood weighing one: the plate's subsample indices are fixed to ``rows``, and Pyro's subsample scale
    ``size / m`` is undone for the sites inside the plate (the model is then the model of those m rows)."""

    def __init__(self, plate: str, rows: torch.Tensor, size: int):
        super().__init__()
        self.plate, self.rows, self.factor = plate, rows, len(rows) / size

    def _pyro_sample(self, msg) -> None:
        if msg["name"] == self.plate:
            msg["value"], msg["is_observed"] = self.rows, True
        elif any(frame.name == self.plate for frame in msg["cond_indep_stack"]):
            msg["scale"] = msg["scale"] * self.factor


def _output(fn) -> tuple[torch.Tensor, str]:
    """The network output a likelihood reads, (rows, k), and its kind (``"normal"``, ``"categorical"``)."""
    while isinstance(fn, (dist.Independent, dist.MaskedDistribution)):
        fn = fn.base_dist
    if isinstance(fn, dist.Normal):
        if fn.scale.requires_grad:
            raise ValueError("the GGN Laplace needs a Normal likelihood whose sd does not depend on the network "
                             "(a fixed or separately inferred noise; not a heteroscedastic likelihood)")
        return fn.loc.reshape(fn.loc.shape[0], -1), "normal"
    if isinstance(fn, dist.Categorical):
        return fn.logits, "categorical"
    raise ValueError(f"the GGN Laplace supports Normal and Categorical likelihoods, not {type(fn).__name__}")


@dataclass
class Curvature:
    """The GGN of a network at a point, and what the marginal likelihood needs from the same pass.

    Attributes
    ----------
    matrix : (P, P) float64, :math:`\\sum_i J_i^\\top \\Lambda_i J_i` over the sites in order, each flattened.
    log_likelihood : :math:`\\log p(y \\mid \\theta_*)`, summed over the data.
    outputs : the number of data rows.
    likelihood : ``"normal"`` or ``"categorical"``.
    """

    matrix: torch.Tensor
    log_likelihood: float
    outputs: int
    likelihood: str = "normal"


@dataclass
class Linearisation:
    """The network at :math:`\\theta_*` on a chunk of ``c`` data rows (:func:`linearisations`).

    Attributes
    ----------
    rows : (c,) the rows' indices.
    outputs : (c, k) :math:`f(x_i; \\theta_*)` (a Normal's mean, a Categorical's normalised logits).
    jacobian : (c, k, P) :math:`J_i` over the sites in order.
    weights : the likelihood's curvature weights: the variance :math:`\\sigma^2` (c,) of a Normal, the probabilities
        (c, k) of a Categorical.
    likelihood : ``"normal"`` or ``"categorical"``.
    observed : (c, k) of a Normal, (c,) class labels of a Categorical: the rows' observed values.
    log_likelihood : :math:`\\sum_i \\log p(y_i \\mid \\theta_*)` over the chunk.
    """

    rows: torch.Tensor
    outputs: torch.Tensor
    jacobian: torch.Tensor
    weights: torch.Tensor
    likelihood: str
    observed: torch.Tensor
    log_likelihood: float


def _rows(trace, site: str):
    """The data plate around ``site`` that the model subsamples through its indices: (name, size), or None."""
    for frame in trace.nodes[site]["cond_indep_stack"]:
        node = trace.nodes.get(frame.name)
        if node is not None and site_is_subsample(node):
            return frame.name, frame.size
    return None


def ggn(model, data: dict, point: dict, sites: list[str], site: str | None = None,
        rows: torch.Tensor | None = None) -> Curvature:
    r""":math:`G = \sum_i J_i^\top \Lambda_i J_i` with respect to ``sites`` (in that order, each flattened) at
    ``point`` (every latent site's value: the sites' and the others', which stay fixed), for the likelihood at
    ``site`` (default: the model's one observed site), summed over the data's ``rows`` (default: all) as
    :func:`linearisations` gives them.
    """
    P = sum(point[s].numel() for s in sites)
    G, log_likelihood, n, kind = None, 0.0, 0, "normal"
    for chunk in linearisations(model, data, point, sites, site, rows):
        J, kind = chunk.jacobian.double(), chunk.likelihood
        G = torch.zeros(P, P, dtype=torch.float64, device=J.device) if G is None else G
        if kind == "normal":  # Lambda_i = 1 / sigma_i^2
            A = (J * chunk.weights.double().rsqrt()[:, None, None]).reshape(-1, P)
            G += A.T @ A
        else:  # Lambda_i = diag(p_i) - p_i p_i^T
            p = chunk.weights.double()
            A = (J * p.sqrt()[..., None]).reshape(-1, P)
            v = torch.einsum("ck,ckp->cp", p, J)
            G += A.T @ A - v.T @ v
        log_likelihood += chunk.log_likelihood
        n += len(chunk.rows)
    return Curvature((G + G.T) / 2, log_likelihood, n, kind)


def data_rows(model, data: dict, site: str | None = None) -> tuple[str | None, torch.Tensor]:
    """The data plate around the likelihood ``site`` (default: the model's one observed site) that the model
    subsamples through its indices (None for a model that does not), and the observed values there (n, ...)."""
    site = site or _single_observed(model, data)
    with torch.no_grad(), poutine.block():
        trace = poutine.trace(model).get_trace(**data)
    plate = _rows(trace, site)
    return (None if plate is None else plate[0]), trace.nodes[site]["value"]


def linearisations(model, data: dict, point: dict, sites: list[str], site: str | None = None,
                   rows: torch.Tensor | None = None):
    """The network at ``point`` on the data's ``rows`` (default: all), chunk by chunk: :class:`Linearisation` s.

    The Jacobians come from reverse-mode differentiation, batched over the outputs of a chunk of rows
    (:data:`OUTPUTS_PER_CHUNK`): the chunk is chosen by conditioning the data plate's subsample indices, for a
    model that indexes its data with them (the zoo's networks); any other model is run on all rows at once
    (and cannot be given ``rows``).
    """
    site = site or _single_observed(model, data)
    fixed = {k: v.detach() for k, v in point.items()}
    with torch.no_grad():
        full = poutine.trace(poutine.condition(model, data=fixed)).get_trace(**data)
    out, _ = _output(full.nodes[site]["fn"])
    n, k = out.shape
    plate = _rows(full, site)
    if rows is not None and plate is None:
        raise ValueError(f"the model does not index the rows of its likelihood '{site}' by a subsampled plate: "
                         "its rows cannot be taken apart")
    chosen = rows is not None
    rows = torch.arange(n, device=out.device) if rows is None else rows.to(out.device)
    chunk = max(1, OUTPUTS_PER_CHUNK // k) if plate is not None else n
    for start in range(0, len(rows), chunk):
        index = rows[start:start + chunk]
        yield _jacobian(model, data, fixed, sites, site, plate[0] if chosen or len(index) < n else None, index)


def _single_observed(model, data) -> str:
    sites = observed_sites(model, data)
    if len(sites) != 1:
        raise ValueError(f"the GGN Laplace needs a model with one likelihood site; this one has {sites}")
    return sites[0]


def _jacobian(model, data, fixed, sites, site, plate, index) -> Linearisation:
    """The :class:`Linearisation` of the rows ``index`` (all rows when ``plate`` is None)."""
    leaves = [fixed[s].clone().requires_grad_(True) for s in sites]
    conditioned = {**fixed, **dict(zip(sites, leaves))}
    if plate is not None:
        conditioned[plate] = index
    with torch.enable_grad():
        trace = poutine.trace(poutine.condition(model, data=conditioned)).get_trace(**data)
        fn = trace.nodes[site]["fn"]
        out, kind = _output(fn)
        rows, k = out.shape
        if plate is not None and rows != len(index):
            raise ValueError(f"the model did not take the rows of plate '{plate}' it was given")
        eye = torch.eye(rows * k, dtype=out.dtype, device=out.device).reshape(rows * k, rows, k)
        grads = torch.autograd.grad(out, leaves, grad_outputs=eye, is_grads_batched=True, allow_unused=True)
    J = torch.cat([torch.zeros(rows * k, leaf.numel(), dtype=out.dtype, device=out.device) if g is None
                   else g.reshape(rows * k, -1) for g, leaf in zip(grads, leaves)], 1).reshape(rows, k, -1)
    base = fn
    while isinstance(base, (dist.Independent, dist.MaskedDistribution)):
        base = base.base_dist
    value = trace.nodes[site]["value"].detach()
    if kind == "normal":
        weights = (base.scale.detach() ** 2).expand(base.loc.shape).reshape(rows)
        value = value.reshape(rows, k)
    else:
        weights = base.probs.detach()
    log_likelihood = float(fn.log_prob(trace.nodes[site]["value"]).detach().sum())
    return Linearisation(index, out.detach(), J, weights, kind, value, log_likelihood)


def model_prior(model, data: dict, point: dict, sites: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own Gaussian prior of ``sites`` (mean, precision), each (P,) float64, read from its
    Normal prior factors; a clear error for a site whose prior is not Normal (e.g. the scale mixture)."""
    with torch.no_grad():
        trace = poutine.trace(poutine.condition(model, data=point)).get_trace(**data)
    means, precisions = [], []
    for s in sites:
        fn = trace.nodes[s]["fn"]
        while isinstance(fn, dist.Independent):
            fn = fn.base_dist
        if not isinstance(fn, dist.Normal):
            raise ValueError(f"prior_precision=model needs a Normal prior on '{s}', not {type(fn).__name__} "
                             "(give a number or marglik)")
        shape = trace.nodes[s]["value"].shape
        means.append(fn.loc.expand(shape).reshape(-1).double())
        precisions.append(fn.scale.expand(shape).reshape(-1).double() ** -2)
    return torch.cat(means), torch.cat(precisions)


def log_marginal_likelihood(curvature: Curvature, theta: torch.Tensor, prior_mean: torch.Tensor,
                            prior_precision: torch.Tensor) -> float:
    r""":math:`\log Z` of the module docstring; ``theta``, ``prior_mean`` (P,), ``prior_precision`` (P,) (a
    diagonal; a scalar prior is ``delta`` repeated)."""
    precision = curvature.matrix + torch.diag(prior_precision)
    d = theta.double() - prior_mean
    logdet = 2 * torch.linalg.cholesky(precision).diagonal().log().sum()
    return float(curvature.log_likelihood - 0.5 * ((d * prior_precision) @ d + logdet - prior_precision.log().sum()))


def marglik_precision(eigenvalues: torch.Tensor, squared_norm: float) -> float:
    r"""The scalar prior precision :math:`\delta` that maximises :math:`\log Z`: the root of
    :math:`\sum_j g_j / (\delta (g_j + \delta)) = \lVert\theta_* - \mu_0\rVert^2` (the left side falls from
    infinity to 0 as :math:`\delta` grows), by bisection in :math:`\log\delta` to float64 precision.

    >>> g = torch.tensor([4.0, 1.0])
    >>> delta = marglik_precision(g, squared_norm=0.5)
    >>> round(float((g / (delta * (g + delta))).sum()), 9)
    0.5
    """
    g = eigenvalues.double().clamp(min=0.0)
    if not bool((g > 0).any()) or not squared_norm > 0:
        raise ValueError("the marginal likelihood has no maximum in the prior precision (no curvature, or the "
                         "weights are all zero): give prior_precision as a number")
    low, high = math.log(1e-12), math.log(1e12)
    for _ in range(200):
        mid = (low + high) / 2
        delta = math.exp(mid)
        if float((g / (delta * (g + delta))).sum()) > squared_norm:
            low = mid
        else:
            high = mid
        if high - low < 1e-14:
            break
    return math.exp((low + high) / 2)
