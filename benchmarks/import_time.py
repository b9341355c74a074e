"""Seconds to `import pyro_bdl` and to run `pyro-bdl list`, each in a fresh process, and the heavy modules they load.

With ``--reference DIR`` (a directory holding another version's ``pyro_bdl`` package, e.g. an older checkout's
tree; an old tree with a top-level ``models/`` folder is laid out as installed first) both are timed in alternating
fresh processes, so the ratio compares the two in one run on a machine whose load varies.

Usage: python benchmarks/import_time.py [--repeats 5] [--reference DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Modules that cost seconds to import and that `import pyro_bdl` and `pyro-bdl list` should not need.
HEAVY = ("arviz", "matplotlib", "scipy.stats", "xarray", "pyro_bdl.inference.compile.aten_trace",
         "pyro_bdl.inference.mcmc.sampler")
COMMANDS = {
    "import pyro_bdl": "import pyro_bdl",
    "pyro-bdl list": ("import io, contextlib\nfrom pyro_bdl.cli import main\n"
                      "with contextlib.redirect_stdout(io.StringIO()):\n    main(['list'])"),
}


def as_installed(tree: Path, into: Path) -> Path:
    """``tree``'s ``pyro_bdl`` as an installed package: an old layout's top-level ``models/`` becomes
    ``pyro_bdl/models`` (what its pyproject's package-dir did)."""
    shutil.copytree(tree / "pyro_bdl", into / "pyro_bdl", ignore=shutil.ignore_patterns("__pycache__"))
    if (tree / "models").is_dir() and not (tree / "pyro_bdl" / "models").exists():
        shutil.copytree(tree / "models", into / "pyro_bdl" / "models", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def run(path: Path, code: str) -> tuple[float, list[str]]:
    """Seconds for ``code`` in a fresh interpreter with ``path`` first on its path, and the heavy modules it loaded."""
    probe = f"{code}\nimport sys\nprint('heavy:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(path), "MPLBACKEND": "Agg"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{code!r} failed with {path}: {done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1]
    return seconds, [m for m in last.removeprefix("heavy:").split(",") if m]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per command and version")
    parser.add_argument("--reference", type=Path, help="a tree holding another version's pyro_bdl, timed alternately")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        versions = {"this tree": ROOT}
        if args.reference is not None:
            versions["reference"] = as_installed(args.reference.resolve(), Path(tmp))
        times = {(v, c): [] for v in versions for c in COMMANDS}
        loaded = {}
        for _ in range(args.repeats):
            for command, code in COMMANDS.items():
                for version, path in versions.items():
                    seconds, heavy = run(path, code)
                    times[version, command].append(seconds)
                    loaded[version, command] = heavy
    print(f"fresh processes, {args.repeats} each, alternating; python {sys.version.split()[0]}")
    for (version, command), values in times.items():
        print(f"  {version:<10} {command:<16} median {statistics.median(values):5.2f} s "
              f"(range {min(values):.2f}-{max(values):.2f}); heavy modules loaded: {', '.join(loaded[version, command]) or 'none'}")
    if "reference" in versions:
        for command in COMMANDS:
            ratio = statistics.median(times["this tree", command]) / statistics.median(times["reference", command])
            print(f"  ratio this tree / reference, {command}: {ratio:.2f}")


if __name__ == "__main__":
    main()
