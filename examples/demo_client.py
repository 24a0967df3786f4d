"""What ``make demo`` runs: the demo server over stdio, driven through real tasks.

It creates a task and follows it by polling (with progress notifications), awaits another
task's result, cancels a third mid-flight, shows a failing task, and lists them all.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from trio_mcp import McpError, connect_stdio
from trio_mcp.protocol.messages import ElicitRequestParams, ElicitResult, ProgressParams, Task

SERVER = [sys.executable, str(Path(__file__).with_name("demo_server.py"))]


def show(task: Task) -> str:
    message = f" - {task.status_message}" if task.status_message else ""
    return f"{task.task_id[:8]}… {task.status.value}{message}"


async def answer_question(request: ElicitRequestParams) -> ElicitResult:
    """Our stand-in for a person: the demo answers the server's question itself."""
    print(f"   the server asks: {request.message!r} -> answering 'trio'")
    return ElicitResult(action="accept", content={"answer": "trio"})


async def main() -> None:
    async with connect_stdio(SERVER, on_elicit=answer_question) as client:
        assert client.server is not None
        info = client.server.server_info
        print(f"connected to {info.name} {info.version} (protocol {client.server.protocol_version})")
        for tool in await client.list_tools():
            print(f"  tool {tool.name:<10} taskSupport={tool.task_support:<9} {tool.description or ''}")

        print("\n1. create a task and poll it")

        def on_progress(p: ProgressParams) -> None:
            print(f"   progress {p.progress:g}/{p.total:g} {p.message or ''}")

        created = await client.call_tool_as_task("sleep", {"seconds": 1.5}, on_progress=on_progress)
        task = created.task
        print(f"   created {show(task)} (ttl {task.ttl} ms, poll every {task.poll_interval} ms)")
        final = await client.poll_task(created.task.task_id, on_status=lambda t: print(f"   poll: {show(t)}"))
        result = await client.task_result(final.task_id)
        print(f"   result: {result.text!r}")

        print("\n2. create a task and await its result")
        job = await client.call_tool_as_task("batch_job", {"seconds": 0.5})
        print(f"   created {show(job.task)}; waiting on tasks/result…")
        print(f"   result: {(await client.task_result(job.task.task_id)).text!r}")

        print("\n3. cancel a running task")
        long = await client.call_tool_as_task("sleep", {"seconds": 3600})
        await trio.sleep(0.3)
        print(f"   before: {show(await client.get_task(long.task.task_id))}")
        print(f"   cancel: {show(await client.cancel_task(long.task.task_id))}")
        try:
            await client.cancel_task(long.task.task_id)
        except McpError as exc:
            print(f"   cancelling again: error {exc.code}: {exc.message}")

        print("\n4. a tool that fails, and the rules of taskSupport")
        failing = await client.call_tool_as_task("fail", {"message": "something broke"})
        failed = await client.poll_task(failing.task.task_id)
        print(f"   {show(failed)}")
        print(f"   add(2, 3) as a plain call: {(await client.call_tool('add', {'a': 2, 'b': 3})).text}")
        for name, args, as_task in (("add", {"a": 1, "b": 1}, True), ("batch_job", {"seconds": 1}, False)):
            try:
                if as_task:
                    await client.call_tool_as_task(name, args)
                else:
                    await client.call_tool(name, args)
            except McpError as exc:
                how = "as a task" if as_task else "without a task"
                print(f"   {name} {how}: error {exc.code}: {exc.message}")

        print("\n5. a task that needs input: the server elicits an answer from the client")
        asking = await client.call_tool_as_task("ask", {"question": "Which async library?"})
        print(f"   created {show(asking.task)}: {asking.meta}")
        print(f"   poll: {show(await client.poll_task(asking.task.task_id))}")
        print(f"   result: {(await client.task_result(asking.task.task_id)).text!r}")

        print("\n6. tasks/list")
        async for task in client.all_tasks():
            print(f"   {show(task)}")


if __name__ == "__main__":
    trio.run(main)
