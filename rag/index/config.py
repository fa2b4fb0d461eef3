"""An index's typed config: chunking, embedder, vector index; its hash names the index and keys every cache."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from rag.ingest.chunking import ChunkConfig
from .embedders import EmbedderConfig
from rag.errors import env_number
from rag.llm.urls import redact_url


@dataclass(frozen=True)
class IndexConfig:
    chunking: ChunkConfig = field(default_factory=ChunkConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["embedder"]["base_url"] = redact_url(d["embedder"]["base_url"])  # stored and printed: no credentials
        return d

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:8]

    @classmethod
    def from_dict(cls, d: dict) -> "IndexConfig":
        return cls(ChunkConfig(**d["chunking"]), EmbedderConfig(**d["embedder"]))


VECTOR_INDEX_MODES = ("auto", "ann", "exact")


ANN_MIN_CHUNKS = int(env_number("RAGWB_ANN_MIN_CHUNKS", 100000, integer=True))  # auto: ANN index from here up


ANN_ROWS_PER_PARTITION = 4096


PAGE_VECTOR_BATCH = 65_536  # chunk vectors read at a time while an ANN index's page vectors are built
