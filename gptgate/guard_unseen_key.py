"""A key refused out of the guard's sight: an SDK's own client inside ``@gate.guard``.

A refusal of the backend's own key counts towards its circuit (gptgate/credential_owner.py),
one of another key — a tenant's — blames no backend. Which key it was, the guard reads from
the refused request the SDK's exception carries. ``openai`` 3.x adds its key in an auth step
after building the request: the exception's request carries none, so a revoked backend key
(every call refused) and one tenant's wrong key look the same. The guard does not guess —
guessing "the backend's" would let one user's wrong key open the circuit for everyone — so the
circuit does not count it; but the refusal no longer passes in silence: when the refused
request went to the guard's backend's own server (its ``base_url``'s scheme, host and port)
and carried no credential in sight, the SDK's exception gets a note (PEP 678, shown with its
traceback) and the log a WARNING (once per backend) saying what to do — put the SDK on
``gate.http_client(name)``, where the key is seen (and ``fallback=`` can move the request).
Neither holds the key.
"""

from __future__ import annotations

import logging

import httpx2

from .credential_failover import refused_credentials
from .errors import GateError
from .routing import BackendState
from .scrub import is_secret_name
from .warn_once import warn_once

__all__ = ["note_unseen_key"]

_log = logging.getLogger("gptgate")


def _request_of(exc: BaseException) -> httpx2.Request | None:
    for holder in (exc, getattr(exc, "response", None)):
        try:
            request = getattr(holder, "request", None)
        except RuntimeError:  # httpx: a response built without its request
            continue
        if isinstance(request, httpx2.Request):
            return request
    return None


def _same_server(url: httpx2.URL, base: httpx2.URL) -> bool:
    return (url.scheme, url.host, url.port) == (base.scheme, base.host, base.port)


def note_unseen_key(state: BackendState, view: GateError, original: BaseException) -> bool:
    """Say what to do about a refused key the guard could not see (see the module); True
    when said."""
    if not refused_credentials(view):
        return False
    request = _request_of(original)
    if request is None or any(is_secret_name(name) for name in request.headers):
        return False  # a key in sight: counted as the backend's, or a tenant's
    if not _same_server(request.url, state.pool.client.base_url):
        return False
    note = (
        f"gptgate: backend {state.name!r}'s server refused the request's credentials "
        f"[{view.status}], but the SDK added its key out of gptgate's sight (its own HTTP "
        f"client): gptgate cannot tell {state.name!r}'s own key from another (a tenant's), "
        f"so {state.name!r}'s circuit does not count it. Give the SDK "
        f"http_client=gate.http_client({state.name!r}) — a refusal of the backend's own key "
        f"then opens its circuit, and fallback=[...] moves its requests — or fix the key."
    )
    notes = getattr(original, "__notes__", None)
    if not notes or note not in notes:
        original.add_note(note)
    warn_once(_log, state, "unseen_key", "%s", note)
    return True
