"""Messages as an OpenAI-dialect server takes them: without the keys only another dialect reads.

An Anthropic answer's raw message carries ``thinking_blocks`` (gptgate/wire/anthropic_thinking.py)
so that a tool loop can append it as it is. When that conversation is then sent to an
OpenAI-dialect backend — a mixed fleet's failover, ``tier="auto"``, a pinned backend — the key
must not go with it: OpenAI refuses a message with a field it does not know ("Additional
properties are not allowed ('thinking_blocks' was unexpected) - 'messages.1'"), and so do
strict compatible servers; the thinking means nothing to another model. LiteLLM drops it too.

A reasoning model's answer carries its thinking as ``reasoning_content`` (DeepSeek, which
wants it back in a tool loop; vLLM's older parser) or ``reasoning`` (vLLM's newer one,
ollama). DeepSeek needs it, a self-hosted server's chat template reads it, OpenRouter passes it
on; a strict hosted API (``Provider.strict_messages``: OpenAI, Azure, Gemini, Groq, Mistral)
refuses it like ``thinking_blocks``, so there :data:`STRICT_DROPPED` leave both out.
The caller's messages are not changed: the Anthropic path still sends the blocks, DeepSeek
still gets its reasoning.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = ["ANTHROPIC_ONLY_KEY", "STRICT_DROPPED", "openai_messages", "with_reasoning"]

#: the message key only the Anthropic dialect reads
ANTHROPIC_ONLY_KEY = "thinking_blocks"
#: an Anthropic answer's whole content, kept when a server tool's blocks are in it
#: (gptgate/wire/anthropic_server_tools.py): its text is in ``content`` already
ANTHROPIC_BLOCKS_KEY = "content_blocks"
_ANTHROPIC_ONLY = frozenset({ANTHROPIC_ONLY_KEY, ANTHROPIC_BLOCKS_KEY})
#: the keys a strict OpenAI-format API refuses on a message: Anthropic's thinking and a
#: reasoning model's
STRICT_DROPPED = _ANTHROPIC_ONLY | {"reasoning_content", "reasoning"}


def _carries(message: Any, keys: Collection[str]) -> bool:
    return isinstance(message, Mapping) and any(k in message for k in keys)


def openai_messages(
    messages: Sequence[Mapping[str, Any]], keys: Collection[str] = _ANTHROPIC_ONLY
) -> Sequence[Mapping[str, Any]]:
    """``messages`` without ``keys`` (default :data:`ANTHROPIC_ONLY_KEY`); the same object
    when none has one (the common call pays a key lookup or three per message, and no copy)."""
    for message in messages:
        if type(message) is dict and not any(k in message for k in keys):
            continue  # the common case
        if _carries(message, keys):
            break
    else:
        return messages
    return [
        {k: v for k, v in m.items() if k not in keys} if _carries(m, keys) else m
        for m in messages
    ]


def _lacks_reasoning(message: Any) -> bool:
    return (
        isinstance(message, Mapping) and message.get("role") == "assistant"
        and bool(message.get("tool_calls")) and "reasoning_content" not in message
    )


def with_reasoning(messages: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """``messages`` with an empty ``reasoning_content`` on each tool-calling assistant turn
    that has none — another provider's turn (Claude's, in a mixed fleet's tool loop). DeepSeek's
    thinking mode refuses such a turn without the field (a 400: "The `reasoning_content` in the
    thinking mode must be passed back to the API") and takes it empty; the same object when
    no turn lacks it."""
    if not any(_lacks_reasoning(m) for m in messages):
        return messages
    return [{**m, "reasoning_content": ""} if _lacks_reasoning(m) else m for m in messages]
