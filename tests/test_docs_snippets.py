"""The docs' code says only what the library has: every ```python block of README.md and
docs/ compiles, and each ``gg.`` name, keyword argument and attribute of a result it uses
exists (tests/docs_snippets.py reads them statically: fast, no call made). Inline code that
builds one of gptgate's objects (```gg.Budget(usd_per_hour=10)```) is held to the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import docs_snippets as snippets

BLOCKS = [block for page in snippets.pages() for block in snippets.blocks(page)]


def test_the_pages_hold_the_blocks_the_reader_copies() -> None:
    # the extractor finds them (a fence it misread would check nothing)
    assert len(BLOCKS) >= 50
    assert len(list(snippets.inline_calls())) >= 20


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.skipped], ids=lambda b: b.where)
def test_python_block(block: snippets.Block) -> None:
    assert snippets.check(block) == []


def test_inline_constructions() -> None:
    problems = [problem for block in snippets.inline_calls() for problem in snippets.check(block)]
    assert problems == []


def test_the_checker_sees_what_a_reader_would_trip_on() -> None:
    """Each kind of mistake a stale page holds is named (else the checks above prove nothing)."""
    block = snippets.Block(snippets.ROOT / "README.md", 1, "\n".join([
        "import gptgate as gg",
        "from gptgate.testing import sim_backend, no_such_helper",
        'gate = gg.Gateway([gg.Backend(name="x", base_url="u", model="m", colour=1)],',
        "                  max_attempt=3)",
        "async with gate:",
        "    r = await gate.chat(messages)",
        "    print(r.txt, r.usage.output_token, gate.stats()['x'].limt)",
        "    async with gate.stream(messages) as s:",
        "        pass",
        "    s.result.ttft",
        "gg.Nope",
        "with gg.SyncGateway([], bogus=1) as sync:",
        "    sync.chat(messages).textt",
        "try:",
        "    gg.BatchPolicy(8, 2.0)",
        "except gg.BudgetExceededError as error:",
        "    error.spent",
        "r = await gate.chat(messages, hedges=True, temperature=0, max_attempts=2)",
        "with gg.SyncGateway([]) as sync:",
        "    sync.map(items, max_pendng=8, max_tokens=60, backend='x')",
        "client = openai.AsyncOpenAI(http_client=gate.http_client('x'), max_retries=0)",
        "client = openai.AsyncOpenAI(base_url=url, http_client=gate.http_client('x'))",
    ]), skipped=False)
    found = "\n".join(snippets.check(block))
    for expected in [
        "README.md:2: gptgate.testing has no 'no_such_helper'",
        "README.md:3: Backend() takes no keyword 'colour'",
        "README.md:3: Gateway() takes no keyword 'max_attempt'",
        "README.md:7: ChatResult has no attribute 'txt'",
        "README.md:7: Usage has no attribute 'output_token'",
        "README.md:7: BackendStats has no attribute 'limt'",
        "README.md:10: ChatResult has no attribute 'ttft'",
        "README.md:11: gptgate has no attribute 'Nope'",
        "README.md:12: SyncGateway() takes no keyword 'bogus'",
        "README.md:13: ChatResult has no attribute 'textt'",
        "README.md:15: BatchPolicy() takes 0 positional argument(s), the page gives 2",
        "README.md:17: BudgetExceededError has no attribute 'spent'",
        # a chat verb's **params go to the server: a typo there is no error until then
        "README.md:18: Gateway.chat() takes no keyword 'hedges'",
        "README.md:20: SyncGateway.map() takes no keyword 'max_pendng'",
        # without base_url= the SDK sends the backend's traffic to api.openai.com
        "README.md:21: AsyncOpenAI(http_client=...http_client(...)) without base_url=",
    ]:
        assert expected in found
    assert len(re.findall(r"^README", found, re.M)) == 15, found
    # inline: a span that wraps a line, and a call inside a span that is a shape, not code
    assert snippets._placeholders("gate.batch(items, ..., max_tokens=60)") == (
        "gate.batch(items, max_tokens=60)")
    broken = snippets.Block(snippets.ROOT / "README.md", 1, "gate.chat(]", skipped=False)
    assert "does not compile" in snippets.check(broken)[0]


def test_the_configuration_reference_shows_every_gateway_argument() -> None:
    """docs/configuration.md's ``gg.Gateway(...)`` block is the one place that lists the
    constructor's own arguments (the fields below it are generated): one added to the code
    must be added there."""
    import inspect

    import gptgate as gg

    page = snippets.ROOT / "docs" / "configuration.md"
    block = next(b for b in snippets.blocks(page) if "gg.Gateway(" in b.source)
    own = [name for name in inspect.signature(gg.Gateway.__init__).parameters
           if name not in ("self", "options")]
    assert [name for name in own if f"{name}=" not in block.source] == []


def test_a_block_that_builds_a_gateway_opens_it_before_calling_it() -> None:
    """docs/tiers.md built a Gateway and awaited ``gate.chat`` on it: copied as shown, a
    GatewayClosedError ("the gateway is not open"). In a function the app opens it."""
    block = snippets.Block(snippets.ROOT / "docs" / "tiers.md", 1, "\n".join([
        "gate = gg.Gateway(backends=[])",
        "r = await gate.chat(messages)",
        "async def answer():",
        "    await gate.chat(messages)",
        "async with gate:",
        "    await gate.chat(messages)",
        "other = gg.Gateway([])",
        "await other.start()",
        "await other.map([])",
    ]), skipped=False)
    assert snippets.check(block) == [
        "docs/tiers.md:2: gate.chat() on a gateway the block never opened (async with gate: ...)"
    ]


def test_the_readme_links_every_page_of_the_site() -> None:
    """README.md's "Documentation" list is the site's table of contents for readers on the
    repository: a page in mkdocs.yml's nav that it does not link is a page they never find
    (fleet.md and fleet-pacing.md were missing)."""
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$",
                     (snippets.ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    readme = (snippets.ROOT / "README.md").read_text(encoding="utf-8")
    assert len(nav) > 30
    assert [page for page in nav if f"(docs/{page}" not in readme] == []


def test_a_block_marked_skip_is_not_checked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- snippet: skip -->\n```python\ngg.Nope(\n```\n\n"
                    "```python\ngg.Budget(usd_per_hour=1)\n```\n", encoding="utf-8")
    found = list(snippets.blocks(page))
    assert [(b.line, b.skipped) for b in found] == [(5, True), (9, False)]


def test_a_paragraph_marked_skip_has_its_inline_calls_unchecked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/guide/calls.md shows `gate.map(items, concurrency="auto")` because the library
    refuses it: the paragraph after the marker is not read, the next one is."""
    page = tmp_path / "page.md"
    page.write_text('<!-- snippet: skip -->\n`gate.chat(m, max_concurrency=8)` is refused\n'
                    '`gg.Nope(1)` too\n\n`gg.Budget(usd_per_hour=1)`\n', encoding="utf-8")
    monkeypatch.setattr(snippets, "pages", lambda: [page])
    assert [(b.line, b.source) for b in snippets.inline_calls()] == [
        (5, "gg.Budget(usd_per_hour=1)")]


def test_each_dotted_name_in_the_prose_exists() -> None:
    """```gg.PROVIDERS[name].strict_messages```, ```gptgate.sim.DEEPSEEK_PROFILE```: a name
    the prose gives is the package's, or a span attribute or metric it emits
    (```gptgate.retry_reason```)."""
    telemetry = snippets._telemetry_names()
    names = list(snippets.inline_names())
    assert len(names) > 100
    assert [f"{where}: {name}" for where, name in names
            if snippets.unresolved(name, telemetry)] == []
    for wrong in ("gg.Nope", "gptgate.sim.NOPE_PROFILE", "gg.Backend.colour", "gptgate.nope_s"):
        assert snippets.unresolved(wrong, telemetry), wrong
    assert not snippets.unresolved("gg.Backend.abandon_grace_s", telemetry)


def test_each_field_of_what_a_call_returns_is_named_in_the_docs() -> None:
    """The fields a reader gets back — a call's result, its usage, ``gate.stats()``, the
    budget's status, a plan — are each named in code on some page (``streamed_attempts`` and
    ``plain_attempts`` were only "streamed vs plain attempts")."""
    import dataclasses

    import gptgate as gg

    text = "\n".join(page.read_text(encoding="utf-8") for page in snippets.pages())
    spans = " ".join(re.findall(r"`[^`\n]+`", text)) + "\n".join(
        block.source for page in snippets.pages() for block in snippets.blocks(page))
    missing = []
    for cls in (gg.ChatResult, gg.Usage, gg.BackendStats, gg.BudgetStatus, gg.Plan):
        fields = getattr(cls, "model_fields", None) or [f.name for f in dataclasses.fields(cls)]
        missing += [f"{cls.__name__}.{name}" for name in fields
                    if not re.search(rf"\b{name}\b", spans)]
    assert missing == []


def test_the_api_reference_renders_every_public_name() -> None:
    """docs/api.md says it is generated from ``gptgate.__all__``: each public name has its
    ``::: gptgate.NAME`` (17 — ``Budget``, ``plan``, ``profile``, ``PROVIDERS``, … — had none)."""
    import gptgate

    page = (snippets.ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rendered = set(re.findall(r"^::: gptgate\.(\w+)$", page, re.M))
    assert [name for name in gptgate.__all__
            if name != "__version__" and name not in rendered] == []


async def test_an_sdk_on_gate_http_client_without_base_url_is_refused_unsent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Why the checker asks for ``base_url=``: ``openai.AsyncOpenAI(http_client=
    gate.http_client("gpu-local"))`` as README.md showed it addresses api.openai.com. That
    request once went there, booked as gpu-local's; it is refused unsent now
    (gptgate/sdk_address.py, tests/test_sdk_address.py). A MockTransport: nothing leaves the
    process."""
    import httpx2
    import openai

    import gptgate as gg

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)  # the SDK's own default
    seen: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(f"{request.url.scheme}://{request.url.host}")
        return httpx2.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    backend = gg.Backend(name="gpu-local", base_url="http://gpu:8000/v1", model="m",
                         api_key="sk-test", transport=httpx2.MockTransport(answer))
    async with gg.Gateway([backend]) as gate:
        for base_url in (None, "http://gpu:8000/v1"):
            client = openai.AsyncOpenAI(api_key="sk-test", base_url=base_url, max_retries=0,
                                        http_client=gate.http_client("gpu-local"))
            try:
                await client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                           "content": "hi"}])
            except gg.MisaddressedRequestError as exc:
                seen.append(f"refused: {exc.addressed}")
    assert seen == ["refused: https://api.openai.com:443", "http://gpu"]
