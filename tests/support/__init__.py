"""What the tests share, beside the test files: ``problems`` (the shared test models and random conjugate problems
with fixed seeds, eight schools among them), ``posterior_checks`` (draws against exact posteriors within Monte Carlo
error), ``pyro_example_models`` (Pyro's example programs as written), ``toy_uci`` (tiny UCI-layout folders)."""

from pathlib import Path

#: Reference results the tests compare with (long NUTS runs written by ``benchmarks/``).
FIXTURES = Path(__file__).resolve().parent / "fixtures"
