"""What a run is: ``RunConfig``, the typed config whose hash names the run and keys its caches.

In its own module because both the runner (which plans a run) and the item evaluator (which reads the
config of the run it works for) need it: with it inside the runner, items -> runner -> engines -> items
was an import circle."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from rag.index.workspace import IndexConfig
from rag.llm.client import LLMConfig



# --judge-repeats samples a judge to measure its noise (a flip rate, a spread): 20 samples put a flip rate of 0.5
# within +-0.22 (95%), and each repeat is another judge call per item, so a typo like 1000000 would send millions
JUDGE_REPEATS_MAX = 20
JUDGE_REPEATS_WHY = ("each repeat is one more judge call per item and judge; 20 samples already measure a judge's "
                     "flip rate, more buy cost, not precision")
JURY_SIZE = (2, 8)  # a jury of one is a judge; past eight, each item costs more calls than any panel study uses


def check_jury(models) -> tuple:
    """The juror models as given (2..8, each named, each once), or a ValueError that says which rule broke."""
    models = tuple(models or ())
    if not models:
        return ()
    if any(not isinstance(m, str) or not m.strip() for m in models):
        raise ValueError(f"a jury's juror names must be model names, got an empty one in {list(models)!r}")
    if len(set(models)) != len(models):
        twice = sorted({m for m in models if models.count(m) > 1})
        raise ValueError(f"a juror is named twice in the jury: {', '.join(twice)} (each model once)")
    lo, hi = JURY_SIZE
    if not lo <= len(models) <= hi:
        raise ValueError(f"a jury has {lo}..{hi} juror models, got {len(models)} (one model is a judge, not a jury; "
                         f"past {hi}, every item costs that many judge calls per judge)")
    return models


@dataclass(frozen=True)
class RunConfig:
    dataset: str = "squad2"
    questions_file: str | None = None
    index: IndexConfig = field(default_factory=IndexConfig)
    grid: dict = field(default_factory=dict)  # strategy -> {param: [values]}; {} = every strategy at defaults
    answerer: str = "extractive"
    answerer_params: dict = field(default_factory=dict)
    llm: LLMConfig | None = None
    judge: LLMConfig | None = None  # an LLM judge endpoint (costs money; off by default)
    judges: tuple = ()  # judge names (the CLI names DEFAULT_LLM_JUDGES when none is given; () = ragas_faithfulness, as runs before)
    scorers: tuple = ()
    prices: dict = field(default_factory=dict)  # model -> [input, output] dollars per million tokens
    repeats: int = 1
    limit: int = 0  # first N questions (0 = all)
    use_cache: bool = True
    memory: dict = field(default_factory=dict)  # conversations: policy -> {param: [values]} ({} = every policy)
    query_modes: tuple = ()  # conversations: retrieval query modes (() = last_turn)
    insert_fillers: float = 0.0  # conversations: seeded filler turns inserted at this rate (bypass tests)
    vector_index: str = "auto"  # auto | ann | exact (rag/index/workspace.py)
    fit_context: bool = False  # LLM answers: a prompt over the model's window is re-packed to fit by the
    #                            point's own overflow policy (default: the item is status context_overflow)
    plugins: dict = field(default_factory=dict)  # strategy plugin file or module -> sha256 of its source
    systems: tuple = ()  # deployed RAG services measured beside the strategies (rag/answer/systems.py SystemConfig)
    prompt: dict | None = None  # a user's prompt template for the LLM answerer (rag/answer/prompts.py), stored whole
    plugin_timeout: float = 60.0  # seconds a plugin's shape may take for one item (0 = no limit)
    # a raced sweep (docs/sweeps.md): {"metric", "batch", "alpha", "cost_tolerance" (None: one winner), "seed"}
    race: dict = field(default_factory=dict)
    # index axes (docs/sweeps.md "Index axes"): setting -> [values] swept over ``index``; {} = the one index
    index_grid: dict = field(default_factory=dict)
    # each judge asked this many times an item, sampled (docs/llm.md "Judge noise"): its flip rate, its spread
    judge_repeats: int = 1
    # a jury (docs/llm.md "Juries"): these judge models at the judge endpoint, combined by ``jury_rule``
    jury: tuple = ()
    jury_rule: str = "mean"
    # confirm questions (evals/run/confirm.py): {"share": x} or {"n": k}, "seed", "metric"; {} = every question tunes
    confirm: dict = field(default_factory=dict)

    def __post_init__(self):
        if (not isinstance(self.judge_repeats, int) or isinstance(self.judge_repeats, bool)
                or not 1 <= self.judge_repeats <= JUDGE_REPEATS_MAX):
            raise ValueError(f"judge_repeats must be an integer 1..{JUDGE_REPEATS_MAX}, got {self.judge_repeats!r} "
                             f"({JUDGE_REPEATS_WHY})")
        check_jury(self.jury)
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats must be an integer >= 1, got {self.repeats!r}")
        if not isinstance(self.limit, int) or self.limit < 0:
            raise ValueError(f"limit must be an integer >= 0 (0 = all questions), got {self.limit!r}")
        t = self.plugin_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (t >= 0) or t == float("inf"):
            raise ValueError(f"plugin_timeout must be seconds >= 0 (0 = no limit), got {t!r}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["index"] = self.index.to_dict()
        d["llm"] = self.llm.public() if self.llm else None
        d["judge"] = self.judge.public() if self.judge else None
        d["systems"] = [x.public() for x in self.systems]
        d.pop("use_cache")  # a cache switch must not change what a run *is*
        if d.get("plugin_timeout") == 60.0:  # the default: runs stored before the limit keep their hash
            d.pop("plugin_timeout")
        if not d.get("race"):  # not raced: runs stored before races keep their hash
            d.pop("race", None)
        if not d.get("index_grid"):  # one index: runs stored before index axes keep their hash
            d.pop("index_grid", None)
        if d.get("judge_repeats") == 1:  # one judgment an item: runs stored before judge repeats keep their hash
            d.pop("judge_repeats", None)
        if not d.get("jury"):  # one judge model: runs stored before juries keep their hash
            d.pop("jury", None)
            d.pop("jury_rule", None)
        if not d.get("confirm"):  # no confirm part: runs stored before it keep their hash
            d.pop("confirm", None)
        return d

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        d = dict(d)
        d["index"] = IndexConfig.from_dict(d["index"])
        d["llm"] = LLMConfig(**d["llm"]) if d.get("llm") else None
        d["judge"] = LLMConfig(**d["judge"]) if d.get("judge") else None
        d["judges"] = tuple(d.get("judges") or ())
        d["jury"] = tuple(d.get("jury") or ())
        d["scorers"] = tuple(d.get("scorers") or ())
        d["query_modes"] = tuple(d.get("query_modes") or ())
        from rag.answer.systems import SystemConfig

        d["systems"] = tuple(SystemConfig.from_dict(x) for x in d.get("systems") or ())
        return cls(**d)
