"""The Azure OpenAI dialect: OpenAI's body and answers at Azure's URLs, with Azure's auth.

What differs from :class:`~gptgate.wire.dialect.OpenAIDialect`, and why:

* the URL: ``{base_url}/openai/deployments/{deployment}/chat/completions?api-version=...``
  with ``deployment=``, else the newer ``{base_url}/openai/v1/chat/completions`` (``model``
  in the body); a ``base_url`` that already ends in ``/openai`` or ``/openai/v1`` is taken as
  meant, not doubled;
* the key goes in an ``api-key`` header, or — with ``azure_ad_token_provider=`` — an Entra ID
  token as ``Authorization: Bearer``, asked for again when it expires (:class:`EntraAuth`);
* a 404 "Resource not found" says which of endpoint, deployment and api-version to check
  (the Azure error users report most), and a 429 without ``retry-after`` takes the wait from
  the reset headers Azure sends instead; a 400 ``content_filter`` (the prompt refused) is
  billed by Azure, so it is booked at its prompt;
* its RPM is enforced over 1 s or 10 s windows: after a 429 the pacer sends the held calls
  one retry-after apart (``spaced_after_429``) instead of all at once.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import math
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import httpx2

from gptgate.errors import BadRequestError, GateError, RateLimitedError
from gptgate.scrub import remember_call_headers
from gptgate.wire.dialect import OpenAIDialect
from gptgate.wire.openai import error_for_status
from gptgate.wire.ratelimits import retry_after_from_resets

if TYPE_CHECKING:
    from gptgate.config import Backend
    from gptgate.providers import Provider

__all__ = ["AzureDialect", "EntraAuth"]

#: a token is asked for again this long before it expires (azure-identity's own margin)
REFRESH_MARGIN_S = 300.0


def _now() -> float:
    """Wall-clock seconds: a token's expiry is a wall-clock time, whatever the gateway's."""
    return time.time()


def _jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim (epoch seconds) of a JWT, unverified — only to know when to ask
    again; None for anything else."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, (int, float)) and math.isfinite(exp) else None


class EntraAuth(httpx2.Auth):
    """``Authorization: Bearer`` from a token provider (sync or async callable returning a
    str, or an object with ``token`` and ``expires_on`` such as azure-identity's
    ``AccessToken``). The token is kept until :data:`REFRESH_MARGIN_S` before it expires (an
    ``expires_on``, else a JWT's ``exp``; a token of unknown lifetime is asked for on every
    request, as the openai SDK does), one refresh at a time; a 401 asks once more and resends.
    The token is masked from every error and never logged."""

    def __init__(self, provider: Callable[[], Any], backend: str | None = None) -> None:
        self._provider = provider
        self._backend = backend
        self._token: str | None = None
        self._expires = -math.inf
        self._lock = anyio.Lock()

    async def _fetch(self) -> None:
        try:
            result = self._provider()
            if inspect.isawaitable(result):
                result = await result
        except Exception as error:  # the credential failed: the backend's, as a refused key
            raise self._refused(f"failed: {type(error).__name__}: {error}") from error
        token = getattr(result, "token", result)
        if not isinstance(token, str) or not token:
            raise self._refused("returned no token (expected a str)")
        expires = getattr(result, "expires_on", None)
        if not isinstance(expires, (int, float)):
            expires = _jwt_expiry(token)
        remember_call_headers({"authorization": f"Bearer {token}"})  # masked from now on
        self._token = token
        self._expires = -math.inf if expires is None else float(expires) - REFRESH_MARGIN_S

    def _refused(self, what: str) -> BadRequestError:
        """No token to send: a 401 of our own, nothing sent — the backend's credentials
        failed, so the call moves to another backend and its circuit counts it
        (gptgate/credential_failover.py), as when Azure refuses a key."""
        return BadRequestError(
            f"authentication failed: azure_ad_token_provider {what[:300]}",
            backend=self._backend, status=401, unsent=True,
        )

    async def token(self, *, rejected: str | None = None) -> str:
        """The token to send; ``rejected`` is one Azure answered 401: replaced unless a
        refresh already replaced it (the 401s of every request sent with it ask once)."""
        seen = self._token
        if seen is None or seen == rejected or _now() >= self._expires:
            async with self._lock:
                if self._token is seen:  # single flight: not refreshed meanwhile
                    await self._fetch()
        assert self._token is not None
        return self._token

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        sent = await self.token()
        request.headers["authorization"] = f"Bearer {sent}"
        response = yield request
        if response.status_code == 401:  # revoked or expired early: one fresh token
            request.headers["authorization"] = f"Bearer {await self.token(rejected=sent)}"
            yield request

    def __repr__(self) -> str:
        return "EntraAuth(provider=...)"


def _prompt_filtered(body: bytes) -> bool:
    """Is this 400 the content filter refusing the prompt (``"code": "content_filter"``)?
    Azure bills such a request: "there will be a charge for this request as the prompt was
    evaluated by the service" (its content-filtering page)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    inner = payload.get("error") if isinstance(payload, dict) else None
    return isinstance(inner, dict) and inner.get("code") == "content_filter"


class AzureDialect(OpenAIDialect):
    """Azure OpenAI: see the module docstring."""

    name = "azure"

    def __init__(self, backend: Backend, preset: Provider) -> None:
        super().__init__(backend, preset)
        self.deployment = backend.deployment
        self.api_version = backend.api_version
        self._token_provider = backend.azure_ad_token_provider

    def chat_url(self, base: httpx2.URL) -> httpx2.URL:
        path = base.raw_path  # ends in "/"
        if path.endswith(b"/openai/v1/"):
            return base.copy_with(raw_path=path + b"chat/completions")
        root = path[: -len(b"openai/")] if path.endswith(b"/openai/") else path
        if self.deployment is None:
            return base.copy_with(raw_path=root + b"openai/v1/chat/completions")
        deployment = httpx2.URL(self.deployment).raw_path  # percent-escaped as a path part
        query = f"api-version={self.api_version}".encode()
        return base.copy_with(
            raw_path=root + b"openai/deployments/" + deployment + b"/chat/completions?" + query
        )

    def auth_headers(self, key: str | None) -> dict[str, str]:
        if self._token_provider is not None:
            return {}  # the token provider's bearer, per request
        return {"api-key": key} if key else {}

    def auth(self) -> httpx2.Auth | None:
        if self._token_provider is None:
            return None
        return EntraAuth(self._token_provider, self.backend)

    def error_for_status(
        self, status: int, headers: Mapping[str, str] | None, body: bytes, *, backend: str
    ) -> GateError:
        error = error_for_status(status, headers, body, backend=backend)
        if status == 404:
            return BadRequestError(
                f"{error.message}; Azure found no {self._where()}",
                backend=backend, status=status, request_id=error.request_id,
            )
        if isinstance(error, RateLimitedError) and error.retry_after is None and headers:
            error.retry_after = retry_after_from_resets(headers)
        if status == 400 and _prompt_filtered(body):
            error.billed = True  # Azure charges the prompt it evaluated: booked, not free
        return error

    def _where(self) -> str:
        if self.deployment is None:
            return (
                "/openai/v1/ API at this base_url: base_url must be the resource's endpoint "
                "(https://RESOURCE.openai.azure.com, no path), or pass deployment= for the "
                "deployments API"
            )
        return (
            f"deployment {self.deployment!r} with api-version {self.api_version!r}: check "
            "that base_url is the resource's endpoint (https://RESOURCE.openai.azure.com, no "
            "path), that the deployment exists in that resource (its name, not the model's), "
            "and that Azure serves that api_version"
        )
