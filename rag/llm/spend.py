"""What a batch of LLM calls will cost, counted before any is sent: the cost line every spending action shows
first (the workbench page's Send buttons, ``ragwb generate``, ``ragwb judge``)."""
from __future__ import annotations

from dataclasses import dataclass

from rag.tokens import count_tokens

from .client import LLMClient, dollars_text, price_known, price_of


@dataclass
class CallPlan:
    """Calls not in the response cache (a prompt asked twice counted once: the second is a cache hit), the ones
    that are, their prompt tokens and dollars (completions counted at max_tokens: an upper bound)."""
    model: str
    new_calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    dollars: float = 0.0
    price_known: bool = True

    def line(self) -> str:
        return (f"{self.new_calls:,} call(s) to {self.model} ({self.prompt_tokens:,} prompt tokens, "
                f"{dollars_text(self.dollars, self.price_known, 'up to ')}); "
                f"{self.cached_calls:,} already in the response cache (free)")


def plan_calls(client: LLMClient, messages: list[list[dict]], extra: dict | None = None,
               encoding: str = "o200k_base") -> CallPlan:
    """The plan of sending each of ``messages`` once with ``extra`` request parameters (repeat 0)."""
    plan = CallPlan(client.cfg.model, price_known=price_known(client.cfg.model, client.prices))
    params, seen = client._params(extra or {}), set()
    for msgs in messages:
        key = client.cache_key(msgs, params, 0)
        if key in seen or client.has_key(key):
            plan.cached_calls += 1
            continue
        seen.add(key)
        # the chat framing too, as the endpoint counts it (3 tokens a message, 3 to prime the reply: OpenAI's
        # cookbook, rag/answer/prompts.prompt_tokens); without it 200 judge calls were announced 1,800 short
        tokens = sum(count_tokens(m.get("content") or "", encoding) + 3 for m in msgs) + 3
        plan.new_calls += 1
        plan.prompt_tokens += tokens
        plan.dollars += price_of(client.cfg.model, tokens, client.cfg.max_tokens, client.prices)
    return plan


def price_text(model: str, prices: dict | None = None) -> str:
    """A model's price as a cost line says it: "$0.15 in / $0.6 out per million tokens", or "price unknown"."""
    from .client import PRICES

    table = {**PRICES, **(prices or {})}
    if not price_known(model, table):
        return "price unknown (--price MODEL=IN,OUT)"
    pin, pout = table[model]
    return f"${pin:g} in / ${pout:g} out per million tokens"


@dataclass
class BoundPlan:
    """A cost line that can only bound its calls before they are made (a judge that may ask several times)."""
    text: str
    new_calls: int
    up_to: bool = True

    def line(self) -> str:
        return self.text


def confirm_spend(what: str, plan, yes: bool) -> bool:
    """The cost line of a spending command (a ``CallPlan``, a ``BoundPlan`` or anything with ``line()`` and
    ``new_calls``), printed before anything is sent; on a terminal it waits for a yes unless ``--yes``. False:
    the user said no (nothing was sent)."""
    import sys

    print(f"{what}: {plan.line()}", flush=True)
    if not plan.new_calls or yes or not (sys.stdin.isatty() and sys.stdout.isatty()):
        return True
    try:
        answer = input(f"Send {'up to ' if getattr(plan, 'up_to', False) else ''}{plan.new_calls:,} call(s)? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")
