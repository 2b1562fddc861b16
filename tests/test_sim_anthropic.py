"""The simulator's Anthropic flavor speaks the Messages API: auth, shapes, events, caching only
at cache_control markers, rate-limit headers, 529 overloads and the 1.25×/0.1× bill."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx2

from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual
from gptgate.sim.anthropic import AnthropicEngine, bill_usd
from gptgate.sim.faults import FaultPlan

AUTH = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
SYSTEM = "You answer in one word. " * 400  # ~2,400 tokens


def _body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Name a prime."}],
    }
    body.update(over)
    return body


def _post(
    bodies: list[dict[str, Any]], headers: dict[str, str] = AUTH, **profile: Any
) -> tuple[list[httpx2.Response], SimEngine]:
    async def main() -> tuple[list[httpx2.Response], SimEngine]:
        engine = SimEngine(
            ANTHROPIC_PROFILE.model_copy(update=profile), clock=LoopClock(), seed=3
        )
        out = []
        transport = SimTransport(engine)
        async with httpx2.AsyncClient(transport=transport, base_url="http://sim") as client:
            for body in bodies:
                out.append(await client.post("/v1/messages", json=body, headers=headers))
        return out, engine

    return run_virtual(main)


def test_the_flavor_builds_the_messages_engine_and_rejects_wrong_auth_headers() -> None:
    assert isinstance(SimEngine(ANTHROPIC_PROFILE), AnthropicEngine)
    wrong = {"api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}  # Azure's header
    (azure,), _ = _post([_body()], headers=wrong)
    assert azure.status_code == 401
    assert azure.json()["error"]["type"] == "authentication_error"
    bearer = {"authorization": "Bearer sk-ant-test", "anthropic-version": "2023-06-01"}
    (sdk,), _ = _post([_body()], headers=bearer)  # what the anthropic SDK 2.x sends
    assert sdk.status_code == 200
    (versionless,), _ = _post([_body()], headers={"x-api-key": "sk-ant-test"})
    assert versionless.status_code == 400
    assert "anthropic-version" in versionless.json()["error"]["message"]


def test_a_message_has_anthropic_shape_usage_and_ratelimit_headers() -> None:
    (r,), engine = _post([_body()])
    assert r.status_code == 200
    body = r.json()
    assert body["type"] == "message" and body["id"].startswith("msg_")
    assert body["content"][0]["type"] == "text"
    assert body["stop_reason"] in ("end_turn", "max_tokens")
    usage = body["usage"]
    assert set(usage) >= {"input_tokens", "cache_creation_input_tokens",
                          "cache_read_input_tokens", "output_tokens"}
    for family in ("requests", "tokens"):
        reset = r.headers[f"anthropic-ratelimit-{family}-reset"]
        assert datetime.fromisoformat(reset.replace("Z", "+00:00")).tzinfo is not None
        assert int(r.headers[f"anthropic-ratelimit-{family}-remaining"]) >= 0
    # one bucket for prompt and answer: not Anthropic's two budgets (gptgate/sim/anthropic.py)
    assert "anthropic-ratelimit-output-tokens-remaining" not in r.headers
    assert "x-ratelimit-limit-requests" not in r.headers
    snap = engine.ledger.snapshot()
    assert snap.input_tokens == (
        usage["input_tokens"] + usage["cache_creation_input_tokens"]
        + usage["cache_read_input_tokens"]
    )


def test_caching_happens_only_at_markers_writes_then_reads_on_top_of_input() -> None:
    (first, second), engine = _post([_body(), _body()])
    u1, u2 = first.json()["usage"], second.json()["usage"]
    assert u1["cache_creation_input_tokens"] > 2000 and u1["cache_read_input_tokens"] == 0
    assert u2["cache_read_input_tokens"] == u1["cache_creation_input_tokens"]
    assert u2["cache_creation_input_tokens"] == 0
    assert u2["input_tokens"] == u1["input_tokens"] > 0  # the uncached tail, not the total
    plain = _body(system=SYSTEM)  # the same prompt without a marker: never cached
    (a, b), _ = _post([plain, plain])
    assert b.json()["usage"]["cache_read_input_tokens"] == 0
    assert a.json()["usage"]["cache_creation_input_tokens"] == 0
    snap = engine.ledger.snapshot()
    price_in, price_out = 3.0, 15.0
    by_hand = (
        (snap.input_tokens - snap.cached_input_tokens - snap.cache_write_input_tokens) * price_in
        + 1.25 * snap.cache_write_input_tokens * price_in
        + 0.1 * snap.cached_input_tokens * price_in
        + snap.output_tokens * price_out
    ) / 1e6
    assert bill_usd(snap, price_in, price_out) == by_hand


def test_a_short_marked_prefix_is_not_cached_and_five_markers_are_refused() -> None:
    short = _body(system=[{"type": "text", "text": "Be brief.",
                           "cache_control": {"type": "ephemeral"}}])
    (_a, b), _ = _post([short, short])
    assert b.json()["usage"]["cache_read_input_tokens"] == 0
    mark = {"type": "ephemeral"}
    five = _body(system=[{"type": "text", "text": f"part {i}", "cache_control": mark}
                         for i in range(5)])
    (r,), _ = _post([five])
    assert r.status_code == 400 and "maximum of 4" in r.json()["error"]["message"]


def test_unknown_fields_and_missing_max_tokens_are_400s() -> None:
    body = _body(frequency_penalty=0.5)
    no_max = _body()
    del no_max["max_tokens"]
    (extra, missing), _ = _post([body, no_max])
    assert extra.status_code == 400 and "frequency_penalty" in extra.json()["error"]["message"]
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]


def _events(raw: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_a_stream_is_the_messages_event_sequence() -> None:
    (r,), _ = _post([_body(stream=True)])
    events = _events(r.text)
    names = [e for e, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    usage = events[-2][1]["usage"]
    assert usage["output_tokens"] * 4 >= len(text) > 0


def test_tools_are_called_with_tool_use_and_answered_after_a_result() -> None:
    tool = {"name": "lookup", "description": "find a fact",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}},
                             "required": ["q"]}}
    call, _ = _post([_body(tools=[tool])])
    block = call[0].json()["content"][0]
    assert call[0].json()["stop_reason"] == "tool_use"
    assert block["type"] == "tool_use" and block["input"] == {"q": "sim"}
    answered = _body(tools=[tool], messages=[
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"],
                                      "content": "42"}]},
    ])
    (r,), _ = _post([answered])
    assert r.json()["content"][0]["type"] == "text"


def test_a_full_queue_is_a_529_overloaded_error_and_limits_are_429_with_retry_after() -> None:
    async def main() -> list[httpx2.Response]:
        import anyio

        p = ANTHROPIC_PROFILE.model_copy(update={"replicas": 1, "slots": 1, "max_queue": 0})
        engine = SimEngine(p, clock=LoopClock(), seed=1)
        out: list[httpx2.Response] = []
        async with httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://s") as c:

            async def one() -> None:
                out.append(await c.post("/v1/messages", json=_body(), headers=AUTH))

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(one)
        return out

    statuses = sorted(r.status_code for r in run_virtual(main))
    assert statuses == [200, 529, 529]
    (_ok, limited), _ = _post([_body(), _body()], rpm=1)
    assert limited.status_code == 429
    assert limited.json()["error"]["type"] == "rate_limit_error"
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.headers["anthropic-ratelimit-requests-remaining"] == "0"


def test_scripted_503_becomes_a_529() -> None:
    async def main() -> httpx2.Response:
        engine = SimEngine(ANTHROPIC_PROFILE, clock=LoopClock(), seed=1,
                           faults=FaultPlan(seed=1))
        async with httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://s") as c:
            return await c.post("/v1/messages", json=_body(),
                                headers={**AUTH, "x-sim-fault": "503"})

    r = run_virtual(main)
    assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error"
