"""Talking to endpoints: the OpenAI-compatible client (``client``), the caps every outside reply gets
(``guard``: size, time, redirects), the on-disk HTTP reply cache (``cache``) and the URL/secret redaction
applied to everything stored (``urls``). Below everything that calls a model: embedders, answerers, judges."""
