"""gRPC server and client of the GRPC Backend tests, on grpcio (PyPI).

Generic handlers with raw bytes (no protoc, no generated code). Service
`redirector.test.Echo`:
  Echo    unary          answers the request's bytes
  Count   server stream  request b"N": N messages b"message i"
  Fail    unary          aborts NOT_FOUND "no such thing" with trailing metadata
  Slow    unary          answers after request b"SECONDS" seconds

  grpc_peer.py serve PORT CERT KEY   TLS server on [::]:PORT; prints "listening"
                                     and one "call METHOD" line per call
  grpc_peer.py call TARGET CASE..    plaintext client; one JSON line per case
                                     (unary, stream, fail, big, slow, and
                                     forbidden: a method of another service)
"""

import json
import sys
import time
from concurrent import futures

import grpc

SERVICE = "redirector.test.Echo"
STREAMED = 1000
BIG = 1024 * 1024
TRAILING = (("x-detail", "kept intact"), ("x-detail-bin", b"\x00\x01\xfe\xff"))
LIMITS = [
    ("grpc.max_send_message_length", 4 * BIG),
    ("grpc.max_receive_message_length", 4 * BIG),
]


def raw(x):
    return x


def echo(request, context):
    print(f"call Echo {len(request)} bytes from {context.peer()}", flush=True)
    return request


def count(request, context):
    print(f"call Count {request!r}", flush=True)
    for i in range(int(request)):
        yield b"message %d" % i


def fail(request, context):
    print("call Fail", flush=True)
    context.set_trailing_metadata(TRAILING)
    context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")


def slow(request, context):
    print(f"call Slow {request!r}", flush=True)
    time.sleep(float(request))
    return b"late"


def serve(port, cert, key):
    with open(cert, "rb") as c, open(key, "rb") as k:
        credentials = grpc.ssl_server_credentials([(k.read(), c.read())])
    unary = lambda f: grpc.unary_unary_rpc_method_handler(f, raw, raw)  # noqa: E731
    handlers = {
        "Echo": unary(echo),
        "Count": grpc.unary_stream_rpc_method_handler(count, raw, raw),
        "Fail": unary(fail),
        "Slow": unary(slow),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=LIMITS)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, handlers),)
    )
    server.add_secure_port(f"[::]:{port}", credentials)
    server.start()
    print(f"listening on [::]:{port}", flush=True)
    server.wait_for_termination()


def outcome(case, error=None, **fields):
    """One JSON line: the case, the status code's name, details, and `fields`."""
    result = {"case": case, "code": "OK"}
    if error is not None:
        result["code"] = error.code().name
        result["details"] = error.details()
        result["trailing"] = {
            k: (v.hex() if isinstance(v, bytes) else v)
            for k, v in (error.trailing_metadata() or ())
        }
    result.update(fields)
    print(json.dumps(result), flush=True)


def call(target, cases):
    # Plaintext: h2 with prior knowledge, as gRPC clients speak it without TLS.
    options = LIMITS + [("grpc.enable_http_proxy", 0)]
    channel = grpc.insecure_channel(target, options=options)
    method = lambda name: f"/{SERVICE}/{name}"  # noqa: E731
    unary = lambda name: channel.unary_unary(method(name), raw, raw)  # noqa: E731
    for case in cases:
        try:
            if case == "unary":
                answer = unary("Echo")(b"hello over grpc", timeout=20)
                outcome(case, echoed=answer == b"hello over grpc")
            elif case == "stream":
                stream = channel.unary_stream(method("Count"), raw, raw)
                got = list(stream(str(STREAMED).encode(), timeout=60))
                want = [b"message %d" % i for i in range(STREAMED)]
                outcome(case, messages=len(got), in_order=got == want)
            elif case == "fail":
                unary("Fail")(b"", timeout=20)
                outcome(case, unexpected="Fail succeeded")
            elif case == "big":
                payload = bytes(range(256)) * (BIG // 256)
                answer = unary("Echo")(payload, timeout=60)
                outcome(case, bytes=len(answer), echoed=answer == payload)
            elif case == "forbidden":
                forbidden = channel.unary_unary("/redirector.test.Forbidden/Call", raw, raw)
                forbidden(b"", timeout=20)
                outcome(case, unexpected="Forbidden answered")
            elif case == "slow":
                unary("Slow")(b"5", timeout=20)
                outcome(case, unexpected="Slow answered in time")
            else:
                raise SystemExit(f"unknown case {case}")
        except grpc.RpcError as error:
            outcome(case, error)
    channel.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(*sys.argv[2:5])
    elif sys.argv[1] == "call":
        call(sys.argv[2], sys.argv[3:])
    else:
        raise SystemExit(__doc__)
