r"""The zoo's optimiser: :class:`pyro.optim.ClippedAdam`'s update, one multi-tensor step for all parameters.

Pyro's ``ClippedAdam`` wrapper keeps one ``torch.optim`` object per parameter tensor and steps them
in a Python loop: on a small network that loop is a third of an SVI step.  :class:`FastClippedAdam`
does the same arithmetic for every parameter at once with ``torch._foreach_*`` operations: per
parameter, at its ``t``-th step,

.. math::

    g \leftarrow \mathrm{clamp}(g, -c, c), \quad m \leftarrow \beta_1 m + (1 - \beta_1) g, \quad
    v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \quad
    \theta \leftarrow \theta - \eta_0 \rho^t \frac{\sqrt{1 - \beta_2^t}}{1 - \beta_1^t}
    \frac{m}{\sqrt v + \epsilon},

with ``c = clip_norm`` (an elementwise clamp, despite the name) and the rate decaying by ``lrd``
(:math:`\rho`) at every step.  The tests check it against ``pyro.optim.ClippedAdam`` step by step.
"""

from __future__ import annotations

import math

import torch

import pyro
from pyro.optim import PyroOptim

__all__ = ["FastClippedAdam"]


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

    def __init__(self, lr: float, lrd: float = 1.0, clip_norm: float = 10.0, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(torch.optim.Adam, {})  # only so that pyro's SVI accepts it; never used
        self.lr, self.lrd, self.clip_norm, self.betas, self.eps = lr, lrd, clip_norm, betas, eps
        self.state: dict = {}  # parameter tensor -> its state

    def __call__(self, params, *args, **kwargs) -> None:
        self._step([p for p in params if p.grad is not None])

    def _state_of(self, p: torch.Tensor) -> dict:
        state = self.state.get(p)
        if state is None:
            state = self._state_waiting_to_be_consumed.pop(pyro.get_param_store().param_name(p), None)
            if state is not None and "param_groups" in state:  # saved by pyro.optim.ClippedAdam (a torch state_dict)
                saved = next(iter(state["state"].values()), None)
                state = saved and {"step": int(saved["step"]), "lr": state["param_groups"][0]["lr"],
                                   "exp_avg": saved["exp_avg"], "exp_avg_sq": saved["exp_avg_sq"]}
            state = self.state[p] = state or {"step": 0, "lr": self.lr, "exp_avg": torch.zeros_like(p),
                                              "exp_avg_sq": torch.zeros_like(p)}
        return state

    @torch.no_grad()
    def _step(self, params: list) -> None:
        groups: dict = {}  # parameters at the same step count and rate move together
        for p in params:
            state = self._state_of(p)
            state["step"] += 1
            state["lr"] *= self.lrd
            groups.setdefault((state["step"], state["lr"]), []).append((p, state))
        beta1, beta2 = self.betas
        for (step, lr), members in groups.items():
            ps = [p for p, _ in members]
            grads = [p.grad for p in ps]
            m = [s["exp_avg"] for _, s in members]
            v = [s["exp_avg_sq"] for _, s in members]
            torch._foreach_clamp_min_(grads, -self.clip_norm)
            torch._foreach_clamp_max_(grads, self.clip_norm)
            torch._foreach_mul_(m, beta1)
            torch._foreach_add_(m, grads, alpha=1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_add_(denom, self.eps)
            step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
            torch._foreach_addcdiv_(ps, m, denom, value=-step_size)

    def get_state(self) -> dict:
        store = pyro.get_param_store()
        return {store.param_name(p): dict(s) for p, s in self.state.items() if store.param_name(p) is not None}
