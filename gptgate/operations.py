"""Which GenAI operation an OpenAI-compatible request path is (chat, embeddings, …): the
SDK transport's spans and metrics name it, and only a refusal on one of these endpoints says
the backend cannot serve the gateway's calls (gptgate/credential_owner.py: a restricted key
refused ``/files`` still serves chat)."""

from __future__ import annotations

__all__ = ["GENERATIVE", "OPERATIONS", "operation_of"]

#: the GenAI operation of an OpenAI-compatible endpoint, by the path's last segments
OPERATIONS = (
    ("/chat/completions", "chat"),
    ("/completions", "text_completion"),
    ("/embeddings", "embeddings"),
    ("/responses", "chat"),
    ("/v1/messages", "chat"),  # Anthropic's Messages API
)
#: operations whose answers, with a known size, teach the limit its latency per token
GENERATIVE = frozenset({"chat", "text_completion"})


def operation_of(path: str) -> str | None:
    """The GenAI operation name of a request path; None for any other endpoint."""
    path = path.rstrip("/")
    for suffix, operation in OPERATIONS:
        if path.endswith(suffix):
            return operation
    return None
