"""Reading stored scores: summaries with intervals (``summary``), per-question views (``explore``), the
paired regression gate (``gate``) and routing (``routing``). Reads the store; never runs anything."""
