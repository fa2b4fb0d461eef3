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


def url_secrets(url: str | None) -> list[str]:
    """The secret parts of a URL (a password, secret query values): what ``redact_url`` hides."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    out = []
    if "@" in parts.netloc:
        cred = parts.netloc.rsplit("@", 1)[0]
        out.append(cred.split(":", 1)[1] if ":" in cred else cred)
    out += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_PARAM.search(k)]
    return [x for x in out if len(x) >= 3]


def scrub(text: str | None, secrets) -> str | None:
    """``text`` with every known secret replaced by ``***`` (longest first, so a secret that contains
    another is hidden whole). For what is stored or printed, never for what is sent."""
    if not text:
        return text
    for s in sorted({x for x in secrets if x}, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def split_query(url: str) -> tuple[str, dict]:
    """``http://h/v1?api_key=K`` -> (``http://h/v1``, {"api_key": "K"}): the client appends its paths to
    the base URL, so a query string must travel as query parameters, not as part of the path."""
    parts = urlsplit(url)
    if not parts.query:
        return url, {}
    return (urlunsplit((parts.scheme, parts.netloc, parts.path, "", parts.fragment)),
            dict(parse_qsl(parts.query, keep_blank_values=True)))


def same_redacted(full: str | None, stored: str | None) -> bool:
    """Whether ``full`` (with its secrets) is the URL whose redacted form was stored."""
    return bool(full) and redact_url(full) == stored
