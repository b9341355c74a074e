"""Where a fit runs: torch's thread count (:mod:`.threads`), the device (:mod:`.devices`) and the processes of a
``torchrun`` launch (:mod:`.processes`), with the gradient all-reduce of data-parallel optimisation
(:mod:`.data_parallel`); and, for the workflows, independent jobs side by side in worker processes (:mod:`.pool`:
SBC's replications, the UCI table's fits, active-learning runs).

:func:`pyro_bdl.fit` chooses all three before it runs a method: ``threads="auto"`` (one thread unless the model's
largest operation is big enough to gain from more), ``device="cpu"`` (or ``"cuda"``, ``"cuda:1"``, ``"mps"``), and
the process group the environment describes (``torchrun`` sets ``WORLD_SIZE``, ``RANK``, ...; one process
otherwise).  README, "Scaling out", has the commands.
"""

from __future__ import annotations

from pyro_bdl.inference.parallel.devices import move_to, resolve_device
from pyro_bdl.inference.parallel.processes import ProcessGroup, current_group
from pyro_bdl.inference.parallel.threads import choose_threads, largest_op, using_threads

__all__ = ["ProcessGroup", "choose_threads", "current_group", "largest_op", "move_to", "resolve_device",
           "using_threads"]
