"""An endpoint that accepts connections and never answers: what a hostile (or hung) model
endpoint looks like from the site. It reads whatever is sent and keeps every connection open
until stopped, counting them."""

from __future__ import annotations

import socket
import threading


class SilentEndpoint:
    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def connections(self) -> int:
        with self.lock:
            return len(self.held)

    def _accept(self):
        while self.running:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.held.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket):
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def stop(self):
        self.running = False
        self.server.close()
        with self.lock:
            for conn in self.held:
                try:
                    conn.close()
                except OSError:
                    pass
