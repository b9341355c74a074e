"""What :func:`~pyro_bdl.inference.svi.optimise` calls around every step: one protocol, :class:`StepCallback`.

A callback sees the step about to run (:meth:`~StepCallback.before_step`: a KL warm-up sets its factor) and the
step just taken (:meth:`~StepCallback.after_step`: the drift check averages the parameters, early stopping scores
an epoch and may stop the run); what it has gathered is saved in the run's checkpoint under its ``key`` and
restored on resume (:meth:`~StepCallback.state`, :meth:`~StepCallback.load`).  The loop itself keeps no other
hooks.

Example
-------
>>> class Countdown(StepCallback):
...     key = "countdown"
...     def __init__(self, stop_at):
...         self.stop_at, self.seen = stop_at, 0
...     def after_step(self, step, losses, bar, rate):
...         self.seen += 1
...         return step + 1 >= self.stop_at      # True: stop the run after this step
...     def state(self):
...         return {"seen": self.seen}
...     def load(self, state):
...         self.seen = state["seen"]
>>> countdown = Countdown(3)
>>> [countdown.after_step(t, [], None, 0.01) for t in range(4)]
[False, False, True, True]
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["StepCallback", "checkpointed_state", "restore_state"]


class StepCallback:
    """A hook of the optimisation loop; override what it needs (the defaults do nothing).

    Attributes
    ----------
    key : the name of its state in a checkpoint (None: it keeps no state).
    shows_progress : it writes the progress bar's postfix itself (else the loop shows the loss).
    """

    key: ClassVar[str | None] = None
    shows_progress: ClassVar[bool] = False

    def before_step(self, step: int) -> None:
        """Called before step ``step`` (0-based; a resumed run calls it from the first step it runs)."""

    def after_step(self, step: int, losses: list, bar, rate: float) -> bool:
        """Called after step ``step`` with the losses so far, the progress bar and the learning rate the step was
        taken at; True stops the run after this step."""
        return False

    def state(self) -> dict:
        """What a checkpoint keeps of the callback (tensors, numbers, lists and dicts of them)."""
        return {}

    def load(self, state: dict) -> None:
        """Restore what :meth:`state` returned, on resume."""


def checkpointed_state(callbacks) -> dict:
    """``{key: state}`` of the callbacks that keep one, for a checkpoint."""
    return {cb.key: cb.state() for cb in callbacks if cb.key is not None}


def restore_state(callbacks, saved: dict) -> None:
    """Each callback's state from a checkpoint's ``{key: state}``, where the checkpoint has it."""
    for cb in callbacks:
        if cb.key is not None and cb.key in saved:
            cb.load(saved[cb.key])
