import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rag.embedders import Embedder, register_embedder

KEYWORDS = ["alpha", "beta", "gamma", "delta", "omega"]


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


@pytest.fixture
def workspace(tmp_path):
    return tmp_path / "ws"
