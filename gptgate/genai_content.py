"""Prompt and answer text for spans, in the GenAI semantic conventions' message shape.

With ``capture_content=True`` the conventions put the prompt on ``gen_ai.input.messages`` and
the answer on ``gen_ai.output.messages``, each a JSON array of ``{"role", "parts": [...]}``
(an output message also ``finish_reason``). Trace backends that read the conventions parse
that shape; OpenAI's own message list, or the bare answer text, shows there as nothing.

Parts: ``text``, ``tool_call`` (``arguments`` parsed when they are JSON), ``tool_call_response``,
an image URL as ``uri``, a ``data:`` image as ``blob`` (its base64 ``content``); any other part
is kept as given, under its own ``type``. Anthropic's blocks, in what its SDK sends on
``gate.http_client``, map the same way (``image``, ``tool_use``, ``tool_result``), and its
``system`` goes on ``gen_ai.system_instructions``. Only called when content capture is on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["input_messages", "output_messages", "request_content"]

#: OpenAI's finish reasons → the conventions' (the rest, "stop", "length", …, are the same)
_FINISH = {"tool_calls": "tool_call", "function_call": "tool_call"}


def input_messages(messages: Sequence[Mapping[str, Any]]) -> str:
    """The ``gen_ai.input.messages`` value for OpenAI-style chat ``messages``."""
    return json.dumps([_message(m) for m in messages])


def request_content(body: Mapping[str, Any]) -> dict[str, str]:
    """The content attributes of a request an SDK sent (``gate.http_client``): its
    ``messages`` (OpenAI's or Anthropic's) and Anthropic's ``system`` as
    ``gen_ai.system_instructions``; nothing for a request without messages (embeddings, …)."""
    attributes: dict[str, str] = {}
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        attributes["gen_ai.input.messages"] = input_messages(
            [m for m in messages if isinstance(m, Mapping)]
        )
    system = body.get("system")
    if system:
        attributes["gen_ai.system_instructions"] = json.dumps(_content_parts(system))
    return attributes


def output_messages(
    text: str | None, finish_reason: str | None, raw: Mapping[str, Any] | None
) -> str:
    """The ``gen_ai.output.messages`` value for an answer: its text and, from the answer's
    raw body (OpenAI's shape, which every dialect maps to), its tool calls."""
    parts: list[dict[str, Any]] = [_text(text)] if text else []
    parts.extend(_tool_calls(_answer_message(raw)))
    reason = finish_reason or ""
    return json.dumps([{
        "role": "assistant", "parts": parts, "finish_reason": _FINISH.get(reason, reason)
    }])


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        parts: list[dict[str, Any]] = [{
            "type": "tool_call_response",
            "id": message.get("tool_call_id"),
            "response": content,
        }]
    else:
        parts = _content_parts(content)
        parts.extend(_tool_calls(message))
    converted: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(name := message.get("name"), str):
        converted["name"] = name
    return converted


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_text(content)]
    if not isinstance(content, list):
        return [_text(str(content))]
    return [_part(p) for p in content]


def _part(part: Any) -> dict[str, Any]:
    if not isinstance(part, Mapping):
        return _text(str(part))
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return _text(part["text"])
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if isinstance(url, str):
            return _image(url)
    if kind in _ANTHROPIC:
        return _ANTHROPIC[kind](part)
    return dict(part)


def _anthropic_image(part: Mapping[str, Any]) -> dict[str, Any]:
    source = part.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        return {"type": "blob", "modality": "image", "mime_type": source.get("media_type"),
                "content": source.get("data")}
    if isinstance(source, Mapping) and isinstance(source.get("url"), str):
        return {"type": "uri", "modality": "image", "uri": source["url"]}
    return dict(part)


#: Anthropic's content blocks (a request its SDK sends on ``gate.http_client``)
_ANTHROPIC: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "image": _anthropic_image,
    "tool_use": lambda p: {"type": "tool_call", "id": p.get("id"), "name": p.get("name"),
                           "arguments": p.get("input")},
    "tool_result": lambda p: {"type": "tool_call_response", "id": p.get("tool_use_id"),
                              "response": p.get("content")},
}


def _image(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        header, _, data = url.partition(";base64,")
        return {"type": "blob", "modality": "image", "mime_type": header[5:], "content": data}
    return {"type": "uri", "modality": "image", "uri": url}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _tool_calls(message: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") if message is not None else None
    if not isinstance(calls, list):
        return []
    parts = []
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        parts.append({
            "type": "tool_call",
            "id": call.get("id"),
            "name": function.get("name"),
            "arguments": _arguments(function.get("arguments")),
        })
    return parts


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _answer_message(raw: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    choices = raw.get("choices") if raw is not None else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, Mapping) else None
