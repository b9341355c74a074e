"""The one format a long workflow keeps its finished work in, and resumes from: a run log.

A run log is a JSON-lines file: a header line naming the kind of run and its fingerprint (a hash of everything that
identifies the run: :func:`~pyro_bdl.storage.checkpoint.fingerprint`), then one line per finished unit of work (an
SBC replication, an active-learning round, a fit of the UCI table), appended and flushed as the unit ends.  A run
stopped anywhere (Ctrl-C, a kill, a power cut) loses at most the unit in progress: a line cut short is dropped when
the log is read, and the same call goes on with the units not yet in it.  A log of another run (another kind or
fingerprint) is refused with an error that says so, never overwritten.

Example
-------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "run.jsonl"
>>> log = RunLog(path, "demo", "abc123")
>>> log.keep({"unit": 0, "value": 1.5}); log.keep({"unit": 1, "value": 2.5})
>>> [r["value"] for r in RunLog(path, "demo", "abc123").records]
[1.5, 2.5]
>>> RunLog(path, "demo", "other")
Traceback (most recent call last):
...
ValueError: ... holds another run ...
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pyro_bdl.storage.files import atomic_write_text

__all__ = ["RunLog"]


class RunLog:
    """The finished units of one run, kept in ``path`` (None: kept in memory only).

    Attributes
    ----------
    records : the units finished so far (read from the file, then each one kept), in the order they finished.
    """

    def __init__(self, path: str | Path | None, kind: str, fingerprint: str):
        self.path = None if path is None else Path(path)
        self.kind, self.fingerprint = kind, fingerprint
        self.records: list[dict] = self._read()

    def _read(self) -> list[dict]:
        if self.path is None or not self.path.exists():
            return []
        if self.path.is_dir():
            raise ValueError(f"{self.path}: is a directory, not a run log")
        lines = self.path.read_bytes().decode("utf-8", errors="replace").splitlines()
        if not lines:
            return []
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError:
            header = {}
        if not isinstance(header, dict) or header.get("run") != self.kind:
            raise ValueError(f"{self.path}: holds no {self.kind} run log (another workflow's log, or another file); "
                             f"delete it or name another file")
        if header.get("fingerprint") != self.fingerprint:
            raise ValueError(f"{self.path} holds another run (its model, data, method, settings or seed differ); "
                             f"delete it or name another file")
        records = []
        for line in lines[1:]:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # the line a stopped run was writing
                continue
        return records

    def keep(self, record: dict) -> None:
        """Add a finished unit; on disk (flushed and synced) before this returns."""
        self.records.append(record)
        if self.path is None:
            return
        if not self.path.exists() or self.path.stat().st_size == 0:
            atomic_write_text(self.path, json.dumps({"run": self.kind, "fingerprint": self.fingerprint}) + "\n")
        elif not self.path.read_bytes().endswith(b"\n"):  # after a line an interruption cut short
            with open(self.path, "a") as handle:
                handle.write("\n")
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def clear(self) -> None:
        """Remove the file (the run is over and its answer kept elsewhere)."""
        if self.path is not None and self.path.exists():
            self.path.unlink()
