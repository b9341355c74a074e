# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv if missing, installs what is needed (CPU torch pinned here, not in the
# package's dependencies), installs this tree non-editable, then runs.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch that lies on this machine's disk; a plain `torch` pulls a CUDA build.
TORCH  ?= torch==2.13.0
# Test workers (pytest-xdist; this machine has 2 cores): every test runs torch on one thread
# (tests/conftest.py).  JOBS=0 runs in one process.  Not --dist loadgroup: with pytest 9.2 it silently
# stops grouping (pytest-xdist issue #1386), so an expensive fit two tests need lives in one test.  worksteal: an
# idle worker takes queued tests from the busy one, so a long test scheduled last does not leave a core idle.
JOBS   ?= 2
# pip compiles every module it installs to bytecode, most of them torch's that nothing here imports; --no-compile
# skips that, and one import of what the package and its tests load compiles those modules once, before the test
# processes start (the install's steps timed: benchmarks/RESULTS.md, "The test suite").
PIP    := $(BIN)/pip install --quiet --no-compile
WARM   := import pyro_bdl, pyro_bdl.cli, pyro_bdl.models, pyro_bdl.posterior.plots, pyro_bdl.workflows, arviz, \
          matplotlib.pyplot, sklearn.datasets, pytest, xdist, hypothesis, nbclient
# Bytecode is written (and so compiled once for every test process) even where the environment says not to.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-slow install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.deps-installed: pyproject.toml | $(BIN)/python
	$(PIP) $(TORCH)
	$(PIP) ".[test]"
	$(BIN)/python -c "$(WARM)"
	touch $@

# Always reinstall the working tree (non-editable: the way users get the package).
install: $(VENV)/.deps-installed
	$(PIP) --no-deps .

demo: install
	$(BIN)/pyro-bdl fit blr --inference nuts --out runs/demo
	@echo "Open runs/demo/trace.png and runs/demo/posterior.png; predict with:"
	@echo "  $(BIN)/pyro-bdl predict runs/demo --data YOUR.csv --out predictions.csv"

test: install
	$(BIN)/pytest -n $(JOBS) --dist worksteal

test-slow: install
	$(BIN)/pytest -m slow -n $(JOBS) --dist worksteal

clean:
	rm -rf $(VENV) build runs *.egg-info
