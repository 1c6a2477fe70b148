"""WebSocket server and client of the WSS Backend tests, on `websockets` (PyPI).

  ws_peer.py serve PORT CERT KEY   TLS echo server on PORT of every address (ALPN
                                   http/1.1); prints "listening", then per connection one
                                   "connection {json}" line (path, Host, ALPN)
  ws_peer.py echo URL COUNT        client: COUNT text echoes, each sent after the
                                   previous one came back, then one 1 MiB binary
                                   echo; prints one JSON line
"""

import asyncio
import json
import ssl
import sys
import time

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve as ws_serve

BIG = 1024 * 1024
LIMIT = 4 * BIG


async def echo(websocket):
    ssl_object = websocket.transport.get_extra_info("ssl_object")
    seen = {
        "path": websocket.request.path,
        "host": websocket.request.headers.get("Host"),
        "alpn": ssl_object.selected_alpn_protocol() if ssl_object else None,
        "tls": ssl_object is not None,
    }
    print("connection " + json.dumps(seen), flush=True)
    async for message in websocket:
        await websocket.send(message)


async def serve(port, cert, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    # No host: every address, IPv4 and IPv6 ("::" alone would be IPv6 only).
    async with ws_serve(echo, None, int(port), ssl=context, max_size=LIMIT):
        print(f"listening on port {port}", flush=True)
        await asyncio.get_running_loop().create_future()


async def client(url, count):
    result = {"echoed": 0, "mismatched": 0}
    # proxy=None: no proxy from the environment; the connection is the pod's own.
    async with connect(url, max_size=LIMIT, proxy=None) as websocket:
        started = time.monotonic()
        for i in range(count):
            text = f"echo {i}"
            await websocket.send(text)
            if await websocket.recv() == text:
                result["echoed"] += 1
            else:
                result["mismatched"] += 1
        result["echo_ms"] = round((time.monotonic() - started) * 1e3, 1)
        payload = bytes(range(256)) * (BIG // 256)
        started = time.monotonic()
        await websocket.send(payload)
        answer = await websocket.recv()
        result["big_ms"] = round((time.monotonic() - started) * 1e3, 1)
        result["big_bytes"] = len(answer)
        result["big_echoed"] = answer == payload
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        asyncio.run(serve(*sys.argv[2:5]))
    elif sys.argv[1] == "echo":
        asyncio.run(client(sys.argv[2], int(sys.argv[3])))
    else:
        raise SystemExit(__doc__)
