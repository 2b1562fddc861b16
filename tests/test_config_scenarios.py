"""Configuration validation, pool sizing and the stream rule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

import gptgate as gg
from gptgate.scenarios import decide_stream, resolve_scenario

BASE: dict[str, Any] = {"name": "b", "base_url": "http://127.0.0.1:8000/v1", "model": "m"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("concurrency", -1),
        ("concurrency", 0),
        ("concurrency", "lots"),
        ("hardware", "fpga"),
        ("base_url", "not a url"),
        ("base_url", "ftp://host/v1"),
        ("max_concurrency", 0),
        ("timeout", 0),
        ("tier", "medium"),
        ("name", ""),
        ("name", "has spaces"),
    ],
)
def test_bad_backend_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        gg.Backend(**{**BASE, field: value})
    assert field in str(info.value)


def test_unknown_backend_option_is_rejected() -> None:
    with pytest.raises(ValidationError, match="concurency"):
        gg.Backend(**BASE, concurency=5)


def test_price_rejects_negative_rates() -> None:
    with pytest.raises(ValidationError, match="output_per_mtok"):
        gg.Price(output_per_mtok=-1)


def test_gateway_config_rejects_duplicate_and_missing_backends() -> None:
    with pytest.raises(ValidationError, match="unique"):
        gg.Gateway([gg.Backend(**BASE), gg.Backend(**BASE)])
    with pytest.raises(ValidationError, match="at least one backend"):
        gg.Gateway([])


@pytest.mark.parametrize(("ceiling", "pool"), [(1, 2), (10, 12), (30, 36), (64, 77), (80, 96)])
def test_pool_is_target_concurrency_plus_20_percent(ceiling: int, pool: int) -> None:
    assert gg.Backend(**BASE, max_concurrency=ceiling).pool_size == pool
    assert gg.Backend(**BASE, concurrency=ceiling).pool_size == pool


def test_pseudo_concurrency_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    from gptgate.pool import BackendPool

    backend = gg.Backend(**BASE, concurrency=50, max_connections=20)
    assert backend.pseudo_concurrency
    with caplog.at_level("WARNING", logger="gptgate.pool"):
        pool = BackendPool(backend, gg.SystemClock())
    assert "pseudo-concurrent" in caplog.text
    assert pool.statistics().pseudo_concurrency and pool.statistics().size == 20
    assert not gg.Backend(**BASE, concurrency=50).pseudo_concurrency


def test_price_cost_counts_cached_input_at_its_own_rate() -> None:
    price = gg.Price(input_per_mtok=2.0, cached_input_per_mtok=0.5, output_per_mtok=8.0)
    usage = gg.Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000)
    assert price.cost(usage) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)
    assert gg.Price(input_per_mtok=2.0).cost(usage) == pytest.approx(2.0)


TEXT = [{"role": "user", "content": "hi"}]
IMAGE = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
        ],
    }
]


@pytest.mark.parametrize(
    ("scenario", "messages", "params", "explicit", "expected"),
    [
        # the field stream rule, row by row
        ("realtime_chat", TEXT, {"max_tokens": 100}, None, (True, "latency_sensitive")),
        ("default", TEXT, {"max_tokens": 150}, None, (False, "short_output")),
        ("default", TEXT, {"max_tokens": 1200}, None, (True, "long_output")),
        ("default", TEXT, {"max_completion_tokens": 1200}, None, (True, "long_output")),
        ("batch_content", TEXT, {"max_tokens": 1200}, None, (False, "batch")),
        ("offline", TEXT, {"max_tokens": 1200}, None, (False, "batch")),
        ("multimodal", IMAGE, {"max_tokens": 1200}, None, (False, "multimodal")),
        ("realtime_chat", IMAGE, {}, None, (False, "multimodal")),
        ("default", TEXT, {"max_tokens": 500}, None, (False, "default")),
        ("default", TEXT, {}, None, (False, "default")),
        # an explicit choice wins over everything
        ("batch_content", IMAGE, {}, True, (True, "explicit")),
        ("realtime_chat", TEXT, {}, False, (False, "explicit")),
    ],
)
def test_stream_rule(
    scenario: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    explicit: bool | None,
    expected: tuple[bool, str],
) -> None:
    assert decide_stream(resolve_scenario(scenario), messages, params, explicit) == expected


def test_custom_scenario_forcing_a_mode() -> None:
    always = gg.Scenario(name="always", stream=True)
    assert decide_stream(always, TEXT, {"max_tokens": 10}) == (True, "scenario")
    expected = gg.Scenario(name="long", expected_output_tokens=2000)
    assert decide_stream(expected, TEXT, {}) == (True, "long_output")


def test_presets_follow_seeds_section_6() -> None:
    realtime = gg.PRESETS["realtime_chat"]
    batch = gg.PRESETS["batch_content"]
    multimodal = gg.PRESETS["multimodal"]
    offline = gg.PRESETS["offline"]
    assert realtime.concurrency_window == (20, 30) and realtime.batch is None
    assert batch.concurrency_window == (30, 50) and batch.batch is not None
    assert batch.batch.max_wait_s == 2.0 and 5 <= batch.batch.max_size <= 10
    assert batch.ramp is not None and batch.ramp.target_hit_rate == 0.85
    assert multimodal.concurrency_window == (10, 15) and multimodal.batch_only_offline
    assert offline.batch == gg.BatchPolicy.SMALL
    assert realtime.priority > batch.priority > offline.priority


def test_scenario_window_must_be_ordered() -> None:
    with pytest.raises(ValidationError):
        gg.Scenario(concurrency_window=(30, 20))


def test_concurrency_window_from_a_preset_or_a_pair() -> None:
    assert gg.Backend(**BASE, concurrency_window="realtime_chat").concurrency_window == (20, 30)
    assert gg.Backend(**BASE, concurrency_window=(5, 9)).concurrency_window == (5, 9)
    with pytest.raises(ValidationError, match="concurrency_window"):
        gg.Backend(**BASE, concurrency_window="offline")  # no window in that preset
    with pytest.raises(ValidationError, match="concurrency_window"):
        gg.Backend(**BASE, concurrency_window=(9, 5))


async def test_the_adaptive_limit_stays_inside_the_window() -> None:
    backend = gg.Backend(**BASE, concurrency_window="realtime_chat", transport=None)
    async with gg.Gateway([backend]) as gate:
        limit = gate.stats()["b"].limit
    assert 20 <= limit <= 30
