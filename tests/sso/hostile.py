"""A small OpenID Connect provider on loopback that answers whatever ID token a test
crafts (oidc-provider-mock only issues good ones): discovery, JWKS and a token endpoint."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class HostileProvider:
    client_id = "gpuquota"

    def __init__(self):
        self.key = rsa_key()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.claimed_issuer = self.url
        self.id_token = ""
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def claims(self, nonce: str, changes: dict | None = None) -> dict:
        now = int(time.time())
        claims = {"iss": self.url, "aud": self.client_id, "sub": "s-1", "iat": now,
                  "exp": now + 300, "nonce": nonce, "preferred_username": "mallory",
                  "groups": ["vision"]}
        claims.update(changes or {})
        return {k: v for k, v in claims.items() if v is not None}

    def sign(self, claims: dict, *, key=None, alg: str = "RS256", kid: str = "k1") -> str:
        return jwt.encode(claims, key or self.key, algorithm=alg, headers={"kid": kid})

    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/.well-known/openid-configuration":
                    self._json({"issuer": provider.claimed_issuer,
                                "authorization_endpoint": f"{provider.url}/authorize",
                                "token_endpoint": f"{provider.url}/token",
                                "jwks_uri": f"{provider.url}/jwks"})
                elif self.path == "/jwks":
                    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(
                        provider.key.public_key()))
                    self._json({"keys": [{**public, "kid": "k1", "alg": "RS256",
                                          "use": "sig"}]})
                else:
                    self.send_error(404)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                if self.path == "/token":
                    self._json({"id_token": provider.id_token, "access_token": "at",
                                "token_type": "Bearer", "expires_in": 300})
                else:
                    self.send_error(404)

        return Handler

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
