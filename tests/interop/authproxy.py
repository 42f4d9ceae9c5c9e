"""A loopback reverse proxy that adds ``Authorization: Bearer <token>`` to every request.

For peers that cannot send a header (the official conformance suite has no option for one):
the bridge's auth rules stay exactly as they are, and the peer still talks to the real
bridge over real HTTP. Every other header (Host and Origin included, which the DNS-rebinding
scenarios depend on) and the body pass through untouched, and so does the response.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"}


class AuthProxy:
    """``AuthProxy(port, token)``: serve on 127.0.0.1:<ephemeral>; ``url`` is the peer's URL."""

    def __init__(self, upstream_port: int, token: str) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                up = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                try:
                    up.putrequest(
                        self.command, self.path, skip_host=True, skip_accept_encoding=True
                    )
                    for k, v in self.headers.items():
                        if k.lower() not in _HOP and k.lower() != "authorization":
                            up.putheader(k, v)
                    up.putheader("Authorization", f"Bearer {proxy.token}")
                    if body or self.command in ("POST", "PUT"):
                        up.putheader("Content-Length", str(len(body)))
                    up.endheaders(body or None)
                    r = up.getresponse()
                    data = r.read()
                    self.send_response_only(r.status, r.reason)
                    for k, v in r.getheaders():
                        if k.lower() not in _HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    if r.status not in (204, 304):
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    up.close()

            do_POST = do_GET = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = _forward

        self.upstream_port = upstream_port
        self.token = token
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> AuthProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
