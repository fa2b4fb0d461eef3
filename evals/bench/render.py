"""The text `ragwb bench` prints: one line (or a few) per figure measured, each with its target."""
from __future__ import annotations


def render(f: dict) -> str:
    # a figure that could not be measured here (one that reads a checkout's tests/ or docs/, run from a wheel) is
    # one line saying so, never a figure drawn from missing keys
    skipped = {k for k, v in f.items() if isinstance(v, dict) and set(v) == {"skipped"}}
    lines = [f"machine: {f['machine']}", f"dataset: {f['dataset']}"]
    lines += [f"{k}: not measured ({f[k]['skipped'].split(' (', 1)[0].split(' needs ', 1)[-1]})" for k in sorted(skipped)]
    f = {k: v for k, v in f.items() if k not in skipped}
    lines += _outside_input(f)
    lines += _services(f)
    lines += _core(f)
    lines += _costs(f)
    lines += _workbench_and_scale(f)
    return "\n".join(lines)


def _outside_input(f: dict) -> list[str]:
    """Hostile patterns, index grids, logs, plugins, races, search."""
    lines: list[str] = []
    pt = f.get("patterns")
    if pt:
        lines.append(f"hostile gitignore patterns ({pt['backend']}): " + "; ".join(
            f"{c['stars']} stars vs {c['name_chars']} chars {c['match_us']:.2f} us a match" for c in pt["cases"]))
    ig = f.get("index_grid")
    if ig:
        lines.append(f"index grid ({', '.join(ig['configs'])} on {ig['dataset']}, {ig['embedder']}): {ig['chunks']} chunks, "
                     f"{ig['distinct_texts']} distinct texts ({ig['shared_share']:.0%} shared across configs), "
                     f"{ig['embedded']} embedded; ingest {ig['ingest_s']:.1f} s vs the raw embedder on those texts "
                     f"{ig['raw_embedder_s']:.1f} s -> {ig['throughput_vs_raw']:.2f}x (target {ig['target']}); the "
                     f"same grid again embedded {ig['second_run_embedded']}")
    sc = f.get("score")
    if sc:
        d = sc.get("distinct")
        if d:
            lines.append(f"ragwb score, {d['rows']} rows with distinct contexts: {d['score_s']:.1f} s; the raw e5 embedder on "
                         f"the {d['texts_embedded']} texts it must embed {d['raw_embedder_s']:.1f} s -> throughput "
                         f"{d['throughput_vs_raw']:.2f}x raw (target {d['target']})")
        r = sc.get("repeated")
        if r:
            lines.append(f"ragwb score, {r['rows']:,} rows over {r['distinct_contexts']} contexts: {r['score_s']:.1f} s "
                         f"(target {r['target']})")
        b = sc.get("bulk_no_support")
        if b:
            lines.append(f"ragwb score --metrics (no support scorer), {b['rows']:,} rows: {b['score_s']:.1f} s "
                         f"(target {b['target']})")
    if f.get("plugins"):
        from .plugins import render as render_plugins
        lines += render_plugins(f["plugins"])
    if f.get("score_stream"):
        from .score_stream import render as render_stream
        lines += render_stream(f["score_stream"])
    if f.get("race"):
        from .race import render as render_race
        lines += render_race(f["race"])
    if f.get("search"):
        from .search import render as render_search
        lines += render_search(f["search"])
    if f.get("embed"):
        from .embed import render as render_embed
        lines += render_embed(f["embed"])
    if f.get("browser"):
        from .browser import render as render_browser
        lines += render_browser(f["browser"])
    if f.get("first_chart"):
        from .first_chart import render as render_first_chart
        lines += render_first_chart(f["first_chart"])
    return lines


def _services(f: dict) -> list[str]:
    """A deployed service's overhead."""
    lines: list[str] = []
    sy = f.get("system")
    if sy:
        for c in sy["cases"]:
            lines.append(f"--system, {c['requests']} requests of {sy['latency_s'] * 1000:.0f} ms at concurrency "
                         f"{c['concurrency']}: {c['wall_s']:.1f} s (ideal {c['ideal_s']:.1f} s, start {c['start_s']:.2f} s, "
                         f"overhead {c['overhead']:+.1%} ({c.get('overhead_vs_waves', float('nan')):+.1%} against "
                         f"whole waves of C requests), tail {c.get('tail_s', float('nan')):.2f} s after the last "
                         f"reply; target {sy['target']})")
            if "wave_slip_ms" in c:
                lines.append(f"    where it goes: whole waves alone {c['floor_vs_ideal']:+.1%} over the ideal; the first "
                             f"wave leaves over {c['first_wave_ms']:.0f} ms, each later wave starts "
                             f"{c['wave_slip_ms']:.1f} ms late (median), {c['tail_s'] * 1000:.0f} ms after the last reply")
        for kind, x in (sy.get("client_alone") or {}).items():
            lines.append(f"--system's client alone ({kind}, no runner): {x['requests']} requests at concurrency "
                         f"{x['concurrency']}: {x['overhead_vs_waves']:+.1%} against whole waves; arrivals within a "
                         f"wave spread {x['wave_spread_ms_first']:.0f} -> {x['wave_spread_ms_last']:.0f} ms")
    return lines


def _core(f: dict) -> list[str]:
    """Ingest, retrieval, repack, the full evaluation, ragas, the LLM re-run."""
    lines: list[str] = []
    i = f.get("ingest")
    if i:
        lines.append(f"ingest ({i.get('embedded', '?')} of {i['chunks']} chunks embedded): {i['ingest_chunks_per_s']:.1f} "
                     f"chunks/s vs embedder alone {i['embedder_chunks_per_s']:.1f} -> ratio {i['ratio']:.2f} "
                     f"(target {i['target']})")
    r = f.get("retrieval")
    if r and r["strategies"]:
        lines.append(f"retrieval per question: raw LanceDB vector query {r['raw_lancedb_ms']:.2f} ms")
        for n, v in r["strategies"].items():
            lines.append(f"  {n:16s} {v['ms']:.2f} ms  ratio {v['ratio']:.2f} (target {r['target']})")
    p = f.get("repack")
    if p:
        lines.append(f"re-pack {p['questions']} questions x {p['strategies']} strategies from cached candidates: "
                     f"{p['seconds']:.3f} s (target {p['target']})")
    e = f.get("full_eval")
    if e:
        lines.append(f"full offline evaluation: {e['items']} items in {e['seconds']:.1f} s (target {e['target']})")
    g = f.get("ragas")
    if g:
        lines.append(f"offline scoring vs ragas non-LLM metrics: {g['skipped']}" if "skipped" in g else
                     f"offline scoring vs ragas non-LLM metrics on {g['rows']} rows: ours {g['ours_s']:.2f} s, ragas "
                     f"{g['ragas_s']:.2f} s -> {g['speedup']:.1f}x faster (target {g['target']})")
    l = f.get("llm_rerun")
    if l:
        lines.append(f"LLM re-run: first run {l['first_run_calls']} calls, re-run {l['rerun_calls']} calls "
                     f"({l['rerun_cache_hits']} cache hits; target {l['target']})")
    return lines


def _costs(f: dict) -> list[str]:
    """Growth, re-runs, the support scorer, the ANN scale curve."""
    lines: list[str] = []
    gr = f.get("growth")
    if gr:
        lines.append("growth with corpus size:")
        for p in gr["points"]:
            lines.append(f"  x{p['copies']:<3d} {p['chunks']:6d} chunks  ingest {p['ingest_s']:.1f} s "
                         f"(embedded {p['embedded']})  retrieval, 5 strategies: "
                         f"{p['retrieve_5_strategies_ms_per_question']:.2f} ms/question")
    rr = f.get("rerun")
    if rr:
        lines.append(f"re-run cost, {rr['files']} PDFs: before the first question {rr['first_s']:.1f} s first run, "
                     f"{rr['second_s']:.2f} s unchanged re-run -> ratio {rr['ratio']:.3f} (target {rr['target']})")
    sp = f.get("support")
    if sp:
        lines.append(f"support scorer ({'e5' if sp['e5'] else 'lexical'}), {sp['statements']} statements: "
                     f"{sp['cold_per_s']:.0f}/s cold, {sp['warm_per_s']:.0f}/s warm (target {sp['target']})")
    sc = f.get("scale")
    if sc:
        lines.append(f"ANN scale curve ({sc['targets']}):")
        for p in sc["points"]:
            lines.append(f"  {p['rows']:>9,} rows: " + (p["error"] if "error" in p else
                         f"build {p['index_build_s']:.1f} s, recall@10 {p['ann_recall@10']:.3f}, p50 {p['ann_p50_ms']:.1f} ms, "
                         f"p95 {p['ann_p95_ms']:.1f} ms (exact streamed {p['exact_streamed_ms']:.0f} ms), peak RSS "
                         f"{p['peak_rss_mb']:.0f} MB"))
    return lines


def _workbench_and_scale(f: dict) -> list[str]:
    """Apply, the 5-strategy curve, engines, the gate, the main job."""
    lines: list[str] = []
    ap = f.get("apply")
    if ap:
        n = ap.get("sessions", 1)
        lines.append(f"workbench Apply, {ap['questions']} questions x {ap['strategies']} strategies, median of {n} "
                     f"fresh session(s): first {ap['first_apply_s']:.1f} s; a never-seen packing-only change of one "
                     f"strategy: median {ap['packing_change_median_s']:.2f} s, slowest {ap['packing_change_max_s']:.2f} s "
                     f"(target {ap['target']}; worst single session {ap.get('worst_single_s', ap['packing_change_max_s']):.2f} s); "
                     f"a shared budget for all 5 ({ap['shared_budget']}) {ap['shared_budget_s']:.2f} s; back to a "
                     f"budget seen before {ap['revisit_s']:.2f} s")
        for c in ap["changes"]:
            lines.append(f"  {c['budget']}: {c['seconds']:.2f} s (worst {c.get('worst_s', c['seconds']):.2f} s)")
    s5 = f.get("scale5")
    if s5:
        lines.append(f"5-strategy retrieval per question ({s5['targets']}):")
        for p in s5["points"]:
            lines.append(f"  {p['rows']:>9,} chunks {p['mode']:5s}: " + (p["error"] if "error" in p else
                         f"p50 {p['p50_ms']:.1f} ms, p95 {p['p95_ms']:.1f} ms, peak RSS {p['peak_rss_mb']:.0f} MB "
                         f"(index built in {p['build_s']:.0f} s, build peak RSS {p['build_peak_rss_mb']:.0f} MB; "
                         f"opened in {p['open_s']:.1f} s)"))
    en = f.get("engines")
    if en:
        lines.append(f"engines on one machine (Ray runtime, {en['cpus']} CPUs, started in {en['ray_start_s']:.1f} s): "
                     f"ingest {en['chunks']} chunks local {en['ingest_local_s']:.1f} s "
                     f"({en['ingest_local_chunks_per_s']:.1f}/s) vs ray {en['ingest_ray_s']:.1f} s "
                     f"({en['ingest_ray_chunks_per_s']:.1f}/s) -> ratio {en['ingest_ratio']:.2f} ({en['target']}); "
                     f"run {en['items']} items local {en['run_local_s']:.1f} s vs ray {en['run_ray_s']:.1f} s -> "
                     f"ratio {en['run_ratio']:.2f}")
    gt = f.get("gate")
    if gt:
        lines.append(f"gate on two stored runs of {gt['items_per_run']:,} items ({gt['score_rows_per_run']:,} score rows "
                     f"each): read {gt['read_s']:.1f} s + gate {gt['gate_s']:.1f} s = {gt['total_gate_s']:.1f} s "
                     f"(target {gt['target']}); run comparison {gt['compare_s']:.1f} s"
                     + (f"; judged metrics of one run ({gt['judgments']:,} judgments): {gt['judged_s']:.1f} s, "
                        f"its pool of {gt['pool_rows']:,} pairs {gt['pool_s']:.1f} s" if "judged_s" in gt else ""))
    mj = f.get("mainjob")
    if mj:
        lines.append(f"main job on a fresh workspace: {mj['seconds']:.1f} s (exit {mj['exit']}; target {mj['target']})")
    return lines
