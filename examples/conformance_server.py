"""The server the official MCP conformance suite tests (`make conformance`).

An ordinary trio-mcp server: every tool, resource and prompt below is one the suite's server
scenarios name (``@modelcontextprotocol/conformance``, ``src/scenarios/server/**``), written
with the public API only. Serve it with::

    trio-mcp serve examples/conformance_server.py --http 127.0.0.1:8000

and point the suite at ``http://127.0.0.1:8000/mcp`` (``scripts/conformance.py`` does both).

The suite talks to it in both protocol eras: the 2025-11-25 handshake (sessions, server→client
requests on the call's stream) and the stateless 2026-07-28 envelope (input through
``InputRequiredResult``, the tasks extension). The tools do not care which: ``ctx.elicit``
and ``ctx.sample`` ask the client the way the call's era allows.

The suite names the inputs it answers (``inputRequests["user_name"]``): the tools pass
``key=`` to ``ctx.elicit`` / ``ctx.sample`` / ``ctx.list_roots``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import trio

from trio_mcp import Context, McpError, Server
from trio_mcp.protocol.messages import AudioContent, EmbeddedResource, ImageContent, TextContent

# A 1x1 red PNG and a minimal WAV file, as the suite's own reference server sends them.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

server = Server("trio-mcp-conformance", version="1.0.0")


# -- small helpers over Context --------------------------------------------------------------


async def ask(ctx: Context, key: str, message: str, properties: dict[str, Any]) -> dict[str, Any]:
    """Elicit an object with ``properties`` (all required) under input key ``key``; the
    answer's ``content``, or {}."""
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    answer = await ctx.elicit(message, schema, key=key)
    return dict(answer.content or {}) if answer.action == "accept" else {}


async def sample_text(ctx: Context, key: str, prompt: str, max_tokens: int) -> str:
    """Ask the client's model; the text of its answer."""
    result = await ctx.sample([prompt], max_tokens=max_tokens, key=key)
    return result.text or "no response"


async def list_roots(ctx: Context, key: str) -> list[Any]:
    """The client's roots (``roots/list``), under input key ``key``."""
    return await ctx.list_roots(key=key)


# -- tools: content, errors, progress, logging (both eras) ------------------------------------
@server.tool(task_support="forbidden")
async def test_simple_text() -> str:
    """Tests simple text content response."""
    return "This is a simple text response for testing."


@server.tool(task_support="forbidden")
async def test_image_content() -> ImageContent:
    """Tests image content response."""
    return ImageContent(PNG, "image/png")


@server.tool(task_support="forbidden")
async def test_audio_content() -> AudioContent:
    """Tests audio content response."""
    return AudioContent(WAV, "audio/wav")


@server.tool(task_support="forbidden")
async def test_embedded_resource() -> EmbeddedResource:
    """Tests embedded resource content response."""
    return EmbeddedResource(
        {
            "uri": "test://embedded-resource",
            "mimeType": "text/plain",
            "text": "This is an embedded resource content.",
        }
    )


@server.tool(task_support="forbidden")
async def test_multiple_content_types() -> list[Any]:
    """Tests response with multiple content types (text, image, resource)."""
    return [
        TextContent("Multiple content types test:"),
        ImageContent(PNG, "image/png"),
        EmbeddedResource(
            {
                "uri": "test://mixed-content-resource",
                "mimeType": "application/json",
                "text": json.dumps({"test": "data", "value": 123}),
            }
        ),
    ]


@server.tool(task_support="forbidden")
async def test_tool_with_logging(ctx: Context) -> str:
    """Tests tool that emits log messages during execution."""
    for i, text in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if i:
            await trio.sleep(0.05)
        ctx.log("info", text, "conformance-test-server")
    return "Tool with logging executed successfully"


@server.tool(task_support="forbidden")
async def test_tool_with_progress(ctx: Context) -> str:
    """Tests tool that reports progress notifications."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
        await trio.sleep(0.05)
    return "Progress reported: 0, 50, 100 of 100"


@server.tool(task_support="forbidden")
async def test_error_handling() -> str:
    """Tests error response handling."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool(task_support="forbidden")
async def test_reconnection() -> str:
    """Tests SSE stream disconnection and client reconnection (SEP-1699)."""
    await trio.sleep(0.1)
    return (
        "Reconnection test completed successfully. If you received this, the client properly "
        "reconnected after stream closure."
    )


# SEP-1613 / SEP-2106: an inputSchema given as is, every 2020-12 keyword kept.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


async def json_schema_2020_12_tool(**arguments: Any) -> str:
    """Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)."""
    return f"JSON Schema 2020-12 tool called with: {json.dumps(arguments)}"


server.add_tool(json_schema_2020_12_tool, task_support="forbidden", input_schema=JSON_SCHEMA_2020_12)


# SEP-2243: a parameter the client also sends as the header ``Mcp-Param-Region``.
async def test_header_param(region: str) -> str:
    """Echoes ``region``, which also travels in the ``Mcp-Param-Region`` header."""
    return f"Region: {region}"


server.add_tool(
    test_header_param,
    task_support="forbidden",
    input_schema={
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        "required": ["region"],
    },
)


# -- tools: input from the client (2025-11-25: requests on the call's stream) -----------------
@server.tool(task_support="forbidden")
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Tests server-initiated sampling (LLM completion request)."""
    return f"LLM response: {await sample_text(ctx, 'sampling', prompt, 100)}"


@server.tool(task_support="forbidden")
async def test_elicitation(message: str, ctx: Context) -> str:
    """Tests server-initiated elicitation (user input request)."""
    schema = {
        "type": "object",
        "properties": {"response": {"type": "string", "description": "User's response"}},
        "required": ["response"],
    }
    answer = await ctx.elicit(message, schema)
    return f"User response: action={answer.action}, content={json.dumps(answer.content or {})}"


@server.tool(task_support="forbidden")
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Tests elicitation with default values per SEP-1034."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
        "required": [],
    }
    answer = await ctx.elicit("Please review and update the form fields with defaults", schema)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content or {})}"


def _titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


@server.tool(task_support="forbidden")
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Tests elicitation with enum schema improvements per SEP-1330."""
    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "description": "Select one option", "enum": options},
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": _titled(
                    ("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option")
                ),
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string", "enum": options},
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": _titled(
                        ("value1", "First Choice"), ("value2", "Second Choice"), ("value3", "Third Choice")
                    )
                },
            },
        },
        "required": [],
    }
    answer = await ctx.elicit("Please select options from the enum fields", schema)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content or {})}"


# -- tools: the stateless 2026-07-28 era ------------------------------------------------------
@server.tool(task_support="forbidden")
async def test_missing_capability(ctx: Context) -> str:
    """Needs the client's sampling capability: without it the call is refused (-32021)."""
    await sample_text(ctx, "probe", "Say OK", 10)
    return "Success"


@server.tool(task_support="forbidden")
async def test_streaming_elicitation(ctx: Context) -> str:
    """Reports progress on the response stream and sends no request on it."""
    await ctx.report_progress(50, 100)
    return "Streaming complete"


@server.tool(task_support="forbidden")
async def test_logging_tool(ctx: Context) -> str:
    """Logs only when the request asked for a log level."""
    ctx.log("info", "Diagnostic trace logging activated")
    return "Logging evaluated"


# -- tools: multi round-trip requests (SEP-2322) ----------------------------------------------
@server.tool(task_support="forbidden")
async def test_input_required_result_elicitation(ctx: Context) -> str:
    """MRTR: asks for the user's name (input ``user_name``)."""
    answer = await ask(ctx, "user_name", "What is your name?", {"name": {"type": "string"}})
    return f"Hello, {answer.get('name', 'unknown')}!"


@server.tool(task_support="forbidden")
async def test_input_required_result_sampling(ctx: Context) -> str:
    """MRTR: asks the client's model a question (input ``capital_question``)."""
    answer = await sample_text(ctx, "capital_question", "What is the capital of France?", 100)
    return f"Sampling result: {answer}"


@server.tool(task_support="forbidden")
async def test_input_required_result_list_roots(ctx: Context) -> str:
    """MRTR: asks for the client's roots (input ``client_roots``)."""
    return f"Found {len(await list_roots(ctx, 'client_roots'))} root(s)"


@server.tool(task_support="forbidden")
async def test_input_required_result_request_state(ctx: Context) -> str:
    """MRTR: asks for a confirmation (input ``confirm``); the retry carries the request state."""
    answer = await ask(ctx, "confirm", "Please confirm", {"ok": {"type": "boolean"}})
    if answer.get("ok") is not True:
        return "not confirmed"
    return "state-ok: requestState validated"


@server.tool(task_support="forbidden")
async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
    """MRTR: three inputs at once (``user_name``, ``greeting``, ``client_roots``)."""
    got: dict[str, Any] = {}

    async def name() -> None:
        got["name"] = (await ask(ctx, "user_name", "What is your name?", {"name": {"type": "string"}})).get(
            "name"
        )

    async def greeting() -> None:
        got["greeting"] = await sample_text(ctx, "greeting", "Generate a greeting", 50)

    async def roots() -> None:
        got["roots"] = await list_roots(ctx, "client_roots")

    async with trio.open_nursery() as nursery:
        for asker in (name, greeting, roots):
            nursery.start_soon(asker)
    return f"Name: {got['name']}; Greeting: {got['greeting']}; Roots: {len(got['roots'])}"


@server.tool(task_support="forbidden")
async def test_input_required_result_multi_round(ctx: Context) -> str:
    """MRTR: two rounds, ``step1`` (a name) then ``step2`` (a colour)."""
    name = (await ask(ctx, "step1", "Step 1: What is your name?", {"name": {"type": "string"}})).get("name")
    color = (
        await ask(ctx, "step2", "Step 2: What is your favorite color?", {"color": {"type": "string"}})
    ).get("color")
    return f"Multi-round complete for {name} who likes {color}"


@server.tool(task_support="forbidden")
async def test_input_required_result_tampered_state(ctx: Context) -> str:
    """MRTR: the request state is sealed, so a tampered one is refused."""
    await ask(ctx, "confirm", "Please confirm", {"ok": {"type": "boolean"}})
    return "integrity-ok: state verified"


@server.tool(task_support="forbidden")
async def test_input_required_result_capabilities(ctx: Context) -> str:
    """MRTR: asks only for what the client declared it can answer."""
    received: list[str] = []
    try:
        await ask(ctx, "elicit_input", "Elicitation input", {"value": {"type": "string"}})
        received.append("elicit_input")
    except McpError:  # the client cannot elicit (-32021): do without
        pass
    try:
        await sample_text(ctx, "sample_input", "Sample request", 50)
        received.append("sample_input")
    except McpError:
        pass
    if not received:
        return "No supported capabilities declared"
    return f"capabilities-ok: received {','.join(received)}"


# -- tools: the tasks extension (io.modelcontextprotocol/tasks) -------------------------------
@server.tool(task_support="forbidden")
async def greet(name: str) -> str:
    """Sync only: says hello."""
    return f"Hello, {name}!"


@server.tool(task_support="optional")
async def slow_compute(seconds: float, label: str = "") -> str:
    """Sleeps ``seconds``, then answers; cancellable while it sleeps."""
    await trio.sleep(seconds)
    return f"Computed {label or 'result'} after {seconds}s"


@server.tool(task_support="optional")
async def confirm_delete(filename: str, ctx: Context) -> str:
    """Asks the user to confirm, then 'deletes' ``filename``."""
    answer = await ask(ctx, "confirm", f"Delete {filename}?", {"confirm": {"type": "boolean"}})
    return f"Deleted {filename}" if answer.get("confirm") else f"Kept {filename}"


@server.tool(task_support="optional")
async def multi_input(ctx: Context) -> str:
    """Asks two questions at once."""
    answers: dict[str, Any] = {}

    async def one(key: str, message: str) -> None:
        answers[key] = await ask(ctx, key, message, {"name": {"type": "string"}})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, "first", "First name?")
        nursery.start_soon(one, "second", "Second name?")
    return f"Got {answers['first'].get('name')} and {answers['second'].get('name')}"


@server.tool(task_support="required")
async def failing_job() -> str:
    """Always a task; fails with a tool error after a second."""
    await trio.sleep(1)
    raise RuntimeError("failing_job failed, as it always does")


@server.tool(task_support="required")
async def protocol_error_job() -> str:
    """Always a task; ends in a protocol error."""
    await trio.sleep(0.1)
    raise McpError(-32603, "protocol_error_job: internal error, as always")


@server.tool(task_support="required")
async def test_tool_with_task(ctx: Context) -> str:
    """Asks the user's name, then works on as a task."""
    answer = await ask(ctx, "user_name", "What is your name?", {"name": {"type": "string"}})
    await trio.sleep(0.5)
    return f"Task done for {answer.get('name', 'unknown')}"


# -- resources -----------------------------------------------------------------------------------
WATCHED = "Watched resource content"


@server.resource(
    "test://static-text",
    name="static-text",
    title="Static Text Resource",
    description="A static text resource for testing",
    mime_type="text/plain",
)
async def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource(
    "test://static-binary",
    name="static-binary",
    title="Static Binary Resource",
    description="A static binary resource (image) for testing",
    mime_type="image/png",
)
async def static_binary() -> bytes:
    return base64.b64decode(PNG)


@server.resource(
    "test://template/{id}/data",
    name="template",
    title="Resource Template",
    description="A resource template with parameter substitution",
    mime_type="application/json",
)
async def template(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.resource(
    "test://watched-resource",
    name="watched-resource",
    title="Watched Resource",
    description="A resource that can be subscribed to",
    mime_type="text/plain",
)
async def watched_resource() -> str:
    return WATCHED


# -- prompts -------------------------------------------------------------------------------------
@server.prompt(title="Simple Test Prompt", description="A simple prompt without arguments")
async def test_simple_prompt() -> str:
    return "This is a simple prompt for testing."


@server.prompt(title="Prompt With Arguments", description="A prompt with required arguments")
async def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt(
    title="Prompt With Embedded Resource", description="A prompt that includes an embedded resource"
)
async def test_prompt_with_embedded_resource(resourceUri: str) -> list[Any]:
    return [
        EmbeddedResource(
            {
                "uri": resourceUri,
                "mimeType": "text/plain",
                "text": "Embedded resource content for testing.",
            }
        ),
        TextContent("Please process the embedded resource above."),
    ]


@server.prompt(title="Prompt With Image", description="A prompt that includes image content")
async def test_prompt_with_image() -> list[Any]:
    return [ImageContent(PNG, "image/png"), TextContent("Please analyze the image above.")]


@server.prompt(description="MRTR: prompt that requires elicitation input")
async def test_input_required_result_prompt(ctx: Context) -> str:
    answer = await ask(
        ctx, "user_context", "What context should the prompt use?", {"context": {"type": "string"}}
    )
    return f"Prompt with context: {answer.get('context', 'unknown')}"


# -- completion ----------------------------------------------------------------------------------
@server.completion("prompt", "test_prompt_with_arguments", "arg1")
async def complete_arg1(value: str, context: dict[str, str]) -> list[str]:
    return [v for v in ("paris", "park", "party") if v.startswith(value)]


# -- list-changed triggers (2026-07-28 subscriptions/listen) ----------------------------------
@server.tool(task_support="forbidden")
async def test_trigger_tool_change() -> str:
    """Adds a tool: listeners get notifications/tools/list_changed."""

    async def dynamic_tool() -> str:
        """Registered by test_trigger_tool_change."""
        return "dynamic"

    server.add_tool(dynamic_tool, name=f"dynamic_tool_{len(server.tools)}", task_support="forbidden")
    return "Mutation triggered"


@server.tool(task_support="forbidden")
async def test_trigger_prompt_change() -> str:
    """Adds a prompt: listeners get notifications/prompts/list_changed."""

    async def dynamic_prompt() -> str:
        return "A prompt registered by test_trigger_prompt_change."

    name = f"dynamic_prompt_{len(server.prompts)}"
    server.prompt(name, description="A prompt added while serving")(dynamic_prompt)
    return "Mutation triggered"
