"""The exact secrets this process sends, so that no error, log line or span can repeat them.

Pattern scrubbing (``sk-…``, ``Bearer …``) only catches keys shaped like a known provider's;
a self-hosted server's ``--api-key`` is any string, and a server that echoes it in a 401 body
would put it in the error's text. The gateway knows the values it puts on the wire (the API
key, the secret headers), so it remembers them and masks them literally wherever it builds
text (every ``GateError``'s message, the wire's scrubbed server messages).

Values shorter than ``MIN_SECRET_LEN`` are placeholders (vLLM's ``EMPTY``, ``none``), not
secrets: masking them would mangle ordinary words in every message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

__all__ = [
    "MASK",
    "MIN_SECRET_LEN",
    "forget_secrets",
    "is_secret_name",
    "remember_call_headers",
    "remember_headers",
    "remember_secret",
    "scrub_known",
]

MIN_SECRET_LEN = 8
MASK = "***"
#: per-call secrets (a caller's own ``Authorization`` in ``extra_headers``) kept: the newest
#: ones, so that a caller rotating tokens cannot grow this without bound
_MAX_CALL_SECRETS = 256

#: headers whose value is credentials whatever the backend (a call's own headers count only
#: when named so; a backend's configured headers count unless they are plainly not secret)
_SECRET_NAMES = ("auth", "key", "token", "secret", "password", "cookie", "signature")
_PLAIN_HEADERS = frozenset(
    {"content-type", "accept", "accept-encoding", "accept-language", "user-agent", "connection"}
)

_lock = threading.Lock()
_configured: set[str] = set()
_per_call: OrderedDict[str, None] = OrderedDict()
#: longest first, so that a secret containing another one is masked whole
_ordered: tuple[str, ...] = ()


def _values(value: str) -> Iterable[str]:
    """A header value and, for ``Scheme token`` (``Bearer …``, ``Basic …``), its token."""
    value = value.strip()
    yield value
    scheme, _, token = value.partition(" ")
    if token and scheme.isalpha():
        yield token.strip()


def _rebuild() -> None:
    global _ordered
    _ordered = tuple(sorted(_configured | _per_call.keys(), key=len, reverse=True))


def remember_secret(value: str | None) -> None:
    """Mask ``value`` (an API key the gateway sends) from now on, for good."""
    if value is None or len(value.strip()) < MIN_SECRET_LEN:
        return
    with _lock:
        if value.strip() not in _configured:
            _configured.add(value.strip())
            _rebuild()


def remember_headers(headers: Mapping[str, str]) -> None:
    """A backend's configured headers: every value is masked but the plainly public ones
    (``Content-Type``, ``User-Agent``, …) — a proxy's token may go under any name."""
    for name, value in headers.items():
        if name.lower() not in _PLAIN_HEADERS:
            for part in _values(value):
                remember_secret(part)


def is_secret_name(name: str) -> bool:
    """A header named for a credential (``Authorization``, ``x-api-key``, a token, …)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_NAMES)


_is_secret_name = is_secret_name


def remember_call_headers(headers: Mapping[str, str] | None) -> None:
    """A call's own headers (``extra_headers``): the credential-named ones are masked (the
    newest ``_MAX_CALL_SECRETS`` of them); a request id or a trace header is not a secret."""
    if not headers:
        return
    for name, value in headers.items():
        if not _is_secret_name(name):
            continue
        for part in _values(value):
            if len(part) < MIN_SECRET_LEN:
                continue
            with _lock:
                if part in _per_call:
                    _per_call.move_to_end(part)  # the newest again; the order is unchanged
                    continue
                if part in _configured:
                    continue
                _per_call[part] = None
                while len(_per_call) > _MAX_CALL_SECRETS:
                    _per_call.popitem(last=False)
                _rebuild()


def forget_secrets() -> None:
    """Forget every remembered value (tests)."""
    with _lock:
        _configured.clear()
        _per_call.clear()
        _rebuild()


def scrub_known(text: str) -> str:
    """``text`` with every remembered secret replaced by ``***``."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text
