"""The benchmarks must keep running: a tiny size of every workload, figures checked for sanity.

Nothing here judges speed (the benchmarks print PASS/MISS against their targets, never fail).
The TypeScript SDK peer runs only if its Node install (``.cache/bench/``, made by ``make bench``)
is already there: this test never installs it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_node_setup() -> ModuleType:
    """``benchmarks/peers/node.py``, by path (the repository root need not be on sys.path)."""
    spec = importlib.util.spec_from_file_location(
        "bench_peers_node", ROOT / "benchmarks" / "peers" / "node.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


node = _load_node_setup()


def _positive_stat(stat: dict[str, Any]) -> None:
    assert stat["requests"] > 0
    assert stat["seconds"] > 0
    assert stat["rate"] > 0
    assert stat["p99_ms"] >= stat["p50_ms"] > 0
    assert stat["errors"] == 0
    assert stat["cpu_us_per_request"] > 0


def _compared(entry: dict[str, Any]) -> None:
    _positive_stat(entry["server"])
    _positive_stat(entry["floor"])
    assert entry["ratio"] > 0
    assert "full_gc" in entry["server"]  # the server recorded its collections


def _versus_stdio(entry: dict[str, Any]) -> None:
    _positive_stat(entry["ws"])
    _positive_stat(entry["stdio"])
    assert entry["ratio"] > 0
    assert entry["cpu_ratio"] > 0
    assert "full_gc" in entry["ws"]  # the WebSocket server recorded its collections too


def test_smoke_run_covers_every_workload(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    with_ts = node.installed()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--json",
            str(out),
            *([] if with_ts else ["--no-ts"]),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "targets" in proc.stdout
    data = json.loads(out.read_text())
    assert data["machine"]["nproc"] >= 1
    w = data["workloads"]
    assert set(w) >= {
        "create", "result", "get", "cancel", "memory", "scaling", "ws", "churn", "stores", "http",
        "hardening", "peers", "memory_breakdown"
    }  # fmt: skip

    # 0: the peers, interleaved, each with sane figures; trio-mcp's ratios to each
    peers = w["peers"]
    expected = ["trio-mcp", *(["ts-sdk"] if with_ts else []), "bare-trio", "raw-floor"]
    assert peers["peers"] == expected
    assert peers["L"] == w["get"]["L"]
    for name in expected:
        runs = peers["runs"][name]
        assert len(runs) == peers["repeats"] >= 1
        for run in runs:
            for op in ("create", "result", "get", "cancel"):
                _positive_stat(run[op])
                assert 0 < run[op]["main_thread_cpu_us_per_request"] <= run[op]["cpu_us_per_request"]
            assert run["memory"]["rss_after_kib"] > 0
        median = peers["median"][name]
        assert all(median["cpu_us_per_request"][op] > 0 for op in ("create", "result", "get", "cancel"))
        if name != "trio-mcp":
            ratios = peers["ratios"][name]
            for op in ("create", "result", "get", "cancel"):
                expect = round(
                    peers["median"]["trio-mcp"]["cpu_us_per_request"][op] / median["cpu_us_per_request"][op],
                    4,
                )
                assert ratios[op] == expect
                # paired: the median over rounds of that round's trio-mcp / this peer
                pairs = [
                    ours[op]["cpu_us_per_request"] / theirs[op]["cpu_us_per_request"]
                    for ours, theirs in zip(peers["runs"]["trio-mcp"], runs, strict=True)
                ]
                assert peers["paired_ratios"][name][op] == round(statistics.median(pairs), 4)
    assert "paired (median of each round's trio-mcp / peer)" in proc.stdout
    trio_cancel = peers["trio_cancel_us"]
    assert len(trio_cancel["runs"]) == peers["repeats"] and trio_cancel["median"] > 0
    assert "Trio alone, cancelling a task asleep in its cancel scope" in proc.stdout
    for name in ("trio-mcp", "bare-trio", *(["ts-sdk"] if with_ts else [])):
        assert peers["median"][name]["rss_bytes_per_task"] > 0  # the stateful peers hold the tasks
    assert "0 headline" in proc.stdout
    assert ("<= 1.0x TS SDK" in proc.stdout) == with_ts
    assert "<= 1.3x bare Trio" in proc.stdout
    if with_ts:
        assert peers["versions"]["@modelcontextprotocol/sdk"] == node.SDK_VERSION
        assert peers["versions"]["node"].startswith("v22.")
        assert any(t["target"].startswith("cancel: CPU/request trio-mcp / TS SDK") for t in data["targets"])
    assert any(t["target"].startswith("get: CPU/request trio-mcp / bare Trio") for t in data["targets"])

    # 12: the memory of a live task, attributed in-process for trio-mcp and the bare-Trio floor
    breakdown = w["memory_breakdown"]
    assert breakdown["live"] == w["get"]["L"]
    assert set(breakdown["subjects"]) == {"trio-mcp", "bare-trio"}
    for name, subject in breakdown["subjects"].items():
        assert subject["objects"]["per_task"] > 10  # a Trio task, its coroutines, a cancel scope...
        assert subject["objects"]["bytes_per_task"] > 1000
        assert subject["traced"]["bytes_per_task"] > 1000
        types = {row["type"] for row in subject["objects"]["by_type"]}
        assert "trio.CancelScope" in types
        own = subject["traced"]["by_own_line"][0]["where"]
        assert own.startswith(
            ("trio_mcp/", "benchmarks/server.py") if name == "trio-mcp" else "benchmarks/trio_floor.py"
        )
    assert "12 memory per idle live sleep task" in proc.stdout

    _compared(w["create"])
    _compared(w["result"])
    _compared(w["get"])
    _compared(w["cancel"])
    _positive_stat(w["cancel"]["probe"]["server"])

    points = w["scaling"]["points"]
    assert len(points) >= 2
    for point in points:
        _compared(point["get"])
        _compared(point["cancel"])
        # the creation of the sleep tasks counts every round's: as many creates as cancels
        assert point["create_sleep"]["requests"] == point["L"] * point["cancel"]["rounds"]
        assert point["memory"]["rss_after_kib"] > 0
    assert w["scaling"]["get_rate_ratio"] > 0
    seq = w["scaling"]["flat_sequential"]
    assert (seq["from_L"], seq["to_L"]) == (points[0]["L"], points[-1]["L"])
    assert seq["get_cpu_ratio"] > 0 and seq["cancel_cpu_ratio"] > 0 and seq["create_cpu_ratio"] > 0
    # the judged flatness: the smallest and largest L on two servers side by side
    flat = w["scaling"]["flat"]
    lo, hi = points[0]["L"], points[-1]["L"]
    assert (flat["from_L"], flat["to_L"], flat["side_by_side"]) == (lo, hi, True)
    turns = -(-hi // flat["chunk"])
    assert flat["build_requests"] == {"low": lo * turns, "high": hi}
    rounds = max(1, data["config"]["cancel_min"] // lo)  # creates at L: as many on both ends
    assert flat["create_requests"] == {"low": lo * rounds, "high": lo * rounds}
    assert flat["cancel_requests"] == {"low": lo * turns, "high": hi}
    assert flat["get_requests"]["low"] == flat["get_requests"]["high"] >= hi
    for op in ("create", "get", "cancel", "build"):
        cpu = flat[f"{op}_cpu_us"]
        assert cpu["low"] > 0 and cpu["high"] > 0 and flat[f"{op}_paired"] > 0
        ratio = cpu["high"] / cpu["low"]  # of the rounded figures: within 1% of the exact one
        assert abs(flat[f"{op}_cpu_ratio"] - ratio) <= 0.01 * ratio
    assert "flatness, the two ends side by side (judged)" in proc.stdout
    assert any(t["target"].endswith("(side by side)") for t in data["targets"])
    assert w["scaling"]["cancel_rate_ratio"] > 0
    assert w["memory"]["bytes_per_task"] > 0

    ws = w["ws"]
    _versus_stdio(ws["create"])
    _versus_stdio(ws["get"])
    _versus_stdio(ws["cancel"])
    _versus_stdio(ws["cancel"]["probe"])
    assert ws["create"]["n"] == w["create"]["n"]
    assert ws["create"]["stdio"] == w["create"]["server"]  # the ratio is to this run's stdio figure
    assert ws["get"]["L"] == ws["cancel"]["L"] == w["get"]["L"]
    assert ws["get"]["stdio"] == w["get"]["server"]
    assert ws["cancel"]["stdio"] == w["cancel"]["server"]
    assert ws["memory"]["bytes_per_task"] > 0
    for row in ("7 ws create", "7 ws get", "7 ws cancel"):
        assert row in proc.stdout

    churn = w["churn"]
    assert churn["create_rate"] > 0
    assert all(chunk["rate"] > 0 for chunk in churn["chunks"])
    assert churn["list_empty"], "every short-TTL task should have expired"
    assert churn["get_probe"]["expired_-32602"] == churn["get_probe"]["sampled"] > 0
    assert churn["rss_end_kib"] > 0
    # growth is judged on medians of the first and last thirds from the steady chunk on
    cpus = [c["cpu_us_per_request"] for c in churn["chunks"][churn["steady_chunk"] :]]
    third = churn["thirds"]
    assert third == max(1, len(cpus) // 3)
    assert churn["cpu_us_early_median"] == statistics.median(cpus[:third])
    assert churn["cpu_us_late_median"] == statistics.median(cpus[-third:])
    assert "churn: server CPU per create, median of the last" in proc.stdout

    # 9: every store measured in this run; SQLite and Redis as ratios to memory's figures
    stores = w["stores"]["stores"]
    assert set(stores) == {"memory", "sqlite", "redis"}
    for name, entry in stores.items():
        for phase in ("create", "get", "cancel"):
            _positive_stat(entry[phase])
        if name != "memory":
            for phase in ("create", "get", "cancel"):
                cmp = entry["vs_memory"][phase]
                assert cmp["ratio"] == round(entry[phase]["rate"] / stores["memory"][phase]["rate"], 4)
                assert cmp["ratio"] > 0 and cmp["cpu_ratio"] > 0
    assert "store_cpu_us_per_request" in stores["redis"]["create"]
    assert "9 sqlite create" in proc.stdout and "9 redis cancel" in proc.stdout

    # 10: HTTP against stdio with the same sizes, in this run
    http = w["http"]
    for side in ("stdio", "http"):
        for phase in ("create", "get", "cancel"):
            _positive_stat(http[side][phase])
    for phase in ("create", "get", "cancel"):
        cmp = http["http"]["vs_stdio"][phase]
        assert cmp["ratio"] == round(http["http"][phase]["rate"] / http["stdio"][phase]["rate"], 4)
        assert cmp["ratio"] > 0 and cmp["cpu_ratio"] > 0
    assert "10 http get" in proc.stdout

    # 11: the bounds hold (the smoke run lowers the unread-answer bound and the write timeout)
    hard = w["hardening"]
    for name in ("non_reader_stdio", "non_reader_ws"):
        r = hard[name]
        assert r["disconnected"], f"{name}: the server never let the non-reading client go"
        assert r["rss_peak_kib"] >= r["rss_start_kib"] > 0
        assert r["samples"]
    assert hard["non_reader_ws"]["server_after"]["sessions"] == 0
    assert hard["non_reader_ws"]["serves_others_after"]
    flood = hard["waiter_flood"]
    assert flood["refused"] == flood["waiters"] - 256
    assert flood["refused_codes"] == [-32603]
    assert any("at most 256 outstanding" in m for m in flood["refused_messages"])
    assert math.isfinite(flood["ping_ms_max"])  # every ping answered while the waiters are parked
    churn_c = hard["disconnect_churn"]
    assert churn_c["tasks_created"] == churn_c["connections"] * churn_c["tasks_per_connection"]
    assert churn_c["left"]["sessions"] == churn_c["left"]["actors"] == churn_c["left"]["records"] == 0
    assert "11 hardening" in proc.stdout

    assert {t["result"] for t in data["targets"]} <= {"PASS", "MISS"}
    assert len(data["targets"]) >= 12


def test_the_in_process_harness_measures_both_subjects() -> None:
    # In a child process: the harness tunes the collector, which this process should keep.
    for subject in ("trio-mcp", "bare-trio"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.inproc",
                "--subject",
                subject,
                "--live",
                "70",
                "-n",
                "70",
                "--json",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        figures = json.loads(proc.stdout)
        assert set(figures) == {"create_sleep", "create", "result", "get", "cancel"}
        for op in figures.values():
            assert op["cpu_us"] > 0 and op["gc_us"] >= 0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--subject", "bare-trio"), r"bare-trio: instructions ([\d,]+) per create\n"),
        (("--http", "--op", "get", "--subject", "floor"), r"floor: instructions ([\d,]+) per get\n"),
    ],
)
def test_instruction_counts_come_from_the_real_server_process(args: tuple[str, ...], line: str) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", *args, "--sizes", "20", "60"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    match = re.fullmatch(line, proc.stdout)
    assert match is not None, proc.stdout
    # A create costs bare Trio some 250k instructions, an HTTP request the h11 floor some 600k;
    # start-up (tens of millions) cancels out.
    assert 50_000 < int(match.group(1).replace(",", "")) < 2_000_000


@pytest.mark.parametrize(
    ("args", "first", "own"),
    [
        (
            ("--op", "get", "--subject", "bare-trio"),
            "bare-trio: {} per get",
            r"benchmarks/trio_floor\.py:\d+:handle$",
        ),
        (
            ("--http", "--op", "m_call", "--subject", "floor"),
            "floor: {} per m_call",
            r"h11/_connection\.py:\d+:",
        ),
        (
            ("--op", "get", "--subject", "bare-trio", "--lines"),
            "bare-trio: {} per get",
            r"benchmarks/trio_floor\.py:\d+:handle@\d+$",
        ),
    ],
)
def test_bytecode_counts_come_from_the_measured_requests_only(
    args: tuple[str, ...], first: str, own: str
) -> None:
    """``benchmarks.bytecodes`` counts, in the real server process, the bytecodes of the
    requests it measures (over stdio, and with ``--http`` over HTTP): a ``tasks/get`` of the
    floor is some hundreds, an HTTP request some thousands (h11's parsing), the warm-up and
    the start-up (hundreds of thousands) left out; its own functions are named."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bytecodes", *args, "--n", "50"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line, *rows = proc.stdout.splitlines()
    match = re.fullmatch(first.format(r"([\d,]+) bytecodes, ([\d.]+) calls"), line)
    assert match is not None, proc.stdout
    assert 100 < int(match.group(1).replace(",", "")) < 20_000
    assert any(re.search(own, row) for row in rows), proc.stdout


def test_cachegrind_totals_are_read_from_its_summary() -> None:
    log = (
        "==7== I   refs:      2,059,682,073\n==7== I1  misses:       39,336,051\n"
        "==7== D1  misses:       31,946,305  ( 28,632,639 rd   +   3,313,666 wr)\n"
    )
    from benchmarks.instructions import totals

    assert totals(log) == {
        "instructions": 2_059_682_073,
        "d1_read_misses": 28_632_639,
        "i1_misses": 39_336_051,
    }
    assert totals("==7== I   refs:      1,000\n") == {"instructions": 1000}


def test_side_by_side_peers_take_turns_chunk_by_chunk_and_each_gets_all_its_requests() -> None:
    """Workload 0's peers take turns every ``chunk`` requests, the first of each turn rotating,
    so drift weighs on all alike; each peer's requests all run, in order, merged into one run."""
    from benchmarks.client import RunResult
    from benchmarks.workloads import interleaved

    calls: list[tuple[str, list[Any], int]] = []

    class Fake:
        def __init__(self, name: str) -> None:
            self.name = name

        def run(self, requests: Any, window: int) -> RunResult:
            calls.append((self.name, list(requests), window))
            return RunResult(len(requests), 0.5, [0.0] * len(requests), list(requests), peer_cpu=0.25)

    targets: Any = {name: Fake(name) for name in ("a", "b", "c")}
    requests = {"a": list(range(5)), "b": list(range(10, 15)), "c": list(range(20, 23))}
    runs = interleaved(targets, requests, 8, chunk=2)
    # turns: chunk 0 a b c, chunk 1 b c a, chunk 2 c a b (c has run out: only a, b)
    assert [name for name, _, _ in calls] == ["a", "b", "c", "b", "c", "a", "a", "b"]
    assert {window for _, _, window in calls} == {8}
    for name, wanted in requests.items():
        assert runs[name].results == wanted  # all of them, in order
        assert runs[name].count == len(wanted)
        assert runs[name].peer_cpu == 0.25 * sum(1 for n, _, _ in calls if n == name)
    # without a chunk: each target's requests in one run, one target after the other
    calls.clear()
    whole = interleaved(targets, requests, 4, chunk=None)
    assert [(name, len(part)) for name, part, _ in calls] == [("a", 5), ("b", 5), ("c", 3)]
    assert whole["b"].results == requests["b"]


def test_http_peers_smoke_measures_trio_mcp_and_the_floor_over_http_and_websocket(tmp_path: Path) -> None:
    """``python -m benchmarks.http_peers`` at a tiny size, trio-mcp and the h11 floor only (no
    install, no Node, no SDK environment): every op measured, ratios and targets reported."""
    out = tmp_path / "http.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.http_peers",
            "--smoke",
            "--servers",
            "trio-mcp,floor",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert set(data["runs"]) == {"trio-mcp", "floor"}
    http_ops = ["call", "create", "result", "get", "cancel", "m_call", "m_get", "get@1", "m_get@1"]
    assert data["ops"] == [*http_ops, "ws_create", "ws_get"]
    for name in ("trio-mcp", "floor"):
        for op in data["ops"]:
            (run,) = data["runs"][name][op]  # one round
            assert run["requests"] == (20 if op.endswith("@1") else 60 if op.startswith("ws_") else 40)
            assert run["cpu_us_per_request"] > 0
            assert run["p99_ms"] >= run["p50_ms"] > 0
            assert data["median"][name][op]["cpu_us_per_request"] == run["cpu_us_per_request"]
    for op in data["ops"]:
        ours, floor = (data["median"][n][op]["cpu_us_per_request"] for n in ("trio-mcp", "floor"))
        assert data["ratios"]["floor"][op] == round(ours / floor, 3)
    assert {t["result"] for t in data["targets"]} <= {"PASS", "MISS"}
    assert any(t["target"] == "get@1: p50 ms" for t in data["targets"])
    assert "2026-07-28 tasks/get" in proc.stdout and "/ h11 floor" in proc.stdout


def test_http_load_reads_content_length_chunked_and_sse_answers() -> None:
    from benchmarks.http_load import parse_response

    plain = bytearray(
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{"id":1}\nHTTP/1.1'
    )
    response = parse_response(plain)
    assert response is not None and response.body == b'{"id":1}\n' and plain == b"HTTP/1.1"
    events = [b'data: {"method":"n/x"}\n\n', b'id: 1\ndata: {"id":2,"result":{}}\n\n']
    sse = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    sse += b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events) + b"0\r\n\r\n"
    for cut in range(len(sse)):  # never a response before all of it is there
        assert parse_response(bytearray(sse[:cut])) is None
    response = parse_response(bytearray(sse))
    assert response is not None and response.message() == {"id": 2, "result": {}}
    empty = bytearray(b"HTTP/1.1 202 Accepted\r\ndate: x\r\n\r\n")
    response = parse_response(empty)
    assert response is not None and response.status == 202 and response.body == b"" and not empty


def test_http_peers_skip_a_peer_that_cannot_be_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """No npm (or no network for the SDK 2 environment): the peer is skipped with its reason."""
    from benchmarks import http_peers
    from benchmarks.peers import node as bench_node
    from benchmarks.peers import sdk2

    def no_npm(**_: Any) -> None:
        raise bench_node.SetupError("npm is not installed")

    def no_network(**_: Any) -> None:
        raise sdk2.SetupError("could not set up .venv-sdk2: pip failed")

    monkeypatch.setattr(bench_node, "install", no_npm)
    monkeypatch.setattr(sdk2, "install", no_network)
    said: list[str] = []
    ready, skipped = http_peers.install(["trio-mcp", "ts-sdk", "sdk2", "floor"], said.append)
    assert ready == ["trio-mcp", "floor"]
    assert skipped == {
        "ts-sdk": "SetupError: npm is not installed",
        "sdk2": "SetupError: could not set up .venv-sdk2: pip failed",
    }
    assert said == [f"skipping {http_peers.LABELS[n]}: {skipped[n]}" for n in ("ts-sdk", "sdk2")]


def test_the_scale_out_benchmark_counts_cpu_and_redis_commands_per_task(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.scale", "--tasks", "6", "--processes", "1"),
            *("--concurrency", "1,3", "--json", str(out)),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    rows = json.loads(out.read_text())
    assert [(row["concurrency"], row["processes"]) for row in rows] == [(1, 1), (3, 1)]
    for row in rows:
        assert row["tasks"] == 6
        assert row["cpu_ms_per_task"] > 0
        assert 1 <= row["commands_sent_per_task"] <= row["commands_run_per_task"]
