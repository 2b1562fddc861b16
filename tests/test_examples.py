"""Every ``examples/*.py`` runs by itself, with no API key, and says what it showed — so the
examples never rot. A new example is picked up by the glob; it then needs an entry in
``EXPECTED`` (what its output must contain), or its test fails saying so."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
#: each example's cap on its own CPU time; together they take ~15 s on an idle 2-core
#: machine. CPU, not wall time: on a loaded CI box (load 12 on 2 cores) batch_map's ~10 s of
#: CPU took more than 60 s of wall time, and a wall-clock cap failed an example that was fine
CPU_CAP_S = 60.0
#: a hang uses no CPU: the wall-clock backstop that catches it, far past any loaded run
WALL_CAP_S = 600.0

#: a line each example must print: the figure it exists to show, not just that it ran
EXPECTED: dict[str, str] = {
    "quickstart": r"^stats +-> 22 calls, 0 failed, limit \d+ .* tokens, \$0\.\d+$",
    "openai_sdk": r"^stats +-> 14 calls through the gateway \(0 failed\)",
    "anthropic_api": r"^ledger +-> (\$0\.\d{4}) for 23 calls; the server billed \1$",
    "guard_existing_function": r"^guarded calls: 40/40 succeeded; the server answered [1-9]\d* "
    r"with a 5xx and the guard retried them \([1-9]\d* retries\)$",
    "batch_map": r"^10,000 of 10,000 items done \(0 failed\)",
    "streaming_endpoint": r"^GET /stats -> 3 calls, limit \d+, \$0\.\d+$",
    "hybrid_routing": r"^private=True x20: \{'gpu-onprem': 20\}$",
    "opentelemetry_console": r"^metric gen_ai\.client\.token\.usage \(\{token\}\): \d+ series",
    "offline_batch": r"^cost: \$0\.\d+ through the Batch API vs \$0\.\d+ live: 0\.5\dx$",
    "flask_app": r"^peak in flight at the server: [1-4] / limit 4 \[held\]$",
    "notebook_sync": r"^from inside a running event loop: 43 calls, gateway threads left: 0$",
    "fleet_workers": r"^peak in flight at the server: [1-6] / fleet limit 6 \[held\]",
    "azure": r"^burst  -> 60 calls into a 10 req/s deployment: 0 failed, \d+ answered 429, "
    r"longest run of 429s [12]$",
    "self_hosted": r"^self-hosted: 40 calls, 0 failed, on 3 servers$",
    "sdk_fallback": r"^fallback +-> 10 of 10 SDK requests answered: gpu-b 10, gpu-a 0$",
}


def _env() -> dict[str, str]:
    """No key of any provider, no fleet from the environment; this checkout's gptgate first
    (``python examples/x.py`` puts examples/, not the repository, on sys.path)."""
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and k != "GPTGATE_SHARED"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run(path: Path) -> tuple[int, str, str]:
    """Run an example in its own process group: past the cap, the example and whatever it
    started (a simulator process, redis-server, workers) are killed together."""
    process = subprocess.Popen(
        [sys.executable, str(path)], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    started = time.monotonic()
    while True:
        try:
            out, err = process.communicate(timeout=0.25)  # retried, no output is lost
            break
        except subprocess.TimeoutExpired:
            over = _over_cap(process.pid, time.monotonic() - started)
            if over:
                os.killpg(process.pid, signal.SIGKILL)
                out, err = process.communicate()
                pytest.fail(f"{path.name} ran past {over}\n{out[-2000:]}\n{err[-2000:]}")
    leftovers = _left_running(process.pid)
    if leftovers:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"{path.name} exited but left processes running: {leftovers}")
    return process.returncode, out, err


def _cpu_s(pid: int) -> float | None:
    """The CPU time a live process has used (user + system), or None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _over_cap(pid: int, wall_s: float) -> str:
    """Which cap a running example is past ("" if none): its CPU time, or the wall-clock
    backstop (the only cap where /proc cannot tell CPU time)."""
    cpu_s = _cpu_s(pid)
    if cpu_s is not None and cpu_s > CPU_CAP_S:
        return f"{CPU_CAP_S:g} s of CPU time"
    if wall_s > (WALL_CAP_S if cpu_s is not None else CPU_CAP_S):
        return f"{wall_s:.0f} s of wall time"
    return ""


def _left_running(group: int, grace_s: float = 3.0) -> list[int]:
    """The processes of the example's group still alive ``grace_s`` after it exited (its
    simulator, redis-server or workers must be stopped, not orphaned)."""
    if not Path("/proc").is_dir():  # not Linux: nothing to look at
        return []
    deadline = time.monotonic() + grace_s
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":  # pgrp; zombies are gone
                alive.append(int(entry.name))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def test_the_examples_are_there() -> None:
    names = {p.stem for p in EXAMPLES}
    assert set(EXPECTED) <= names, set(EXPECTED) - names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_an_example_says_what_it_shows_and_how_to_run_it(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    assert "What it shows" in doc and "How to run" in doc, path.name
    assert f"python examples/{path.name}" in doc, path.name


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_an_example_runs_by_itself_with_no_key(path: Path) -> None:
    code, out, err = _run(path)
    assert code == 0, f"{path.name} exited {code}\n{out[-2000:]}\n{err[-4000:]}"
    assert "Traceback" not in err, err[-4000:]
    pattern = EXPECTED.get(path.stem)
    assert pattern is not None, f"add the line {path.name} must print to EXPECTED"
    assert re.search(pattern, out, re.MULTILINE), f"{path.name} printed:\n{out[-3000:]}"


def test_an_example_past_its_cpu_cap_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap still fails a runaway example, however loaded the machine: by its CPU time."""
    if _cpu_s(os.getpid()) is None:
        pytest.skip("CPU time is read from /proc")
    spin = tmp_path / "spin.py"
    spin.write_text("while True:\n    pass\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "CPU_CAP_S", 0.3)
    with pytest.raises(pytest.fail.Exception, match=r"spin\.py ran past 0.3 s of CPU time"):
        _run(spin)
