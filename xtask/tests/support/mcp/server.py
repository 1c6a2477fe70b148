"""`python server.py PORT CERT KEY GATE [--json]`: an MCP server of the official Python
SDK (FastMCP, streamable HTTP) over TLS, for xtask/tests/http/mcp.rs.

Tools: `search` (answered at once, with the Authorization header it came with),
`fetch`, `delete` (prints `delete called` when it
runs: the test's policy must keep every call of it away), and `steps COUNT`, which sends
COUNT progress notifications and, after each but the last, waits for a datagram on the
Unix socket GATE: the test sends one only once the client has printed that
notification, so the call can only end if each event reached the client on its own.
With `--json` the server answers with JSON bodies instead of event streams.

Prints `listening` once its socket listens.
"""

import asyncio
import socket
import sys

import anyio
import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.transport_security import TransportSecuritySettings

port, cert, key, gate = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
json_response = "--json" in sys.argv[5:]

# The agent forwards the Host the client sent: the Backend's name, never a loopback
# one, so the SDK's DNS-rebinding check (on for loopback hosts) is left off.
mcp = FastMCP(
    "redirector-test",
    host="::",
    port=port,
    json_response=json_response,
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
)


@mcp.tool()
def search(query: str, ctx: Context) -> str:
    """Finds things; says with what Authorization it was asked."""
    request = ctx.request_context.request
    authorization = request.headers.get("authorization", "") if request else ""
    return f"found {query} (authorization: {authorization})"


@mcp.tool()
def fetch(url: str) -> str:
    """Fetches a URL."""
    return f"fetched {url}"


@mcp.tool()
def delete(path: str) -> str:
    """Deletes a path."""
    print(f"delete called {path}", flush=True)
    return f"deleted {path}"


# Bound before `listening`: a datagram the test sends waits here until it is read.
gate_socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
gate_socket.bind(gate)


@mcp.tool()
async def steps(count: int, ctx: Context) -> str:
    """Reports progress COUNT times, waiting for the test between reports."""
    for step in range(1, count + 1):
        await ctx.report_progress(step, count, f"step {step}")
        print(f"sent progress {step}", flush=True)
        if step < count:
            await anyio.to_thread.run_sync(gate_socket.recv, 16)
    return f"done {count}"


async def main() -> None:
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("::", port))
    listener.listen(128)
    config = uvicorn.Config(
        mcp.streamable_http_app(),
        ssl_certfile=cert,
        ssl_keyfile=key,
        log_level="warning",
    )
    print("listening", flush=True)
    await uvicorn.Server(config).serve(sockets=[listener])


asyncio.run(main())
