"""From a context to an answer: answerers (``answerers``), prompt templates (``prompts``), conversation
memory policies (``memory``), deployed RAG services measured as a point (``systems``) and logged outputs
read as records (``logged``)."""
