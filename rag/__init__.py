"""RAG Workbench: corpora, chunking, index, strategies, prompts and answers."""
import os as _os

# lance logs a WARN for every table it creates; keep the CLI output readable.
_os.environ.setdefault("LANCE_LOG", "error")
_os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

__version__ = "0.1.0"
