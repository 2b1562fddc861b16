"""Parsing a Messages-API request (``POST /v1/messages``) the way Anthropic validates it.

Anthropic is strict where OpenAI-compatible servers are lenient: ``max_tokens`` is required,
an unknown top-level field is a 400 ("Extra inputs are not permitted"), and at most 4 blocks
may carry ``cache_control``. The prompt is modelled as a sequence of *content blocks* (tool
definitions, then system blocks, then each message's blocks), because a cache breakpoint sits
at the end of a block: each block becomes one pseudo-message of the simulator's canonical
token stream, so ``ends[i]`` is the token position right after block ``i``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gptgate.media_tokens import part_tokens
from gptgate.sim.anthropic_thinking import check_thinking
from gptgate.sim.cache import media_placeholder
from gptgate.sim.profiles import SimProfile
from gptgate.sim.request import BadRequest, ChatRequest
from gptgate.sim.tokenizer import sim_text_tokens
from gptgate.tokens import MESSAGE_OVERHEAD_TOKENS

__all__ = ["MAX_BREAKPOINTS", "MessagesRequest", "parse_messages"]

#: Anthropic allows at most this many ``cache_control`` blocks in one request
MAX_BREAKPOINTS = 4

_FIELDS = frozenset(
    {
        "model", "messages", "max_tokens", "system", "stream", "temperature", "top_p",
        "top_k", "stop_sequences", "tools", "tool_choice", "metadata", "thinking",
        "service_tier",
    }
)
_BLOCK_TYPES = frozenset(
    {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)


@dataclass(slots=True)
class MessagesRequest(ChatRequest):
    """A validated Messages request; ``messages`` holds one pseudo-message per block."""

    #: token position after each block, in prompt order
    ends: list[int] = field(default_factory=list)
    #: indexes (into ``ends``) of the blocks carrying ``cache_control``
    marks: list[int] = field(default_factory=list)
    #: the tool to call (tools given, tool_choice allows it, no tool result to answer yet)
    tool: Mapping[str, Any] | None = None
    #: ``thinking`` is enabled: the answer opens with a thinking block
    thinking: bool = False


def _bad(message: str) -> BadRequest:
    return BadRequest(message)


def _block_text(block: Mapping[str, Any]) -> str:
    """The text a block contributes to the token stream."""
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return text if isinstance(text, str) else ""
    if kind == "tool_use":
        return f"{block.get('name')}{json.dumps(block.get('input'), sort_keys=True)}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return "".join(_block_text(b) for b in content if isinstance(b, Mapping))
        return content if isinstance(content, str) else ""
    if kind in ("image", "document"):  # billed by the published rule (media_tokens.py)
        return media_placeholder(block, max(1, part_tokens(block)))
    if kind == "thinking":
        return str(block.get("thinking", ""))
    return ""


class _Prompt:
    """Accumulates blocks into pseudo-messages, positions and cache marks."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.ends: list[int] = []
        self.marks: list[int] = []
        self.tokens = 0
        #: a 5-minute breakpoint came: a 1-hour one may not follow (TTLs never increase)
        self._short_seen = False

    def add(self, role: str, text: str, block: Mapping[str, Any] | None, where: str) -> None:
        if block is not None and block.get("cache_control") is not None:
            control = block["cache_control"]
            if not isinstance(control, Mapping) or control.get("type") != "ephemeral":
                raise _bad(f"{where}.cache_control.type: Input should be 'ephemeral'")
            ttl = control.get("ttl", "5m")
            if ttl not in ("5m", "1h"):
                raise _bad(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
            if ttl == "1h" and self._short_seen:
                raise _bad(
                    f"{where}.cache_control.ttl: a ttl='1h' cache_control block must not come "
                    "after a ttl='5m' cache_control block. Note that blocks are processed in "
                    "the following order: `tools`, `system`, `messages`."
                )
            self._short_seen = self._short_seen or ttl == "5m"
            self.marks.append(len(self.ends))
        self.messages.append({"role": role, "content": text})
        self.tokens += MESSAGE_OVERHEAD_TOKENS + sim_text_tokens(text)
        self.ends.append(self.tokens)

    def add_blocks(self, role: str, content: Any, where: str) -> None:
        if isinstance(content, str):
            self.add(role, content, None, where)
            return
        if not isinstance(content, list) or not content:
            raise _bad(f"{where}: Input should be a valid string or a non-empty list")
        for j, block in enumerate(content):
            if not isinstance(block, Mapping) or block.get("type") not in _BLOCK_TYPES:
                raise _bad(f"{where}.{j}: Input tag does not match any of the expected tags")
            self.add(role, _block_text(block), block, f"{where}.{j}")


def _require_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        raise _bad("There was an issue with your request body: invalid JSON") from None
    if not isinstance(data, dict):
        raise _bad("Input should be an object")
    extra = sorted(set(data) - _FIELDS)
    if extra:
        raise _bad(f"{extra[0]}: Extra inputs are not permitted")
    for name in ("model", "messages", "max_tokens"):
        if name not in data:
            raise _bad(f"{name}: Field required")
    return data


def _pick_tool(data: Mapping[str, Any], last: Any) -> Mapping[str, Any] | None:
    """The tool this simulated model calls: the named one, else the first, unless the
    caller forbade it or the last turn already carries a tool's result (then it answers)."""
    tools = data.get("tools")
    if not tools:
        return None
    choice = data.get("tool_choice") or {"type": "auto"}
    if not isinstance(choice, Mapping) or choice.get("type") == "none":
        return None
    if isinstance(last, list) and any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in last
    ):
        return None
    if choice.get("type") == "tool":
        for tool in tools:
            if tool.get("name") == choice.get("name"):
                return tool  # type: ignore[no-any-return]
        raise _bad(f"tool_choice.name: tool {choice.get('name')!r} not found in tools")
    return tools[0]  # type: ignore[no-any-return]


def parse_messages(body: bytes, p: SimProfile) -> MessagesRequest:
    """Validate a Messages body (Anthropic's 400s, worded like its field errors)."""
    data = _require_json(body)
    max_tokens = data["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _bad("max_tokens: Input should be greater than or equal to 1")
    messages = data["messages"]
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: at least one message is required")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream: Input should be a valid boolean")
    prompt = _Prompt()
    tools = data.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                raise _bad(f"tools.{i}.name: Field required")
            if not isinstance(tool.get("input_schema"), Mapping):
                raise _bad(f"tools.{i}.input_schema: Field required")
            prompt.add("tools", json.dumps(tool, sort_keys=True), tool, f"tools.{i}")
    system = data.get("system")
    if system is not None:
        prompt.add_blocks("system", system, "system")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant"):
            raise _bad(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        prompt.add_blocks(str(m["role"]), m.get("content"), f"messages.{i}.content")
    thinking = check_thinking(data)
    if len(prompt.marks) > MAX_BREAKPOINTS:
        raise _bad(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(prompt.marks)}."
        )
    if prompt.tokens + max_tokens > p.context_tokens:
        raise _bad(
            f"prompt is too long: {prompt.tokens} tokens + {max_tokens} max_tokens > "
            f"{p.context_tokens} maximum"
        )
    return MessagesRequest(
        messages=prompt.messages,
        stream=stream,
        include_usage=False,
        max_tokens=max_tokens,
        prompt_tokens=prompt.tokens,
        cache_key=None,
        ends=prompt.ends,
        marks=prompt.marks,
        tool=_pick_tool(data, messages[-1].get("content")),
        thinking=thinking,
    )
