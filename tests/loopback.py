"""A loopback HTTP server for tests that must prove nothing was fetched."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class CountingServer:
    """A loopback HTTP server that serves a schema and counts every request it gets."""

    def __init__(self) -> None:
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                body = b'{"type": "string"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/schema.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> CountingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class WebhookReceiver:
    """A loopback webhook receiver that does what a real one should: it verifies the
    ``Portal-Signature`` with ``agents.signing.verify`` (401 when it fails), and handles
    each ``Portal-Event-Id`` once, answering 200 to a repeat without handling it again.

    ``stop()`` takes it down (connections are refused) and ``start()`` brings it back on
    the same port. ``drop_answers`` makes it handle that many requests and then close the
    connection without answering (the sender cannot tell it arrived); ``hang`` makes it
    hold every request that long before handling it.
    """

    def __init__(self, secret: str = "", *, path: str = "/hook") -> None:
        self.secret = secret
        self.path = path
        self.port = 0
        self.requests: list[tuple[dict[str, str], bytes]] = []  # every one, even refused
        self.handled: dict[str, bytes] = {}  # event id -> body, once each
        self.repeats = 0
        self.arrived = 0  # requests that reached it, counted before any hang
        self.refused: list[str] = []
        self.drop_answers = 0
        self.hang = 0.0
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def start(self) -> WebhookReceiver:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                from agents import signing

                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer._lock:
                    outer.arrived += 1
                if outer.hang:
                    import time

                    time.sleep(outer.hang)
                with outer._lock:
                    outer.requests.append((headers, body))
                    if outer.secret:
                        try:
                            signing.verify(outer.secret, headers.get("portal-signature"), body)
                        except signing.SignatureError as exc:
                            outer.refused.append(str(exc))
                            self._answer(401)
                            return
                    event = headers.get("portal-event-id", "")
                    if event in outer.handled:
                        outer.repeats += 1
                    else:
                        outer.handled[event] = body
                    if outer.drop_answers:
                        outer.drop_answers -= 1
                        self.close_connection = True
                        self.connection.close()
                        return
                self._answer(200)

            def _answer(self, code: int) -> None:
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
