"""RAG Workbench evaluation: metrics, runner, results store, gate, reports."""
import rag as _rag  # noqa: F401  (sets quiet logging defaults)
