"""Per-item scores: the metric registry and formulas (``metrics``), the offline support scorer
(``support``), LLM judges (``judges``) and how far each agrees with people (``agreement``)."""
