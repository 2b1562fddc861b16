"""Extended thinking on the simulated Messages API, with the rules a client can break.

With ``thinking={"type": "enabled", "budget_tokens": N}`` Anthropic answers with a
``thinking`` block (a summary of the reasoning and a ``signature`` that authenticates it)
before the text or ``tool_use`` block; a stream sends it as ``thinking_delta`` and
``signature_delta`` events at index 0. What it refuses with a 400, as the real API does
(Anthropic's extended-thinking docs):

* ``budget_tokens`` under 1,024, or not below ``max_tokens``;
* a ``temperature`` other than 1, ``top_k``, a ``top_p`` under 0.95, or a ``tool_choice`` that
  forces a tool (``any``, ``tool``): thinking takes none of them;
* a tool loop whose last assistant turn — the one whose ``tool_use`` the final user turn
  answers — does not start with its ``thinking`` (or ``redacted_thinking``) block: a client
  that keeps the tool call but drops the thinking breaks the loop on its second turn (the
  most reported way extended thinking fails in production);
* a ``thinking`` block whose ``signature`` is not the one the server gave it (a block edited
  or made up by the client).

The visible thinking is a summary: billed output tokens do not match what is shown (as
Claude 4 models bill the full thinking), so the engine's output count stands unchanged.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gptgate.sim.request import BadRequest

__all__ = ["MIN_BUDGET_TOKENS", "Turn", "check_thinking", "sign", "thinking_block", "thinking_text"]

#: Anthropic's smallest ``thinking.budget_tokens``
MIN_BUDGET_TOKENS = 1024
#: the server's secret: a client cannot mint a signature the simulator accepts
_KEY = b"gptgate-sim-thinking"
_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


@dataclass(frozen=True, slots=True)
class Turn:
    """What one Messages answer holds besides its text: a tool call, a thinking block."""

    tool: Mapping[str, Any] | None
    thinking: bool


def sign(thinking: str) -> str:
    """The signature the simulated server puts on (and checks of) a thinking block."""
    digest = hashlib.blake2b(thinking.encode(), key=_KEY, digest_size=24).digest()
    return base64.b64encode(digest).decode()


def thinking_text(request_id: str) -> str:
    """The summarised reasoning an answer shows (its request's own, so each signature is)."""
    return f"The user asks a question; I weigh it before answering ({request_id})."


def thinking_block(request_id: str) -> dict[str, Any]:
    text = thinking_text(request_id)
    return {"type": "thinking", "thinking": text, "signature": sign(text)}


def _bad(message: str) -> BadRequest:
    return BadRequest(message)


def _enabled(data: Mapping[str, Any]) -> bool:
    spec = data.get("thinking")
    if spec is None:
        return False
    if not isinstance(spec, Mapping) or spec.get("type") not in ("enabled", "disabled"):
        raise _bad("thinking.type: Input should be 'enabled' or 'disabled'")
    if spec["type"] == "disabled":
        return False
    budget = spec.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise _bad("thinking.enabled.budget_tokens: Field required")
    if budget < MIN_BUDGET_TOKENS:
        raise _bad(
            f"thinking.enabled.budget_tokens: Input should be greater than or equal to "
            f"{MIN_BUDGET_TOKENS}"
        )
    if budget >= data["max_tokens"]:
        raise _bad("`max_tokens` must be greater than `thinking.budget_tokens`")
    temperature = data.get("temperature")
    if temperature is not None and temperature != 1:
        raise _bad("`temperature` may only be set to 1 when thinking is enabled. Please "
                   f"consult our documentation at {_DOCS}")
    if data.get("top_k") is not None:
        raise _bad("`top_k` cannot be set when thinking is enabled.")
    top_p = data.get("top_p")
    if isinstance(top_p, int | float) and top_p < 0.95:
        raise _bad("`top_p` must be greater than or equal to 0.95 or unset when thinking is "
                   "enabled.")
    choice = data.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"):
        raise _bad("Thinking may not be enabled when tool_choice forces tool use.")
    return True


def _kinds(content: Any) -> list[str]:
    if not isinstance(content, list):
        return ["text"]
    return [str(b.get("type")) for b in content if isinstance(b, Mapping)]


def _check_signatures(messages: Sequence[Mapping[str, Any]]) -> None:
    for i, m in enumerate(messages):
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, Mapping) or block.get("type") != "thinking":
                continue
            text, signature = block.get("thinking"), block.get("signature")
            if not isinstance(text, str) or signature != sign(text):
                raise _bad(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")


def check_thinking(data: Mapping[str, Any]) -> bool:
    """Whether the request enables thinking; raises Anthropic's 400 for the rules above."""
    messages = data["messages"]
    _check_signatures(messages)
    if not _enabled(data):
        return False
    last = messages[-1]
    if last.get("role") != "user" or "tool_result" not in _kinds(last.get("content")):
        return True
    for i in range(len(messages) - 2, -1, -1):
        if messages[i].get("role") != "assistant":
            continue
        kinds = _kinds(messages[i].get("content"))
        if "tool_use" in kinds and kinds[0] not in ("thinking", "redacted_thinking"):
            raise _bad(
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                f"but found `{kinds[0]}`. When `thinking` is enabled, a final `assistant` "
                "message must start with a thinking block (preceeding the lastmost set of "
                "`tool_use` and `tool_result` blocks). We recommend you include thinking "
                "blocks from previous turns. To avoid this requirement, disable `thinking`. "
                f"Please consult our documentation at {_DOCS}"
            )
        break
    return True
