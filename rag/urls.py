"""Credentials never leave the process: URLs are redacted before they are stored or printed."""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_SECRET_PARAM = re.compile(r"key|token|secret|password|passwd|sig|auth", re.I)


def redact_url(url: str | None) -> str | None:
    """``http://user:KEY@host/v1?api_key=K`` -> ``http://user:***@host/v1?api_key=***``."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    netloc = parts.netloc
    if "@" in netloc:
        cred, host = netloc.rsplit("@", 1)
        user = cred.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in cred else f"***@{host}"
    query = parts.query
    if query:
        query = urlencode([(k, "***" if _SECRET_PARAM.search(k) else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
