"""Messages as an OpenAI-dialect server takes them: without the keys only another dialect reads.

An Anthropic answer's raw message carries ``thinking_blocks`` (gptgate/wire/anthropic_thinking.py)
so that a tool loop can append it as it is. When that conversation is then sent to an
OpenAI-dialect backend — a mixed fleet's failover, ``tier="auto"``, a pinned backend — the key
must not go with it: OpenAI refuses a message with a field it does not know ("Additional
properties are not allowed ('thinking_blocks' was unexpected) - 'messages.1'"), and so do
strict compatible servers; the thinking means nothing to another model. LiteLLM drops it too.
The caller's messages are not changed: the Anthropic path still sends the blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ANTHROPIC_ONLY_KEY", "openai_messages"]

#: the message key only the Anthropic dialect reads
ANTHROPIC_ONLY_KEY = "thinking_blocks"


def _carries(message: Any) -> bool:
    return isinstance(message, Mapping) and ANTHROPIC_ONLY_KEY in message


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """``messages`` without :data:`ANTHROPIC_ONLY_KEY`; the same object when none has it
    (the common call pays one key lookup per message, and no copy)."""
    for message in messages:
        if type(message) is dict and ANTHROPIC_ONLY_KEY not in message:
            continue  # the common case, at the cost of one lookup
        if _carries(message):
            break
    else:
        return messages
    return [
        {k: v for k, v in m.items() if k != ANTHROPIC_ONLY_KEY} if _carries(m) else m
        for m in messages
    ]
