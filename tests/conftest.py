import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rag.index.embedders import Embedder, register_embedder

KEYWORDS = ["alpha", "beta", "gamma", "delta", "omega"]


def pytest_configure(config):
    """Once, before any worker starts: the package's bytecode written, as pip writes it at install. The suite starts
    hundreds of Python processes (the CLI as typed, marimo kernels, plugin and parse workers); under
    PYTHONDONTWRITEBYTECODE (set in CI) an editable checkout never gets its bytecode, so each of them compiled every
    module it imported again (~0.25 s a process)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    import compileall
    import re

    root = Path(__file__).resolve().parents[1]
    for pkg in ("rag", "evals"):  # not rag/_bundle: links to the data and notebooks the wheel carries as they are
        compileall.compile_dir(str(root / pkg), quiet=1, rx=re.compile(r"_bundle"))


@register_embedder("keywords")
class KeywordEmbedder(Embedder):
    """A transparent embedder for hand-computed tests: one axis per keyword, counts normalised."""
    name = "keywords"
    dim = len(KEYWORDS)

    def __init__(self, cfg=None):
        pass

    def embed_passages(self, texts):
        m = np.array([[t.lower().count(k) for k in KEYWORDS] for t in texts], np.float32) + 1e-6
        return m / np.linalg.norm(m, axis=1, keepdims=True)


def write_docx(path: Path, paragraphs: list[str]) -> None:
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/'
                   'vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
                   '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
                   'wordprocessingml.document.main+xml"/></Types>')
        z.writestr("_rels/.rels", '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.'
                   'openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>'
                   '</Relationships>')
        z.writestr("word/document.xml", '<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.'
                   f'openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>')


def tree_hashes(root: Path) -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(autouse=True)
def _strategy_registry_restored():
    """A plugin registers into this process's registry: later tests (which run every strategy by default, and may
    pack a test's plugin in this very process) must see what a fresh `ragwb` process sees. Every test, every file:
    a plugin test in one file once made a later file's bench pack a plugin that calls os._exit."""
    from rag.strategies import STRATEGIES
    from rag.strategies.plugins import _LOADED, ORIGIN

    saved = [(d, dict(d)) for d in (STRATEGIES, ORIGIN, _LOADED)]
    yield
    for d, before in saved:
        d.clear()
        d.update(before)


@pytest.fixture
def workspace(tmp_path):
    return tmp_path / "ws"


def ensure_chromium() -> str:
    """The test set-up installs Debian's chromium when it is missing (CI runs as root)."""
    import os
    import shutil
    import subprocess

    path = shutil.which("chromium")
    if path:
        return path
    if os.geteuid() != 0:
        raise RuntimeError("chromium is missing: apt-get install chromium (needs root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env, capture_output=True)
    return shutil.which("chromium")


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    exe = ensure_chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)  # fresh temporary profile each launch
        yield b
        b.close()
