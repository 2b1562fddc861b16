"""``gptgate profile``: measures each backend per concurrency band into a baseline that
round-trips and that a Gateway accepts; the config file loader; the command's exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

import gptgate as gg
import gptgate.cli
from gptgate.baseline import BANDS, Baseline
from gptgate.config_file import ConfigFileError, load_config
from gptgate.profiling import ProfileError, profile
from gptgate.sim import SimEngine, SimTransport
from gptgate.sim.process import SimProcess, free_port
from gptgate.testing import LoopClock, run_virtual

MODEL = "gpt-5.5"


def test_profile_on_the_simulator_measures_every_band_and_round_trips(tmp_path: Path) -> None:
    clock = LoopClock()

    async def main() -> tuple[Baseline, gg.BackendStats, gg.BackendStats]:
        gpu = gg.Backend(
            name="gpu-a", base_url="http://127.0.0.1:8000/v1", model="m-gpu", hardware="gpu",
            transport=SimTransport(SimEngine("gpu", clock=clock, seed=1)),
        )
        tpu = gg.Backend(
            name="tpu-a", base_url="http://127.0.0.1:8001/v1", model="m-tpu", hardware="tpu",
            transport=SimTransport(SimEngine("tpu", clock=clock, seed=2)),
        )
        config = gg.GatewayConfig(backends=[gpu, tpu])
        seen: list[tuple[str, int, int, int]] = []
        baseline = await profile(
            config, requests=30, clock=clock, on_progress=lambda *a: seen.append(a)
        )
        assert len(seen) == 2 * len(BANDS) * 30 and seen[-1] == ("tpu-a", 48, 30, 30)
        baseline.save(tmp_path / "baseline.json")
        loaded = Baseline.load(tmp_path / "baseline.json")
        path = tmp_path / "baseline.json"
        async with gg.Gateway(config=config, clock=clock, baseline=path) as gate:
            await gate.chat([{"role": "user", "content": "hi"}], max_tokens=5)
            stats = gate.stats()
        return loaded, stats["gpu-a"], stats["tpu-a"]

    baseline, gpu_stats, tpu_stats = run_virtual(main)
    assert [b.name for b in baseline.backends] == ["gpu-a", "tpu-a"]
    gpu, tpu = baseline.backends
    assert (gpu.model, gpu.base_url, gpu.hardware) == ("m-gpu", "http://127.0.0.1:8000/v1", "gpu")
    for entry in (gpu, tpu):
        assert list(entry.bands) == [band.name for band in BANDS]
        for band in BANDS:
            f = entry.bands[band.name]
            assert f.concurrency == band.level and f.samples == 30 and f.failures == 0
            assert 0 < f.latency_p50_s <= f.latency_p95_s <= f.latency_p99_s
            assert f.ttft_p50_s is not None and f.ttft_p95_s is not None
            assert 0 < f.ttft_p50_s <= f.ttft_p95_s < f.latency_p95_s
            assert f.output_tokens_per_s is not None and f.output_tokens_per_s > 0
            # one shared system prompt past the provider's 1,024-token minimum: it is cached
            assert f.cache_hit_rate is not None and f.cache_hit_rate > 0.5
            # what drift compares like with like by (gptgate/drift_measure.py): decode speed
            # after the first token (faster than the whole call's), the answers' mean length,
            # the prompt tokens not served from cache
            assert f.decode_tokens_per_s is not None
            assert f.decode_tokens_per_s > f.output_tokens_per_s
            assert f.output_tokens_mean is not None and 0 < f.output_tokens_mean <= 256
            assert f.uncached_input_tokens_mean is not None
            assert 0 < f.uncached_input_tokens_mean < 1_024
    # the shapes the bands exist for: a GPU's tail grows with load, its first token is faster
    assert gpu.bands["41+"].latency_p95_s > 1.5 * gpu.bands["1-4"].latency_p95_s
    assert gpu.bands["1-4"].ttft_p50_s < tpu.bands["1-4"].ttft_p50_s  # type: ignore[operator]
    # a Gateway accepts the file it wrote: drift is watched on both backends
    assert gpu_stats.drift is not None and not gpu_stats.drift.drifting
    assert tpu_stats.drift is not None


def test_profile_takes_a_gateway_and_leaves_it_closed() -> None:
    clock = LoopClock()

    async def main() -> tuple[Baseline, gg.Gateway]:
        sim = gg.Backend(
            name="a", base_url="http://127.0.0.1:8000/v1", model="m",
            transport=SimTransport(SimEngine("gpu", clock=clock)),
        )
        gate = gg.Gateway([sim], clock=clock)
        return await profile(gate, levels=[1, 10], requests=12), gate

    baseline, gate = run_virtual(main)
    assert set(baseline.backends[0].bands) == {"1-4", "5-15"}
    assert baseline.backends[0].bands["5-15"].concurrency == 10
    assert gate.stats() == {}  # never opened


def test_bad_arguments_are_refused_before_any_call() -> None:
    config = gg.GatewayConfig(backends=[gg.Backend(name="a", base_url="http://127.0.0.1:9/v1",
                                                   model="m")])

    async def attempt(**kwargs: Any) -> None:
        await profile(config, **kwargs)

    with pytest.raises(ValueError, match="band 1-4 twice"):
        _run(attempt, levels=[1, 4])
    with pytest.raises(ValueError, match="requests must be an int >= 1"):
        _run(attempt, requests=0)
    with pytest.raises(ValueError, match="each level"):
        _run(attempt, levels=[0])
    with pytest.raises(TypeError, match="GatewayConfig or a Gateway"):
        _run(lambda: profile([]))  # type: ignore[arg-type]


def _run(func: Any, **kwargs: Any) -> Any:
    async def main() -> Any:
        return await func(**kwargs)

    return run_virtual(main)


def test_a_backend_whose_every_call_fails_is_a_profile_error() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(404, json={"error": {"message": "no such route"}})

    broken = gg.Backend(
        name="broken", base_url="http://127.0.0.1:9/v1", model="m",
        transport=httpx2.MockTransport(refuse),
    )
    with pytest.raises(ProfileError, match=r"every call to backend 'broken' failed: .*404"):
        _run(lambda: profile(gg.GatewayConfig(backends=[broken]), levels=[2], requests=4))


# -- load_config ---------------------------------------------------------------------------


def test_load_config_reads_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "gate.toml"
    toml.write_text(
        'max_attempts = 2\n\n[[backends]]\nname = "gpu-a"\n'
        'base_url = "http://127.0.0.1:8000/v1"\nmodel = "m"\nhardware = "gpu"\n'
    )
    config = load_config(toml)
    assert config.max_attempts == 2 and config.backends[0].name == "gpu-a"
    as_json = tmp_path / "gate.json"
    as_json.write_text(json.dumps({"backends": [
        {"name": "t", "base_url": "http://h:1/v1", "model": "m", "hardware": "tpu"}
    ]}))
    assert load_config(as_json).backends[0].hardware == "tpu"
    other = tmp_path / "gate.conf"  # no known suffix: TOML, then JSON
    other.write_text(as_json.read_text())
    assert load_config(other).backends[0].name == "t"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("missing.toml", None, "no such file"),
        ("bad.toml", "backends = [", "not valid TOML"),
        ("bad.json", "{", "not valid JSON"),
        ("list.json", "[]", "expected a table of GatewayConfig fields"),
        ("empty.toml", "", "backends: Field required"),
        (
            "url.toml",
            '[[backends]]\nname = "a"\nbase_url = "ftp://x"\nmodel = "m"\n',
            "backends.0.base_url: Value error, base_url must be an absolute http(s) URL",
        ),
        (
            "extra.toml",
            '[[backends]]\nname = "a"\nbase_url = "http://x/v1"\nmodel = "m"\nflavour = 1\n',
            "backends.0.flavour: Extra inputs are not permitted",
        ),
    ],
)
def test_load_config_errors_are_one_line_naming_path_and_field(
    tmp_path: Path, name: str, content: str | None, expected: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigFileError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message


def test_a_key_in_the_config_file_never_shows_in_an_error(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        '[[backends]]\nname = "a"\nbase_url = "http://x/v1"\nmodel = "m"\n'
        'api_key = "sk-secret-123"\nconcurrency = "many"\n'
    )
    with pytest.raises(ConfigFileError) as caught:
        load_config(path)
    assert "sk-secret-123" not in str(caught.value) and "concurrency" in str(caught.value)


# -- the command ---------------------------------------------------------------------------


def cli(*argv: str) -> int:
    """``gptgate profile ...`` through the real entry point (its wiring included)."""
    return gptgate.cli.main(["profile", *argv])


def write_config(path: Path, base_url: str) -> Path:
    path.write_text(
        f'[[backends]]\nname = "local"\nbase_url = "{base_url}"\nmodel = "{MODEL}"\n'
        'hardware = "gpu"\ntimeout = 10\n'
    )
    return path


def test_cli_profiles_a_real_loopback_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a fast deployment of the gpu profile, so that the real-time run takes a second or two
    with SimProcess("gpu", ttft_overhead_s=0.005, base_step_s=0.001, model=MODEL) as server:
        config = write_config(tmp_path / "gate.toml", server.base_url)
        out = tmp_path / "baseline.json"
        code = cli("--config", str(config), "--out", str(out), "--levels", "1,5",
                   "--requests", "8", "--max-tokens", "8")
        printed = capsys.readouterr()
        assert code == 0, printed.err
        assert "baseline written to" in printed.out and "local" in printed.out
        baseline = Baseline.load(out)
        entry = baseline.backends[0]
        assert (entry.name, entry.base_url, entry.model) == ("local", server.base_url, MODEL)
        assert set(entry.bands) == {"1-4", "5-15"}
        assert all(f.samples == 8 and f.ttft_p95_s is not None for f in entry.bands.values())
        # --json: the same document on stdout, nothing else
        code = cli("--config", str(config), "--out", str(out), "--levels", "2",
                   "--requests", "4", "--max-tokens", "4", "--json")
        printed = capsys.readouterr()
        assert code == 0
        document = json.loads(printed.out)
        assert document["version"] == 1 and Baseline.parse(document) == Baseline.load(out)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--requests", "0"], "--requests must be an integer >= 1, got '0'"),
        (["--requests", "-1"], "--requests must be an integer >= 1"),
        (["--levels", "2,3"], "measure band 1-4 twice"),
        (["--levels", "auto"], "--levels must be an integer >= 1, got 'auto'"),
        (["--max-tokens", "x"], "--max-tokens must be an integer"),
    ],
)
def test_cli_bad_usage_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    config = write_config(tmp_path / "gate.toml", "http://127.0.0.1:9/v1")
    code = cli("--config", str(config), "--out", str(tmp_path / "b.json"), *argv)
    err = capsys.readouterr().err
    assert code == 2 and expected in err and err.count("\n") == 1
    assert not (tmp_path / "b.json").exists()


def test_cli_bad_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("--config", str(tmp_path / "none.toml"), "--out", str(tmp_path / "b.json")) == 2
    assert "none.toml: no such file" in capsys.readouterr().err
    config = write_config(tmp_path / "gate.toml", "http://127.0.0.1:9/v1")
    assert cli("--config", str(config), "--out", str(tmp_path / "no" / "b.json")) == 2
    assert "not a file in an existing directory" in capsys.readouterr().err


def test_cli_run_where_every_call_fails_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "gate.toml", f"http://127.0.0.1:{free_port()}/v1")
    out = tmp_path / "b.json"
    code = cli("--config", str(config), "--out", str(out), "--levels", "1", "--requests", "2")
    err = capsys.readouterr().err
    assert code == 1 and "every call to backend 'local' failed" in err and err.count("\n") == 1
    assert not out.exists()
