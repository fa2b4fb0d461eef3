"""From files to documents and chunks: the importers of every bundled and user corpus (``corpora``),
gold conversations (``conversations``), chunking (``chunking``; code through ``code/``), and locating an
answer's text in a page (``textmatch``). Nothing here touches LanceDB: ``rag.index`` writes what this reads."""
