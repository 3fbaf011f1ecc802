"""Real services that a test may stop, freeze and start again: a Redis server of the test's
own (never the suite's), on a free loopback port."""

import os
import signal
import subprocess
import time

import pytest
import redis

from tests.helpers import free_port


class RedisProcess:
    """A redis-server on 127.0.0.1:`port`, no persistence."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Stopped: connections are refused."""
        if self.proc is not None:
            self.thaw()
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def freeze(self) -> None:
        """Frozen (SIGSTOP): connections open but nothing ever answers."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture
def own_redis():
    server = RedisProcess()
    server.start()
    try:
        yield server
    finally:
        server.stop()
