"""The demo's loopback OpenID Connect provider (oidc-provider-mock) and the two mapping
rules that make its `vlead` Vision's lead and its `vmember` a member (docs/sso.md, "The
demo with a provider")."""

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from accounts.models import MappingRule, Team

DEMO_PROVIDER = "demo"
DEMO_CLIENT_ID = "gpuquota-demo"
DEMO_USERS = {
    "vlead": {"preferred_username": "vlead", "email": "vlead@example.org",
              "given_name": "Vanya", "family_name": "Lead", "groups": ["vision-leads", "vision"]},
    "vmember": {"preferred_username": "vmember", "email": "vmember@example.org",
                "given_name": "Vic", "family_name": "Member", "groups": ["vision"]},
}


def demo_rules_seed() -> list[MappingRule]:
    """The demo's rules (idempotent): `vision-leads` → lead of Vision, `vision` → member."""
    vision = Team.objects.get(slug="vision")
    wanted = [(10, "vision-leads", MappingRule.Grant.LEAD), (20, "vision",
                                                             MappingRule.Grant.MEMBER)]
    return [MappingRule.objects.get_or_create(
        provider=DEMO_PROVIDER, claim="groups", value=value, team=vision,
        defaults={"position": position, "grant": grant})[0]
        for position, value, grant in wanted]


@contextmanager
def demo_provider_running(*, port: int) -> Iterator[str]:
    """oidc-provider-mock on 127.0.0.1:`port` with the demo's users; yields its issuer and
    sets the environment that makes it gpuquota's provider `demo` (for this process and
    the servers it starts)."""
    import werkzeug.serving
    from oidc_provider_mock import User, app

    provider_app = app(require_nonce=True, user_claims=[
        User(sub=sub, claims=claims) for sub, claims in DEMO_USERS.items()])
    server = werkzeug.serving.make_server("127.0.0.1", port, provider_app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    issuer = f"http://127.0.0.1:{server.server_port}"
    os.environ.update({
        "GPUQUOTA_OIDC_PROVIDERS": DEMO_PROVIDER, "GPUQUOTA_OIDC_DEMO_LABEL": "Demo SSO",
        "GPUQUOTA_OIDC_DEMO_ISSUER": issuer, "GPUQUOTA_OIDC_DEMO_CLIENT_ID": DEMO_CLIENT_ID,
        "GPUQUOTA_OIDC_DEMO_CLIENT_SECRET": "demo-secret"})
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
