"""The workflows' run machinery: the run log a long run keeps its finished work in
(:mod:`pyro_bdl.storage.run_log`) and the pool that runs independent jobs side by side
(:mod:`pyro_bdl.inference.parallel.pool`)."""

from __future__ import annotations

import json
import signal
import threading

import pytest

from pyro_bdl.inference.parallel.pool import run_jobs
from pyro_bdl.storage.run_log import RunLog


def test_a_line_cut_short_is_dropped_and_the_next_record_starts_a_line_of_its_own(tmp_path):
    path = tmp_path / "run.jsonl"
    log = RunLog(path, "demo", "abc")
    log.keep({"unit": 0})
    with open(path, "a") as handle:  # a run killed while writing its second record
        handle.write('{"unit": 1, "val')
    resumed = RunLog(path, "demo", "abc")
    assert resumed.records == [{"unit": 0}]
    resumed.keep({"unit": 1})
    assert RunLog(path, "demo", "abc").records == [{"unit": 0}, {"unit": 1}]
    assert json.loads(path.read_text().splitlines()[0]) == {"run": "demo", "fingerprint": "abc"}


def test_a_log_of_another_run_or_kind_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "run.jsonl"
    RunLog(path, "demo", "abc").keep({"unit": 0})
    before = path.read_bytes()
    with pytest.raises(ValueError, match="holds another run"):
        RunLog(path, "demo", "xyz")
    with pytest.raises(ValueError, match="holds no sbc run log"):
        RunLog(path, "sbc", "abc")
    (tmp_path / "notes.txt").write_text("my notes\n")
    with pytest.raises(ValueError, match="holds no demo run log"):
        RunLog(tmp_path / "notes.txt", "demo", "abc")
    assert path.read_bytes() == before and (tmp_path / "notes.txt").read_text() == "my notes\n"
    assert RunLog(None, "demo", "abc").records == []  # no file: kept in memory only


def test_jobs_run_in_workers_with_a_closure_and_give_every_answer():
    offset = 10  # a closure: the workers get it by fork, unpickled
    assert sorted(run_jobs(lambda n: n + offset, range(6), workers=2)) == list(range(10, 16))
    assert list(run_jobs(lambda n: n + offset, range(3), workers=1)) == [10, 11, 12]  # in order, in this process


def _fails(n):
    if n == 1:
        raise ValueError("job 1 failed")
    return n


def test_a_failing_job_raises_here_and_ends_the_workers_even_under_a_sigterm_handler():
    """The parent's SIGTERM handler (a run that stops between two jobs sets a flag) is inherited by forked workers:
    they must still end at the pool's terminate (they once waited for ever)."""
    stop = threading.Event()
    before = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        with pytest.raises(ValueError, match="job 1 failed"):
            list(run_jobs(_fails, range(4), workers=2, stop=stop))
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not stop.is_set()


def test_a_stop_ends_the_run_between_two_answers():
    stop = threading.Event()
    answers = run_jobs(lambda n: n, range(4), workers=2, stop=stop)
    next(answers)
    stop.set()
    with pytest.raises(KeyboardInterrupt):
        list(answers)
