"""OpenAI-style chat requests as Anthropic Messages requests.

Callers keep writing ``[{"role": "system", ...}, {"role": "user", ...}]`` and OpenAI's
parameters; the Messages API wants ``system`` apart, content *blocks*, tool calls as
``tool_use`` blocks and tool results as ``tool_result`` blocks in a user turn, ``max_tokens``
always, and ``stop_sequences``/``tool_choice`` in its own shapes. Parameters it would refuse
(its API rejects unknown fields) or that would silently do nothing are refused here, before
anything is sent, naming the parameter; ``extra_body=`` still sends anything as it is.

Blocks already in Anthropic's shape (``image`` with a ``source``, ``document``,
``tool_result``, a ``cache_control`` on a part) pass through untouched, so a caller's own
cache markers are kept; so do a server tool's blocks (``server_tool_use``, a
``web_search_tool_result``, …), and an assistant message's ``content_blocks`` (an answer's
whole content, anthropic_server_tools.py) is sent as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gptgate.errors import BadRequestError
from gptgate.wire.anthropic_server_tools import sent_blocks, server_block
from gptgate.wire.anthropic_thinking import sent_thinking

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MAX_BREAKPOINTS",
    "PASSED",
    "to_messages_request",
    "unsupported",
]

#: ``max_tokens`` when the caller gives none (the Messages API requires it): enough for
#: any ordinary answer, far below every current model's output cap
DEFAULT_MAX_TOKENS = 4096
#: the most ``cache_control`` blocks one request may carry
MAX_BREAKPOINTS = 4

#: parameters sent as they are (Anthropic's own names, or OpenAI's with the same meaning)
PASSED = frozenset(
    {"temperature", "top_p", "top_k", "stop_sequences", "metadata", "thinking", "service_tier",
     "output_config", "cache_control"}
)
#: OpenAI parameters translated to Anthropic's shape
_MAPPED = frozenset(
    {"max_tokens", "max_completion_tokens", "stop", "tools", "tool_choice",
     "parallel_tool_calls", "user", "stream_options", "extra_body", "n"}
)

_ROLE_OF = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
            "tool": "user", "function": "user"}


def unsupported(param: str, value: Any) -> str | None:
    """Why the Messages API cannot take ``param`` (None when it can)."""
    if param in PASSED or param in _MAPPED:
        if param == "n" and value not in (None, 1):
            return "rejects"  # one answer per request
        if param == "temperature" and isinstance(value, int | float) and value > 1:
            return "accepts only 0 to 1 for"  # OpenAI's range is 0-2, Anthropic's 0-1
        if param in ("stop", "stop_sequences") and _blank_stop(value):
            return "accepts only stop sequences with a non-whitespace character in"
        return None
    return "rejects"


def _blank_stop(value: Any) -> bool:
    """A stop sequence Anthropic answers with a 400: ``"\\n"`` ("each stop sequence must
    contain non-whitespace"), ``""`` ("must be non-empty") — OpenAI takes both."""
    stops = [value] if isinstance(value, str) else value if isinstance(value, list | tuple) else ()
    return any(isinstance(s, str) and not s.strip() for s in stops)


def _image(part: Mapping[str, Any]) -> dict[str, Any]:
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, Mapping) else spec
    if not isinstance(url, str):
        raise BadRequestError("an image_url part needs a url (http(s) or a data: URL)")
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media = head[len("data:") :].split(";")[0] or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as Messages content blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, Mapping):
            raise BadRequestError("a content part must be an object with a 'type'")
        kind = part.get("type")
        if kind == "image_url":
            block = _image(part)
            if "cache_control" in part:
                block["cache_control"] = part["cache_control"]
            out.append(block)
        elif kind == "text" or kind in ("image", "document", "tool_result", "tool_use",
                                        "thinking", "redacted_thinking") or server_block(kind):
            out.append(dict(part))
        else:
            raise BadRequestError(
                f"bad request: provider 'anthropic' takes no {kind!r} content part"
            )
    return out


def _tool_use(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    fn = fn if isinstance(fn, Mapping) else {}
    arguments = fn.get("arguments") or "{}"
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    except ValueError:
        raise BadRequestError(
            f"tool call {call.get('id')!r}: arguments are not a JSON object"
        ) from None
    return {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": args}


def _turn_blocks(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    role = message.get("role")
    if role in ("tool", "function"):
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.get("tool_call_id") or message.get("name"),
            "content": _blocks(message.get("content")) or "",
        }
        return [result]
    kept = sent_blocks(message, where) if role == "assistant" else None
    if kept is not None:  # the answer's content as it came (a paused turn continues on it)
        return kept
    blocks = _blocks(message.get("content"))
    if role == "assistant":  # an answer's thinking goes back first, as Anthropic requires
        blocks[:0] = sent_thinking(message, where)
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        blocks.extend(_tool_use(c) for c in calls if isinstance(c, Mapping))
    return blocks


def _split(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any] | None]]:
    """(system blocks, turns, each message's last block); consecutive turns of one role
    merge (tool results after a tool call become one user turn, as the Messages API wants)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    last: list[dict[str, Any] | None] = []
    for i, m in enumerate(messages):
        role = _ROLE_OF.get(str(m.get("role")))
        if role is None:
            raise BadRequestError(f"messages[{i}]: role {m.get('role')!r} is not one of "
                                  "system, developer, user, assistant, tool")
        blocks = _turn_blocks(m, f"messages[{i}]")
        last.append(blocks[-1] if blocks else None)
        if role == "system":
            system.extend(blocks)
        elif turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns, last


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping):  # already Anthropic's shape (name, input_schema)
            out.append(dict(tool))
            continue
        schema = fn.get("parameters") or {"type": "object", "properties": {}}
        item = {"name": fn.get("name"), "input_schema": schema}
        if fn.get("description"):
            item["description"] = fn["description"]
        if "cache_control" in tool:
            item["cache_control"] = tool["cache_control"]
        out.append(item)
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if choice is None:
        out: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, str):
        out = {"type": choice}  # "auto", "none"
    elif isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        out = {"type": "tool", "name": choice["function"].get("name")}
    else:
        out = dict(choice)
    if out is not None and parallel is False:
        out["disable_parallel_tool_use"] = True
    return out


def _mark(block: dict[str, Any] | None, body: Mapping[str, Any]) -> None:
    """Put an ephemeral cache breakpoint on ``block``, unless it has one or the request
    already carries the most Anthropic takes (the caller's own markers are kept). Its TTL is
    an hour when a caller's one-hour breakpoint follows it: Anthropic refuses a ``"1h"``
    after a 5-minute one (in the order tools, system, messages)."""
    if block is None or "cache_control" in block:
        return
    blocks = _blocks_in_order(body)
    marks = [b for b in blocks if isinstance(b, Mapping) and b.get("cache_control")]
    auto = body.get("cache_control")  # automatic caching: a breakpoint on the last block
    if len(marks) + (auto is not None) >= MAX_BREAKPOINTS:
        return
    at = next((i for i, b in enumerate(blocks) if b is block), len(blocks))
    later = [b["cache_control"] for b in blocks[at + 1:]
             if isinstance(b, Mapping) and b.get("cache_control")]
    hour = any(isinstance(c, Mapping) and c.get("ttl") == "1h" for c in [*later, auto])
    block["cache_control"] = {"type": "ephemeral", "ttl": "1h"} if hour else {"type": "ephemeral"}


def _blocks_in_order(body: Mapping[str, Any]) -> list[Any]:
    """The request's blocks in the order Anthropic reads its breakpoints: tools, system,
    messages."""
    blocks: list[Any] = list(body.get("tools") or ())
    system = body.get("system")
    if isinstance(system, list):
        blocks.extend(system)
    for turn in body.get("messages") or ():
        content = turn.get("content")
        if isinstance(content, list):
            blocks.extend(content)
    return blocks


def to_messages_request(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    default_max_tokens: int,
    *,
    mark_after: int | None = None,
) -> dict[str, Any]:
    """The Messages request for an OpenAI-style call (parameters already checked), with a
    cache breakpoint at the end of message ``mark_after`` when given."""
    system, turns, last = _split(messages)
    body: dict[str, Any] = {"model": model}
    max_tokens = params.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = params.get("max_tokens")
    body["max_tokens"] = default_max_tokens if max_tokens is None else max_tokens
    if system:
        body["system"] = system
    body["messages"] = turns
    for key in PASSED:
        if key in params:
            body[key] = params[key]
    stop = params.get("stop")
    if stop is not None:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if params.get("tools"):
        body["tools"] = _tools(params["tools"])
    choice = _tool_choice(params.get("tool_choice"), params.get("parallel_tool_calls"))
    if choice is not None and body.get("tools"):
        body["tool_choice"] = choice
    user = params.get("user")
    if isinstance(user, str) and "metadata" not in body:
        body["metadata"] = {"user_id": user}
    if mark_after is not None:
        _mark(last[mark_after], body)
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    return body
