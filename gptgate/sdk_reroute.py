"""An SDK request rewritten for another backend of its wire's shape (gptgate/sdk_failover.py).

The SDK built the request for its primary: that server's URL, that account's key, that
deployment's model. Sent elsewhere as it is, it would carry the primary's key to another
host (never: gptgate sends a key only to the backend it belongs to) and name a model the
other server may not serve. So the copy keeps what the request says about the *work* — the
API it calls (``chat/completions``, ``embeddings``, ``responses``, ``messages``), its body,
its SDK's headers — and takes the rest from the fallback backend as its own calls do: the URL
its dialect builds under its ``base_url`` (an Azure deployment's path and ``api-version``),
the credential its pool sends in its dialect's header (``Authorization: Bearer``, Azure's
``api-key`` or Entra token, Anthropic's ``x-api-key``), its ``headers=``, and its model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx2

from .scrub import is_secret_name

if TYPE_CHECKING:
    from .config import Backend
    from .routing import BackendState

__all__ = ["FAMILIES", "api_tail", "model_on", "rerouted"]

#: the request shapes: a dialect's requests may go to another of its family (an OpenAI SDK's
#: to Azure's deployments API and back), never across (an OpenAI body to Anthropic)
FAMILIES = {"openai": "openai", "azure": "openai", "anthropic": "anthropic"}

#: the APIs a request may be moved for, per family: the path's last segments → the tail
#: appended where the fallback's dialect puts its chat endpoint
_TAILS = {
    "openai": (
        ("/chat/completions", b"chat/completions"),
        ("/completions", b"completions"),
        ("/embeddings", b"embeddings"),
        ("/responses", b"responses"),
    ),
    "anthropic": (("/v1/messages", b"messages"),),
}
#: headers the copy never takes from the SDK's request: its host's, its length, and every
#: credential-named one (``is_secret_name``: the primary's key, whatever header carries it)
_OWN = frozenset({"host", "content-length"})
_API_VERSION = b"api-version="


def api_tail(family: str, path: str) -> bytes | None:
    """The API ``path`` calls (``b"chat/completions"``), None for one not moved (a file, a
    stored answer read back, a batch: those live in the primary's account)."""
    path = path.rstrip("/")
    for suffix, tail in _TAILS[family]:
        if path.endswith(suffix):
            return tail
    return None


def model_on(
    model: object, primary: Backend, fallback: Backend, mapped: Mapping[str, str]
) -> str | None:
    """The model the request names at ``fallback``: the user's mapping, else the fallback's
    model for the primary's (its ``model``, Azure ``deployment`` or ``embedding_model``);
    None: sent as it is (a model both may serve under one name)."""
    if not isinstance(model, str):
        return None
    if model in mapped:
        return mapped[model]
    if model in (primary.model, primary.deployment):
        return fallback.model
    if model == primary.embedding_model and fallback.embedding_model is not None:
        return fallback.embedding_model
    return None


def _url(state: BackendState, tail: bytes, query: bytes) -> httpx2.URL:
    """``tail`` where the fallback's dialect puts its chat endpoint, with its own query
    (Azure's ``api-version``) and the request's other parameters."""
    chat = state.pool.dialect.chat_url(state.pool.client.base_url)
    path, _, own = chat.raw_path.partition(b"?")
    head, found, _ = path.rpartition(b"chat/completions")
    if found:
        path = head + tail
    # Azure's api-version is the fallback's own, or none (another server's is no concern of
    # it): the primary's never goes along
    kept = [p for p in query.split(b"&") if p and not p.startswith(_API_VERSION)]
    joined = b"&".join([own, *kept] if own else kept)
    return chat.copy_with(raw_path=path + (b"?" + joined if joined else b""))


def _headers(state: BackendState, request: httpx2.Request) -> list[tuple[str, str]]:
    """The SDK's headers but its credentials; the fallback's own (its key, its dialect's and
    its configured headers) over them."""
    names = {n.lower() for n in state.pool.dialect.auth_headers("k")}
    names |= {n.lower() for n in state.backend.headers}
    own = [(k, v) for k, v in state.pool.client.headers.multi_items() if k.lower() in names]
    replaced = {k.lower() for k, _ in own}
    kept = [
        (k, v) for k, v in request.headers.multi_items()
        if k.lower() not in _OWN and k.lower() not in replaced and not is_secret_name(k)
    ]
    return kept + own


async def rerouted(
    request: httpx2.Request, content: bytes, body: dict[str, Any], tail: bytes,
    primary: Backend, state: BackendState, mapped: Mapping[str, str],
) -> httpx2.Request:
    """The copy of ``request`` (its ``content``, parsed: ``body``) for ``state``'s backend."""
    model = model_on(body.get("model"), primary, state.backend, mapped)
    if model is not None:
        content = json.dumps({**body, "model": model}, ensure_ascii=False,
                             separators=(",", ":")).encode()
    copy = httpx2.Request(
        request.method, _url(state, tail, request.url.query), headers=_headers(state, request),
        content=content,
        # the primary's pool's own trace of its send stays with it
        extensions={k: v for k, v in request.extensions.items() if k != "trace"},
    )
    auth = state.pool.client.auth  # a credential made per request (Azure's Entra token)
    if auth is not None:
        flow = auth.async_auth_flow(copy)
        copy = await flow.__anext__()
        await flow.aclose()
    return copy
