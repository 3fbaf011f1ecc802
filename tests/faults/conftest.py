"""Real services that a test may stop, freeze and start again, never the suite's own: a
Redis server of the test's own, a TCP proxy in front of PostgreSQL to cut, and the product
served by gunicorn in a process of its own (so that it reaches the database through the
proxy)."""

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.db import connection

from gpuquota.celery import app
from tests.helpers import free_port, project_process


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


class TcpProxy:
    """A TCP forwarder on a free loopback port to `target` (host, port). `stop()` closes the
    listener and every connection through it: to its clients the server is gone (refused
    from then on), as when PostgreSQL's host drops off the network. `start()` again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
            listener, self._listener = self._listener, None
        for sock in [listener, *sockets]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def database_url(host: str = "", port: int | None = None) -> str:
    """This test's PostgreSQL database as a URL, optionally through another host/port."""
    db = connection.settings_dict
    return (f"postgres://{db['USER']}@{host or db['HOST'] or '127.0.0.1'}:"
            f"{port or db['PORT'] or 5432}/{db['NAME']}")


@contextlib.contextmanager
def web_server(env: dict, log_path: Path) -> Iterator[str]:
    """The product's WSGI application in gunicorn (one sync worker), as deployed, with
    `env`; yields its base URL once /healthz answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with project_process(["gunicorn", "gpuquota.wsgi", "--bind", f"127.0.0.1:{port}",
                          "--workers", "1", "--timeout", "60"],
                         env={**os.environ, **env}, log_path=log_path) as proc:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the web server did not start"
                time.sleep(0.2)
        yield url


@pytest.fixture
def tasks_through_own_redis(own_redis):
    """This process queues tasks to the test's own Redis (not in process, as the suite
    otherwise does), e.g. for workers of the test's own or to find the broker stopped."""
    previous = app.conf.broker_url, app.conf.task_always_eager
    app.conf.broker_url, app.conf.task_always_eager = own_redis.url, False
    app._pool = app.amqp._producer_pool = None
    yield own_redis
    app.conf.broker_url, app.conf.task_always_eager = previous
    app._pool = app.amqp._producer_pool = None
