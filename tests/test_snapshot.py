"""Warm start: gate.snapshot() → a JSON file → Gateway(state=...) starts probing at the saved
knee; stale, foreign and corrupt state start cold with one log line (issue 14, item 1)."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from gptgate.limits import LLMLimit, Sample
from gptgate.sim import LoopClock, run_virtual
from gptgate.snapshot import save_state
from gptgate.testing import sim_backend

# ---------------------------------------------------------------- LLMLimit, scripted


def _window(lim: LLMLimit, t: float, latency: float, n: int | None = None) -> float:
    """``n`` identical successes admitted at ``t`` with the limiter full; the next time."""
    for _ in range(n if n is not None else max(lim.window_samples, math.ceil(lim.limit / 2))):
        lim.update(
            Sample(start=t, latency_s=latency, inflight=lim.limit, kind="ok", output_tokens=100),
            t + latency,
        )
    return t + latency + 1_000.0


def _learned() -> LLMLimit:
    """Slow start 4 → 8 → 16 saturating at 8: centre 8, baseline 3 s."""
    lim = LLMLimit(initial=4, window_samples=4, max_limit=128)
    t = _window(lim, 0.0, 2.0)
    t = _window(lim, t, 2.0)
    _window(lim, t, 4.0)
    assert not lim.in_slow_start
    return lim


def _warm(state: dict[str, float]) -> LLMLimit:
    lim = LLMLimit(initial=4, window_samples=4, max_limit=128)
    lim.restore(state)
    return lim


def test_export_state_is_none_until_something_is_learned() -> None:
    assert LLMLimit().export_state() is None


def test_restore_probes_around_the_saved_knee_with_the_saved_baseline() -> None:
    saved = _learned().export_state()
    assert saved is not None
    lim = _warm(saved)
    assert not lim.in_slow_start and lim.warm
    assert lim.center == pytest.approx(saved["knee"])
    assert lim.limit == round(saved["knee"] * (1 - lim.probe))  # the low probe first
    assert lim.export_state() == pytest.approx(saved)


def test_latency_as_before_confirms_the_warm_state() -> None:
    saved = _learned().export_state()
    assert saved is not None
    lim = _warm(saved)
    _window(lim, 0.0, 3.0 * 1.3, n=2 * lim.window_samples + 2 * lim.limit)
    assert not lim.warm and not lim.in_slow_start
    assert lim.events.get("warm_fallback", 0) == 0


def test_double_latency_falls_back_to_slow_start_from_initial() -> None:
    saved = _learned().export_state()
    assert saved is not None
    lim = _warm(saved)
    _window(lim, 0.0, 3.0 * 2.1, n=lim.window_samples)
    assert lim.in_slow_start and not lim.warm
    assert lim.limit == 4
    assert lim.events["warm_fallback"] == 1
    assert lim.export_state() is None  # nothing of the old backend is kept


def test_loss_after_a_warm_start_falls_back_to_slow_start() -> None:
    saved = _learned().export_state()
    assert saved is not None
    lim = _warm(saved)
    lim.update(
        Sample(start=0.0, latency_s=0.1, inflight=lim.limit, kind="dropped", congestion=True),
        0.1,
    )
    assert lim.in_slow_start and lim.limit == 4
    assert lim.events["warm_fallback"] == 1


def test_a_server_failure_is_no_sign_of_a_changed_backend() -> None:
    saved = _learned().export_state()
    assert saved is not None
    lim = _warm(saved)
    lim.update(
        Sample(start=0.0, latency_s=0.1, inflight=lim.limit, kind="dropped", congestion=False),
        0.1,
    )
    assert lim.warm and not lim.in_slow_start


def test_restore_rejects_an_incomplete_state() -> None:
    with pytest.raises(ValueError, match="knee"):
        LLMLimit().restore({"limit": 8.0})


# ---------------------------------------------------------------- through the gateway


def _backend(clock: LoopClock, **options: Any) -> gg.Backend:
    backend, _ = sim_backend(
        "tpu", name="tpu", clock=clock, seed=5, concurrency="auto", max_concurrency=128, **options
    )
    return backend


def _items(n: int) -> list[dict[str, Any]]:
    return [
        {"messages": [{"role": "user", "content": f"item {i} " + "x " * 200}], "max_tokens": 200}
        for i in range(n)
    ]


async def _learn(path: Path) -> dict[str, Any]:
    """A cold run that leaves slow start and writes its state to ``path`` on exit."""
    clock = LoopClock()
    async with gg.Gateway([_backend(clock)], clock=clock, seed=1, state=path) as gate:
        await gate.map(_items(700), scenario="default")
        exported = gate.backend_state("tpu").limiter.limit.export_state()  # type: ignore[attr-defined]
    assert exported is not None
    return dict(exported)


async def _open(state: object, max_age_s: float = 86_400.0) -> LLMLimit:
    """The limit a new gateway starts with from ``state`` (no call made)."""
    clock = LoopClock()
    backend = _backend(clock)
    async with gg.Gateway(
        [backend],
        clock=clock,
        state=state,  # type: ignore[arg-type]
        state_max_age_s=max_age_s,
    ) as gate:
        limit = gate.backend_state("tpu").limiter.limit
    assert isinstance(limit, LLMLimit)
    return limit


def _good_state(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "state.json"
    exported = run_virtual(_learn, path)
    return path, exported


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the saved document, the limit's exported state at exit) of one cold tpu run."""
    path, exported = _good_state(tmp_path_factory.mktemp("learned"))
    return json.loads(path.read_text()), exported


def test_a_missing_path_starts_cold_and_is_written_on_exit(
    learned: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    document, exported = learned
    assert document["version"] == 1
    assert abs(document["taken_at"] - time.time()) < 600
    entry = document["backends"]["tpu"]
    assert entry["model"] and entry["base_url"] == "http://127.0.0.1:8000/v1"
    assert entry["limit"]["knee"] == pytest.approx(exported["knee"])
    assert entry["limit"]["baseline_s"] > 0


def test_round_trip_through_a_file_restores_limit_and_baseline(
    learned: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(learned[0]))
    limit = run_virtual(_open, path)
    assert not limit.in_slow_start and limit.warm
    restored = limit.export_state()
    assert restored is not None
    for key in ("knee", "baseline_a", "baseline_b", "reference_tokens", "log_var"):
        assert restored[key] == pytest.approx(learned[1][key]), key


def test_a_dict_from_snapshot_works_as_state(
    learned: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    limit = run_virtual(_open, learned[0])
    assert limit.warm and limit.center == pytest.approx(learned[1]["knee"])


async def _first_window(state: dict[str, Any]) -> list[int]:
    """The limits of a warm start's first 120 calls, on virtual time."""
    clock = LoopClock()
    async with gg.Gateway([_backend(clock)], clock=clock, seed=2, state=state) as gate:
        limit = gate.backend_state("tpu").limiter.limit
        await gate.map(_items(120), scenario="default")
        return [lim for _, lim in limit.trace]  # type: ignore[attr-defined]


def test_warm_start_first_window_probes_near_the_saved_limit(
    learned: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    knee = learned[1]["knee"]
    limits = run_virtual(_first_window, learned[0])
    assert limits and all(abs(lim - knee) <= 0.2 * knee for lim in limits)


def _cold(limit: LLMLimit) -> bool:
    return limit.in_slow_start and not limit.warm and limit.limit == 4


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda d: d.update(taken_at=time.time() - 2 * 86_400), id="stale"),
        pytest.param(lambda d: d["backends"]["tpu"].update(model="other-model"), id="model"),
        pytest.param(
            lambda d: d["backends"]["tpu"].update(base_url="http://127.0.0.1:9/v1"), id="url"
        ),
        pytest.param(lambda d: d.update(version=2), id="version"),
        pytest.param(lambda d: d["backends"]["tpu"]["limit"].update(knee="high"), id="edited"),
    ],
)
def test_stale_foreign_or_invalid_state_starts_cold_with_one_log_line(
    learned: tuple[dict[str, Any], dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    edit: Any,
) -> None:
    document = json.loads(json.dumps(learned[0]))
    edit(document)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(document))
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        limit = run_virtual(_open, path)
    assert _cold(limit)
    lines = [r for r in caplog.records if "starting cold" in r.getMessage()]
    assert len(lines) == 1 and lines[0].name == "gptgate"


@pytest.mark.parametrize(
    "text",
    [pytest.param(None, id="truncated"), pytest.param("\x00garbage{{", id="garbage")],
)
def test_a_corrupt_file_starts_cold_with_one_log_line(
    learned: tuple[dict[str, Any], dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    text: str | None,
) -> None:
    path = tmp_path / "state.json"
    whole = json.dumps(learned[0])
    path.write_text(whole[: len(whole) // 2] if text is None else text)
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        limit = run_virtual(_open, path)
    assert _cold(limit)
    assert len([r for r in caplog.records if "starting cold" in r.getMessage()]) == 1


def test_the_max_age_is_configurable(
    learned: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    document = dict(learned[0], taken_at=time.time() - 120)
    assert run_virtual(_open, document).warm
    assert _cold(run_virtual(_open, document, 60.0))


@pytest.mark.parametrize("state", [42, 1.5, ["state.json"], b"state.json"])
def test_a_wrong_type_for_state_is_a_typed_error_at_construction(state: object) -> None:
    async def construct() -> None:
        backend, _ = sim_backend("tpu", clock=LoopClock())
        gg.Gateway([backend], state=state)  # type: ignore[arg-type]

    with pytest.raises(gg.BadRequestError, match="state must be"):
        run_virtual(construct)


def test_the_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"old": true}')
    seen: list[str] = []

    def broken(src: str, dst: object) -> None:
        seen.append(os.path.dirname(src))
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        save_state(path, {"version": 1})
    assert path.read_text() == '{"old": true}'  # the old file is whole
    assert seen == [str(tmp_path)]  # the temporary file was in the same directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # and is gone
    monkeypatch.undo()
    save_state(path, {"version": 1})
    assert json.loads(path.read_text()) == {"version": 1}


async def _save_fails(path: Path) -> None:
    clock = LoopClock()
    async with gg.Gateway([_backend(clock)], clock=clock, state=path):
        pass


def test_an_unwritable_path_is_logged_not_raised_on_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        run_virtual(_save_fails, tmp_path / "missing-dir" / "state.json")
    assert "not saved" in caplog.text


# ---------------------------------------------------------------- a file that is not state


async def _run_once(path: Path, *backends: str) -> None:
    """A short run on fixed-limit sims named ``backends`` with ``state=path``."""
    clock = LoopClock()
    configured = [
        sim_backend("gpu", name=name, clock=clock, seed=i, concurrency=4)[0]
        for i, name in enumerate(backends or ("gpu",))
    ]
    async with gg.Gateway(configured, clock=clock, state=path) as gate:
        await gate.chat([{"role": "user", "content": "hi"}], max_tokens=5)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(json.dumps({"backends": [{"name": "gpu"}], "max_attempts": 3}), id="config"),
        pytest.param(json.dumps({"version": 2, "taken_at": 0, "backends": {}}), id="newer"),
        pytest.param("[gateway]\nmax_attempts = 3\n", id="toml"),
        pytest.param("", id="empty"),
    ],
)
def test_a_file_that_is_not_state_is_never_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    path = tmp_path / "gateway.json"
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        run_virtual(_run_once, path)
        run_virtual(_run_once, path)  # a second run: still untouched
    assert path.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gateway.json"]
    lines = [r.getMessage() for r in caplog.records]
    # one line per run, naming the path and saying it is left as it is
    assert len(lines) == 2 and all(str(path) in line and "not written" in line for line in lines)


def test_a_baseline_file_given_as_state_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The baseline `gptgate profile` just wrote, passed as ``state=`` by mistake."""

    async def profile_then_run(path: Path) -> None:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="gpu", clock=clock, seed=1, concurrency=2)
        baseline = await gg.profile(gg.Gateway([backend], clock=clock), levels=[2], requests=8)
        baseline.save(path)
        async with gg.Gateway([backend], clock=clock, state=path) as gate:
            await gate.chat([{"role": "user", "content": "hi"}], max_tokens=5)

    path = tmp_path / "baseline.json"
    run_virtual(profile_then_run, path)
    gg.Baseline.load(path)  # still a baseline
    assert "not written" in caplog.text


def test_a_file_that_became_something_else_during_the_run_is_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"

    async def overwrite_mid_run() -> None:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="gpu", clock=clock, concurrency=4)
        async with gg.Gateway([backend], clock=clock, state=path):
            path.write_text('{"max_attempts": 3}')

    with caplog.at_level(logging.WARNING, logger="gptgate"):
        run_virtual(overwrite_mid_run)
    assert path.read_text() == '{"max_attempts": 3}'
    assert str(path) in caplog.text and "not written" in caplog.text


# ---------------------------------------------------------------- merged per backend


def _entry(document: dict[str, Any], name: str, **changes: Any) -> dict[str, Any]:
    entry = json.loads(json.dumps(document["backends"]["tpu"]))
    entry.update(changes)
    return entry


def test_a_run_with_fewer_backends_keeps_the_others_entries(
    learned: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    document = json.loads(json.dumps(learned[0]))
    other = _entry(document, "other", base_url="http://127.0.0.9:8000/v1")
    document["backends"]["other"] = other
    path = tmp_path / "state.json"
    path.write_text(json.dumps(document))
    run_virtual(_open, path)  # a gateway configured with "tpu" only
    after = json.loads(path.read_text())
    assert sorted(after["backends"]) == ["other", "tpu"]
    kept = after["backends"]["other"]
    assert kept["limit"] == other["limit"]
    # the kept entry keeps its own age: the rewrite does not make it look fresh
    assert kept["taken_at"] == pytest.approx(document["taken_at"])


def test_a_kept_entry_older_than_the_max_age_is_dropped_and_not_made_fresh(
    learned: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    document = json.loads(json.dumps(learned[0]))
    old = time.time() - 2 * 86_400
    document["backends"]["old"] = _entry(document, "old", taken_at=old)
    document["backends"]["recent"] = _entry(document, "recent", taken_at=time.time() - 60)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(document))
    run_virtual(_open, path)
    after = json.loads(path.read_text())
    assert sorted(after["backends"]) == ["recent", "tpu"]


async def _warm_pair(path: Path) -> tuple[bool, bool]:
    """Whether backends tpu and "copy" (the same server, another name) start warm."""
    clock = LoopClock()
    tpu = _backend(clock)
    copy = tpu.model_copy(update={"name": "copy"})
    async with gg.Gateway([tpu, copy], clock=clock, state=path) as gate:
        return tuple(  # type: ignore[return-value]
            gate.backend_state(n).limiter.limit.warm  # type: ignore[attr-defined]
            for n in ("tpu", "copy")
        )


def test_a_kept_entry_starts_its_backend_warm_by_its_own_age(
    learned: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    document = json.loads(json.dumps(learned[0]))
    document["backends"]["copy"] = _entry(document, "copy", taken_at=time.time() - 2 * 86_400)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(document))
    assert run_virtual(_warm_pair, path) == (True, False)  # "copy" is stale on its own


def test_the_file_is_reread_and_merged_just_before_writing(
    learned: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    """Two gateways sharing one path, each with its own backend: neither loses the other's."""
    path = tmp_path / "state.json"
    path.write_text(json.dumps(learned[0]))

    async def meanwhile() -> None:
        clock = LoopClock()
        async with gg.Gateway([_backend(clock)], clock=clock, state=path):
            # another process wrote its own backend while this one ran
            document = json.loads(path.read_text())
            document["backends"]["elsewhere"] = _entry(document, "elsewhere")
            save_state(path, document)

    run_virtual(meanwhile)
    after = json.loads(path.read_text())
    assert sorted(after["backends"]) == ["elsewhere", "tpu"]
