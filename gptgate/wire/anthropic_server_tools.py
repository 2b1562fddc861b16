"""Anthropic's server tools (web search, web fetch, code execution, …): their blocks, kept.

A server tool runs on Anthropic's side within the request: the answer carries a
``server_tool_use`` block (its input), a ``*_tool_result`` block (``web_search_tool_result``:
the pages, their ``encrypted_content``), and text blocks with ``citations``
(``web_search_result_location``: url, title, cited text), interleaved in the order they
happened. An OpenAI-shaped message has no place for them, and a long turn may stop with
``stop_reason: "pause_turn"``: Anthropic's docs continue it by sending the assistant's content
back *as it came*. So an answer with such a block keeps the whole content, in order, on its
raw message as ``content_blocks`` (whole or streamed), and an assistant message that carries
``content_blocks`` goes back as exactly those blocks: appending ``r.raw["choices"][0]
["message"]`` to the conversation continues the turn. Another dialect never sees the key
(gptgate/wire/openai_messages.py). An assistant ``content`` already in Anthropic's shape (the
SDK's blocks) passes through too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any

from gptgate.errors import BadRequestError

__all__ = [
    "BLOCKS_KEY", "DEFAULT_SEARCHES", "BlockFold", "count_search", "kept_blocks",
    "most_searches", "sent_blocks", "server_block", "server_tool_in",
]

#: the raw message's key for the answer's whole content (only the Anthropic dialect reads it)
BLOCKS_KEY = "content_blocks"
#: blocks the OpenAI shape carries (text, tool calls; thinking rides as ``thinking_blocks``)
_PLAIN = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
#: server-side blocks that are not ``*_tool_result``s
_SERVER = frozenset({"server_tool_use", "container_upload", "mcp_tool_use", "search_result"})


def server_block(kind: Any) -> bool:
    """Is ``kind`` a block type a server tool puts in an answer (and takes back)?"""
    return isinstance(kind, str) and (kind in _SERVER or kind.endswith("_tool_result"))


def _needs_keeping(block: Mapping[str, Any]) -> bool:
    return block.get("type") not in _PLAIN or bool(block.get("citations"))


def kept_blocks(content: Iterable[Any]) -> list[dict[str, Any]] | None:
    """A whole answer's content as it came, when a block of it has no OpenAI shape (a server
    tool's, a text's citations); None for a plain answer (its raw message stays as it was)."""
    blocks = [dict(b) for b in content if isinstance(b, Mapping)]
    return blocks if any(_needs_keeping(b) for b in blocks) else None


def sent_blocks(message: Mapping[str, Any], where: str) -> list[dict[str, Any]] | None:
    """The blocks an assistant message's ``content_blocks`` sends, as they are; None without."""
    blocks = message.get(BLOCKS_KEY)
    if blocks is None:
        return None
    if not isinstance(blocks, list) or not all(
        isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in blocks
    ):
        raise BadRequestError(
            f"{where}.{BLOCKS_KEY} must be a list of Anthropic content blocks, as an answer's "
            "raw message gave them: pass them back unchanged"
        )
    return [dict(b) for b in blocks]


def server_tool_in(params: Mapping[str, Any]) -> str | None:
    """The type of an Anthropic-defined tool in the call's ``tools`` (a versioned type: a
    server tool such as ``web_search_20250305``, or ``bash_20250124``), or None. A strict
    OpenAI-format API answers it with a 400; its dialect refuses it before sending, so a
    mixed fleet keeps the call on Claude (gptgate/param_fit.py)."""
    tools = params.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if isinstance(kind, str) and _VERSIONED.fullmatch(kind):
            return kind
    return None


#: the searches a budget reserves for a web search tool without ``max_uses``, which bounds
#: them no other way (Anthropic states no per-request maximum): its docs' and examples'
#: usual ``max_uses``
DEFAULT_SEARCHES = 5
#: a server tool's type: its name and the date of its version
_VERSIONED = re.compile(r"[a-z_]+_\d{8}")


def most_searches(params: Mapping[str, Any]) -> int:
    """The most searches a call's web search tools may make: their ``max_uses`` (what a dollar
    budget reserves beside the tokens). A tool without ``max_uses`` has no bound of its own:
    it reserves :data:`DEFAULT_SEARCHES` (set ``max_uses`` to reserve what it allows).
    Reserving none let such a call out under any budget, whatever its searches cost."""
    tools = params.get("tools")
    if not isinstance(tools, list):
        return 0
    return sum(
        _searches(tool) for tool in tools
        if isinstance(tool, Mapping) and str(tool.get("type", "")).startswith("web_search_")
    )


def _searches(tool: Mapping[str, Any]) -> int:
    most = tool.get("max_uses")
    if isinstance(most, int) and not isinstance(most, bool):
        return max(most, 0)
    return DEFAULT_SEARCHES


def count_search(block: Mapping[str, Any], usage: dict[str, Any]) -> bool:
    """Count a streamed web search's result in a Messages ``usage`` object so far: Anthropic
    bills a search once made (not one that errored), but states the count only in the
    stream's last ``message_delta`` — a stream cut after the search is still billed for it.
    True if counted (the server's own count replaces it when it comes)."""
    if block.get("type") != "web_search_tool_result" or not isinstance(block.get("content"), list):
        return False
    tools = usage.get("server_tool_use")
    tools = dict(tools) if isinstance(tools, dict) else {}
    done = tools.get("web_search_requests")
    tools["web_search_requests"] = (done if isinstance(done, int) else 0) + 1
    usage["server_tool_use"] = tools
    return True


class BlockFold:
    """Rebuilds a stream's content, every block by index, as the SDK's ``accumulate_event``
    does: text by ``text_delta`` and ``citations_delta``, a (server) tool's input by
    ``input_json_delta``, thinking by its deltas; a tool result comes whole at its start."""

    __slots__ = ("_blocks", "_kept", "_parts")

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        #: a block with no OpenAI shape came: the content is kept (a plain answer's is not
        #: even joined)
        self._kept = False
        #: (index, field) → its pieces so far (joined once, at the end: a long answer's
        #: thousands of deltas are not copied over and over)
        self._parts: dict[tuple[int, str], list[str]] = {}

    def start(self, index: Any, block: Mapping[str, Any]) -> None:
        if isinstance(index, int):
            self._blocks[index] = dict(block)
            self._kept = self._kept or _needs_keeping(block)

    def delta(self, index: Any, delta: Mapping[str, Any]) -> None:
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None or not isinstance(index, int):
            return
        kind = delta.get("type")
        if kind == "citations_delta" and isinstance(delta.get("citation"), Mapping):
            block["citations"] = [*(block.get("citations") or ()), dict(delta["citation"])]
            self._kept = True
            return
        field = _DELTA_FIELDS.get(kind) if isinstance(kind, str) else None
        piece = delta.get(field[0]) if field is not None else None
        if field is not None and isinstance(piece, str):
            self._parts.setdefault((index, field[1]), []).append(piece)

    def blocks(self) -> list[dict[str, Any]] | None:
        """The content so far, as :func:`kept_blocks` keeps it (None for a plain answer)."""
        if not self._kept:
            return None
        out = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            for name in ("text", "thinking", "signature"):
                parts = self._parts.get((index, name))
                if parts:
                    block[name] = str(block.get(name) or "") + "".join(parts)
            arguments = self._parts.get((index, "input"))
            if arguments:
                with suppress(ValueError):  # cut mid-input: the start's input stays
                    block["input"] = json.loads("".join(arguments))
            out.append(block)
        return kept_blocks(out)


#: a delta's type → (its piece's key, the block field it extends)
_DELTA_FIELDS = {
    "text_delta": ("text", "text"),
    "input_json_delta": ("partial_json", "input"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("signature", "signature"),
}
