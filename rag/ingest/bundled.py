"""Where the files that ship with the package are: the bundled gold sets (their shipped vectors, parsed pages and
licences) and the notebooks. They are package data of ``rag`` under ``rag/_bundle/``, found through
``importlib.resources`` the same way in a wheel and in an editable checkout: in a checkout ``rag/_bundle/datasets``
and ``rag/_bundle/notebooks`` are links to the top-level ``datasets/`` and ``notebooks/`` (the layout people
browse), and the wheel carries their files (never as a top-level ``datasets`` package: that name is Hugging
Face's, which ragas installs). Tests, scripts and docs exist only in a checkout: ``checkout_root`` says where one
is, and ``need_checkout`` turns its absence into one line for the commands that need it."""
from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


class CheckoutOnly(RuntimeError):
    """A command that reads a checkout's files (tests/, scripts/, docs/) was run from an installed package."""


def bundle_root() -> Path:
    """``rag/_bundle`` as a filesystem path (``rag`` is a regular package: ``files`` gives a real path)."""
    return Path(str(files("rag") / "_bundle"))


def datasets_root() -> Path:
    """The bundled gold sets; ``RAGWB_DATASETS`` points elsewhere (a set under construction, a test's copy)."""
    env = os.environ.get("RAGWB_DATASETS")
    return Path(env) if env else bundle_root() / "datasets"


def notebooks_root() -> Path:
    """The marimo notebooks (workbench.py, report.py, review.py, head.html) and the Jupyter example."""
    return bundle_root() / "notebooks"


def notebook(name: str) -> Path:
    """One shipped notebook by file name; a missing one names where it was looked for."""
    path = notebooks_root() / name
    if not path.is_file():
        raise FileNotFoundError(f"{name}: not in this installation's notebooks ({notebooks_root()}); "
                                "reinstall rag-workbench (its wheel carries them)")
    return path


def checkout_root() -> Path | None:
    """The checkout this package runs from (its pyproject.toml and tests/ beside ``rag/``), or None when it is an
    installed wheel."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "tests").is_dir() and (root / "rag").is_dir():
        return root
    return None


def need_checkout(what: str) -> Path:
    """The checkout's root, or ``CheckoutOnly`` saying in one line that ``what`` needs one."""
    root = checkout_root()
    if root is None:
        raise CheckoutOnly(f"{what} needs a checkout of rag-workbench (it reads the repository's tests/, scripts/ "
                           f"or docs/, which the installed package at {Path(__file__).resolve().parents[1]} does not "
                           "carry): git clone the project and run it there")
    return root
