"""The simulator's Azure OpenAI flavor (``SimProfile(flavor="azure")``): its URLs, its auth and
its rate-limit headers, so the Azure dialect is tested over loopback as the others are.

What Azure does differently, and this reproduces:

* paths: ``/openai/deployments/{deployment}/chat/completions?api-version=...`` (the deployment
  is the profile's ``model``) or the newer ``/openai/v1/chat/completions``; the Batch API's
  ``/openai/files`` and ``/openai/batches`` (with ``api-version``) or ``/openai/v1/...``;
  anything else — a ``base_url`` with ``/v1`` on it, a missing ``api-version`` — is a bare 404
  ``Resource not found``, the error users meet most;
* auth: the key in an ``api-key`` header, or an Entra ID token as ``Authorization: Bearer``;
  a key sent as a Bearer token (the OpenAI habit) is a 401;
* rate limits: RPM enforced over short windows (``rpm_window_s``: 1 s or 10 s), and only
  ``x-ratelimit-remaining-{requests,tokens}`` sent, the requests figure scaled to a minute —
  it claims capacity while the window rejects; an unlimited budget says ``-1``; a 429 carries
  ``retry-after-ms`` and ``retry-after``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

from gptgate.sim.profiles import PROFILES, SimProfile

__all__ = ["AZURE_API_VERSIONS", "AZURE_PROFILE", "AzureRefusal", "azure_route"]

#: the ``api-version`` values the simulated resource serves
AZURE_API_VERSIONS = frozenset({"2024-06-01", "2024-10-21", "2025-01-01-preview"})

#: an Azure OpenAI resource with one deployment, ``gpt-4o`` (Standard: 450k TPM, 2,700 RPM
#: enforced over 10 s windows); any ``api-key`` or JWT-shaped Entra token is accepted
AZURE_PROFILE = PROFILES["hosted"].model_copy(update={
    "name": "azure", "flavor": "azure", "model": "gpt-4o",
    "rpm": 2_700, "rpm_window_s": 10.0, "tpm": 450_000,
})

_DEPLOYMENT = re.compile(r"^/openai/deployments/([^/]+)/(chat/completions|embeddings)$")
_V1 = re.compile(r"^/openai/v1/(chat/completions|models|(?:files|batches)(?:/.*)?)$")
#: the Batch API's files and batches (gptgate/sim/openai_batches.py), by api-version
_BATCH = re.compile(r"^/openai/((?:files|batches)(?:/.*)?)$")

_NOT_FOUND = "Resource not found"
_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide "
    "a valid key for an active subscription and use a correct regional API endpoint for your "
    "resource."
)


@dataclass(frozen=True, slots=True)
class AzureRefusal:
    """An Azure error answer: its status, code and message."""

    status: int
    code: str
    message: str


def _authorized(headers: Mapping[str, str], profile: SimProfile) -> bool:
    key = headers.get("api-key")
    if key is not None:
        return bool(key) and (profile.api_key is None or key == profile.api_key)
    bearer = headers.get("authorization", "")
    if not bearer.lower().startswith("bearer "):
        return False
    token = bearer[7:].strip()
    # an Entra ID token is a JWT; an API key sent the OpenAI way is refused
    return token in profile.bearer_tokens or (not profile.bearer_tokens and token.count(".") == 2)


def azure_route(
    path: str, query: str, headers: Mapping[str, str], profile: SimProfile
) -> str | AzureRefusal:
    """The OpenAI path an Azure request stands for (``/v1/chat/completions``), or the refusal
    Azure would answer it with."""
    deployment = _DEPLOYMENT.match(path) or _BATCH.match(path)
    v1 = _V1.match(path)
    if deployment is None and v1 is None:
        return AzureRefusal(404, "404", _NOT_FOUND)
    versions = parse_qs(query).get("api-version", [])
    if deployment is not None and (not versions or versions[0] not in AZURE_API_VERSIONS):
        return AzureRefusal(404, "404", _NOT_FOUND)
    if not _authorized(headers, profile):
        return AzureRefusal(401, "401", _DENIED)
    if deployment is not None and deployment.re is _BATCH:
        return "/v1/" + deployment.group(1)
    if deployment is not None:
        if deployment.group(1) != profile.model:
            return AzureRefusal(
                404,
                "DeploymentNotFound",
                "The API deployment for this resource does not exist. If you created the "
                "deployment within the last 5 minutes, please wait a moment and try again.",
            )
        return "/v1/" + deployment.group(2)
    assert v1 is not None
    return "/v1/" + v1.group(1)
