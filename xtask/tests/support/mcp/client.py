"""`python client.py URL [STEPS]`: an MCP client of the official Python SDK (streamable
HTTP), for xtask/tests/http/mcp.rs. Prints one JSON line per step: the tools listed, the
refused call of `delete` (the error the SDK raised), a call of `search`, and with STEPS
each progress notification of the `steps` tool as it arrives, then its result.
"""

import json
import sys
import time

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


async def main(url: str, steps: int) -> None:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            say(event="tools", names=sorted(tool.name for tool in listed.tools))
            try:
                result = await session.call_tool("delete", {"path": "/data"})
                say(event="refused", result=result.model_dump(mode="json"))
            except McpError as error:
                say(event="refused", code=error.error.code, message=error.error.message)
            result = await session.call_tool("search", {"query": "redirector"})
            say(event="called", text=result.content[0].text, is_error=result.isError)
            if steps:

                async def progress(done: float, total: float | None, message: str | None) -> None:
                    say(event="progress", progress=done, total=total, message=message,
                        at=time.monotonic())

                result = await session.call_tool(
                    "steps", {"count": steps}, progress_callback=progress
                )
                say(event="steps", text=result.content[0].text)
    say(event="done")


anyio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
