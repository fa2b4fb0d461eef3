"""Executing a run: its config (``config``), the runner that plans points and resumes (``runner``), one
item's retrieval, answer and scores (``items``), the engines that execute shards (``engines``),
conversations turn by turn (``conversations``) and logged outputs scored as a run (``logged``)."""
