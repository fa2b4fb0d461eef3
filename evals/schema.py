"""The results database's schema (runs, their questions, per-item results, per-metric scores, judgments) and its
migrations: a file written by an older version is brought up to date when it opens."""
from __future__ import annotations

import time


SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    created_at TIMESTAMP,
    finished_at TIMESTAMP,
    status VARCHAR,            -- running | finished | incomplete (stored items differ from the plan)
    git_commit VARCHAR,
    dataset VARCHAR,
    index_name VARCHAR,
    config JSON,
    config_hash VARCHAR,
    versions JSON,
    planned BIGINT,
    summary JSON,
    corpus JSON                -- doc_id -> content hash at run creation (resume refuses a changed corpus)
);
ALTER TABLE runs ADD COLUMN IF NOT EXISTS corpus JSON;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS options JSON;  -- how the run was asked for beyond its config (a resume keeps it)
ALTER TABLE runs ADD COLUMN IF NOT EXISTS index_built JSON;  -- per index config: the chunking modes used, the settings they read, the embedder
CREATE TABLE IF NOT EXISTS questions (
    dataset VARCHAR,
    question_id VARCHAR,
    text VARCHAR,
    answerable BOOLEAN,
    qtype VARCHAR,
    language VARCHAR,
    answers JSON,
    evidence JSON,
    metadata JSON,
    PRIMARY KEY (dataset, question_id)
);
ALTER TABLE questions ADD COLUMN IF NOT EXISTS metadata JSON;
-- the gold questions of each run as they were when it started: a later ingest of the dataset never
-- rewrites a stored run's gold (runs stored before this table fall back to `questions`)
CREATE TABLE IF NOT EXISTS run_questions (
    run_id VARCHAR,
    question_id VARCHAR,
    text VARCHAR,
    answerable BOOLEAN,
    qtype VARCHAR,
    language VARCHAR,
    answers JSON,
    evidence JSON,
    metadata JSON,
    PRIMARY KEY (run_id, question_id)
);
CREATE TABLE IF NOT EXISTS results (
    run_id VARCHAR,
    strategy VARCHAR,
    point_id VARCHAR,
    point_label VARCHAR,
    params JSON,
    question_id VARCHAR,
    repeat INTEGER,
    blocks JSON,
    counters JSON,
    answer VARCHAR,
    answer_status VARCHAR,
    answer_error VARCHAR,
    citations JSON,
    n_blocks BIGINT,
    prompt_tokens BIGINT,
    context_tokens BIGINT,
    completion_tokens BIGINT,
    usage_source VARCHAR,
    cached BOOLEAN,
    retrieve_ms DOUBLE,
    pack_ms DOUBLE,
    answer_ms DOUBLE,
    score_ms DOUBLE,
    conversation_id VARCHAR,   -- multi-turn sets: the conversation and turn of this item
    turn INTEGER,
    query_mode VARCHAR,
    PRIMARY KEY (run_id, strategy, point_id, question_id, repeat)
);
ALTER TABLE results ADD COLUMN IF NOT EXISTS conversation_id VARCHAR;
ALTER TABLE results ADD COLUMN IF NOT EXISTS passage_keys VARCHAR;  -- the judged metrics' ranked passages (keys)
ALTER TABLE results ADD COLUMN IF NOT EXISTS turn INTEGER;
ALTER TABLE results ADD COLUMN IF NOT EXISTS query_mode VARCHAR;
CREATE TABLE IF NOT EXISTS scores (
    run_id VARCHAR,
    strategy VARCHAR,
    point_id VARCHAR,
    question_id VARCHAR,
    repeat INTEGER,
    metric VARCHAR,
    value DOUBLE,
    status VARCHAR,
    detail VARCHAR,
    PRIMARY KEY (run_id, strategy, point_id, question_id, repeat, metric)
);
-- relevance judgments (docs/judgments.md): keyed by question and passage *content*, so any run that shows
-- the same passage for the same question reuses them; one row per judge (human:NAME, llm:MODEL, gold:evidence)
CREATE TABLE IF NOT EXISTS judgments (
    question_key VARCHAR,
    passage_key VARCHAR,
    judge VARCHAR,
    grade INTEGER,             -- 0 not relevant, 1 related, 2 partly answers, 3 answers (NULL when status <> ok)
    question_id VARCHAR,
    question VARCHAR,
    text VARCHAR,
    status VARCHAR,            -- ok | parse_error | error (an LLM judge's failure is kept, and retried next time)
    detail VARCHAR,
    source VARCHAR,            -- the run or file it came from
    judged_at TIMESTAMP,
    PRIMARY KEY (question_key, passage_key, judge)
);
CREATE OR REPLACE VIEW run_gold AS
SELECT run_id, question_id, text, answerable, qtype, language, answers, evidence, metadata FROM run_questions
UNION ALL
SELECT r.run_id, q.question_id, q.text, q.answerable, q.qtype, q.language, q.answers, q.evidence, q.metadata
FROM runs r JOIN questions q ON q.dataset = r.dataset
WHERE NOT EXISTS (SELECT 1 FROM run_questions x WHERE x.run_id = r.run_id);
CREATE OR REPLACE VIEW aggregates AS
SELECT run_id, strategy, point_id, metric,
       count(*) AS n,
       count(*) FILTER (WHERE status = 'ok') AS n_ok,
       count(*) FILTER (WHERE status <> 'ok') AS n_not_ok,
       avg(value) FILTER (WHERE status = 'ok') AS mean,
       stddev_samp(value) FILTER (WHERE status = 'ok') AS sd
FROM scores GROUP BY ALL;
CREATE OR REPLACE VIEW run_costs AS
SELECT run_id, strategy, point_id, count(*) AS items,
       avg(context_tokens) AS context_tokens, avg(prompt_tokens) AS prompt_tokens,
       avg(retrieve_ms) AS retrieve_ms, avg(pack_ms) AS pack_ms, avg(answer_ms) AS answer_ms,
       avg(score_ms) AS score_ms
FROM results GROUP BY ALL;
"""


RESULT_COLUMNS = ["run_id", "strategy", "point_id", "point_label", "params", "question_id", "repeat", "blocks",
                  "counters", "answer", "answer_status", "answer_error", "citations", "n_blocks", "prompt_tokens",
                  "context_tokens", "completion_tokens", "usage_source", "cached", "retrieve_ms", "pack_ms",
                  "answer_ms", "score_ms", "conversation_id", "turn", "query_mode", "passage_keys"]


SCORE_COLUMNS = ["run_id", "strategy", "point_id", "question_id", "repeat", "metric", "value", "status", "detail"]


WIDE_COLUMNS = {"results": ("n_blocks", "prompt_tokens", "context_tokens", "completion_tokens"), "runs": ("planned",)}


def migrate(con) -> None:
    """Counters of stores made by older versions were INTEGER (an absurd usage count overflowed them)."""
    for table, cols in WIDE_COLUMNS.items():
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
                                 [table]).fetchall())
        for c in cols:
            if types.get(c) == "INTEGER":
                con.execute(f"ALTER TABLE {table} ALTER COLUMN {c} SET DATA TYPE BIGINT")
