r"""The zoo's optimiser: :class:`pyro.optim.ClippedAdam`'s update, one multi-tensor step for all parameters.

Pyro's ``ClippedAdam`` wrapper keeps one ``torch.optim`` object per parameter tensor and steps them
in a Python loop: on a small network that loop is a third of an SVI step.  :class:`FastClippedAdam`
does the same arithmetic for every parameter at once with ``torch._foreach_*`` operations: per
parameter, at its ``t``-th step,

.. math::

    g \leftarrow \mathrm{clamp}(g, -c, c), \quad m \leftarrow \beta_1 m + (1 - \beta_1) g, \quad
    v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \quad
    \theta \leftarrow \theta - \eta_0 \rho^{\max(0,\, t - h)} \frac{\sqrt{1 - \beta_2^t}}{1 - \beta_1^t}
    \frac{m}{\sqrt v + \epsilon},

with ``c = clip_norm`` (an elementwise clamp, despite the name; ``inf``: none) and the rate held for
the first ``hold`` (:math:`h`) steps, then decaying by ``lrd`` (:math:`\rho`) at every step.  With
``hold=0`` it is ``pyro.optim.ClippedAdam``, and the tests check it against that step by step.

On small parameters the update runs on one flat tensor (each parameter, gradient and moment a view
into it: :meth:`FastClippedAdam._flat_views`), nine operations a step whatever the number of
parameters; :meth:`FastClippedAdam.zero_grad` then zeroes the flat gradient after a step, as Pyro's
SVI zeroes gradients, instead of releasing it.
"""

from __future__ import annotations

import math

import pyro
import torch
from pyro.optim import PyroOptim

from pyro_bdl.inference import pyro_internals

__all__ = ["FastClippedAdam"]

#: Parameters step as one flat tensor while their mean size is at most this many entries (measured on the
#: BBB benchmark: the 1-50-50-1 regressor's step is faster flat, the 784-400-400-10 classifier's is not).
FLAT_MEAN_NUMEL = 16384


class FastClippedAdam(PyroOptim):
    """``pyro.optim.ClippedAdam({"lr": lr, "lrd": lrd, "clip_norm": clip_norm})``, stepped as one.

    ``get_state`` / ``set_state`` map parameter names to ``{"step", "lr", "exp_avg", "exp_avg_sq"}``
    (for checkpoints); parameters first seen after ``set_state`` pick up their saved state.

    Example
    -------
    >>> p = torch.zeros(3, requires_grad=True)
    >>> p.grad = torch.tensor([1.0, -100.0, 0.0])
    >>> opt = FastClippedAdam(lr=0.1)
    >>> opt._step([p]); p.detach()
    tensor([-0.1000,  0.1000,  0.0000])
    """

    def __init__(self, lr: float, lrd: float = 1.0, clip_norm: float = 10.0, betas=(0.9, 0.999), eps: float = 1e-8,
                 hold: int = 0):
        if not clip_norm > 0:
            raise ValueError(f"the gradient clamp must be positive (inf: none), got {clip_norm}")
        super().__init__(torch.optim.Adam, {})  # only so that pyro's SVI accepts it; never used
        self.lr, self.lrd, self.clip_norm, self.betas, self.eps, self.hold = lr, lrd, clip_norm, betas, eps, int(hold)
        self.state: dict = {}  # parameter tensor -> its state
        self._betas_t: dict = {}  # dtype -> (beta1, beta2) as 0-dim tensors
        self._flat = None  # the group laid out flat: (params, their data_ptrs, their grads' data_ptrs, flat tensors)

    def __call__(self, params, *args, **kwargs) -> None:
        # a parameter stepped before that has no gradient now steps with a zero one: what it does
        # under pyro's SVI, which zeroes gradients after each step (the zoo's step releases them)
        for p in params:
            if p.grad is None and p in self.state:
                p.grad = torch.zeros_like(p)
        self._step([p for p in params if p.grad is not None])

    def _state_of(self, p: torch.Tensor) -> dict:
        state = self.state.get(p)
        if state is None:
            state = pyro_internals.pending_optimiser_state(self, pyro.get_param_store().param_name(p))
            if state is not None and "param_groups" in state:  # saved by pyro.optim.ClippedAdam (a torch state_dict)
                saved = next(iter(state["state"].values()), None)
                state = saved and {"step": int(saved["step"]), "lr": state["param_groups"][0]["lr"],
                                   "exp_avg": saved["exp_avg"], "exp_avg_sq": saved["exp_avg_sq"]}
            state = self.state[p] = state or {"step": 0, "lr": self.lr, "exp_avg": torch.zeros_like(p),
                                              "exp_avg_sq": torch.zeros_like(p)}
        return state

    def _betas_as(self, dtype, device=None) -> tuple:
        """beta1, beta2 as 0-dim tensors of ``dtype`` (the same numbers: multiplying by a Python float wraps it
        into such a tensor for every parameter, three more operations each)."""
        cached = self._betas_t.get((dtype, device))
        if cached is None:
            cached = self._betas_t[(dtype, device)] = tuple(torch.tensor(b, dtype=dtype, device=device)
                                                            for b in self.betas)
        return cached

    @torch.no_grad()
    def _step(self, params: list) -> None:
        groups: dict = {}  # parameters at the same step count and rate (and of one dtype) move together
        for p in params:
            state = self._state_of(p)
            state["step"] += 1
            if state["step"] > self.hold:
                state["lr"] *= self.lrd
            groups.setdefault((state["step"], state["lr"], p.dtype, p.device), []).append((p, state))
        beta1, beta2 = self.betas
        for (step, lr, dtype, device), members in groups.items():
            beta1_t, beta2_t = self._betas_as(dtype, device)
            # one flat tensor each (the parameters, gradients and moments are views into them), else the lists
            ps, grads, m, v = self._flat_views(members)
            if math.isfinite(self.clip_norm):  # inf: no clamp, plain Adam with the decaying rate
                torch._foreach_clamp_min_(grads, -self.clip_norm)
                torch._foreach_clamp_max_(grads, self.clip_norm)
            torch._foreach_mul_(m, beta1_t)
            torch._foreach_add_(m, grads, alpha=1 - beta1)
            torch._foreach_mul_(v, beta2_t)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_add_(denom, self.eps)
            step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
            torch._foreach_addcdiv_(ps, m, denom, value=-step_size)

    def _flat_views(self, members: list) -> tuple:
        """``([params], [grads], [exp_avg], [exp_avg_sq])`` of a group stepped together: one flat tensor each
        when the group is the one laid out flat, else a list with a tensor per parameter.

        Every operation of the update is elementwise, so one operation on the concatenation gives the
        numbers that one per parameter gives, without a dispatch per parameter.  That pays for small
        parameters (a small network's step is mostly dispatch); large ones (mean size above
        :data:`FLAT_MEAN_NUMEL`) stay apart, since gradient views are added into (one more pass over
        memory) where fresh gradients would be taken as they are.  The group's tensors
        are laid out flat the first time it is stepped: each parameter's ``.data``, ``.grad`` and
        moments become views into four flat tensors (the parameter objects stay the same).  The layout
        holds while the group's parameters and gradients are those views: :meth:`zero_grad` zeroes the
        flat gradient (the next backward pass adds into it) rather than releasing the views.  A group
        that differs (other parameters, or a gradient that was replaced) is laid out afresh.
        """
        ps = [p for p, _ in members]
        flat = self._flat
        if flat is not None and len(flat[0]) == len(ps) and all(
                p is q and p.data_ptr() == ptr and p.grad is not None and p.grad.data_ptr() == gptr
                for p, q, ptr, gptr in zip(ps, flat[0], flat[1], flat[2])):
            return flat[3]
        states = [s for _, s in members]
        lists = (ps, [p.grad for p in ps], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states])
        if (len(ps) < 2 or sum(p.numel() for p in ps) > FLAT_MEAN_NUMEL * len(ps)
                or any(t.is_sparse or t.device != ps[0].device for t in lists[1])):
            return lists
        self._flat = None
        flats = [torch.cat([t.detach().reshape(-1) for t in ts]) for ts in lists]
        offset = 0
        for p, state in zip(ps, states):
            views = [f[offset:offset + p.numel()].view_as(p) for f in flats]
            offset += p.numel()
            p.data, p.grad, state["exp_avg"], state["exp_avg_sq"] = views
        self._flat = (ps, [p.data_ptr() for p in ps], [p.grad.data_ptr() for p in ps], tuple([f] for f in flats))
        return self._flat[3]

    def zero_grad(self, params) -> None:
        """After a step: zero the flat gradient of the parameters laid out flat (so that the next backward
        pass adds into its views: the same numbers as into fresh gradients), release the others' (``grad = None``)."""
        flat = self._flat
        flat_ids = {id(p) for p in flat[0]} if flat is not None else ()
        for p in params:
            if id(p) not in flat_ids:
                p.grad = None
        if flat is not None:
            flat[3][1][0].zero_()

    def get_state(self) -> dict:
        store = pyro.get_param_store()
        return {store.param_name(p): dict(s) for p, s in self.state.items() if store.param_name(p) is not None}
