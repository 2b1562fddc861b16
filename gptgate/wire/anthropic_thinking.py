"""Extended thinking's blocks, kept from an Anthropic answer and sent back with its turn.

With ``thinking`` enabled, an answer opens with ``thinking`` blocks (the reasoning and a
``signature``) or ``redacted_thinking`` ones (``data``). In a tool loop Anthropic requires
them back, unchanged and first, in the assistant turn that made the tool call — else the
loop's second request is a 400 ("a final `assistant` message must start with a thinking
block"). An OpenAI-shaped message has no place for them, so they ride on it as
``thinking_blocks`` (the name LiteLLM gives them): the answer's ``raw`` message carries them,
whole or streamed, and an assistant message that carries them is sent with them in front.
Appending ``r.raw["choices"][0]["message"]`` to the conversation is then enough.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gptgate.errors import BadRequestError

__all__ = [
    "INTERLEAVED_BETA", "MIN_BUDGET_TOKENS", "THINKING_TYPES", "ThinkingFold", "budget_refused",
    "foreign_tool_turn", "kept_thinking", "refused_with_thinking", "sent_thinking",
    "thinking_budget",
]

THINKING_TYPES = ("thinking", "redacted_thinking")


def kept_thinking(content: Iterable[Any]) -> list[dict[str, Any]]:
    """The thinking blocks of a whole answer's content, as they came."""
    return [dict(b) for b in content if isinstance(b, Mapping) and b.get("type") in THINKING_TYPES]


def sent_thinking(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """The blocks an assistant message's ``thinking_blocks`` sends back, first in its turn."""
    blocks = message.get("thinking_blocks")
    if blocks is None:
        return []
    if not isinstance(blocks, list) or not all(
        isinstance(b, Mapping) and b.get("type") in THINKING_TYPES for b in blocks
    ):
        raise BadRequestError(
            f"{where}.thinking_blocks must be a list of Anthropic 'thinking' / "
            "'redacted_thinking' blocks, as an answer's raw message gave them: pass them back "
            "unchanged (Anthropic checks their signatures)"
        )
    return [dict(b) for b in blocks]


class ThinkingFold:
    """Rebuilds a stream's thinking blocks from ``content_block_start`` and its
    ``thinking_delta`` / ``signature_delta`` events, by block index."""

    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}

    def start(self, index: Any, block: Mapping[str, Any]) -> bool:
        """Take a block's start; True if it is a thinking block (and now folded)."""
        if block.get("type") not in THINKING_TYPES or not isinstance(index, int):
            return False
        self._blocks[index] = dict(block)
        return True

    def delta(self, index: Any, delta: Mapping[str, Any]) -> bool:
        """Take a delta; True if it belonged to a thinking block."""
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None:
            return False
        kind = delta.get("type")
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block["thinking"] = str(block.get("thinking") or "") + delta["thinking"]
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block["signature"] = str(block.get("signature") or "") + delta["signature"]
        return True

    def blocks(self) -> list[dict[str, Any]]:
        return [self._blocks[i] for i in sorted(self._blocks)]


def thinking_budget(params: Mapping[str, Any]) -> int | None:
    """The call's thinking budget in tokens, or None when it does not think."""
    spec = params.get("thinking")
    if not isinstance(spec, Mapping) or spec.get("type") != "enabled":
        return None
    budget = spec.get("budget_tokens")
    return budget if isinstance(budget, int) and not isinstance(budget, bool) else None


#: Anthropic's smallest ``thinking.budget_tokens`` (its extended-thinking docs)
MIN_BUDGET_TOKENS = 1024
#: the beta under which a budget may exceed ``max_tokens`` (interleaved thinking, Claude 4:
#: "the token limit becomes your entire context window")
INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
#: the ``thinking`` types the Messages API knows
_TYPES = ("enabled", "adaptive", "disabled")


def budget_refused(
    params: Mapping[str, Any], max_tokens: int, *, interleaved: bool = False
) -> str | None:
    """Why the call's ``thinking`` is a 400 whatever the model (None when it is not): not an
    object of a known ``type``, a manual one without an integer ``budget_tokens``, a budget
    under :data:`MIN_BUDGET_TOKENS`, or one not below ``max_tokens`` — the tokens the request
    sends, which count the thinking (unless ``interleaved``: :data:`INTERLEAVED_BETA`)."""
    if "thinking" not in params or params["thinking"] is None:
        return None
    spec = params["thinking"]
    if not isinstance(spec, Mapping) or spec.get("type") not in _TYPES:
        return ("thinking must be {'type': 'enabled', 'budget_tokens': N}, {'type': "
                "'adaptive'} or {'type': 'disabled'}")
    if spec["type"] != "enabled":
        return None
    budget = thinking_budget(params)
    if budget is None:
        return "thinking of type 'enabled' needs an integer budget_tokens"
    if budget < MIN_BUDGET_TOKENS:
        return (f"thinking.budget_tokens must be at least {MIN_BUDGET_TOKENS} (Anthropic's "
                f"minimum); it is {budget}")
    if budget >= max_tokens and not interleaved:
        return (f"thinking.budget_tokens ({budget}) must be below max_tokens ({max_tokens}), "
                "which counts the thinking")
    return None


#: ``top_p`` may go this low with thinking, no lower
_MIN_TOP_P = 0.95


def refused_with_thinking(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(the parameter, why) that thinking — a budget's or adaptive — does not take beside it:
    a ``temperature`` other than 1, ``top_k``, a ``top_p`` under 0.95, a ``tool_choice`` that
    forces a tool (Anthropic's extended-thinking docs, "Thinking isn't compatible with
    temperature or top_k modifications as well as forced tool use": a 400) — or None."""
    spec = params.get("thinking")
    if not isinstance(spec, Mapping) or spec.get("type") not in ("enabled", "adaptive"):
        return None
    temperature = params.get("temperature")
    if temperature is not None and temperature != 1:
        return "temperature", "thinking takes only the default of 1"
    if params.get("top_k") is not None:
        return "top_k", "thinking takes none"
    top_p = params.get("top_p")
    if isinstance(top_p, int | float) and top_p < _MIN_TOP_P:
        return "top_p", f"thinking takes {_MIN_TOP_P} to 1"
    choice = params.get("tool_choice")
    forced = choice == "required" or (
        isinstance(choice, Mapping) and (
            isinstance(choice.get("function"), Mapping) or choice.get("type") in ("any", "tool")
        )
    )
    if forced:
        return "tool_choice", "thinking takes only 'auto' or 'none', not a forced tool"
    return None


#: the prefix of the ids Anthropic gives its tool calls (``toolu_01A…``; server tools'
#: ``srvtoolu_``): a tool-calling turn with other ids is another provider's
_ANTHROPIC_CALL_IDS = ("toolu_", "srvtoolu_")


def _anthropic_call(call: Any) -> bool:
    return isinstance(call, Mapping) and str(call.get("id", "")).startswith(_ANTHROPIC_CALL_IDS)


def foreign_tool_turn(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Do the messages end in tool results whose assistant turn another provider made (a
    mixed fleet's failover: its tool calls' ids are not Anthropic's, and it carries no
    thinking blocks)? Anthropic refuses thinking on such a request ("a final `assistant`
    message must start with a thinking block ... To avoid this requirement, disable
    `thinking`"): the dialect leaves ``thinking`` out of it, and thinking resumes with the
    next user turn. A Claude turn whose blocks the caller dropped is not foreign: its 400
    says what to pass back."""
    i = len(messages) - 1
    while i >= 0 and isinstance(messages[i], Mapping) and messages[i].get("role") in (
        "tool", "function"
    ):
        i -= 1
    if i == len(messages) - 1 or i < 0:
        return False
    turn = messages[i]
    if not isinstance(turn, Mapping) or turn.get("role") != "assistant":
        return False
    calls = turn.get("tool_calls")
    return (
        isinstance(calls, list) and bool(calls) and not turn.get("thinking_blocks")
        and not any(_anthropic_call(c) for c in calls)
    )
