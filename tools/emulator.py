"""baton's local AWS emulator: moto_server with the two fixes baton needs.

1. Conditional writes are atomic. moto's DynamoDB backend is not thread-safe: with 50
   concurrent conditional UpdateItems on one item, two writers won in 7 of 100 rounds
   (EMULATOR.md). This launcher serializes every DynamoDB request (X-Amz-Target
   `DynamoDB_*`) behind one lock and materialises the response inside it, so a race in a test
   is a real race against correct semantics. `--no-dynamodb-lock` turns the lock off, to show
   the failure it prevents.
2. Step Functions really executes state machines. Execution is switched on before the first
   request, because switching it later hides state machines created earlier.

It also binds first and sets MOTO_PORT to the bound port before moto handles a request: the
Step Functions interpreter calls SQS and DynamoDB back over HTTP on localhost:$MOTO_PORT.

Usage: python tools/emulator.py [--port 0] [--ready-file PATH]
Prints `ready <url>` on stdout once it accepts requests. Stops on SIGINT or SIGTERM.
"""

import argparse
import os
import signal
import sys
import threading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--ready-file", help="also write the URL here once ready")
    parser.add_argument("--no-dynamodb-lock", action="store_true")
    args = parser.parse_args()

    from werkzeug.serving import make_server

    # Bind before importing moto so MOTO_PORT is right from the first request on.
    holder = {}
    server = make_server(args.host, args.port, lambda e, s: holder["app"](e, s), threaded=True,
                         request_handler=_request_handler())
    port = server.socket.getsockname()[1]
    os.environ["MOTO_PORT"] = str(port)

    from moto.moto_api._internal.models import moto_api_backend
    from moto.moto_server.threaded_moto_server import (
        DomainDispatcherApplication,
        create_backend_app,
    )

    moto_api_backend.set_config({"stepfunctions": {"execute_state_machine": True}})
    app = DomainDispatcherApplication(create_backend_app)
    holder["app"] = app if args.no_dynamodb_lock else serialize_dynamodb(app)

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    url = f"http://{args.host}:{port}"
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(url)
        os.replace(tmp, args.ready_file)
    print(f"ready {url}", flush=True)
    server.serve_forever()


def _request_handler():
    from moto.server import MotoRequestHandler

    return MotoRequestHandler


def serialize_dynamodb(app):
    """Wrap the WSGI app so DynamoDB requests run one at a time, response included."""
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return app(environ, start_response)
        with lock:
            captured = []

            def capture(status, headers, exc_info=None):
                captured.append((status, headers, exc_info))
                return lambda _data: None

            result = app(environ, capture)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close:
                    close()
        status, headers, exc_info = captured[0]
        start_response(status, headers, exc_info)
        return [body]

    return wrapped


if __name__ == "__main__":
    sys.exit(main())
