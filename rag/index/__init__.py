"""The LanceDB workspace: ingest into tables (``workspace``, run by an ``engines`` engine, rows laid out
by ``rows``), embedders (``embedders``) and the shipped vectors that seed their cache (``shipped``), and the
read side every strategy searches (``retrieval``: the snapshot, dense and BM25 search, candidate pools)."""
