"""A loopback HTTP receiver for the channels' tests: it records every request and checks a
generic webhook's signature as a receiver following the Standard Webhooks specification
would: with the specification's reference library (`standardwebhooks`, requirements-dev)
where it is installed, and always with a check written from the specification, not from the
product's code."""

import base64
import hashlib
import hmac
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def reference_signature(*, secret: str, headers: dict, body: bytes) -> str | None:
    """The signature the reference library computes for this message (None where the
    library is not installed). Its `verify` also checks the timestamp against the real
    clock, which the fixed-clock tests do not run on; the browser test calls it."""
    try:
        from standardwebhooks.webhooks import Webhook
    except ImportError:
        return None
    at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=UTC)
    return Webhook(secret).sign(msg_id=headers["webhook-id"], timestamp=at,
                                data=body.decode())


def standard_webhooks_verify(*, secret: str, headers: dict, body: bytes,
                             now_s: int, tolerance_s: int = 300) -> bool:
    """The specification's verification: `webhook-signature` holds space-separated
    `v1,<base64>` signatures of `{id}.{timestamp}.{body}` with the secret's base64 key."""
    msg_id, timestamp = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(now_s - int(timestamp)) > tolerance_s:
        return False
    reference = reference_signature(secret=secret, headers=headers, body=body)
    if reference is not None and reference not in headers["webhook-signature"].split(" "):
        return False
    key = base64.b64decode(secret.split("_", 1)[1])
    expected = base64.b64encode(hmac.new(
        key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()).decode()
    return any(version == "v1" and hmac.compare_digest(signature, expected)
               for version, _, signature in (part.partition(",") for part in
                                             headers["webhook-signature"].split(" ")))


class Receiver:
    """`requests`: (path, headers, body) in order; `fail[path]`: how many of the next
    requests to that path answer 500."""

    def __init__(self):
        self.requests: list[tuple[str, dict, bytes]] = []
        self.fail: dict[str, int] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append((self.path, {k.lower(): v for k, v in
                                                      self.headers.items()}, body))
                failing = receiver.fail.get(self.path, 0)
                if failing:
                    receiver.fail[self.path] = failing - 1
                self.send_response(500 if failing else 200)
                self.end_headers()
                self.wfile.write(b"no" if failing else b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def to(self, path: str) -> list[tuple[dict, bytes]]:
        return [(headers, body) for p, headers, body in self.requests if p == path]

    def json(self, path: str) -> list[dict]:
        return [json.loads(body) for _, body in self.to(path)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
