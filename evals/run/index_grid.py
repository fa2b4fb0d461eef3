"""Index axes on the grid (docs/sweeps.md, "Index axes"): chunking and the embedder are budgets a run sweeps.

``ragwb run --set index.chunk_tokens=64,128 --set index.chunker=tokens,hierarchy`` (or a TOML ``[index]`` table)
makes one run whose points carry their index settings: every strategy point is evaluated on every index config, and
a point's label and params name the settings that vary (``index.chunk_tokens=64,top_k=8``). Each distinct config is
ingested once into the workspace (keyed by its hash, as any index), before any answer is made; a chunk text already
embedded by the same embedder comes from the embedding cache (never embedded twice, across configs and runs)."""
from __future__ import annotations

import dataclasses
import itertools
import json

from rag.index.rates import duration_text
from rag.index.workspace import IndexConfig

PREFIX = "index."  # a point's index settings sit beside its budgets under this prefix
# the index settings a grid may sweep: name -> (what it is, the check of one value)
AXES = {
    "chunker": "a chunker name",
    "chunk_tokens": "an integer >= 1 (token windows)",
    "overlap": "an integer >= 0 (below chunk_tokens)",
    "leaf_min": "an integer >= 1 (hierarchy leaves)",
    "leaf_max": "an integer >= 1 (hierarchy leaves; the code chunker's chunk size)",
    "parent_max": "an integer >= 1 (hierarchy parents)",
    "embedder": "an embedder name (e5, use, hash, openai, st; openai and st take --embed-base-url/--embed-model)",
}


def check_axes(axes: dict) -> dict:
    """``{"chunk_tokens": [64, 128], ...}`` checked before anything runs: an unknown name, an empty list or a value
    of the wrong kind is an error naming the valid ones. Returns the axes with every value a list."""
    from rag.index.embedders import EMBEDDERS
    from rag.ingest.chunking import CHUNKERS

    out = {}
    for name, vals in (axes or {}).items():
        if name not in AXES:
            raise ValueError(f"unknown index setting {name!r}; valid: {', '.join(AXES)}")
        vals = vals if isinstance(vals, list) else [vals]
        if not vals:
            raise ValueError(f"index.{name}: give at least one value")
        for v in vals:
            if name == "chunker" and v not in CHUNKERS:
                raise ValueError(f"index.chunker: unknown chunker {v!r}; valid: {', '.join(CHUNKERS)}")
            if name == "embedder" and v not in EMBEDDERS:
                raise ValueError(f"index.embedder: unknown embedder {v!r}; valid: {', '.join(EMBEDDERS)}")
            if name not in ("chunker", "embedder") and (isinstance(v, bool) or not isinstance(v, int)
                                                       or v < (0 if name == "overlap" else 1)):
                raise ValueError(f"index.{name} must be {AXES[name]}, got {v!r}")
        out[name] = list(dict.fromkeys(vals))  # a value given twice is one config
    return out


def index_variants(base: IndexConfig, axes: dict) -> list[tuple[dict, IndexConfig]]:
    """(tag, config) for the product of the axes over ``base``: the tag holds only the swept settings, as a
    point carries them (``{"index.chunk_tokens": 64}``). No axes: ``[({}, base)]``. A combination the chunker
    refuses (overlap not below chunk_tokens) is an error naming it, before anything runs."""
    axes = check_axes(axes)
    if not axes:
        return [({}, base)]
    keys = list(axes)
    out = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        chosen = dict(zip(keys, combo))
        chunking = {k: v for k, v in chosen.items() if k != "embedder"}
        try:
            ch = dataclasses.replace(base.chunking, **chunking)
        except ValueError as e:
            raise ValueError(f"index config {label(chosen)}: {e}") from None
        emb = base.embedder
        if "embedder" in chosen and chosen["embedder"] != emb.name:
            # a shipped model takes no model or URL of the base's; openai and st keep the ones given by flag
            keep = chosen["embedder"] in ("openai", "st")
            emb = dataclasses.replace(emb, name=chosen["embedder"], base_url=emb.base_url if keep else None,
                                      model=emb.model if keep else None)
        out.append(({PREFIX + k: v for k, v in chosen.items()}, IndexConfig(ch, emb)))
    return out


def built_identity(ic: IndexConfig, docs) -> dict:
    """What an index config builds on these documents (``built_chunking``: the modes used and the settings they
    read) and the embedder that embeds it: two configs with one identity are one index (docs/sweeps.md)."""
    from rag.ingest.chunking import built_chunking

    emb = ic.embedder
    return {**built_chunking(ic.chunking, docs), "embedder": emb.name,
            **({"embed_model": emb.model} if emb.model else {})}


def _unread(ic: IndexConfig, ident: dict, keys) -> list[str]:
    return [k for k in keys if k not in ("chunker", "embedder") and k not in ident]


def dataset_variants(ds, base: IndexConfig, axes: dict) -> tuple[list[tuple[dict, IndexConfig]], list[str]]:
    """The index configs of ``axes`` over ``base`` on this dataset, normalised: configs that build the same index
    (a setting no chunker of this corpus reads: chunk_tokens under hierarchy, auto on a Markdown folder) are built
    and shown once, their tag keeping only the settings that apply; the notices say what was merged. A sweep whose
    every value builds one index is refused (it would measure nothing), as is a window rule broken where windows
    are cut, or a chunk size over what the embedder reads. Returns (variants, notices)."""
    variants = index_variants(base, axes)
    docs = ds.documents
    idents = [built_identity(ic, docs) for _, ic in variants]  # each config's, read once
    for (tag, ic), ident in zip(variants, idents):  # the overlap rule where a document is cut into token windows
        if "tokens" in ident["modes"]:
            try:
                ic.chunking.check_windows()
            except ValueError as e:
                raise ValueError(f"index config {label(index_of(tag)) or 'of this run'}: {e}") from None
    _check_window(variants, idents)
    if len(variants) < 2:  # one index: a setting it never reads is said (never labelled as if it applied)
        ic, ident = variants[0][1], idents[0]
        default = dataclasses.asdict(type(ic.chunking)())
        off = [f"{k} {getattr(ic.chunking, k)}" for k in ("chunk_tokens", "overlap", "leaf_min", "leaf_max",
                                                          "parent_max", "embed_window")
               if getattr(ic.chunking, k) != default[k] and k not in ident]
        return variants, ([f"notice: {', '.join(off)}: not read by {' and '.join(ident['modes'])}, which chunks "
                           f"{ds.name}'s documents: the index is the one the defaults build"] if off else [])
    seen: dict[str, int] = {}
    out, merged = [], []
    for (tag, ic), ident in zip(variants, idents):
        key = json.dumps(ident, sort_keys=True)
        drop = _unread(ic, ident, index_of(tag))
        kept = {k: v for k, v in tag.items() if k[len(PREFIX):] not in drop}
        if key in seen:
            merged.append((label(index_of(tag)), label(index_of(out[seen[key]][0]))))
            continue
        seen[key] = len(out)
        out.append((kept, ic))
    notices = []
    unread: dict[str, set] = {}  # the modes of a config -> the swept settings they never read
    for (tag, ic), ident in zip(variants, idents):
        unread.setdefault(" and ".join(ident["modes"]), set()).update(_unread(ic, ident, index_of(tag)))
    ignored = sorted({k for ks in unread.values() for k in ks})
    for modes, ks in unread.items():
        if ks:
            notices.append(f"notice: {modes} (how {ds.name}'s documents are chunked there) never read"
                           f"{'s' if ' and ' not in modes else ''} index.{', index.'.join(sorted(ks))}: those points "
                           "carry no such setting (docs/sweeps.md, what each chunker reads)")
    if merged:
        notices.append(f"notice: {len(merged)} index config(s) build the same chunks as another, built and shown "
                       "once: " + "; ".join(f"{a} = {b}" for a, b in merged[:8]) + (" ..." if len(merged) > 8 else ""))
    if len(out) == 1:
        modes = idents[0]["modes"]
        swept = "; ".join(f"index.{k}=" + ",".join(map(str, v)) for k, v in check_axes(axes).items())
        raise ValueError(
            f"the index axes ({swept}) build one index on {ds.name}: "
            f"its documents are chunked by {', '.join(f'{m} ({n} document(s))' for m, n in modes.items())}, which "
            f"never read{'s' if len(modes) == 1 else ''} {', '.join(ignored) or 'what varies'}; every point would "
            "measure the same chunks. Sweep a setting that applies (hierarchy: index.leaf_max; tokens: "
            "index.chunk_tokens with index.chunker=tokens), or name the chunker")
    # the tags name what varies among the configs kept (a setting one value of which survived is not an axis)
    return out, notices


def fold_fixed(base: IndexConfig, axes: dict, keep=()) -> tuple[IndexConfig, dict]:
    """A setting given one value is the run's index, not an axis: folded into the base config (so the stored
    config says the index the run was built on, and labels name only what varies); the rest stay axes. ``keep``:
    settings that, though fixed, stay in the points' params (a sweep file from `ragwb best` reproducing a grid
    point: the same parameters, so `ragwb gate` pairs the two)."""
    axes = check_axes(axes)
    missing = [k for k in keep if k not in axes]
    if missing:
        raise ValueError(f"index_in_points names {', '.join(missing)}, which [index] does not set")
    fixed = {k: v[0] for k, v in axes.items() if len(v) == 1}
    if fixed:
        ((_, base),) = index_variants(base, fixed)
    return base, {k: v for k, v in axes.items() if len(v) > 1 or k in keep}


def label(chosen: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in chosen.items())


def tag_points(points: list[tuple[str, dict]], tag: dict) -> list[tuple[str, dict]]:
    """The points of one index config: each strategy point with that config's settings beside its budgets."""
    return [(name, {**kw, **tag}) for name, kw in points]


def budgets_of(kw: dict) -> dict:
    """A point's budgets without its index settings (what the strategy's Params take)."""
    return {k: v for k, v in kw.items() if not k.startswith(PREFIX)} if any(
        k.startswith(PREFIX) for k in kw) else kw


def index_tag(kw: dict) -> dict:
    """A point's index settings as it carries them (``{"index.chunk_tokens": 64}``; ``{}`` on one index)."""
    return {k: v for k, v in kw.items() if k.startswith(PREFIX)}


def index_of(kw: dict) -> dict:
    """A point's index settings (``{}`` for a run on one index)."""
    return {k[len(PREFIX):]: v for k, v in kw.items() if k.startswith(PREFIX)}


REMOTE = ("openai",)  # embedders behind an endpoint: their requests can overlap


def embed_concurrently(ws, ds, variants: list, concurrency: int) -> int:
    """For configs whose embedder is remote, the distinct texts every config must embed, sent ``concurrency``
    requests at a time into the embedding cache before the configs are built (each build then finds them there);
    a text two configs share is sent once. Returns the texts embedded."""
    from concurrent.futures import ThreadPoolExecutor

    from rag.index.embedders import get_embedder
    from rag.ingest.chunking import chunk_document

    done = 0
    by_key: dict = {}
    for _, ic in variants:
        if ic.embedder.name in REMOTE:
            texts = by_key.setdefault(ic.embedder.key, (ic.embedder, {}))[1]
            for d in ds.documents:
                for c in chunk_document(d, ic.chunking)[0]:
                    texts.setdefault(c.embed_text, None)
    cache = ws.embedding_cache
    for key, (ecfg, texts) in by_key.items():
        todo = list(texts)
        # requests of at most a batch, and at least as many requests as workers (a small set still overlaps)
        size = max(1, min(ecfg.batch_size, -(-len(todo) // max(1, concurrency))))
        parts = [todo[i:i + size] for i in range(0, len(todo), size)]
        emb = get_embedder(ecfg)
        before = cache.misses
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="ragwb-embed") as ex:
            list(ex.map(lambda part: cache.embed(emb, key, part, "passage"), parts))
        done += cache.misses - before
    return done


def ingest_variants(ws, ds, cfg, progress: bool, lock_wait, ingest_engine, concurrency: int = 1
                    ) -> list[tuple[dict, object]]:
    """Every index config of ``cfg`` built (or found built) before any answer: (tag, IngestSummary) each. With
    more than one config, what each must embed is said first, at the rate this machine measured (slowed for its
    load): a sweep over indexes never starts embedding unannounced. A remote embedder's texts are sent
    ``concurrency`` requests at a time (``embed_concurrently``)."""
    import sys

    from rag.index.rates import estimate_seconds

    variants, notices = dataset_variants(ds, cfg.index, cfg.index_grid)
    for n in notices:
        print(n, file=sys.stderr)
    import functools

    metas = functools.cache(ws.indexes)  # the workspace's index metas, read once for every config not built yet
    variants = [(tag, same_index_built(ws, ds, ic, metas)) for tag, ic in variants]
    if len(variants) == 1:  # one config: what it must embed is said first too (never 85 s unannounced)
        try:
            work = ws.embed_work(ds, variants[0][1])
        except Exception:  # noqa: BLE001 - a damaged table: the ingest below repairs it and says so
            work = {}
        if work:
            secs, src = estimate_seconds(ws.root, variants[0][1].embedder.name, len(work), sum(work.values()))
            print(f"index: {len(work):,} chunk(s) to embed with {variants[0][1].embedder.name}, about "
                  f"{duration_text(secs)} at {src} (once: a later run finds them built)", file=sys.stderr)
    if len(variants) > 1:
        lines, counted, total_n, total_s = [], set(), 0, 0.0
        for tag, ic in variants:
            work = ws.embed_work(ds, ic)
            new = [k for k in work if k not in counted]  # a text an earlier config embeds is embedded once
            counted.update(work)
            n, shared = len(new), len(work) - len(new)
            secs, src = estimate_seconds(ws.root, ic.embedder.name, n, sum(work[k] for k in new))
            total_n, total_s = total_n + n, total_s + secs
            lines.append(f"  {label(index_of(tag))}: " + (
                f"{n:,} chunk(s) to embed with {ic.embedder.name}, about {duration_text(secs)} at {src}"
                if n else "nothing new to embed (built, cached, or embedded by an earlier config)")
                + (f"; {shared:,} shared with an earlier config" if shared else ""))
        print(f"index configs: {len(variants)}, each built once before any answer (a text embedded by the same "
              "embedder is never embedded again):\n" + "\n".join(lines)
              + f"\n  in all: {total_n:,} chunk(s) to embed, about {duration_text(total_s)}", file=sys.stderr)
    if len(variants) > 1 and concurrency > 1 and any(ic.embedder.name in REMOTE for _, ic in variants):
        n = embed_concurrently(ws, ds, variants, concurrency)
        print(f"embedded {n:,} text(s) for the remote configs, {concurrency} request(s) at a time", file=sys.stderr)
    out = []
    for k, (tag, ic) in enumerate(variants, 1):
        summ = ws.ingest(ds, ic, progress=progress, wait=lock_wait, vector_index=cfg.vector_index,
                         engine=ingest_engine)
        if len(variants) > 1:  # one line a config as it finishes, with or without progress bars
            rate = f" ({summ.embedded / summ.embed_seconds:,.1f} chunks/s)" if summ.embedded and summ.embed_seconds else ""
            print(f"index config {k}/{len(variants)} {label(index_of(tag)) or 'as given'}: embedded "
                  f"{summ.embedded:,} chunk(s) in {duration_text(summ.embed_seconds)}{rate}", file=sys.stderr, flush=True)
        out.append((tag, summ))
    return out


def same_index_built(ws, ds, ic, metas=None, say: bool = True):
    """``ic``, or the config of an index of this dataset already built in ``ws`` that builds the same chunks with the
    same embedder (settings its chunker never reads differ): a `ragwb best` TOML, or a flag set to a value no
    chunker of this corpus reads, runs on the grid's index instead of building its twin (issue 74). Said (``say``
    False: a plan that only asks which index a run would use says nothing). ``metas``:
    what reads the workspace's index metas (``ws.indexes``; a grid passes one that reads them once)."""
    import sys

    if ws.has_table(f"{ws.index_name(ds.name, ic)}__meta"):
        return ic
    want, emb = built_identity(ic, ds.documents), ic.to_dict()["embedder"]
    for meta in (metas or ws.indexes)():
        try:
            if meta.get("dataset") != ds.name or meta["config"]["embedder"] != emb:
                continue
            other = IndexConfig.from_dict(meta["config"])
        except (KeyError, TypeError, ValueError):
            continue  # a meta row of an older layout: never reused
        if built_identity(other, ds.documents) == want:
            if not say:
                return other
            from rag.safeio import printable

            differ = sorted(k for k, v in dataclasses.asdict(ic.chunking).items() if getattr(other.chunking, k) != v)
            print(f"index: {printable(str(meta.get('index', ws.index_name(ds.name, other))))} already holds these "
                  f"chunks (the settings that differ, {', '.join(differ)}, are not read by how "
                  f"{printable(ds.name)}'s documents are chunked): reused, not built again", file=sys.stderr)
            return other
    return ic


def _check_window(variants: list, idents: list) -> None:
    """A chunk size over what the embedder reads (e5: 512 tokens) is refused before any work: the tail of every
    chunk would be dropped unembedded (it was said only after 85 s of embedding). Token windows are checked by
    their size; hierarchy and code leaves by leaf_max, which the code chunker already cuts to the window."""
    from rag.index.embedders import window_of

    for (tag, ic), ident in zip(variants, idents):
        window = window_of(ic.embedder.name)
        size = ic.chunking.chunk_tokens if "tokens" in ident["modes"] else None
        if window and size and size > window:
            raise ValueError(f"index config {label(index_of(tag)) or 'of this run'}: chunk_tokens {size:,} is over the "
                             f"{window} tokens {ic.embedder.name} reads of a passage: every chunk's tail past "
                             f"{window} tokens would never be embedded (nor found). Use chunk_tokens <= {window}, or "
                             "an embedder that reads more (--embedder openai, st)")


def built_identities(ds, cfg) -> dict:
    """Each index config of a run (by its label; "" for a run on one index) with what it builds on ``ds``
    (``built_identity``): stored with the run, so `ragwb gate` compares what was built, not the names."""
    return {label(index_of(tag)): built_identity(ic, ds.documents)
            for tag, ic in dataset_variants(ds, cfg.index, cfg.index_grid)[0]}
