"""Installed as users install it: a wheel built from the checkout carries the bundled sets and notebooks (and adds
no top-level ``datasets``), and installed into a new virtualenv it runs the main job in an empty folder outside the
checkout to the same runs and figures as the editable install, and `ragwb workbench` serves the page.

The virtualenv sees the test environment's site-packages for the dependencies (a .pth naming them: no download in
the suite, and the same whether the suite runs in a virtualenv or a global install) while rag-workbench itself comes
from the wheel, which the test checks (rag and evals import from the
virtualenv). docs/performance.md has the same steps timed in a virtualenv with nothing shared."""
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMES: dict = {}


def _run(cmd, cwd, timeout=600, env=None):
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.perf_counter() - t


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("installed")
    proc, TIMES["wheel_s"] = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"),
                                   str(ROOT)], cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next((root / "dist").glob("rag_workbench-*.whl"))
    venv = root / "venv"
    t = time.perf_counter()
    # the dependencies are this test environment's own site-packages, named in a .pth: `--system-site-packages`
    # gives the *base* interpreter's, which inside a virtualenv (the suite run from one, as CI does) lacks them
    # (issue 83: 5 failures there). A .pth path line adds the folder without running its .pth files, so this
    # checkout's editable install is not seen: rag-workbench comes from the wheel
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (Path(site) / "_ragwb_test_deps.pth").write_text("".join(f"{p}\n" for p in ours))
    # --ignore-installed: this machine's editable install must not count as "already satisfied"
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheel)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    TIMES["install_s"] = time.perf_counter() - t
    return {"root": root, "wheel": wheel, "venv": venv, "py": py, "ragwb": venv / "bin" / "ragwb"}


def test_the_wheel_carries_the_bundled_sets_and_notebooks_and_no_top_level_datasets(installed):
    with zipfile.ZipFile(installed["wheel"]) as z:
        names = z.namelist()
        bundled = {n.removeprefix("rag/_bundle/datasets/"): hashlib.sha256(z.read(n)).hexdigest()
                   for n in names if n.startswith("rag/_bundle/datasets/")}
    ours = {str(p.relative_to(ROOT / "datasets")): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (ROOT / "datasets").rglob("*") if p.is_file()}
    assert bundled == ours  # every set, its vectors, parsed pages and licences, byte for byte
    assert {"rag/_bundle/notebooks/" + n for n in ("workbench.py", "report.py", "review.py", "head.html",
                                                    "workbench.ipynb")} <= set(names)
    tops = {n.split("/")[0] for n in names}
    others = tops - {"rag", "evals"}
    assert len(others) == 1 and others.pop().endswith(".dist-info"), tops
    assert "datasets" not in tops and "notebooks" not in tops  # Hugging Face's `datasets` lives there


def test_installed_main_job_in_an_empty_folder_equals_the_editable_one(installed, tmp_path):
    py = installed["py"]
    where = subprocess.run([str(py), "-c", "import rag, evals, rag.ingest.bundled as b; print(rag.__file__); "
                            "print(evals.__file__); print(b.datasets_root()); print(b.checkout_root())"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.split("\n")
    venv = str(installed["venv"])
    assert all(x.startswith(venv) for x in where[:3]), where  # the wheel's code and data, not the checkout's
    assert where[3] == "None"
    wheel_dir, edit_dir = tmp_path / "from-wheel", tmp_path / "editable"
    wheel_dir.mkdir()
    edit_dir.mkdir()
    proc, TIMES["wheel_run_s"] = _run([str(installed["ragwb"]), "run", "--no-progress"], cwd=wheel_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished 6 run(s)" in proc.stdout
    proc, TIMES["editable_run_s"] = _run([sys.executable, "-m", "evals.cli", "run", "--no-progress"], cwd=edit_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]

    def figures(folder):
        con = duckdb.connect(str(folder / "results" / "results.duckdb"), read_only=True)
        runs = con.execute("SELECT dataset, status, git_commit FROM runs ORDER BY dataset").fetchall()
        aggs = con.execute("SELECT r.dataset, a.strategy, a.point_id, a.metric, a.n, a.n_ok, a.n_not_ok, "
                           "a.mean, a.sd FROM aggregates a JOIN runs r USING (run_id) ORDER BY 1, 2, 3, 4").fetchall()
        scores = con.execute("SELECT count(*), count(value), sum(value) FROM scores").fetchone()
        con.close()
        return runs, aggs, scores

    (w_runs, w_aggs, w_scores), (e_runs, e_aggs, e_scores) = figures(wheel_dir), figures(edit_dir)
    assert [(d, s) for d, s, _ in w_runs] == [(d, s) for d, s, _ in e_runs]
    assert len(w_runs) == 6 and {s for _, s, _ in w_runs} == {"finished"}
    assert {c for _, _, c in w_runs} == {None}  # no commit from a wheel (site-packages may sit in another repo)
    # every point, metric and n exactly; mean and sd to 1e-9 (a float sum's last bits may differ between processes)
    assert len(w_aggs) > 500 and [a[:7] for a in w_aggs] == [a[:7] for a in e_aggs]
    for w, e in zip(w_aggs, e_aggs):
        assert w[7:] == pytest.approx(e[7:], rel=1e-9, abs=1e-12, nan_ok=True), (w, e)
    assert w_scores[:2] == e_scores[:2] and w_scores[2] == pytest.approx(e_scores[2], rel=1e-12)
    # the summary a user reads, as `ragwb show` prints it (intervals included), run ids aside
    shown = []
    for folder, exe in ((wheel_dir, [str(installed["ragwb"])]), (edit_dir, [sys.executable, "-m", "evals.cli"])):
        con = duckdb.connect(str(folder / "results" / "results.duckdb"), read_only=True)
        rid = con.execute("SELECT run_id FROM runs WHERE dataset = 'squad2'").fetchone()[0]
        con.close()
        out = subprocess.run(exe + ["show", rid], cwd=folder, capture_output=True, text=True, check=True).stdout
        shown.append(re.sub(r"commit \S+", "commit C", out.replace(rid, "RUN")))  # None from a wheel, said above
    assert shown[0] == shown[1] and "[" in shown[0]
    print("installed-wheel timings:", json.dumps({k: round(v, 1) for k, v in TIMES.items()}))


def test_checkout_only_commands_say_so_in_one_line_from_a_wheel(installed, tmp_path):
    proc, _ = _run([str(installed["ragwb"]), "bench", "--only", "plugins", "--out", str(tmp_path / "b")],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if "needs a checkout" in x]
    assert len(lines) == 1 and "docs/your-system.md" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_pdfs_are_parsed_by_the_wheels_workers_outside_the_checkout(installed, tmp_path):
    """PDFs parsed by worker processes (`python -m rag.ingest.parse_pool`) of the installed package, from a folder
    outside the checkout (a worker that could not start would leave each file skipped, named)."""
    from evals.bench.pdfs import make_pdf

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        make_pdf(docs / f"f{i}.pdf", [[f"Depot {i} stores {7 * i + 3} crates."], [f"Page two of filing {i}."]])
    code = ("import json, rag\nfrom rag.ingest.folders import load_folder\nds = load_folder('docs')\n"
            "print(json.dumps([rag.__file__, [(d.doc_id, len(d.pages), d.text) for d in ds.documents], "
            "[str(s) for s in ds.skipped]]))")
    proc = subprocess.run([str(installed["py"]), "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "RAGWB_PARSE_WORKERS": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, docs_read, skipped = json.loads(proc.stdout.strip().splitlines()[-1])
    assert str(installed["venv"]) in where and not skipped
    assert [(d, n) for d, n, _ in docs_read] == [("f0.pdf", 2), ("f1.pdf", 2), ("f2.pdf", 2)]
    assert "Depot 1 stores 10 crates." in docs_read[1][2]


def test_a_cold_search_from_the_wheel_maps_its_snapshot_without_pylance(installed, tmp_path):
    """Issue 74, item 3, as users run it: `ragwb ingest` then `ragwb search` (e5, the default) from the installed
    package in a folder outside the checkout; the search's fresh process answers from the snapshot the ingest wrote
    (rag/index/snapshot.py) and imports no pylance, LanceDB or pandas."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "harbour.md").write_text("# Harbour\n\nThe harbour office opens at eight and closes at noon.\n")
    (docs / "bees.md").write_text("# Bees\n\nVarroa mites are counted with a sugar roll in late summer.\n")
    proc = subprocess.run([str(installed["ragwb"]), "ingest", "docs", "--no-progress"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list((tmp_path / "results" / "cache" / "snapshots").glob("*.done"))) == 1
    probe = ("import sys, rag\nfrom evals.cli import main\nrc = main(sys.argv[1:])\n"
             "print('MODULES', rag.__file__, *[m for m in ('lance', 'lancedb', 'pandas') if m in sys.modules])\n"
             "sys.exit(rc)")
    proc = subprocess.run([str(installed["py"]), "-c", probe, "search", "when does the harbour office open",
                           "--dataset", "docs", "--show", "1"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out, _, mods = proc.stdout.rpartition("MODULES ")
    where, *heavy = mods.split()
    assert str(installed["venv"]) in where and heavy == [], mods
    assert "harbour.md" in out.splitlines()[1], out


def test_ragwb_workbench_from_the_wheel_serves_the_page_and_its_chart(installed, tmp_path, browser):
    from evals.bench.browser import free_port

    port = free_port()
    t = time.perf_counter()
    proc = subprocess.Popen([str(installed["ragwb"]), "workbench", "--headless", "--port", str(port), "--dataset",
                             "xquad-en", "--limit", "5"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                assert time.time() < deadline, "ragwb workbench did not answer"
                time.sleep(0.3)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        outside = []
        page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:",
                                                                "blob:")) else outside.append(r.url))
        page.goto(url)
        page.wait_for_selector("text=vs context_tokens", timeout=120000)  # the quality-vs-cost chart's title
        page.wait_for_selector(".main-svg", timeout=60000)
        TIMES["workbench_first_chart_s"] = time.perf_counter() - t
        print("installed-wheel timings:", json.dumps({k: round(v, 1) for k, v in TIMES.items()}))
        page.wait_for_selector("text=Apply budgets", timeout=60000)
        page.wait_for_selector("text=questions (of 322)", timeout=60000)
        assert outside == [], outside  # nothing leaves 127.0.0.1
        page.close()
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"ragwb workbench: http://127.0.0.1:{port}/" in out
    assert (tmp_path / "results").is_dir()  # the workspace is results/ in the folder it runs from


def test_ragwb_workbench_refuses_a_bad_flag_before_any_server(tmp_path):
    from evals.cli import main

    assert main(["workbench", "--dataset", "no_such_set", "--headless"]) == 2
    assert main(["workbench", "--llm-model", "m", "--headless"]) == 2


def test_edit_writes_a_copy_that_runs_on_open_and_keeps_a_changed_one(tmp_path):
    from evals.cli.workbench import edit_copy
    from rag.ingest.bundled import notebook

    nb, written = edit_copy(tmp_path / "nb")
    assert written and nb.read_bytes() == notebook("workbench.py").read_bytes()
    assert (tmp_path / "nb" / "head.html").is_file()
    assert "auto_instantiate = true" in (tmp_path / "nb" / "pyproject.toml").read_text()
    nb.write_text(nb.read_text() + "\n# mine\n")
    again, written = edit_copy(tmp_path / "nb")
    assert again == nb and not written and nb.read_text().endswith("# mine\n")


def test_the_page_flags_go_through_ragwb_workbench_as_given():
    from evals.cli.main import build_parser
    from evals.cli.workbench import page_argv
    from evals.workbench.datasets import workbench_args, workbench_parser

    a = build_parser().parse_args(["workbench", "--dataset", "xquad-en", "--limit", "7", "--system", "v1=http://x/a",
                                   "--system", "v2=http://x/b", "--plugins", "a.py", "b.py", "--send", "--port", "9"])
    argv = page_argv(a, workbench_parser(add_help=False))
    assert argv == ["--dataset", "xquad-en", "--limit", "7", "--plugins", "a.py", "b.py", "--system", "v1=http://x/a",
                    "--system", "v2=http://x/b", "--send"]
    got = workbench_args(argv).args
    assert (got.dataset, got.limit, got.system, got.plugins, got.send) == ("xquad-en", 7, ["v1=http://x/a",
                                                                            "v2=http://x/b"], ["a.py", "b.py"], True)
