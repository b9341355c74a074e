"""Signals during a long run: while a block runs, chosen signals call a handler, and the previous handlers come back
after it.  The CLI handles SIGTERM as Ctrl-C (a fit saves its checkpoint); ``bench uci`` turns Ctrl-C and SIGTERM
into a stop flag while it waits on worker processes.  Off the main thread (where Python allows no signal handlers)
the block runs unchanged.

Example
-------
>>> import os, signal, threading
>>> stop, before = threading.Event(), signal.getsignal(signal.SIGTERM)
>>> with handling(signal.SIGTERM, lambda signum, frame: stop.set()):
...     os.kill(os.getpid(), signal.SIGTERM)
>>> stop.is_set(), signal.getsignal(signal.SIGTERM) is before
(True, True)
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable

__all__ = ["handling", "raise_interrupt"]


def raise_interrupt(signum, frame):
    """A handler that raises KeyboardInterrupt, as Ctrl-C does."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def handling(signals, handler: Callable):
    """While the block runs, each of ``signals`` (one or several) calls ``handler(signum, frame)``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [signals] if isinstance(signals, int) else list(signals)
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
