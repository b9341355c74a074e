"""The map matches the package: every module of ``pyro_bdl/`` is named in its package's ``__init__`` docstring, every
subpackage has a line in the README's "Layout" section, and that section comes before "Command line".

- A module (any ``.py`` file but ``__init__.py``, private ``_name.py`` ones included) and a subpackage count as named
  in their parent package's docstring when the docstring has a literal in backticks whose last dotted part is the
  bare name: ``drift``, :mod:`~pyro_bdl.inference.drift` or :mod:`.drift`.  A word of prose ("the gap") does not.
- A subpackage counts as in the README's Layout when its path, with slashes, is a code span there:
  `` `inference/mcmc/` `` for ``pyro_bdl/inference/mcmc/`` (with or without the ``pyro_bdl/`` in front and the
  trailing slash).  Dotted names (``inference.mcmc``) do not count.

The tree is read from the source (``pathlib``), so no import of the package is needed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pyro_bdl"
README = ROOT / "README.md"


def packages() -> list[Path]:
    """Every package folder under ``pyro_bdl/`` (the folders holding an ``__init__.py``), ``pyro_bdl`` itself first."""
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


def named_in(docstring: str) -> set[str]:
    """The bare names a docstring names: the last dotted part of each backtick literal."""
    return {span.strip().rsplit(".", 1)[-1] for span in re.findall(r"`+([^`]+)`+", docstring)}


def unnamed_modules() -> list[str]:
    """The modules and subpackages that their own package's ``__init__`` docstring does not name, as readable lines."""
    missing = []
    for package in packages():
        docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        names = named_in(docstring)
        held = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
        held += [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
        missing += [f"{package.relative_to(ROOT)}/{name}: not named in {package.relative_to(ROOT)}/__init__.py's "
                    f"docstring (write ``{name}``: what it holds)" for name in sorted(held) if name not in names]
    return missing


def layout_section() -> str:
    text = README.read_text()
    start = text.index("\n## Layout\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def test_every_module_is_named_in_its_package_docstring():
    missing = unnamed_modules()
    assert not missing, "\n".join(missing)


def test_every_subpackage_is_in_the_readme_layout():
    layout = layout_section()
    subpackages = [p.relative_to(PACKAGE).as_posix() for p in packages() if p != PACKAGE]
    missing = [s for s in subpackages if not re.search(rf"`(?:pyro_bdl/)?{re.escape(s)}/?`", layout)]
    assert not missing, f"README's Layout lacks a line for: {', '.join(missing)}"


def test_layout_comes_before_the_command_line():
    text = README.read_text()
    assert "\n## Layout\n" in text and "\n## Command line\n" in text
    assert text.index("\n## Layout\n") < text.index("\n## Command line\n"), "README: move Layout above Command line"
