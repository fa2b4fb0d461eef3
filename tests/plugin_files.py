"""Plugin files for tests: a shape that packs what `chunks` packs, with a few lines of its own run first (the
misbehaviour under test: a regex that holds the GIL, an exit, a Ctrl-C)."""
from __future__ import annotations

import textwrap
from pathlib import Path

_TEMPLATE = '''{imports}
from rag.extend import BaseParams, Strategy, register_strategy, get_strategy


@register_strategy
class {cls}(Strategy):
    name = {name!r}
    Params = BaseParams
    seen = []

    def pack(self, r, pool, p):
        {cls}.seen.append(pool.question)
{first}
        return get_strategy("chunks").pack(r, pool, get_strategy("chunks").Params({chunk_params}))
'''


def chunks_plugin(path: Path, cls: str, name: str, first: str = "", imports: str = "", chunk_params: str = "") -> Path:
    """Write a plugin file at ``path`` registering ``name``; ``first``: statements run at the top of its pack (the
    question is ``pool.question``, ``{cls}.seen`` the questions this process has packed so far)."""
    path.write_text(_TEMPLATE.format(imports=imports, cls=cls, name=name, chunk_params=chunk_params,
                                     first=textwrap.indent(textwrap.dedent(first).strip("\n"), " " * 8)))
    return path
