"""A loopback Microsoft Graph: `GET /v1.0/me/transitiveMemberOf` answers the memberships
of the user whose bearer token the OpenID Connect provider's own user information endpoint
accepts (a token it does not know gets 401, as Graph would), in pages linked by
`@odata.nextLink`. A test may make it fail (`status`), answer late (`delay_s`) or point
its next page elsewhere (`next_base`)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import requests

PATH = "/v1.0/me/transitiveMemberOf"


def group(object_id: str) -> dict:
    return {"@odata.type": "#microsoft.graph.group", "id": object_id}


def directory_role(object_id: str) -> dict:
    return {"@odata.type": "#microsoft.graph.directoryRole", "id": object_id}


class GraphServer:
    def __init__(self, userinfo_url: str, page_size: int = 2):
        self.userinfo_url = userinfo_url
        self.page_size = page_size
        self.memberships: dict[str, list[dict]] = {}
        self.status = 200
        self.delay_s = 0.0
        self.next_base = ""
        #: (path with query, the subject its bearer token was of, or "" when refused)
        self.seen: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.base = f"{self.url}/v1.0"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _subject(self, authorization: str) -> str:
        if not authorization.startswith("Bearer "):
            return ""
        answer = requests.get(self.userinfo_url, headers={"Authorization": authorization},
                              timeout=5)
        return answer.json().get("sub", "") if answer.status_code == 200 else ""

    def _page(self, subject: str, query: dict) -> dict:
        start = int(query.get("$skiptoken", ["0"])[0])
        items = self.memberships.get(subject, [])
        body = {"@odata.context": "https://graph.microsoft.com/v1.0/$metadata#directoryObjects",
                "value": items[start:start + self.page_size]}
        if start + self.page_size < len(items):
            base = self.next_base or self.base
            body["@odata.nextLink"] = (f"{base}/me/transitiveMemberOf?$select=id&$top=999"
                                       f"&$skiptoken={start + self.page_size}")
        return body

    def _handler(self):
        graph = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                parts = urlsplit(self.path)
                subject = graph._subject(self.headers.get("Authorization", ""))
                graph.seen.append((self.path, subject))
                if graph.delay_s:
                    time.sleep(graph.delay_s)
                if parts.path != PATH:
                    self._send(404, {"error": {"code": "Request_ResourceNotFound"}})
                elif not subject:
                    self._send(401, {"error": {"code": "InvalidAuthenticationToken"}})
                elif graph.status != 200:
                    self._send(graph.status, {"error": {"code": "ServiceUnavailable"}})
                else:
                    self._send(200, graph._page(subject, parse_qs(parts.query)))

        return Handler

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
