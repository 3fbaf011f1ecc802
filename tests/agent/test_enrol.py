"""The agent's bootstrap enrolment against a small server: retried while the server is
unavailable, the token written once with mode 0600, a refusal stops with the reason."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.enrol import EnrolError, enrol_if_needed


class EnrolServer:
    def __init__(self, answers: list[tuple[int, dict]]):
        self.answers, self.bodies, self.auth = list(answers), [], []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                server.auth.append(self.headers.get("Authorization"))
                code, body = server.answers.pop(0)
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_enrols_after_the_server_comes_back_and_writes_a_private_token(tmp_path):
    server = EnrolServer([(503, {"detail": "Storage is unavailable"}),
                          (201, {"node": "gpu-1", "token": "gqn_secret"})])
    bootstrap = tmp_path / "bootstrap"
    bootstrap.write_text("gqb_shared\n")
    token_file = tmp_path / "state" / "node.token"
    waits = []
    try:
        assert enrol_if_needed(server=server.url, token_file=str(token_file),
                               bootstrap_file=str(bootstrap), node_name="gpu-1", ca_file=None,
                               wait=lambda s: waits.append(s) or False)
    finally:
        server.stop()
    assert waits == [30.0]
    assert server.bodies == [{"node_name": "gpu-1"}] * 2
    assert server.auth == ["Bearer gqb_shared"] * 2
    assert token_file.read_text() == "gqn_secret\n"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in token_file.parent.iterdir()] == ["node.token"]  # no temp left


def test_a_present_token_never_enrols_and_a_refusal_says_why(tmp_path):
    token_file = tmp_path / "node.token"
    token_file.write_text("gqn_mine\n")
    assert enrol_if_needed(server="http://127.0.0.1:9", token_file=str(token_file),
                           bootstrap_file=str(tmp_path / "missing"), node_name="n",
                           ca_file=None, wait=lambda s: True)
    server = EnrolServer([(409, {"detail": "gpu-1 is already enrolled"})])
    bootstrap = tmp_path / "bootstrap"
    bootstrap.write_text("gqb_shared")
    try:
        with pytest.raises(EnrolError, match="409.*already enrolled"):
            enrol_if_needed(server=server.url, token_file=str(tmp_path / "other.token"),
                            bootstrap_file=str(bootstrap), node_name="gpu-1", ca_file=None,
                            wait=lambda s: False)
    finally:
        server.stop()
    assert not (tmp_path / "other.token").exists()
