"""Which Batch API a backend's batch job speaks: picked by the backend's dialect, the way a
live call's wire is (gptgate/wire/dialect.py).

* ``openai`` (and every OpenAI-compatible provider): ``/files`` + ``/batches`` under the
  ``base_url`` (gptgate/batch_openai.py);
* ``azure``: the same API at Azure's paths — ``{endpoint}/openai/files`` and
  ``/openai/batches`` with the deployment's ``?api-version=`` (or ``/openai/v1/...`` without
  a deployment), request lines naming ``/chat/completions`` and the deployment as ``model``
  (a Global-Batch deployment), with the dialect's auth (the pooled client carries it);
* ``anthropic``: Message Batches (gptgate/batch_anthropic.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx2

from .batch_anthropic import ANTHROPIC_LIMITS, AnthropicBatches
from .batch_api import BatchAPI, BatchLimits
from .batch_openai import OPENAI_LIMITS, OpenAIBatches

if TYPE_CHECKING:
    from .config import Backend
    from .wire.dialect import Dialect

__all__ = ["batch_api_for", "batch_model"]

_AZURE_DEPLOYMENTS = b"/openai/deployments/"


def batch_model(backend: Backend) -> str:
    """The ``model`` a batch request names: Azure's deployment when there is one."""
    return backend.deployment or backend.model


def batch_api_for(
    dialect: Dialect, client: httpx2.AsyncClient, backend: Backend, limits: BatchLimits | None
) -> BatchAPI:
    if dialect.name == "anthropic":
        messages = dialect.chat_url(client.base_url)
        return AnthropicBatches(client, backend.name, limits or ANTHROPIC_LIMITS,
                                root=str(messages) + "/batches")
    if dialect.name == "azure":
        chat = dialect.chat_url(client.base_url)
        path = chat.raw_path.split(b"?", 1)[0]
        at = path.find(_AZURE_DEPLOYMENTS)
        if at >= 0:  # the deployments API: /openai/files?api-version=...
            root = path[: at + len(b"/openai/")]
            params = {"api-version": backend.api_version or ""}
        else:  # the v1 API: /openai/v1/files
            root, params = path.removesuffix(b"chat/completions"), {}
        return OpenAIBatches(
            client, backend.name, limits or OPENAI_LIMITS,
            root=str(chat.copy_with(raw_path=root)), params=params, endpoint="/chat/completions",
        )
    return OpenAIBatches(client, backend.name, limits or OPENAI_LIMITS)
