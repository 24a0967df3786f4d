"""Targets (PASS/MISS, never a failure) and the printed table."""

from __future__ import annotations

import statistics
from typing import Any

FLOOR_RATIO = 0.5
SCALING_TOLERANCE = 0.2
RSS_PER_TASK = 4 * 1024
CANCEL_P99_MS = 5.0
CHURN_RSS_TOLERANCE = 0.10
CHURN_RATE_TOLERANCE = 0.2
PEER_LIMITS = {"ts-sdk": 1.0, "bare-trio": 1.3}
"""Headline targets: trio-mcp's server CPU per request at most this many times the peer's."""
PEER_RSS_LIMITS = {"ts-sdk": 1.0}
"""And its RSS per live task at most this many times the peer's."""
FLAT_TOLERANCE = 0.2
"""Per-request cost from the smallest to the largest L: at most this much growth."""
PEER_LABELS = {"trio-mcp": "trio-mcp", "ts-sdk": "TS SDK", "bare-trio": "bare Trio", "raw-floor": "raw floor"}
PEER_OPS = ("create", "result", "get", "cancel")


def _point(results: dict[str, Any], live: int) -> dict[str, Any]:
    point: dict[str, Any]
    for point in results["workloads"]["scaling"]["points"]:
        if point["L"] == live:
            return point
    raise KeyError(live)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target with its measured value and PASS/MISS."""
    w = results["workloads"]
    main, base = w["scaling"]["main_L"], w["scaling"]["base_L"]
    top = _point(results, main)
    out: list[dict[str, Any]] = []

    def add(name: str, value: float, goal: str, ok: bool) -> None:
        out.append({"target": name, "value": value, "goal": goal, "result": "PASS" if ok else "MISS"})

    peers = w.get("peers")
    if peers is not None:
        for peer, limit in PEER_LIMITS.items():
            if peer not in peers["ratios"]:
                continue
            for op in PEER_OPS:
                ratio = peers["ratios"][peer][op]
                add(
                    f"{op}: CPU/request trio-mcp / {PEER_LABELS[peer]} (L={peers['L']})",
                    ratio,
                    f"<= {limit}x",
                    ratio <= limit,
                )
        for peer, limit in PEER_RSS_LIMITS.items():
            if peer in peers["ratios"]:
                ratio = peers["ratios"][peer]["rss_bytes_per_task"]
                add(
                    f"RSS/live task trio-mcp / {PEER_LABELS[peer]} (L={peers['L']})",
                    ratio,
                    f"<= {limit}x",
                    ratio <= limit,
                )
    flat = w["scaling"].get("flat")
    if flat is not None and flat["to_L"] != flat["from_L"]:
        for kind in ("get", "cancel", "create"):
            growth = flat[f"{kind}_cpu_ratio"]
            add(
                f"{kind} CPU/request L={flat['to_L']} / L={flat['from_L']} (side by side)",
                growth,
                f"<= {1 + FLAT_TOLERANCE}",
                growth <= 1 + FLAT_TOLERANCE,
            )

    for name, entry in (
        ("create rate vs floor", w["create"]),
        ("result rate vs floor", w["result"]),
        (f"get rate vs floor (L={main})", top["get"]),
        (f"cancel rate vs floor (L={main})", top["cancel"]),
    ):
        add(name, entry["ratio"], f">= {FLOOR_RATIO}x", entry["ratio"] >= FLOOR_RATIO)
    for kind in ("get", "cancel"):
        growth = w["scaling"][f"{kind}_rate_ratio"]
        add(
            f"{kind} rate L={main} / L={base}",
            growth,
            f">= {1 - SCALING_TOLERANCE} (within {SCALING_TOLERANCE:.0%})",
            growth >= 1 - SCALING_TOLERANCE,
        )
    per_task = w["memory"]["bytes_per_task"]
    add(f"RSS per idle live task (L={main}), bytes", per_task, f"<= {RSS_PER_TASK}", per_task <= RSS_PER_TASK)
    probe_p99 = top["cancel"]["probe"]["server"]["p99_ms"]
    add(
        f"cancel p99 ms (L={main}, one at a time)", probe_p99, f"< {CANCEL_P99_MS}", probe_p99 < CANCEL_P99_MS
    )
    loaded_p99 = top["cancel"]["server"]["p99_ms"]
    add(
        f"cancel p99 ms (L={main}, window {results['config']['window']})",
        loaded_p99,
        f"< {CANCEL_P99_MS}",
        loaded_p99 < CANCEL_P99_MS,
    )
    churn = w.get("churn")
    if churn is not None:
        add(
            "churn: every task expired (tasks/list empty)",
            churn["list_empty_after_s"],
            "empty",
            churn["list_empty"],
        )
        sampled = churn["get_probe"]["sampled"]
        expired = churn["get_probe"]["expired_-32602"]
        add("churn: sampled tasks/get answer -32602", expired, f"= {sampled}", expired == sampled)
        ratio = churn["rss_end_over_start"]
        add(
            "churn: RSS end / start",
            ratio,
            f"<= {1 + CHURN_RSS_TOLERANCE}",
            ratio <= 1 + CHURN_RSS_TOLERANCE,
        )
        growth = churn["cpu_ratio_late_early"]
        first, thirds = churn["steady_chunk"] + 1, churn["thirds"]
        add(
            f"churn: server CPU per create, median of the last {thirds} chunks / of chunks "
            f"{first}-{first + thirds - 1}",
            growth,
            f"<= {1 + CHURN_RATE_TOLERANCE}",
            growth <= 1 + CHURN_RATE_TOLERANCE,
        )
    return out


def _rate(value: float) -> str:
    return f"{value:,.0f}/s"


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(
        c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


COLUMNS = [
    "workload",
    "size",
    "{a}",
    "{b}",
    "ratio",
    "{a} CPU",
    "{b} CPU",
    "CPU ratio",
    "p50 ms",
    "p99 ms",
    "max ms",
    "full GC s (n)",
]


def _head(a: str, b: str) -> list[str]:
    """The comparison table's header: subject ``a`` against baseline ``b``."""
    return [c.format(a=a, b=b) for c in COLUMNS]


def _comparison_row(
    name: str, size: str, s: dict[str, Any], f: dict[str, Any], ratio: float, cpu_ratio: float
) -> list[str]:
    """One comparison row: the subject's figures ``s`` against the baseline's ``f``."""
    gc = s.get("full_gc", {})
    return [
        name,
        size,
        _rate(s["rate"]),
        _rate(f["rate"]),
        f"{ratio:.3f}",
        f"{s['cpu_us_per_request']:.1f} us",
        f"{f['cpu_us_per_request']:.1f} us",
        f"{cpu_ratio:.3f}",
        f"{s['p50_ms']:.2f}",
        f"{s['p99_ms']:.2f}",
        f"{s['max_ms']:.0f}",
        f"{gc.get('seconds', 0.0):.2f} ({gc.get('count', 0)})",
    ]


def table(results: dict[str, Any]) -> str:
    """The figures as a fixed-width text table, then the targets."""
    w = results["workloads"]
    head = _head("server", "floor")
    rows: list[list[str]] = []
    before: list[str] = []
    if "peers" in w:
        before = [*peers_table(w["peers"]), ""]

    def add(name: str, size: str, entry: dict[str, Any]) -> None:
        rows.append(
            _comparison_row(name, size, entry["server"], entry["floor"], entry["ratio"], _cpu_ratio(entry))
        )

    add("1 create (echo task)", f"N={w['create']['n']}", w["create"])
    add("2 result", f"N={w['result']['n']}", w["result"])
    points = w["scaling"]["points"]
    for point in points:
        add("3 get", f"L={point['L']}", point["get"])
    for point in points:
        add("4 cancel", f"L={point['L']}", point["cancel"])
    for point in points:
        probe = point["cancel"]["probe"]
        add("4 cancel, one at a time", f"L={point['L']}", {**probe, "ratio": _ratio(probe)})
    for point in points:
        create = point["create_sleep"]
        rows.append(
            [
                "  (creating the sleep tasks)",
                f"L={point['L']}",
                _rate(create["rate"]),
                "",
                "",
                f"{create['cpu_us_per_request']:.1f} us",
                "",
                "",
                f"{create['p50_ms']:.2f}",
                f"{create['p99_ms']:.2f}",
                f"{create['max_ms']:.0f}",
                f"{create['full_gc']['seconds']:.2f} ({create['full_gc']['count']})"
                if "full_gc" in create
                else "",
            ]
        )
    lines = before + _aligned(head, rows)

    lines.append("")
    lines.append("5 memory: server RSS per idle live sleep task")
    for point in points:
        m = point["memory"]
        lines.append(
            f"  L={point['L']:>7}: {m['bytes_per_task'] / 1024:6.2f} KiB/task "
            f"(RSS {m['rss_before_kib']:,} -> {m['rss_after_kib']:,} KiB)"
        )
    s = w["scaling"]
    lines.append("")
    lines.append(
        f"6 scaling L={s['base_L']} -> L={s['main_L']}: get rate x{s['get_rate_ratio']:.3f}, "
        f"cancel rate x{s['cancel_rate_ratio']:.3f} (1.0 = no per-request cost growth); "
        f"server CPU per request: get x{s['get_cpu_ratio']:.3f}, cancel x{s['cancel_cpu_ratio']:.3f}"
    )
    seq = s.get("flat_sequential")
    if seq is not None and seq["to_L"] != s["main_L"]:
        lines.append(
            f"  L={seq['from_L']} -> L={seq['to_L']} (the rows above, one server per L, one after "
            f"another): server CPU per request get x{seq['get_cpu_ratio']:.3f}, cancel "
            f"x{seq['cancel_cpu_ratio']:.3f}, create (sleep) x{seq['create_cpu_ratio']:.3f}"
        )
    flat = s.get("flat")
    if flat is not None:
        cells = ", ".join(
            f"{op} x{flat[f'{op}_cpu_ratio']:.3f} ({flat[f'{op}_cpu_us']['low']:.1f} -> "
            f"{flat[f'{op}_cpu_us']['high']:.1f} us, paired x{flat[f'{op}_paired']:.3f})"
            for op in ("create", "get", "cancel")
        )
        lines.append(
            f"  flatness, the two ends side by side (judged): L={flat['from_L']} -> L={flat['to_L']}, "
            f"server CPU per request: {cells}"
        )
        lines.append(
            f"  (growing to L={flat['to_L']}, beside creating and cancelling {flat['from_L']}: "
            f"x{flat['build_cpu_ratio']:.3f}, {flat['build_cpu_us']['low']:.1f} -> "
            f"{flat['build_cpu_us']['high']:.1f} us per create, paired x{flat['build_paired']:.3f}; "
            "not judged: each create adds for good, so the collector runs more often)"
        )
    ws = w.get("ws")
    if ws is not None:
        lines.append("")
        lines += ws_table(ws, results["config"]["window"])
    churn = w.get("churn")
    if churn is not None:
        lines.append("")
        lines.append(
            f"8 churn: {churn['tasks']:,} echo tasks, TTL {churn['ttl_ms'][0]}-{churn['ttl_ms'][1]} ms, "
            f"created at {_rate(churn['create_rate'])}"
        )
        rates = ", ".join(f"{c['rate']:,.0f}" for c in churn["chunks"])
        cpu = ", ".join(f"{c['cpu_us_per_request']:,.0f}" for c in churn["chunks"])
        lines.append(f"  create rate per chunk of {churn['chunks'][0]['requests']:,}: {rates} /s")
        lines.append(f"  server CPU per create, per chunk: {cpu} us")
        lines.append(
            f"  last / first chunk: rate x{churn['rate_ratio_last_first']:.3f}, "
            f"CPU per create x{churn['cpu_ratio_last_first']:.3f}; last / chunk {churn['steady_chunk'] + 1} "
            f"x{churn['cpu_ratio_last_steady']:.3f}; median of the last {churn['thirds']} / of the first "
            f"{churn['thirds']} from chunk {churn['steady_chunk'] + 1} x{churn['cpu_ratio_late_early']:.3f} "
            f"({churn['cpu_us_late_median']:.0f} / {churn['cpu_us_early_median']:.0f} us)"
        )
        lines.append(
            f"  tasks/list empty: {churn['list_empty']} ({churn['list_empty_after_s']:.1f} s after the last "
            f"create); sampled tasks/get -32602: {churn['get_probe']['expired_-32602']}/"
            f"{churn['get_probe']['sampled']}"
        )
        lines.append(
            f"  RSS: start {churn['rss_start_kib']:,} KiB, peak {churn['rss_peak_kib']:,} KiB, "
            f"end {churn['rss_end_kib']:,} KiB (end/start {churn['rss_end_over_start']:.3f})"
        )
    if "stores" in w:
        lines.append("")
        lines += stores_table(w["stores"])
    if "http" in w:
        lines.append("")
        lines += http_table(w["http"])
    if "hardening" in w:
        lines.append("")
        lines += hardening_lines(w["hardening"])
    if "memory_breakdown" in w:
        lines.append("")
        lines += [
            "12 " + line if i == 0 else line for i, line in enumerate(memory_lines(w["memory_breakdown"]))
        ]
    lines.append("")
    lines.append("targets (reported, never enforced)")
    tw = max(len(t["target"]) for t in results["targets"])
    for t in results["targets"]:
        value = t["value"]
        shown = f"{value:,.3f}" if isinstance(value, float) else f"{value}"
        lines.append(f"  {t['result']:4}  {t['target'].ljust(tw)}  {shown:>10}  (goal {t['goal']})")
    return "\n".join(lines)


def ws_table(ws: dict[str, Any], window: int) -> list[str]:
    """Workload 7: the WebSocket figures next to the stdio ones of the same run."""
    head = _head("ws", "stdio")
    rows: list[list[str]] = []

    def add(name: str, size: str, entry: dict[str, Any]) -> None:
        rows.append(
            _comparison_row(name, size, entry["ws"], entry["stdio"], entry["ratio"], entry["cpu_ratio"])
        )

    live = ws["get"]["L"]
    add("7 ws create (echo task)", f"N={ws['create']['n']}", ws["create"])
    add("7 ws get", f"L={live}", ws["get"])
    add("7 ws cancel", f"L={live}", ws["cancel"])
    add("7 ws cancel, one at a time", f"L={live}", ws["cancel"]["probe"])
    add("  (creating the sleep tasks)", f"L={live}", ws["create_sleep"])
    lines = [
        f"7 WebSocket: the same server and requests over one WebSocket connection (window {window}); "
        "ratio = ws rate / stdio rate, CPU ratio = stdio CPU / ws CPU per request, of this run"
    ]
    lines += _aligned(head, rows)
    client = ", ".join(
        f"{name} {ws[name]['ws']['client_cpu_us_per_request']:.0f} / "
        f"{ws[name]['stdio']['client_cpu_us_per_request']:.0f} us"
        for name in ("create", "get", "cancel")
    )
    limited = [
        name
        for name in ("create", "get", "cancel")
        if ws[name]["ws"]["client_cpu_us_per_request"] >= ws[name]["ws"]["cpu_us_per_request"]
    ]
    verdict = f"client-bound? {', '.join(limited)}" if limited else "all below the server's"
    lines.append(f"  load client CPU per request, ws / stdio: {client} ({verdict})")
    per_task = ws["memory"]["bytes_per_task"] / 1024
    lines.append(f"  RSS per idle live sleep task over WebSocket, L={live}: {per_task:.2f} KiB")
    return lines


def _aligned(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [_row(head, widths), _row(["-" * x for x in widths], widths)]
    lines += [_row(r, widths) for r in rows]
    return lines


def _cpu_ratio(entry: dict[str, Any]) -> float:
    server = entry["server"]["cpu_us_per_request"]
    return entry["floor"]["cpu_us_per_request"] / server if server else 0.0


def _ratio(entry: dict[str, Any]) -> float:
    rate = entry["floor"]["rate"]
    return round(entry["server"]["rate"] / rate, 4) if rate else 0.0


VARIANT_COLUMNS = [
    "workload",
    "size",
    "rate",
    "ratio",
    "server CPU",
    "CPU ratio",
    "p50 ms",
    "p99 ms",
    "max ms",
]


def _variant_rows(
    name: str, sizes: dict[str, str], entry: dict[str, Any], key: str | None
) -> list[list[str]]:
    rows = []
    for phase in ("create", "get", "cancel"):
        s = entry[phase]
        cmp = entry[key][phase] if key else {"ratio": 1.0, "cpu_ratio": 1.0}
        cpu = f"{s['cpu_us_per_request']:.1f} us"
        if "store_cpu_us_per_request" in s:
            cpu += f" +{s['store_cpu_us_per_request']:.0f}"
        rows.append(
            [
                f"{name} {phase}",
                sizes[phase],
                _rate(s["rate"]),
                f"{cmp['ratio']:.3f}",
                cpu,
                f"{cmp['cpu_ratio']:.3f}",
                f"{s['p50_ms']:.2f}",
                f"{s['p99_ms']:.2f}",
                f"{s['max_ms']:.0f}",
            ]
        )
    return rows


def stores_table(st: dict[str, Any]) -> list[str]:
    """Workload 9: each store's figures as ratios to the memory store of this run."""
    sizes = {"create": f"N={st['n']}", "get": f"L={st['L']}", "cancel": f"L={st['L']}"}
    rows: list[list[str]] = []
    for name, entry in st["stores"].items():
        rows += _variant_rows(f"9 {name}", sizes, entry, None if name == "memory" else "vs_memory")
    lines = [
        "9 stores: the same server with --store memory / sqlite / redis, over stdio "
        f"(window {st['window']}); ratio = rate / memory rate, CPU ratio = memory CPU / store CPU "
        "per request (whole server process; +N = valkey-server's CPU), of this run"
    ]
    return lines + _aligned(VARIANT_COLUMNS, rows)


def http_table(h: dict[str, Any]) -> list[str]:
    """Workload 10: Streamable HTTP as ratios to stdio with the same sizes and window."""
    sizes = {"create": f"N={h['n']}", "get": f"L={h['L']}", "cancel": f"L={h['L']}"}
    rows = _variant_rows("10 stdio", sizes, h["stdio"], None) + _variant_rows(
        "10 http", sizes, h["http"], "vs_stdio"
    )
    client = ", ".join(
        f"{phase} {h['http'][phase]['client_cpu_us_per_request']:.0f} / "
        f"{h['stdio'][phase]['client_cpu_us_per_request']:.0f} us"
        for phase in ("create", "get", "cancel")
    )
    lines = [
        f"10 HTTP: Streamable HTTP (2025-11-25, one session, httpx, window {h['window']}) against "
        "stdio with the same sizes and window; ratio = http rate / stdio rate, "
        "CPU ratio = stdio CPU / http CPU per request"
    ]
    lines += _aligned(VARIANT_COLUMNS, rows)
    lines.append(f"  load client CPU per request, http / stdio: {client}")
    return lines


def hardening_lines(hd: dict[str, Any]) -> list[str]:
    """Workload 11: measured bounds, in MiB, ms and counts."""
    lines = [
        f"11 hardening (bounds: {hd['max_outbound_bytes'] / 1048576:g} MiB of unread answers, "
        f"{hd['write_timeout_s']:g} s write stall)"
    ]
    for name, kind in (("non_reader_stdio", "stdio"), ("non_reader_ws", "WebSocket")):
        r = hd[name]
        extra = ""
        if "rss_after_kib" in r:
            extra = (
                f"; RSS {r['rss_after_kib'] / 1024:.1f} MiB after, "
                f"{r['server_after']['sessions']} sessions / {r['server_after']['actors']} tasks left"
            )
        lines.append(
            f"  client that never reads ({kind}): disconnected {r['disconnected']} ({r['how']}) after "
            f"{r['seconds_to_disconnect']:.2f} s and {r['requests_written']:,} requests; server RSS "
            f"{r['rss_start_kib'] / 1024:.1f} -> peak {r['rss_peak_kib'] / 1024:.1f} MiB "
            f"(+{r['rss_growth_mib']:.1f} MiB){extra}"
        )
    f = hd["waiter_flood"]
    lines.append(
        f"  waiter flood: {f['waiters']} tasks/result on live tasks: {f['refused']} refused "
        f"{f['refused_codes']} within {f['refused_within_ms']:.1f} ms; "
        f"ping while parked p50 {f['ping_ms_p50']:.2f} ms, "
        f"max {f['ping_ms_max']:.2f} ms; tasks/get refused {f['gets_refused']}/{f['gets_while_parked']}; "
        f"cancels ok {f['cancels_ok']}/{f['waiters']}, parked waiters answered "
        f"{f['parked_waiters_answered_after_cancel']} in {f['release_s']:.2f} s"
    )
    c = hd["disconnect_churn"]
    left = c["left"]
    lines.append(
        f"  disconnect churn (WebSocket, RST): {c['connections']} connections x {c['tasks_per_connection']} "
        f"tasks in {c['seconds']:.1f} s; left: {left['sessions']} sessions, {left['actors']} live tasks, "
        f"{left['records']} records; RSS {c['rss_before_kib'] / 1024:.1f} -> "
        f"{c['rss_after_kib'] / 1024:.1f} MiB (+{c['rss_growth_mib']:.1f} MiB)"
    )
    return lines


def memory_lines(breakdown: dict[str, Any]) -> list[str]:
    from .memory import lines

    return lines(breakdown, top=12)


def peers_table(p: dict[str, Any]) -> list[str]:
    """Workload 0, the headline: server CPU per request and RSS per live task of every peer,
    medians of the rounds (every peer side by side in each), with trio-mcp's ratios to the TS
    SDK and bare Trio."""
    names: list[str] = p["peers"]
    med = p["median"]
    judged = [peer for peer in PEER_LIMITS if peer in names]
    head = ["op", *(PEER_LABELS[n] for n in names)]
    head += [f"/ {PEER_LABELS[n]}" for n in names[1:]]
    head += [f"<= {PEER_LIMITS[n]}x {PEER_LABELS[n]}" for n in judged]
    rows: list[list[str]] = []
    for op in PEER_OPS:
        row = [op, *(f"{med[n]['cpu_us_per_request'][op]:.1f} us" for n in names)]
        row += [f"{p['ratios'][n][op]:.3f}" for n in names[1:]]
        row += ["PASS" if p["ratios"][n][op] <= PEER_LIMITS[n] else "MISS" for n in judged]
        rows.append(row)
    row = ["RSS/live task", *(f"{med[n]['rss_bytes_per_task'] / 1024:.2f} KiB" for n in names)]
    row += [f"{p['ratios'][n]['rss_bytes_per_task']:.3f}" if n != "raw-floor" else "" for n in names[1:]]
    row += [
        ("PASS" if p["ratios"][n]["rss_bytes_per_task"] <= PEER_RSS_LIMITS[n] else "MISS")
        if n in PEER_RSS_LIMITS
        else ""
        for n in judged
    ]
    rows.append(row)
    versions = p.get("versions") or {}
    built = ""
    if versions:
        built = f"; TS SDK {versions.get('@modelcontextprotocol/sdk')} on Node {versions.get('node')}"
    lines = [
        f"0 headline: server CPU per request (whole process, /proc/PID/task/*/schedstat), median of "
        f"{p['repeats']} rounds (the peers side by side, taking turns every {p.get('chunk', 0):,} requests), "
        f"stdio, window {p['window']}; create/result N={p['n']:,}, "
        f"get/cancel/RSS at L={p['L']:,} live tasks{built}"
    ]
    lines += _aligned(head, rows)
    for n in names:
        runs = med[n]["cpu_us_per_request_runs"]
        spread = ", ".join(f"{op} " + "/".join(f"{v:.0f}" for v in runs[op]) for op in PEER_OPS)
        rss = "/".join(f"{v / 1024:.2f}" for v in med[n]["rss_bytes_per_task_runs"])
        rates = ", ".join(f"{op} {med[n]['rate'][op]:,.0f}/s" for op in PEER_OPS)
        lines.append(f"  {PEER_LABELS[n]:9} runs: {spread} us; RSS {rss} KiB/task; median rates {rates}")
    paired = p.get("paired_ratios") or {}
    if paired:
        shown = "; ".join(
            f"{PEER_LABELS[n]} " + ", ".join(f"{op} {paired[n][op]:.3f}" for op in PEER_OPS)
            for n in names[1:]
            if n in paired
        )
        lines.append(f"  paired (median of each round's trio-mcp / peer): {shown}")
    trio_cancel = p.get("trio_cancel_us")
    if trio_cancel:
        runs_text = "/".join(f"{v:.1f}" for v in trio_cancel["runs"])
        line = (
            f"  Trio alone, cancelling a task asleep in its cancel scope and unwinding it (no I/O, no "
            f"JSON, no record; trio_floor.py --cancel-cost): {trio_cancel['median']:.1f} us ({runs_text})"
        )
        if "ts-sdk" in names:
            ts_cancel = med["ts-sdk"]["cpu_us_per_request"]["cancel"]
            line += f" = {trio_cancel['median'] / ts_cancel:.2f}x the TS SDK's whole tasks/cancel"
        lines.append(line)
    if "ts-sdk" in names:
        main = {
            op: statistics.median(r[op]["main_thread_cpu_us_per_request"] for r in p["runs"]["ts-sdk"])
            for op in PEER_OPS
        }
        shown = ", ".join(f"{op} {main[op]:.1f}" for op in PEER_OPS)
        lines.append(
            f"  TS SDK, main thread only (the rest is V8's helper threads: GC, compilers): {shown} us"
        )
    return lines
