"""``ragwb ci init``: a CI workflow for the team's own data (docs/gate.md, "A workflow for your own folder"). It
installs the package, restores the workspace's response cache (an unchanged question is never paid twice), runs the
candidate, gates it against the committed baseline (JUnit, the step summary, the comment), uploads the report and the
JUnit file, and on the main branch writes the new baseline. The key is read from a CI secret by name: the file never
holds a key."""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
LOOKS_LIKE_KEY = re.compile(r"(sk-|sk_|key-|Bearer\s)|^[A-Za-z0-9_\-]{32,}$")
BASELINE = "ci/baseline.json.gz"


def _q(x: str) -> str:
    return shlex.quote(str(x))


def check(a) -> None:
    """Every refusal before anything is written: a dataset folder that does not exist, a key given as a value, an
    LLM flag without its partner, an existing file without --force."""
    if not Path(a.dataset).is_dir():
        raise ValueError(f"--dataset {a.dataset}: no such folder (ragwb ci init writes a workflow for your own folder; "
                         "give it as the repository holds it, e.g. docs/)")
    if a.questions and not Path(a.questions).is_file():
        raise ValueError(f"--questions {a.questions}: no such file")
    if bool(a.llm_base_url) != bool(a.llm_model):
        raise ValueError("--llm-base-url and --llm-model go together (the endpoint and the model it serves)")
    if a.llm_key_env is not None and (not ENV_NAME.fullmatch(a.llm_key_env) or LOOKS_LIKE_KEY.search(a.llm_key_env)):
        raise ValueError("--llm-key-env takes the NAME of the variable that holds the key (e.g. OPENAI_API_KEY), "
                         "never the key: the workflow reads it from a CI secret of that name")


def github_workflow(a) -> str:
    run = ["ragwb run --dataset", _q(a.dataset)] + (["--questions", _q(a.questions)] if a.questions else [])
    key = a.llm_key_env or "OPENAI_API_KEY"
    if a.llm_base_url:
        run += ["--llm-base-url", _q(a.llm_base_url), "--llm-model", _q(a.llm_model), "--llm-key-env", key]
    run += ["--workspace results --run-id candidate --no-progress --yes"]
    cache_key = "${{ hashFiles('%s') }}" % (a.questions or f"{a.dataset.rstrip('/')}/**")
    env = (f"        env:\n          {key}: ${{{{ secrets.{key} }}}}  # read by name, never echoed or stored\n"
           if a.llm_base_url else "")
    return f"""# written by `ragwb ci init` (docs/gate.md): {a.dataset} evaluated and gated against {BASELINE}
name: rag-eval
on:
  pull_request:
  push:
    branches: [main]
jobs:
  eval:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - id: install
        run: python -m pip install {_q(a.package)}
      # the response cache: an unchanged question is never paid twice (keyed on the questions, refreshed each run)
      - uses: actions/cache@v4
        with:
          path: results/cache
          key: ragwb-cache-{cache_key}-${{{{ github.sha }}}}
          restore-keys: ragwb-cache-{cache_key}-
      - id: candidate
{env}        run: {" ".join(run)}
      - id: gate
        run: |
          if [ -f {BASELINE} ]; then
            ragwb gate --workspace results --baseline {BASELINE} --candidate candidate --junit gate.xml \\
              --comment comment.md --markdown gate.md
          else
            echo "no baseline yet ({BASELINE}): the main branch writes it" | tee gate.md
          fi
      - if: always()
        uses: actions/upload-artifact@v4
        with:
          name: rag-eval
          path: |
            results/reports/
            gate.xml
            comment.md
      - id: baseline
        if: github.ref == 'refs/heads/main'
        run: |
          mkdir -p ci
          ragwb gate --workspace results --candidate candidate --write-baseline {BASELINE}
"""


def gitlab_ci(a) -> str:
    run = ["ragwb run --dataset", _q(a.dataset)] + (["--questions", _q(a.questions)] if a.questions else [])
    if a.llm_base_url:
        run += ["--llm-base-url", _q(a.llm_base_url), "--llm-model", _q(a.llm_model), "--llm-key-env",
                a.llm_key_env or "OPENAI_API_KEY"]
    run += ["--workspace results --run-id candidate --no-progress --yes"]
    return f"""# written by `ragwb ci init --provider gitlab` (docs/gate.md): {a.dataset} evaluated and gated against
# {BASELINE}; the key is a masked CI/CD variable of the name given (--llm-key-env), never in this file
rag-eval:
  image: python:3.11
  cache:
    key: ragwb-cache
    paths:
      - results/cache
  script:
    - python -m pip install {_q(a.package)}
    - {" ".join(run)}
    - |
      if [ -f {BASELINE} ]; then
        ragwb gate --workspace results --baseline {BASELINE} --candidate candidate --junit gate.xml --comment comment.md --markdown gate.md
      else
        echo "no baseline yet ({BASELINE}): the default branch writes it" | tee gate.md
      fi
    - |
      if [ "$CI_COMMIT_BRANCH" = "$CI_DEFAULT_BRANCH" ]; then
        mkdir -p ci && ragwb gate --workspace results --candidate candidate --write-baseline {BASELINE}
      fi
  artifacts:
    when: always
    paths:
      - results/reports/
      - gate.xml
      - comment.md
    reports:
      junit: gate.xml
"""


def cmd_ci(a) -> int:
    check(a)
    out = Path(a.out or (".github/workflows/rag-eval.yml" if a.provider == "github" else ".gitlab-ci.yml"))
    if (out.exists() or out.is_symlink()) and not a.force:
        raise ValueError(f"--out {out}: the file exists; pass --force to replace it, or another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    text = github_workflow(a) if a.provider == "github" else gitlab_ci(a)
    from rag.safeio import write_whole

    write_whole(out, text.encode("utf-8"))
    print(f"ragwb ci: wrote {out}" + (f"; add the secret {a.llm_key_env or 'OPENAI_API_KEY'} to the repository's "
                                      "CI settings" if a.llm_base_url else "")
          + f"; the main branch writes {BASELINE} on its first run", file=sys.stderr)
    return 0


def add_ci(sub) -> None:
    s = sub.add_parser("ci", help="CI for your own data: `ragwb ci init` writes a GitHub or GitLab workflow")
    verbs = s.add_subparsers(dest="verb", required=True, metavar="VERB")
    i = verbs.add_parser("init", help="write a workflow that runs your folder, gates it against a committed baseline "
                                      "(JUnit, step summary, comment), keeps the response cache and uploads the report")
    i.add_argument("--dataset", required=True, help="your folder of documents, as the repository holds it")
    i.add_argument("--questions", default=None, help="its questions file (JSONL)")
    i.add_argument("--llm-base-url", default=None)
    i.add_argument("--llm-model", default=None)
    i.add_argument("--llm-key-env", default=None, metavar="NAME",
                   help="the NAME of the variable (a CI secret) that holds the key; never the key itself")
    i.add_argument("--provider", choices=("github", "gitlab"), default="github")
    i.add_argument("--package", default="rag-workbench", help="what the workflow installs (default: rag-workbench)")
    i.add_argument("--out", default=None,
                   help="where (default: .github/workflows/rag-eval.yml, or .gitlab-ci.yml for gitlab)")
    i.add_argument("--force", action="store_true", help="replace an existing file")
    s.set_defaults(fn=cmd_ci)
