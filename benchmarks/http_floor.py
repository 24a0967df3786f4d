"""The canned floors for the HTTP and WebSocket peers: h11 (or wsproto) on Trio, no MCP at all.

``python benchmarks/http_floor.py`` serves HTTP/1.1 on 127.0.0.1 (a free port, printed as
``http-port PORT`` on stdout): every POST body is read to its end, ``json.loads``-ed, and
answered ``200 application/json`` with the raw floor's fixed answer for its method
(:func:`benchmarks.floor.answer`: a Task for ``tasks/get``, a CallToolResult for
``tasks/result``... with the request's id), on a keep-alive connection. A POST of a
notification is answered 202. No session, no validation, no state: the least any Python HTTP
server on Trio could do per request, so trio-mcp's ratio to it is what MCP adds over h11.

``--ws`` serves WebSocket instead (``ws-port PORT``; wsproto, subprotocol ``mcp``), answering
each text message the same way. Both exit when stdin closes, as the benchmark servers do.
"""

from __future__ import annotations

import json
import os
import sys

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Ping, TextMessage
from wsproto.events import Request as WsRequest

if __package__ in (None, ""):  # run as a script: import the raw floor's answers from beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from floor import answer  # type: ignore[import-not-found]
else:
    from .floor import answer

READ_SIZE = 65536
JSON_HEADERS = [(b"content-type", b"application/json")]


async def serve_http_connection(stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    body = bytearray()
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(READ_SIZE)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                body.clear()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                reply = answer(json.loads(body)) if body else None
                if reply is None:
                    out = conn.send(h11.Response(status_code=202, headers=[(b"content-length", b"0")]))
                    out += conn.send(h11.EndOfMessage())
                else:
                    reply = reply[:-1]  # the stdio floor's newline
                    headers = [*JSON_HEADERS, (b"content-length", str(len(reply)).encode())]
                    out = conn.send(h11.Response(status_code=200, headers=headers))
                    out += conn.send(h11.Data(data=reply)) + conn.send(h11.EndOfMessage())
                await stream.send_all(out)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
            else:  # ConnectionClosed, PAUSED never happens here
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
        return
    finally:
        await stream.aclose()


async def serve_ws_connection(stream: trio.SocketStream) -> None:
    ws = WSConnection(ConnectionType.SERVER)
    try:
        while True:
            data = await stream.receive_some(READ_SIZE)
            if not data:
                return
            ws.receive_data(data)
            out = bytearray()
            for event in ws.events():
                if isinstance(event, WsRequest):
                    out += ws.send(AcceptConnection(subprotocol="mcp"))
                elif isinstance(event, TextMessage):
                    reply = answer(json.loads(event.data))
                    if reply is not None:
                        out += ws.send(TextMessage(data=reply[:-1].decode()))
                elif isinstance(event, Ping):
                    out += ws.send(event.response())
                elif isinstance(event, CloseConnection):
                    await stream.send_all(bytes(out) + ws.send(event.response()))
                    return
            if out:
                await stream.send_all(bytes(out))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        await stream.aclose()


async def main(ws: bool) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    handler = serve_ws_connection if ws else serve_http_connection
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handler, listeners)
        print(f"{'ws' if ws else 'http'}-port {port}", flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async with stdin:
            while await stdin.receive_some():
                pass
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, "--ws" in sys.argv[1:])
