"""The actor system the server runs on: the runtime, the task supervisor, task actors and stores.

Import the submodules (``trio_mcp.actors.runtime``, ...) directly.
"""

__all__: list[str] = []
