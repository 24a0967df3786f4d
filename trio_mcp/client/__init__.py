"""The MCP client: one connection to a server, over any transport.

>>> from trio_mcp.client import Client, connect, connect_in_memory, connect_stdio, connect_websocket
>>> from trio_mcp.client import connect_http, OAuth, AuthorizationError
"""

from ._auth import (
    AuthorizationError,
    Authorizer,
    FileTokenStore,
    HeadlessAuthorizer,
    LoopbackAuthorizer,
    MemoryTokenStore,
    OAuth,
    TokenStore,
)
from ._client import (
    Client,
    ConnectionClosed,
    ElicitationCompleteCallback,
    ElicitationHandler,
    ProgressCallback,
    SamplingHandler,
    Servable,
    StatusCallback,
    UrlElicitationHandler,
    UrlElicitationRequired,
    connect,
    connect_in_memory,
    connect_stdio,
)
from ._http import HttpTransport, connect_http, open_http_transport
from ._results import (
    GetPromptResult,
    Prompt,
    PromptArgument,
    PromptMessage,
    ReadResourceResult,
    Resource,
    ResourceContents,
    ResourceTemplate,
)
from ._websocket import connect_websocket

__all__ = [
    "AuthorizationError",
    "Authorizer",
    "Client",
    "ConnectionClosed",
    "ElicitationCompleteCallback",
    "ElicitationHandler",
    "FileTokenStore",
    "GetPromptResult",
    "HeadlessAuthorizer",
    "HttpTransport",
    "LoopbackAuthorizer",
    "MemoryTokenStore",
    "OAuth",
    "ProgressCallback",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ReadResourceResult",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
    "SamplingHandler",
    "Servable",
    "StatusCallback",
    "TokenStore",
    "UrlElicitationHandler",
    "UrlElicitationRequired",
    "connect",
    "connect_http",
    "connect_in_memory",
    "connect_stdio",
    "connect_websocket",
    "open_http_transport",
]
