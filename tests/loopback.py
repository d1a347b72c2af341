"""What every test server here shares: a threaded HTTP server on 127.0.0.1, on a free port."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackServer:
    """Start/stop, context manager, ``port`` and ``base_url``; subclasses say what is served."""

    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def before_stop(self) -> None:
        """Wake anything a handler may be waiting on, so shutdown does not hang."""

    def start(self) -> Self:
        # Port 0: the kernel picks a free port, so parallel test runs cannot collide.
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self.handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.before_stop()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"
