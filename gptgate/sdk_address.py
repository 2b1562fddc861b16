"""An SDK request on ``gate.http_client(name)`` must address backend ``name``'s server.

The transport sends a request where the SDK addressed it. An SDK given no ``base_url=``
addresses its own default (``https://api.openai.com/v1``, ``https://api.anthropic.com``):
``openai.AsyncOpenAI(http_client=gate.http_client("gpu-local"))`` sent gpu-local's prompts to
a third party, booked, limited and traced as gpu-local's. A request whose origin — scheme,
host and port (a default port as written or not) — is not the backend's is refused unsent
with ``MisaddressedRequestError``, which names both hosts and the fix. Paths are the SDK's
own business (an Azure deployment's, ``/openai/v1``, a trailing slash): only the origin says
where the prompt goes. The error names origins only: never a URL's user info, path or query,
where a key may sit. A relative URL (``client.post("/chat/completions")`` on the bare
client) addresses no server and goes through as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx2

from .errors import MisaddressedRequestError
from .providers import PROVIDERS

if TYPE_CHECKING:
    from .routing import BackendState

__all__ = ["check_addressed", "origin"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: httpx2.URL) -> str:
    """``scheme://host:port``, the port always written (a default one too): what two URLs
    must share for a request to reach the same server. No user info, path or query."""
    scheme = url.scheme.lower()
    port = url.port if url.port is not None else _DEFAULT_PORTS.get(scheme)
    host = url.host.lower().rstrip(".")
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def _fix(state: BackendState) -> str:
    """How to give the SDK the backend's URL, in the SDK's own words."""
    base = state.pool.client.base_url
    root = origin(base).removesuffix(f":{_DEFAULT_PORTS.get(base.scheme.lower())}")
    if state.backend.provider == "azure":
        return f'azure_endpoint="{root}" on openai.AsyncAzureOpenAI'
    path = base.path.rstrip("/")
    if PROVIDERS[state.backend.provider].dialect == "anthropic":
        path = path.removesuffix("/v1")  # the anthropic SDK appends its /v1/messages itself
    return f'base_url="{root}{path}" on the SDK client'


def check_addressed(state: BackendState, request: httpx2.Request) -> None:
    """Raise ``MisaddressedRequestError`` when ``request`` addresses another server than
    ``state``'s backend: nothing is sent, taken from its limit or booked."""
    if not request.url.host:  # a relative URL reaches no server (a mock transport answers it)
        return
    addressed = origin(request.url)
    own = origin(state.pool.client.base_url)
    if addressed == own:
        return
    raise MisaddressedRequestError(
        f"gptgate: the SDK on gate.http_client({state.name!r}) addressed {addressed}, not "
        f"backend {state.name!r} at {own}; nothing was sent (a prompt meant for "
        f"{state.name!r} never goes to another host). Give the SDK the backend's URL: "
        f"{_fix(state)}",
        backend=state.name, addressed=addressed, expected=own,
    )
