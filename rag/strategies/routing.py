"""Per-question routing between context shapes: the features a router sees, and a trained router.

Features are known before answering (docs/metrics.md, "The learned router"): the question's length and
type words, its script-detected language, and the shape of the shared candidate pool (top dense score,
the gaps to the 5th and 10th, dense/BM25 agreement in the top 10, how many distinct documents and
pages the top 10 chunks come from). Training lives in evals/analyze/routing.py (``ragwb route``); this module
is what the ``routed`` strategy needs at run time, so rag never imports evals.
"""
from __future__ import annotations

import functools
import hashlib
import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FEATURES_VERSION = 1
TYPE_WORDS = ("what", "who", "when", "where", "why", "how", "which")
YES_NO = ("is", "are", "was", "were", "do", "does", "did", "can", "could", "should", "will", "has", "have")
LANGUAGES = ("en", "el", "ru", "zh", "ja", "ko")
FEATURE_NAMES = (["chars", "words", "has_digit", "has_quote"] + [f"type_{w}" for w in TYPE_WORDS + ("yes_no",)]
                 + [f"lang_{x}" for x in LANGUAGES]
                 + ["top_score", "gap_5", "gap_10", "mean_10", "bm25_agreement_10", "docs_10", "pages_10",
                    "bm25_top"])


def text_features(question: str) -> list[float]:
    from rag.ingest.readers import detect_language

    words = question.split()
    low = [w.strip("¿¡\"'()").casefold() for w in words]
    first = low[0] if low else ""
    types = [float(any(w == t for w in low[:3])) for t in TYPE_WORDS] + [float(first in YES_NO)]
    lang = detect_language(question)
    return ([float(len(question)), float(len(words)), float(any(c.isdigit() for c in question)),
             float(any(c in question for c in "\"'«»“”"))] + types + [float(lang == x) for x in LANGUAGES])


def pool_features(r, question: str, key=None) -> list[float]:
    """The candidate pool's shape for a question (the same pool every shape searches)."""
    from rag.index.retrieval import SearchKey

    pool = r.pool(question, key or SearchKey())
    s = np.asarray(pool.dense_scores, float)
    top = [int(i) for i in pool.dense_idx[:10]]
    if not len(s):
        return [0.0] * 8
    from .base import DEFAULT_POOL

    # the pool size hybrid asks for at its defaults: one BM25 scoring per question, shared through the memo
    bm_idx, bm_s = (x[:10] for x in r.bm25_pool(pool, DEFAULT_POOL))
    rd = r.reader
    return [float(s[0]), float(s[0] - s[min(4, len(s) - 1)]), float(s[0] - s[min(9, len(s) - 1)]),
            float(s[:10].mean()), len(set(top) & {int(i) for i in bm_idx}) / 10.0,
            float(len({rd.doc_ids[i] for i in top})), float(len({rd.page_ids[i] for i in top})),
            float(bm_s[0]) if len(bm_s) else 0.0]


def question_features(r, question: str) -> np.ndarray:
    return np.asarray(text_features(question) + pool_features(r, question), np.float64)


# --------------------------------------------------------------------------- a trained router

class SufficiencyModel:
    """Per point, a classifier of "this point is good enough here" (within the tolerance of the best any
    point reached); the choice is the cheapest point (by its mean cost in training) whose probability
    reaches ``confidence``, else the most probable one. A point always or never good enough in training
    keeps that constant."""

    def __init__(self, models: list, constants: list, cost_order: list[int], confidence: float = 0.5):
        self.models, self.constants, self.cost_order, self.confidence = models, constants, cost_order, confidence

    def probabilities(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(X)
        cols = []
        for m, const in zip(self.models, self.constants):
            if m is None:
                cols.append(np.full(len(X), float(const)))
            else:
                cols.append(m.predict_proba(X)[:, list(m.classes_).index(1)])
        return np.column_stack(cols)

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        P = self.probabilities(X)
        out = np.empty(len(P), dtype=int)
        for i, p in enumerate(P):
            ok = [j for j in self.cost_order if p[j] >= self.confidence]
            out[i] = ok[0] if ok else int(np.argmax(p))
        return out, P[np.arange(len(P)), out]


@dataclass
class Router:
    """A trained router: a classifier over the run's points (strategy, params, label)."""
    model: object
    points: list  # [{"strategy", "params", "label"}]
    metric: str
    tolerance: float
    run_id: str
    features_version: int
    sha256: str = ""
    path: str = ""

    def choose(self, x: np.ndarray) -> tuple[int, float]:
        """(index into points, the probability that it is good enough)."""
        j, p = self.model.predict(x.reshape(1, -1))
        return int(j[0]), float(p[0])


def _signing_key() -> bytes:
    """This user's key for signing router files (``RAGWB_SIGNING_KEY``, else a random key made once in
    ``~/.config/ragwb/signing.key``, readable by this user only). A router is a pickle, and unpickling runs
    code: only a file this key signed is ever unpickled."""
    import os
    import secrets

    env = os.environ.get("RAGWB_SIGNING_KEY")
    if env:
        return env.encode()
    folder = Path(os.environ.get("RAGWB_KEY_DIR") or Path.home() / ".config" / "ragwb")
    path = folder / "signing.key"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
        except FileExistsError:  # another process made it first: use theirs
            pass
    return path.read_bytes().strip()


def sign(blob: bytes) -> str:
    import hmac

    return hmac.new(_signing_key(), blob, hashlib.sha256).hexdigest()


def save_router(router: Router, folder: str | Path) -> Path:
    """Pickle the router; its sha256 names the file and is kept in a JSON sidecar with an HMAC signature
    (this user's key): only a signed file is ever unpickled."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    blob = pickle.dumps({"model": router.model, "points": router.points, "metric": router.metric,
                         "tolerance": router.tolerance, "run_id": router.run_id,
                         "features_version": router.features_version, "features": FEATURE_NAMES}, protocol=4)
    digest = hashlib.sha256(blob).hexdigest()
    path = folder / f"router-{router.run_id}-{router.metric.replace('@', '_')}-{digest[:12]}.pkl"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)
    path.with_suffix(".json").write_text(json.dumps(
        {"sha256": digest, "signature": sign(blob), "run_id": router.run_id, "metric": router.metric, "tolerance": router.tolerance,
         "points": router.points, "features": FEATURE_NAMES, "features_version": router.features_version},
        indent=1) + "\n")
    router.sha256, router.path = digest, str(path)
    return path


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime: float, size: int) -> Router:
    import hmac

    p = Path(path)
    blob = p.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    side = p.with_suffix(".json")
    refused = f"router {p}: refused, never unpickled (a pickle runs code; only a router `ragwb route` signed here loads)"
    if not side.is_file():
        raise ValueError(f"{refused}: its signature file {side.name} is missing; train it again with `ragwb route`")
    try:
        meta = json.loads(side.read_text())
        want, sig = meta.get("sha256"), meta.get("signature")
    except (OSError, ValueError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"{refused}: {side.name} is not a readable signature file ({type(e).__name__})") from None
    if not isinstance(want, str) or want != digest:
        raise ValueError(f"{refused}: its sha256 {digest[:12]} differs from the one recorded in {side.name} "
                         f"({str(want)[:12]}): the file changed since `ragwb route` wrote it")
    if not isinstance(sig, str) or not hmac.compare_digest(sig, sign(blob)):
        raise ValueError(f"{refused}: its signature does not match this user's key (made elsewhere, by another user, "
                         "or edited); train it again with `ragwb route`")
    try:
        d = pickle.loads(blob)  # signed by this user's key when `ragwb route` wrote it
        if not isinstance(d, dict):
            raise TypeError(f"holds a {type(d).__name__}")
    except Exception as e:
        raise ValueError(f"router {p}: not a router file ({type(e).__name__}: {str(e)[:100]})") from None
    if d.get("features_version") != FEATURES_VERSION:
        raise ValueError(f"router {p} was trained on features version {d.get('features_version')}, this version "
                         f"computes {FEATURES_VERSION}: train it again with `ragwb route`")
    return Router(d["model"], d["points"], d["metric"], d["tolerance"], d["run_id"], d["features_version"],
                  digest, str(p))


def load_router(path: str | Path) -> Router:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"router {p}: no such file (train one with `ragwb route RUN --metric M`)")
    st = p.stat()
    return _load(str(p.resolve()), st.st_mtime, st.st_size)
