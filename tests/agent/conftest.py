"""Fixtures for the agent's tests: a protocol server, fake clocks, /proc trees. No Django here."""

from __future__ import annotations

import gzip
import json
import shutil
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

BATCH_PATH = "/api/v1/agent/batches"


@pytest.fixture(autouse=True)
def _fast_password_hashing():
    """Replaces the top-level autouse fixture that needs Django's settings: the agent has none."""


class ProtocolServer:
    """The ingestion endpoint's contract, small: identities, idempotency, the status codes."""

    def __init__(self, tokens: dict[str, str], tls: tuple[Path, Path] | None = None) -> None:
        self.tokens = tokens  # token -> node
        self.lock = threading.Lock()
        self.samples: dict[tuple[str, str], dict[str, Any]] = {}
        self.processes: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.events: dict[str, dict[str, Any]] = {}
        self.batches: dict[tuple[str, str], tuple[int, str]] = {}
        self.requests: list[tuple[str | None, int]] = []
        self.encodings: list[str | None] = []
        self.duplicates = 0
        self.down = False  # drop every connection without an answer
        self.forced: list[tuple[int, dict[str, str]]] = []  # answers to give before any other
        self.refuse_batch_ids: set[str] = set()  # answer 400 to these
        self.max_samples = 5000
        self.lose_answers = 0  # store this many requests, then drop the connection unanswered
        self.hang_on_request: int | None = None  # store the Nth request, then never answer it
        self.hung = threading.Event()
        self.release = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def handle(self, headers: Any, raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
        auth = headers.get("Authorization", "")
        node = self.tokens.get(auth.removeprefix("Bearer "))
        if node is None:
            return 401, {"WWW-Authenticate": "Bearer"}, {"detail": "unknown token"}
        if self.forced:
            status, extra = self.forced.pop(0)
            return status, extra, {"detail": "forced"}
        self.encodings.append(headers.get("Content-Encoding"))
        if headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        try:
            batch = json.loads(raw)
            uuid.UUID(batch["batch_id"])
            uuid.UUID(batch["agent_instance_id"])
        except (ValueError, KeyError, TypeError) as exc:
            return 400, {}, {"problems": [{"path": "", "why": str(exc)}]}
        if headers.get("Idempotency-Key", batch["batch_id"]) != batch["batch_id"]:
            return 400, {}, {"problems": [{"path": "Idempotency-Key", "why": "differs"}]}
        if batch["schema_version"] != 1:
            return 422, {}, {"supported": [1]}
        if batch["batch_id"] in self.refuse_batch_ids:
            return 400, {}, {"problems": [{"path": "samples", "why": "refused by the test"}]}
        if len(batch["samples"]) > self.max_samples:
            return 413, {}, {"detail": "too many samples"}
        with self.lock:
            replay = self.batches.get((node, batch["batch_id"]))
            if replay:
                return 200, {}, json.loads(replay[1])
            body = self._store(batch)
            self.batches[(node, batch["batch_id"])] = (202, json.dumps(body))
        return 202, {}, body

    def _store(self, batch: dict[str, Any]) -> dict[str, Any]:
        counts = {}
        for kind, store, key in (
            ("samples", self.samples, lambda r: (r["gpu_uuid"], r["window_start"])),
            ("processes", self.processes,
             lambda r: (r["gpu_uuid"], r["window_start"], r["pid"], r["pid_start"])),
            ("events", self.events, lambda r: r["event_id"]),
        ):
            stored = duplicates = 0
            for record in batch[kind]:
                if key(record) in store:
                    duplicates += 1
                else:
                    store[key(record)] = {**record, "_instance": batch["agent_instance_id"]}
                    stored += 1
            self.duplicates += duplicates
            counts[kind] = {"stored": stored, "duplicates": duplicates, "conflicts": 0}
        return {"batch_id": batch["batch_id"], **counts, "rejected": [], "nulled": []}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != BATCH_PATH:
                    self.send_error(404)
                    return
                if server.down:
                    self.close_connection = True
                    self.connection.close()
                    return
                status, extra, body = server.handle(self.headers, raw)
                with server.lock:
                    server.requests.append((self.headers.get("Idempotency-Key"), status))
                    number = len(server.requests)
                    lose = server.lose_answers > 0
                    server.lose_answers -= lose
                if lose:
                    self.close_connection = True
                    self.connection.close()
                    return
                if number == server.hang_on_request:
                    server.hung.set()
                    server.release.wait(30)
                    return
                payload = json.dumps(body).encode()
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _serve(server: ProtocolServer) -> Iterator[ProtocolServer]:
    server.thread.start()
    yield server
    server.release.set()
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def protocol_server() -> Iterator[ProtocolServer]:
    yield from _serve(ProtocolServer({"token-a": "node-1"}))


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    if not shutil.which("openssl"):
        pytest.skip("needs the openssl command")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_server(tls_files: tuple[Path, Path]) -> Iterator[ProtocolServer]:
    yield from _serve(ProtocolServer({"token-a": "node-1"}, tls=tls_files))


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("token-a\n")
    path.chmod(0o600)
    return path


class FakeClock:
    """Time that passes only when the agent waits: a day of windows runs in milliseconds."""

    def __init__(self, start: float = 1_795_000_000.0) -> None:
        self.t = start
        self.offset = 0.0  # wall minus monotonic: a test moves it to make the wall clock jump

    def now(self) -> float:
        return self.t + self.offset

    def monotonic(self) -> float:
        return self.t

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        self.t += max(0.0, seconds)
        return stop.is_set()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
