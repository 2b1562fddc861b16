"""What a failed connection tells a user to check, from the exception's kind, not its text.

A wrong port, a server not up yet, a mistyped host and ``https://`` to a plain-HTTP server
all surface as one ``ConnectError``; "connection failed" alone leaves a new user guessing.
The cause chain says which it was (``ConnectionRefusedError``, ``socket.gaierror``,
``ssl.SSLError``). The server is named by ``host:port`` only — what spans already export as
``server.address``/``server.port`` — never by the URL: its userinfo, path and query can carry
a key (Gemini's ``?key=``, ``user:token@``), and ``str(exc)`` is never read for the same
reason (gptgate/wire/openai.py ``error_for_exception``).
"""

from __future__ import annotations

import socket
import ssl

__all__ = ["connect_hint"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _server(exc: BaseException) -> str | None:
    """``host:port`` of the request that failed, or None when the exception has none."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx2 raises RuntimeError when no request is set
        return None
    host = url.host
    if not isinstance(host, str) or not host:
        return None
    port = url.port or _DEFAULT_PORTS.get(url.scheme)
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in seen and len(seen) < 8:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return seen


def connect_hint(exc: BaseException) -> str:
    """What to check, after "connection failed (ConnectError): "."""
    where = _server(exc)
    server = f"the server at {where}" if where else "the server at the backend's base_url"
    causes = _causes(exc)
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return f"{server} refused the connection: is it running, and is base_url's port right?"
    if any(isinstance(c, socket.gaierror) for c in causes):
        return f"the host name of {where or 'base_url'} did not resolve: is base_url right?"
    if any(isinstance(c, ssl.SSLError) for c in causes):
        return (f"TLS with {server} failed: does base_url's scheme (http:// or https://) "
                "match the server?")
    return f"{server} could not be reached: is it running, and is base_url right?"
