"""OAuth 2.1 for MCP clients over HTTP (the authorization chapter of 2025-11-25 and 2026-07-28).

Give :func:`~trio_mcp.client.connect_http` an :class:`OAuth` and it answers the server's
**401** (and **403** ``insufficient_scope``) itself: it discovers the authorization server from
the server's protected-resource metadata, registers (or uses the client you give it), gets the
user's consent through an :class:`Authorizer` (the browser with a loopback redirect by default),
exchanges the code with PKCE and a resource indicator, and sends the request again with the
token. Tokens are refreshed when they expire; a **403** asking for more scopes steps up.

>>> from trio_mcp.client import OAuth, FileTokenStore, LoopbackAuthorizer, connect_http
>>> auth = OAuth(LoopbackAuthorizer(), client_name="my-agent", store=FileTokenStore())
>>> # async with connect_http("https://mcp.example.com/mcp", auth=auth) as client:
>>> #     await client.list_tools()

A machine client (no user) uses the client-credentials grant:

>>> machine = OAuth(grant="client_credentials", client_id="agent-7", client_secret="s3cret")

Without ``auth``, a server that wants authorization makes ``connect_http`` raise
:class:`AuthorizationError`, whose ``status`` and ``challenge`` (its ``WWW-Authenticate``) say
what it asked for.
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
    as_metadata_urls,
    canonical_resource,
    default_token_file,
    parse_www_authenticate,
    prm_urls,
)

__all__ = [
    "AuthorizationError",
    "Authorizer",
    "FileTokenStore",
    "HeadlessAuthorizer",
    "LoopbackAuthorizer",
    "MemoryTokenStore",
    "OAuth",
    "TokenStore",
    "as_metadata_urls",
    "canonical_resource",
    "default_token_file",
    "parse_www_authenticate",
    "prm_urls",
]
