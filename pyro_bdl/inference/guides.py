"""Guides (variational families) and the prior-dropping handler used for MLE.

``make_guide(choice, model)`` is the one place that turns a user's guide choice into a guide:

=============  =====================================================================
``"normal"``   :class:`pyro.infer.autoguide.AutoNormal` (mean-field, reparameterised)
``"mvn"``      :class:`pyro.infer.autoguide.AutoMultivariateNormal` (full rank)
``"meanfield"`` :class:`MeanFieldGuide`: Normal per site, sigma = softplus(rho); the guide
               distribution of a real-valued site is a plain Normal, so
               :class:`~pyro.infer.TraceMeanField_ELBO` gets its KL in closed form
``"delta"``    :class:`pyro.infer.autoguide.AutoDelta` (point estimate)
(a model's)    :class:`SparseVDGuide`: N(mu, sigma^2) per weight with (mu, log sigma^2) learned (sparse VD's)
(a model's)    :class:`PrincipalAxesGuide`: a Gaussian over linear weights in the principal axes of their design
               matrix, for a model to offer as its own guide (``last-layer``'s ``axes``)
callable       used as it is (a user-written guide or an autoguide instance)
AutoGuide class instantiated with the model
=============  =====================================================================
"""

from __future__ import annotations

import contextlib
import math

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.infer import autoguide
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.ops.tensor_utils import periodic_repeat
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch.distributions import biject_to, constraints, transforms

from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["MeanFieldGuide", "PrincipalAxesGuide", "SparseVDGuide", "init_weights", "make_guide", "drop_priors", "GUIDES"]


def _inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def _is_identity(t) -> bool:
    while isinstance(t, transforms.IndependentTransform):
        t = t.base_transform
    return t == transforms.identity_transform or (isinstance(t, transforms.ComposeTransform) and not t.parts)


#: log sqrt(2 pi), the Normal density's constant.
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class _Normal(dist.Normal):
    r"""``dist.Normal`` with the same draws and densities in fewer operations.

    * ``rsample``: torch's draws ``eps`` with ``torch.normal(zeros, ones)`` under ``torch.jit.trace``
      (a workaround for old tracers), which allocates and checks two tensors per draw; ``torch.randn``
      gives the same numbers (both fill with ``normal_(0, 1)`` from the global generator), as eager
      ``rsample`` does.
    * ``log_prob`` of the draw it just made, :math:`w = \mu + \sigma\varepsilon`, from that
      :math:`\varepsilon`: :math:`\log q(w) = -\varepsilon^2/2 - \log\sigma - \log\sqrt{2\pi}`.  The same
      function of (mu, sigma, eps), hence the same value and gradients, as the generic
      :math:`-(w-\mu)^2/(2\sigma^2) - \dots`, whose path through ``w`` cancels its direct dependence on
      mu: a few operations per weight instead of a dozen, forward and backward (what a hand-written
      Bayes by Backprop loop computes).  Any other value goes through the generic formula.
    """

    _draw = None  # (value, eps) of the last rsample

    def rsample(self, sample_shape=torch.Size()) -> torch.Tensor:
        eps = torch.randn(self._extended_shape(sample_shape), dtype=self.loc.dtype, device=self.loc.device)
        value = self.loc + eps * self.scale
        self._draw = (value, eps)
        return value

    def log_prob(self, value) -> torch.Tensor:
        draw = self._draw
        if draw is not None and value is draw[0]:
            if self._validate_args:
                self._validate_sample(value)
            return -0.5 * draw[1].square() - self.scale.log() - _LOG_SQRT_2PI
        return super().log_prob(value)


class MeanFieldGuide:
    r"""Mean-field Gaussian guide :math:`q(\theta) = \prod_j \mathcal N(u_j; \mu_j, \mathrm{softplus}(\rho_j)^2)`.

    Each latent site is approximated in its unconstrained space ``u = T^{-1}(theta)``; for
    real-valued sites ``T`` is the identity and the guide distribution is a plain ``Normal``, so
    ``TraceMeanField_ELBO`` computes ``KL(q || p)`` analytically against a Normal prior.  A site in the model's
    vectorised plates is drawn inside the same plates; a subsampled plate's factors are kept for all its members
    and each call trains the ones the plate draws (shapes: ``loc``, ``rho`` of the full site).

    Parameters
    ----------
    model : the Pyro model.
    init_scale : initial sd of every factor (small: start near a point estimate).
    reparameterized : False gives the score-function (BBVI) guide: samples are not
        differentiated through, and each site gets a decaying-average baseline.
    prefix : name prefix of the guide's parameters in the param store.
    init_loc_fn : Pyro init strategy for the locations (default: median of prior draws).

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    ...     pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
    >>> guide = MeanFieldGuide(model)
    >>> sorted(guide(torch.tensor(0.5)))
    ['mu']
    """

    def __init__(self, model, init_scale: float = 0.1, reparameterized: bool = True, prefix: str = "mf",
                 init_loc_fn=None):
        self.model = model
        self.init_loc_fn = init_loc_fn or autoguide.init_to_median(num_samples=15)
        self.init_scale = init_scale
        self.reparameterized = reparameterized
        self.prefix = prefix
        self._sites = None

    def _setup(self, *args, **kwargs) -> None:
        init_model = autoguide.initialization.InitMessenger(self.init_loc_fn)(self.model)
        with poutine.block(), torch.no_grad():
            trace = poutine.trace(init_model).get_trace(*args, **kwargs)
        self._sites, self._plates = {}, {}
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                continue
            transform = biject_to(site["fn"].support)
            value = transform.inv(site["value"]).detach()
            event_dim = transform.domain.event_dim
            frames = [f for f in site["cond_indep_stack"] if f.vectorized]
            for frame in frames:  # a subsampled plate: the guide keeps one factor per member of the full plate
                full = frame.full_size if frame.full_size is not None else frame.size
                self._plates[frame.name] = (full, frame.size, frame.dim)
                if full != frame.size:
                    value = periodic_repeat(value, full, frame.dim - event_dim).contiguous()
            self._sites[name] = (transform, event_dim, value, [f.name for f in frames])

    def _site_plates(self) -> dict:
        """The model's vectorised plates, made anew for each call (a subsampled one draws its members here, and
        the model's plate of the same name takes them)."""
        return {name: pyro.plate(name, full, subsample_size=size if size != full else None, dim=dim)
                for name, (full, size, dim) in self._plates.items()}

    def __call__(self, *args, **kwargs) -> dict:
        if self._sites is None:
            self._setup(*args, **kwargs)
        plates = self._site_plates()
        draws = {}
        for name, (transform, event_dim, init, frames) in self._sites.items():
            loc = pyro.param(f"{self.prefix}.{name}.loc", init.clone())
            rho = pyro.param(f"{self.prefix}.{name}.rho", _inverse_softplus(torch.full_like(init, self.init_scale)))
            with contextlib.ExitStack() as stack:
                for frame in frames:
                    plate = plates[frame]
                    members = stack.enter_context(plate)
                    if plate.subsample_size < plate.size:  # this draw's members of the plate
                        loc = loc.index_select(plate.dim - event_dim, members)
                        rho = rho.index_select(plate.dim - event_dim, members)
                base = _Normal(loc, F.softplus(rho))
                infer = {}
                if not self.reparameterized:  # score-function gradients: never differentiate through the draw
                    base = base.has_rsample_(False)
                    infer = {"baseline": {"use_decaying_avg_baseline": True, "baseline_beta": 0.95}}
                fn = base.to_event(event_dim)
                if not _is_identity(transform):
                    fn = dist.TransformedDistribution(fn, transform)
                draws[name] = pyro.sample(name, fn, infer=infer)
        return draws

    def median(self, *args, **kwargs) -> dict:
        """The guide's median of each site, in the constrained space."""
        if self._sites is None:
            self._setup(*args, **kwargs)
        return {
            name: transform(pyro.param(f"{self.prefix}.{name}.loc")).detach()
            for name, (transform, *_) in self._sites.items()
        }


class PrincipalAxesGuide:
    r"""A Gaussian guide for the weights :math:`\theta = (w, b)` of a linear model on a design matrix
    :math:`\Phi = [\phi(X), 1]`, whose axes are the principal axes of the design.

    .. math::

        \theta = Q z, \qquad z \sim \mathcal N(m, \operatorname{diag}(v^2)), \qquad
        q(\theta) = \mathcal N(Q m, Q \operatorname{diag}(v^2) Q^\top),

    where the columns of :math:`Q` ((h+1, h+1), orthogonal) are the eigenvectors of :math:`\Phi^\top\Phi`
    on the inputs of the guide's first call (then kept, so later calls draw from the same :math:`q`).  With a
    Gaussian likelihood of known noise and an isotropic Gaussian prior, the exact posterior precision
    :math:`\Phi^\top\Phi/\sigma^2 + I/s^2` has the same eigenvectors, so the family holds the exact posterior,
    a product of h+1 independent Gaussians in :math:`z`: Adam's per-coordinate steps fit it at any condition
    number.  :math:`|\det Q| = 1`, so :math:`\log q(\theta) = \log q(z)` (``z`` is auxiliary; the sites
    ``weights`` (h,) and ``bias`` () are its images).  Parameters ``{prefix}.loc``, ``{prefix}.scale``
    (h+1,), started at the prior (sd ``prior_scale``).

    ``features``: :math:`X \mapsto \phi(X)`, (n, d) -> (n, h), a fixed function; ``X`` is the model's first
    argument or its keyword ``X``.

    >>> import torch, pyro
    >>> guide = PrincipalAxesGuide(lambda X: torch.tanh(X * torch.linspace(-1, 1, 8, dtype=X.dtype)), prior_scale=1.0)
    >>> tr = pyro.poutine.trace(guide).get_trace(torch.linspace(-2, 2, 30).unsqueeze(1))
    >>> tr.nodes["axes.z"]["value"].shape, tr.nodes["w"]["value"].shape, tr.nodes["b"]["value"].shape
    (torch.Size([9]), torch.Size([8]), torch.Size([]))
    """

    def __init__(self, features, prior_scale: float, prefix: str = "axes", sites: tuple[str, str] = ("w", "b")):
        self.features, self.prior_scale, self.prefix, self.sites = features, float(prior_scale), prefix, sites
        self._Q = None  # float64, fixed by the first call's inputs

    def axes(self, X: torch.Tensor) -> torch.Tensor:
        """Q, (h+1, h+1) in X's dtype: the eigenvectors of Phi^T Phi on the first inputs seen (float64
        eigendecomposition); later inputs reuse it."""
        if self._Q is None:
            with torch.no_grad():
                phi = self.features(X.detach().double()).double()
                Phi = torch.cat([phi, phi.new_ones(phi.shape[0], 1)], 1)
                self._Q = torch.linalg.eigh(Phi.T @ Phi).eigenvectors
        return self._Q.to(X.dtype)

    def __call__(self, X: torch.Tensor, *args, **kwargs):
        Q = self.axes(X)
        k = Q.shape[0]
        loc = pyro.param(f"{self.prefix}.loc", lambda: X.new_zeros(k))
        scale = pyro.param(f"{self.prefix}.scale", lambda: X.new_full((k,), self.prior_scale),
                           constraint=dist.constraints.positive)
        # z ~ N(m, diag(v^2)) in the principal axes; theta = Q z (z: (..., h+1), any batch of particles in front)
        z = pyro.sample(f"{self.prefix}.z", dist.Normal(loc, scale).to_event(1), infer={"is_auxiliary": True})
        theta = z @ Q.T
        weights, bias = self.sites
        pyro.sample(weights, dist.Delta(theta[..., :-1], event_dim=1))
        pyro.sample(bias, dist.Delta(theta[..., -1]))
        return theta


#: Where sparse VD's log sigma^2 starts (Molchanov et al.'s code): the weights start close to a point estimate.
INIT_LOG_SIGMA2 = -10.0


def init_weights(site):
    """Where optimisation starts a weight W (out, in) or kernel K (out, in, k, k): a draw of N(0, 1 / fan_in)
    (random: a symmetric start makes every unit the same; the prior has no draws to start from)."""
    shape = site["fn"].shape()
    value = site.get("value")
    if not isinstance(value, torch.Tensor):  # called before the site is sampled: the prior's device, from a draw
        with kept_rng():  # that moves no random stream
            value = site["fn"].sample()
    return torch.randn(shape, device=value.device) / math.sqrt(math.prod(shape[1:]))


class SparseVDGuide:
    r"""q(W_ij) = N(mu_ij, sigma_ij^2) for every latent (real) site, (mu, log sigma^2) learned directly.

    Parameters ``{prefix}.{site}.mu`` (started by ``init_loc_fn``, default :func:`init_weights`) and
    ``{prefix}.{site}.log_sigma2`` (started at ``init_log_sigma2``); alpha = sigma^2 / mu^2 is derived.
    """

    def __init__(self, model, init_log_sigma2: float = INIT_LOG_SIGMA2, init_loc_fn=None, prefix: str = "svd"):
        self.model, self.prefix = model, prefix
        self.init_log_sigma2, self.init_loc_fn = float(init_log_sigma2), init_loc_fn or init_weights
        self._sites = None

    def _setup(self, *args, **kwargs) -> None:
        with pyro.poutine.block(), torch.no_grad():
            trace = pyro.poutine.trace(InitMessenger(self.init_loc_fn)(self.model)).get_trace(*args, **kwargs)
        self._sites = {}
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                continue
            support = site["fn"].support
            while isinstance(support, constraints.independent):
                support = support.base_constraint
            if support is not constraints.real:
                raise ValueError(f"SparseVDGuide: site '{name}' is not real-valued ({site['fn'].support})")
            self._sites[name] = site["value"].detach()

    def __call__(self, *args, **kwargs) -> dict:
        if self._sites is None:
            self._setup(*args, **kwargs)
        draws = {}
        for name, init in self._sites.items():
            mu = pyro.param(f"{self.prefix}.{name}.mu", init.clone())
            log_sigma2 = pyro.param(f"{self.prefix}.{name}.log_sigma2", torch.full_like(init, self.init_log_sigma2))
            # W = mu + sigma * eps: the additive noise, sigma = exp(log sigma^2 / 2)
            q = dist.Normal(mu, (0.5 * log_sigma2).exp()).to_event(init.dim())
            draws[name] = pyro.sample(name, q)
        return draws



def _init(init_loc_fn, default):
    return {"init_loc_fn": init_loc_fn or default}


GUIDES = {
    "normal": lambda model, init=None: autoguide.AutoNormal(model, **_init(init, autoguide.init_to_feasible)),
    "mvn": lambda model, init=None: autoguide.AutoMultivariateNormal(model, **_init(init, autoguide.init_to_median)),
    "meanfield": lambda model, init=None: MeanFieldGuide(model, **_init(init, None)),
    "delta": lambda model, init=None: autoguide.AutoDelta(model, **_init(init, autoguide.init_to_median)),
}


def make_guide(choice, model, init_loc_fn=None):
    """Turn a guide choice (a name of :data:`GUIDES`, an AutoGuide class, or a callable) into a guide.

    ``init_loc_fn`` (a Pyro init strategy) overrides where a named guide starts; networks need
    a random start (``init_to_sample``), since a symmetric one leaves every hidden unit the same.
    """
    if isinstance(choice, str):
        if choice not in GUIDES:
            raise ValueError(f"unknown guide '{choice}'; choose one of: {', '.join(GUIDES)}, or pass a callable")
        return GUIDES[choice](model, init_loc_fn)
    if isinstance(choice, type) and issubclass(choice, autoguide.AutoGuide):
        return choice(model, **({"init_loc_fn": init_loc_fn} if init_loc_fn else {}))
    if callable(choice):
        return choice
    raise TypeError(f"guide must be a name, an AutoGuide class or a callable, not {type(choice).__name__}")


class _DropPriors(Messenger):
    """Mask the log density of every latent site, leaving only the likelihood."""

    def _pyro_sample(self, msg):  # Messenger's hook for sample sites (see pyro_internals)
        if not msg["is_observed"]:
            msg["mask"] = False


def drop_priors(model):
    """``model`` with its priors replaced by flat ones: the joint density is the likelihood (for MLE)."""
    return _DropPriors()(model)
