"""A listener that counts the connections it receives (and closes each at once)."""

import socket
import threading


class Canary:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.sock = socket.socket()
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
                self.hits += 1
                conn.close()
            except OSError:
                pass

    def stop(self):
        self.running = False
        self.thread.join(2)
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
