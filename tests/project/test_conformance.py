"""The conformance harness: ``scripts/conformance.py`` and ``examples/conformance_server.py``.

The official suite itself runs under ``make conformance`` (a dependency of ``make test``): it
needs Node 22, installed once into ``.cache/conformance/``, and takes about 40 s. These tests
run without Node: how the script judges results against ``conformance/expected-failures.yml``
(reasons required, unexpected failures and stale entries fail), and that the example server
offers every fixture the suite's scenarios name.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trio_mcp import Server, connect_in_memory

ROOT = Path(__file__).resolve().parents[2]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("conformance_script", ROOT / "scripts" / "conformance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


conf = _load_script()


def run(name: str, **scenarios: list[tuple[str, str]] | None) -> Any:
    """A Run whose scenarios (underscores for dashes) have these (check, status) lists;
    None: the scenario threw and wrote no checks.json."""
    result = conf.Run(name)
    for key, checks in scenarios.items():
        scenario = key.replace("_", "-")
        passed = checks is not None and all(status != "FAILURE" for _, status in checks)
        listed = None if checks is None else [{"id": c, "status": s, "errorMessage": c} for c, s in checks]
        result.scenarios[scenario] = conf.Scenario(scenario, passed, checks=listed)
    return result


def entry(scenario: str, check: str | None = None, runs: list[str] | None = None) -> Any:
    return conf.Entry(scenario, "because", check, runs)


# -- the baseline file ----------------------------------------------------------------------------
def test_every_entry_needs_a_written_reason() -> None:
    with pytest.raises(conf.SetupError, match="reason"):
        conf.parse_baseline({"server": [{"scenario": "ping"}]}, "f.yml")
    with pytest.raises(conf.SetupError, match="reason"):
        conf.parse_baseline({"server": [{"scenario": "ping", "reason": "  "}]}, "f.yml")


@pytest.mark.parametrize(
    "item",
    [
        "ping",  # the suite's own format (bare names) carries no reason
        {"scenario": "ping", "reason": "r", "why": "typo"},
        {"scenario": "ping", "reason": "r", "runs": ["2024-11-05"]},
        {"scenario": "ping", "reason": "r", "runs": []},
        {"scenario": "ping", "reason": "r", "check": ["a", "b"]},
    ],
)
def test_malformed_entries_are_refused(item: Any) -> None:
    with pytest.raises(conf.SetupError):
        conf.parse_baseline({"server": [item]}, "f.yml")


def test_entries_parse() -> None:
    [parsed] = conf.parse_baseline(
        {"server": [{"scenario": "ping", "check": "c", "runs": ["all"], "reason": " r\n"}]}, "f.yml"
    )
    assert (parsed.scenario, parsed.check, parsed.runs, parsed.reason) == ("ping", "c", ["all"], "r")


def test_the_repository_baseline_parses() -> None:
    if not conf.installed(conf.CACHE):
        pytest.skip("Node and the suite are not installed yet (make conformance installs them)")
    entries = conf.load_baseline(conf.BASELINE, conf.CACHE)
    assert all(e.reason for e in entries)


# -- judging ----------------------------------------------------------------------------------------
def test_all_passing_and_nothing_listed() -> None:
    assert conf.judge([run("all", ping=[("ping", "SUCCESS")])], [], False) == ([], [])


def test_an_unlisted_failure_is_unexpected() -> None:
    unexpected, stale = conf.judge([run("all", ping=[("a", "SUCCESS"), ("b", "FAILURE")])], [], False)
    assert unexpected == ["all: ping:b"] and stale == []


def test_warnings_do_not_fail() -> None:
    assert conf.judge([run("all", ping=[("a", "WARNING")])], [], False) == ([], [])


def test_a_listed_failure_is_expected() -> None:
    failing = run("all", ping=[("b", "FAILURE")])
    assert conf.judge([failing], [entry("ping")], False) == ([], [])
    assert conf.judge([failing], [entry("ping", "b")], False) == ([], [])


def test_a_check_entry_excuses_that_check_only() -> None:
    unexpected, _ = conf.judge(
        [run("all", ping=[("b", "FAILURE"), ("c", "FAILURE")])], [entry("ping", "b")], False
    )
    assert unexpected == ["all: ping:c"]


def test_a_thrown_scenario_is_a_failure_of_its_own_name() -> None:
    thrown = run("all", ping=None)
    thrown.scenarios["ping"].passed = False
    assert conf.judge([thrown], [], False)[0] == ["all: ping:ping"]
    assert conf.judge([thrown], [entry("ping")], False) == ([], [])


def test_an_entry_that_passes_is_stale() -> None:
    _, stale = conf.judge([run("all", ping=[("b", "SUCCESS")])], [entry("ping")], False)
    assert stale == ["ping: passes in run all"]


def test_a_check_entry_whose_check_passes_is_stale() -> None:
    _, stale = conf.judge(
        [run("all", ping=[("b", "SUCCESS"), ("c", "FAILURE")])],
        [entry("ping", "b"), entry("ping", "c")],
        False,
    )
    assert stale == ["ping:b: the check passes in run all"]


def test_an_absent_check_of_a_failing_scenario_is_tolerated() -> None:
    # a scenario that bails on a failed prerequisite never reaches its later checks
    failing = run("all", ping=[("a", "FAILURE")])
    assert conf.judge([failing], [entry("ping", "a"), entry("ping", "later")], False) == ([], [])


def test_entries_are_judged_per_run() -> None:
    runs = [run("2026-07-28", ping=[("b", "FAILURE")]), run("all", ping=[("b", "SUCCESS")])]
    assert conf.judge(runs, [entry("ping", runs=["2026-07-28"])], False) == ([], [])
    _, stale = conf.judge(runs, [entry("ping")], False)
    assert stale == ["ping: passes in run all"]
    unexpected, _ = conf.judge(runs, [entry("ping", runs=["all"])], False)
    assert unexpected == ["2026-07-28: ping:b"]


def test_an_entry_for_a_scenario_that_never_ran_is_stale() -> None:
    runs = [run(name, ping=[("a", "SUCCESS")]) for name in conf.RUNS]
    _, stale = conf.judge(runs, [entry("no-such-scenario")], False)
    assert stale == ["no-such-scenario: failed in no run"]
    _, stale = conf.judge(runs[:1], [entry("no-such-scenario")], False)  # a partial run: not judged
    assert stale == []
    _, stale = conf.judge(runs[:1], [entry("no-such-scenario", runs=["2025-11-25"])], False)
    assert stale == ["no-such-scenario: lists run 2025-11-25, where it did not run"]


def test_the_summary_is_parsed() -> None:
    assert conf.SUMMARY_LINE.match("✗ tasks-lifecycle: 8 passed, 1 failed").groups() == (
        "✗",
        "tasks-lifecycle",
        "8",
        "1",
        None,
    )
    not_scored = conf.NOT_SCORED_LINE.match("  ✓ json-schema-2020-12 (pending)")
    assert not_scored.groups() == ("json-schema-2020-12", "pending")


# -- client mode -------------------------------------------------------------------------------------
CLIENT_OUTPUT = """Running requirements 2026-07-28 (3 scenarios) in parallel...

=== SUITE SUMMARY ===

✓ auth/metadata-default: 18 passed, 0 failed
✗ request-metadata: 5 passed, 0 failed, 1 warnings
✗ auth/dpop: 10 passed, 3 failed

Total: 33 passed, 3 failed, 1 warnings

Not scored for 2026-07-28: 1 scenario(s) run, 1 failing. These do not affect conformance.
  ✗ auth/dpop (extension)
"""


def test_the_client_summary_is_parsed_and_a_warning_fails_a_client_scenario() -> None:
    parsed = conf.Run("2026-07-28")
    conf.parse_summary(parsed, CLIENT_OUTPUT, "")
    assert {name: s.passed for name, s in parsed.scenarios.items()} == {
        "auth/metadata-default": True,
        "request-metadata": False,  # the suite's own verdict: a warning fails in client mode
        "auth/dpop": False,
    }
    assert not parsed.scenarios["auth/dpop"].scored
    parsed.scenarios["request-metadata"].checks = [{"id": "retry", "status": "WARNING"}]
    unexpected, _ = conf.judge([parsed], [entry("auth/dpop")], False, conf.CLIENT_RUNS, "client ")
    assert unexpected == ["client 2026-07-28: request-metadata:retry"]


def test_client_entries_name_client_runs() -> None:
    [parsed] = conf.parse_baseline(
        {"client": [{"scenario": "auth/dpop", "runs": ["2026-07-28"], "reason": "r"}]}, "f.yml", "client"
    )
    assert parsed.runs == ["2026-07-28"]
    with pytest.raises(conf.SetupError):  # "all" is a server run only
        conf.parse_baseline(
            {"client": [{"scenario": "x", "runs": ["all"], "reason": "r"}]}, "f.yml", "client"
        )


def test_the_repository_client_baseline_parses() -> None:
    if not conf.installed(conf.CACHE):
        pytest.skip("Node and the suite are not installed yet (make conformance installs them)")
    entries = conf.load_baseline(conf.CLIENT_BASELINE, conf.CACHE, "client")
    assert all(e.reason for e in entries)


# -- the example server ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server() -> Server:
    found = runpy.run_path(str(ROOT / "examples" / "conformance_server.py"))["server"]
    assert isinstance(found, Server)
    return found


SUITE_TOOLS = {
    # 2025-11-25 and both eras
    "test_simple_text": "forbidden",
    "test_image_content": "forbidden",
    "test_audio_content": "forbidden",
    "test_embedded_resource": "forbidden",
    "test_multiple_content_types": "forbidden",
    "test_tool_with_logging": "forbidden",
    "test_tool_with_progress": "forbidden",
    "test_error_handling": "forbidden",
    "test_sampling": "forbidden",
    "test_elicitation": "forbidden",
    "test_elicitation_sep1034_defaults": "forbidden",
    "test_elicitation_sep1330_enums": "forbidden",
    "test_reconnection": "forbidden",
    "json_schema_2020_12_tool": "forbidden",
    # 2026-07-28
    "test_missing_capability": "forbidden",
    "test_streaming_elicitation": "forbidden",
    "test_logging_tool": "forbidden",
    "test_trigger_tool_change": "forbidden",
    "test_trigger_prompt_change": "forbidden",
    "test_header_param": "forbidden",
    "test_input_required_result_elicitation": "forbidden",
    "test_input_required_result_sampling": "forbidden",
    "test_input_required_result_list_roots": "forbidden",
    "test_input_required_result_request_state": "forbidden",
    "test_input_required_result_multiple_inputs": "forbidden",
    "test_input_required_result_multi_round": "forbidden",
    "test_input_required_result_tampered_state": "forbidden",
    "test_input_required_result_capabilities": "forbidden",
    # the tasks extension: sync-only, task-supporting, always a task
    "greet": "forbidden",
    "slow_compute": "optional",
    "confirm_delete": "optional",
    "multi_input": "optional",
    "failing_job": "required",
    "protocol_error_job": "required",
    "test_tool_with_task": "required",
}


def test_the_server_offers_every_tool_the_suite_names(server: Server) -> None:
    offered = {name: t.tool.execution.task_support for name, t in server.tools.items() if name in SUITE_TOOLS}
    assert offered == SUITE_TOOLS
    schema = server.tools["json_schema_2020_12_tool"].tool.input_schema
    assert {"$schema", "$defs", "allOf", "if", "then", "else"} <= set(schema)


def test_the_server_offers_the_resources_prompts_and_completion(server: Server) -> None:
    assert {"test://static-text", "test://static-binary", "test://watched-resource"} <= set(server.resources)
    assert "test://template/{id}/data" in server.templates
    assert {
        "test_simple_prompt",
        "test_prompt_with_arguments",
        "test_prompt_with_embedded_resource",
        "test_prompt_with_image",
        "test_input_required_result_prompt",
    } <= set(server.prompts)
    assert ("prompt", "test_prompt_with_arguments", "arg1") in server.completers


async def test_the_content_tools_answer(server: Server) -> None:
    async with connect_in_memory(server) as client:
        assert (
            await client.call_tool("test_simple_text", {})
        ).text == "This is a simple text response for testing."
        mixed = await client.call_tool("test_multiple_content_types", {})
        assert [block.type for block in mixed.content] == ["text", "image", "resource"]
        failed = await client.call_tool("test_error_handling", {})
        assert failed.is_error
