"""``gptgate sim serve``: a real loopback server started from the command line, with the
fault options of the in-process simulator; bad options are one line and exit 2."""

from __future__ import annotations

import socket

import httpx2
import pytest

from gptgate.cli import main
from gptgate.sim.process import free_port

from .clitools import cli_server

MESSAGES = [{"role": "user", "content": "hello"}]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_port_out_of_range_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "serve", "--port", "70000"]) == 2
    assert "a port is 1-65535, got 70000" in _one_line(capsys.readouterr().err)


def test_a_taken_port_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["sim", "serve", "--port", str(port)]) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--error-rate", "1.5"], "must be within 0 and 1"),
        (["--error-rate", "0.7", "--reset-rate", "0.7"], "must not add up to more than 1"),
        (["--storm-every", "5", "--storm-s", "6"], "storm"),
        (["--profile", "nope"], "unknown simulator profile 'nope'"),
        (["--time-scale", "0"], "must be > 0"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    options: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "serve", "--port", str(free_port()), *options]) == 2
    assert says in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--storm-every", "10"], "--storm-s and --storm-every go together"),
        (["--storm-s", "5"], "--storm-s and --storm-every go together"),
    ],
)
def test_half_a_storm_is_refused_not_served_without_storms(
    options: list[str], says: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A storm needs a period and a length: either alone used to serve and never storm."""
    served: list[object] = []
    monkeypatch.setattr("gptgate.sim.serve", lambda *a, **k: served.append(k))
    assert main(["sim", "serve", "--port", str(free_port()), *options]) == 2
    assert says in _one_line(capsys.readouterr().err)
    assert served == []


def test_port_0_serves_on_a_free_port_and_prints_it() -> None:
    """Scripts and CI jobs can't know a free port in advance: 0 asks the system for one,
    and the printed base_url (``--json``) names the port actually served; ``python -m
    gptgate`` is the same command as ``gptgate``."""
    with cli_server("--time-scale", "100", port=0, module="gptgate") as (base_url, _):
        port = int(base_url.rsplit(":", 1)[1].split("/")[0])
        assert port != 0
        answer = httpx2.post(f"{base_url}/chat/completions", json={"messages": MESSAGES},
                             timeout=10)
        assert answer.status_code == 200 and answer.json()["choices"]


def test_fault_options_reach_the_served_engine() -> None:
    options = ["--time-scale", "100", "--error-rate", "1", "--stall-s", "2",
               "--storm-every", "60", "--storm-s", "5"]
    with cli_server(*options) as (base_url, info):
        faults = info["faults"]
        assert isinstance(faults, dict)
        assert (faults["error_rate"], faults["stall_s"]) == (1.0, 2.0)
        assert (faults["storm_every_s"], faults["storm_s"]) == (60.0, 5.0)
        statuses = {
            httpx2.post(f"{base_url}/chat/completions", json={"messages": MESSAGES},
                        timeout=10).status_code
            for _ in range(8)
        }
    # every request drew a fault: a 5xx, or a 429 when it landed in a storm (every 0.6 s
    # real, 0.05 s long: a request slowed by a loaded machine can meet one)
    assert statuses <= {429, 500, 503} and statuses & {500, 503}


def test_resets_reach_the_client() -> None:
    with (
        cli_server("--time-scale", "100", "--reset-rate", "1") as (base_url, _),
        pytest.raises(httpx2.TransportError),
    ):
        httpx2.post(f"{base_url}/chat/completions", json={"messages": MESSAGES}, timeout=10)


@pytest.mark.parametrize("provider", ["anthropic", "azure", "deepseek"])
async def test_a_providers_dialect_is_served_at_the_root_its_preset_takes(provider: str) -> None:
    """``--profile anthropic|azure|deepseek``: the printed base_url is the server root, which
    ``Backend(provider=...)`` takes as its preset's, and a chat over it is answered."""
    import gptgate as gg
    from gptgate.sim import get_profile

    with cli_server("--profile", provider, "--time-scale", "100") as (base_url, info):
        assert info["profile"] == provider and not base_url.endswith("/v1")
        extra = {"deployment": get_profile(provider).model} if provider == "azure" else {}
        backend = gg.Backend(name="p", provider=provider, base_url=base_url,
                             model=get_profile(provider).model, api_key="sk-test", **extra)
        async with gg.Gateway([backend], seed=1) as gate:
            result = await gate.chat(MESSAGES, max_tokens=20)
    assert result.text and result.usage.output_tokens > 0


def test_with_json_stdout_holds_only_the_address_not_the_access_log() -> None:
    """``--json`` is for a script that reads the address and goes on (``Popen(...,
    stdout=PIPE)``, one ``readline()``): stdout is that one JSON line. Before, uvicorn's
    access log went to stdout too — not the one JSON document the CLI promises — and once a
    few hundred requests filled the unread pipe, the server blocked writing its log and
    answered nothing more. The log goes to stderr."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from .clitools import cli_env

    args = [sys.executable, "-m", "gptgate", "sim", "serve", "--port", "0", "--json",
            "--time-scale", "100"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=cli_env())
    try:
        assert process.stdout is not None
        base_url = json.loads(process.stdout.readline())["base_url"]
        for _ in range(3):
            for attempt in range(200):
                try:
                    answer = httpx2.post(f"{base_url}/chat/completions",
                                         json={"messages": MESSAGES}, timeout=10)
                    break
                except httpx2.TransportError:
                    assert attempt < 199 and process.poll() is None, "did not start"
                    time.sleep(0.05)
            assert answer.status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    assert out == ""
    assert "POST /v1/chat/completions" in err  # the access log is still there, on stderr


@pytest.mark.parametrize("options", [[], ["--json"]])
def test_without_uvicorn_no_address_is_printed_for_a_server_that_never_serves(
    options: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script reads the address line and goes on (docs/cli.md): without the ``sim`` extra
    that line used to come first, then the one-line error — the script called a server that
    was never there. Now the missing extra is the only line, on stderr, exit 1."""
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # ``import uvicorn`` raises ImportError
    assert main(["sim", "serve", "--port", "0", *options]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "needs uvicorn: pip install 'gptgate[sim]'" in _one_line(err)
