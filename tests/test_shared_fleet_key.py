"""``Backend(fleet_key=...)``: which fleet state (``shared=``) a backend shares.

A provider's rate limits are per organization/project, not per URL or per key: two projects'
keys on api.openai.com have a limit each, and one project's keys (many, rotated) share one.
The fleet keyed a backend by namespace + name + base_url + model only, so two services whose
backend "openai" held different projects' keys shared one limit, one 429 pause and one circuit
on one Redis — a 429 of project A's stopped project B's calls — and one project's limit under
two backend names was two limits. ``fleet_key`` names the scope (a label: the project's id or
any name); unset, the keys are today's, so processes of earlier releases on the same Redis
keep sharing one limit with this one (tests/test_shared_mixed_versions.py). The API key never
reaches Redis: not as the scope, nor fingerprinted. Real redis-server.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import pydantic
import pytest
import redis.asyncio

import gptgate as gg
from tests.fleettools import namespace
from tests.mockbackend import ok

URL = "http://127.0.0.1:9/v1"
KEY_A = "sk-proj-aaaa1111bbbb2222cccc3333"
KEY_B = "sk-proj-dddd4444eeee5555ffff6666"
USER = [{"role": "user", "content": "hi"}]


def _backend(name: str, key: str, fleet_key: str | None, handler: Any) -> gg.Backend:
    options: dict[str, Any] = {} if fleet_key is None else {"fleet_key": fleet_key}
    return gg.Backend(name=name, base_url=URL, model="m", api_key=key, concurrency=1,
                      timeout=5.0, transport=httpx2.MockTransport(handler), **options)


async def _answered_beside(redis_url: str, first: gg.Backend, second: gg.Backend) -> bool:
    """Whether ``second`` (another process) answers while ``first`` holds its only permit."""
    ns = namespace()
    gates = [gg.Gateway([b], shared=gg.Shared(redis_url, namespace=ns), seed=1)
             for b in (first, second)]
    async with gates[0], gates[1], anyio.create_task_group() as tg:
        tg.start_soon(gates[0].chat, USER)
        with anyio.fail_after(5):
            while gates[0].stats()[first.name].in_flight < 1:
                await anyio.sleep(0.005)
        answered = False
        with anyio.move_on_after(1.0):
            await gates[1].chat(USER)
            answered = True
        release.set()
    return answered


release = anyio.Event()


async def _held(request: httpx2.Request) -> httpx2.Response:
    await release.wait()
    return ok()


def _quick(request: httpx2.Request) -> httpx2.Response:
    return ok()


@pytest.fixture(autouse=True)
def _fresh_release() -> None:
    global release
    release = anyio.Event()


async def test_two_projects_on_one_url_keep_a_limit_each(redis_url: str) -> None:
    assert await _answered_beside(
        redis_url, _backend("openai", KEY_A, "proj-a", _held),
        _backend("openai", KEY_B, "proj-b", _quick),
    )  # before: no fleet_key; one name → one fleet limit of 1, the second call waited


async def test_one_project_under_two_names_is_one_limit(redis_url: str) -> None:
    assert not await _answered_beside(
        redis_url, _backend("checkout-llm", KEY_A, "proj-a", _held),
        _backend("search-llm", KEY_A, "proj-a", _quick),
    )


async def test_unset_it_shares_by_name_as_before(redis_url: str) -> None:
    """Different keys, no fleet_key: one limit, on the keys every release uses."""
    assert not await _answered_beside(
        redis_url, _backend("openai", KEY_A, None, _held), _backend("openai", KEY_B, None, _quick),
    )


@pytest.mark.parametrize("labels", [("proj-a", "proj-b"), (None, None)])
async def test_a_429_pauses_its_project_only(
    redis_url: str, labels: tuple[str | None, str | None]
) -> None:
    ns = namespace()

    def refused(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(429, headers={"retry-after": "30"},
                               json={"error": {"message": "Rate limit reached"}})

    shared = gg.Shared(redis_url, namespace=ns)
    a = gg.Gateway([_backend("openai", KEY_A, labels[0], refused)], shared=shared, seed=1)
    b = gg.Gateway([_backend("openai", KEY_B, labels[1], _quick)], shared=shared, seed=1)
    a_too = gg.Gateway([_backend("openai", KEY_A, labels[0], _quick)], shared=shared, seed=1)
    async with a, b, a_too:
        with pytest.raises(gg.RateLimitedError):
            await a.chat(USER, max_attempts=1)
        client: Any = redis.asyncio.Redis.from_url(redis_url)
        try:
            with anyio.fail_after(5):  # published by a's background task
                while not [k for k in await client.keys(f"*{ns}*:pause")
                           if await client.pttl(k) > 0]:
                    await anyio.sleep(0.01)
        finally:
            await client.aclose()
        with pytest.raises(gg.OverloadedError):  # project A in another process: paused
            await a_too.chat(USER, timeout=1.0)
        if labels[1] is None:  # one name, no label: project B is paused too (as before)
            with pytest.raises(gg.OverloadedError):
                await b.chat(USER, timeout=1.0)
        else:  # project B: not paused
            assert (await b.chat(USER, timeout=1.0)).queue_s < 1.0


async def test_no_key_reaches_redis(redis_url: str) -> None:
    """Every key name and value the fleet wrote, read back: neither API key, nor any part."""
    ns = namespace()
    shared = gg.Shared(redis_url, namespace=ns)
    gates = [gg.Gateway([_backend("openai", key, label, _quick)], shared=shared, seed=1)
             for key, label in ((KEY_A, "proj-a"), (KEY_B, None))]
    async with gates[0], gates[1]:
        for gate in gates:
            await gate.chat(USER)
        client: Any = redis.asyncio.Redis.from_url(redis_url)
        try:
            dump = []
            for key in await client.keys(f"*{ns}*"):
                dump.append(key)
                kind = (await client.type(key)).decode()
                if kind == "string":
                    dump.append(await client.get(key))
                elif kind == "zset":
                    dump.extend(await client.zrange(key, 0, -1))
                elif kind == "hash":
                    dump.extend(x for kv in (await client.hgetall(key)).items() for x in kv)
                elif kind == "set":
                    dump.extend(await client.smembers(key))
                elif kind == "list":
                    dump.extend(await client.lrange(key, 0, -1))
        finally:
            await client.aclose()
    text = b" ".join(x if isinstance(x, bytes) else str(x).encode() for x in dump)
    assert b"proj-a" in text  # the label is the scope
    for key in (KEY_A, KEY_B):
        assert key[8:20].encode() not in text


@pytest.mark.parametrize("fleet_key", [
    "sk-proj-abcdefghijklmnop",  # shaped like a key
    KEY_A,  # the backend's own key
    "proj a",  # not a label
    "",
])
def test_a_fleet_key_is_a_label_not_a_key(fleet_key: str) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        gg.Backend(name="b", base_url=URL, model="m", api_key=KEY_A, fleet_key=fleet_key)
    assert KEY_A not in str(caught.value) and "abcdefghijklmnop" not in str(caught.value)
