"""The benchmarks must keep running: a tiny size of every workload, figures checked for sanity.

Nothing here judges speed (the benchmarks print PASS/MISS against their targets, never fail).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


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
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--json", str(out)],
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
    assert set(w) >= {"create", "result", "get", "cancel", "memory", "scaling", "ws", "churn"}

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
        assert point["memory"]["rss_after_kib"] > 0
    assert w["scaling"]["get_rate_ratio"] > 0
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

    assert {t["result"] for t in data["targets"]} <= {"PASS", "MISS"}
    assert len(data["targets"]) >= 12
