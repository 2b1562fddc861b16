"""An HTML page where an API answer was expected, named by its title.

A proxy, load balancer or CDN in front of the model server answers an outage with its own
HTML page (a 502/504, a maintenance or login page — sometimes under a 200). The error used
to quote the page's first 200 bytes, which on a CDN's page are a doctype, conditional
comments and meta tags: the message never said 502 or who answered. The page's ``<title>``
(else its first ``<h1>``) says both, and the message says what it means: not the model
server's answer.
"""

from __future__ import annotations

import html
import re

import httpx2

from gptgate.errors import BackendError
from gptgate.wire.ratelimits import request_id

__all__ = ["html_page_message", "html_stream_error", "html_title", "is_html_page"]

#: the title sits in the head: a page is looked at this far
_SCAN_BYTES = 16_384
_MAX_TITLE = 120
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_H1 = re.compile(rb"<h1[^>]*>(.*?)</h1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_HTML = re.compile(rb"^\s*(<!doctype\s+html|<html|<head|<body|<!--|<title|<h1)", re.IGNORECASE)


def html_title(body: bytes) -> str | None:
    """The title (or first heading) of an HTML page; None when ``body`` is not one."""
    head = body[:_SCAN_BYTES]
    if not _HTML.match(head):
        return None
    for pattern in (_TITLE, _H1):
        found = pattern.search(head)
        if found is None:
            continue
        text = html.unescape(_TAG.sub(" ", found.group(1).decode("utf-8", "replace")))
        text = " ".join(text.split())
        if text:
            return text[:_MAX_TITLE]
    return None


def is_html_page(body: bytes, content_type: str) -> bool:
    """Whether a body is an HTML page (labelled so, or opening like one, title or not): a
    proxy's answer, not the model server's — no model ran, so nothing was billed for it."""
    return "text/html" in content_type.lower() or bool(_HTML.match(body[:_SCAN_BYTES]))


def html_page_message(body: bytes) -> str | None:
    """What an error says of an HTML page, or None when ``body`` is none (or has no title)."""
    title = html_title(body)
    if title is None:
        return None
    return f'an HTML page, not an API answer (a proxy or load balancer in front?): "{title}"'


async def html_stream_error(response: httpx2.Response, backend: str) -> BackendError | None:
    """A streamed request answered 2xx with an HTML page: the backend's failure (counted
    towards its circuit), named by the page's title. Before, the page was read as a stream
    cut before its first event — a ``StreamInterruptedError``, which no circuit counted
    then, so a proxy's login page took every stream with nothing opening. None for anything else."""
    if "text/html" not in response.headers.get("content-type", "").lower():
        return None
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _SCAN_BYTES:
            break
    what = html_page_message(body) or "an HTML page, not an API answer"
    return BackendError(
        f"malformed response: {what}", backend=backend, status=response.status_code,
        request_id=request_id(response.headers),
    )
