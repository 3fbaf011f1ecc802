"""Sign-on benchmark: what recording the claims' paths and shapes adds to a login.

    .venv/bin/python -m bench.sso_logins [--users 200] [--rules 20]

It fills its own database (`BENCH_DATABASE`, default gpuquota_bench_sso: recreated), with
`--rules` mapping rules on `groups` and one team each, then logs `--users` people in through
`accounts.sso.services.sso_login` with Keycloak-shaped claims (50 groups, realm and 20
client roles: 56 paths), twice each, and times in the same run the whole login service
and the recording alone (`accounts.sso.shapes.claim_shapes_record`) called again after
each login: a read, as at most logins (the paths were seen within the day); then the
recording's write, as at a provider's first login of the day (a new provider name each
time). The first round writes each person's identity and memberships, the second is the
steady login. It prints RESULT lines. It is not a test.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("BENCH_DATABASE", "gpuquota_bench_sso")

from bench import statements as base  # noqa: E402 (reads BENCH_DATABASE)


def setup() -> None:
    base.database_create()
    os.environ.update(DATABASE_URL=f"{base.PG}/{base.DATABASE}", REDIS_URL="", DEBUG="1",
                      SECRET_KEY="bench-only-secret-key-not-for-production-use-0123456789",
                      SECURE_SSL_REDIRECT="0", ALLOWED_HOSTS="*", GPUQUOTA_MAIL_ENABLED="0",
                      LOG_LEVEL="WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    sys.path.insert(0, str(base.ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def claims(n: int) -> dict:
    return {"sub": f"user-{n}", "preferred_username": f"user{n}", "email_verified": False,
            "groups": [f"/org/group-{g}" for g in range(50)],
            "realm_access": {"roles": ["default-roles", "gpu-user"]},
            "resource_access": {f"client-{c}": {"roles": ["reader"]} for c in range(20)}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--rules", type=int, default=20)
    args = parser.parse_args()
    setup()
    from django.utils import timezone

    from accounts.models import MappingRule, Team
    from accounts.sso.services import ProviderLogin, sso_login
    from accounts.sso.shapes import claim_shapes_record

    for r in range(args.rules):
        team = Team.objects.create(slug=f"team-{r}", name=f"Team {r}")
        MappingRule.objects.create(position=r, claim="groups", value=f"/org/group-{r}",
                                   grant="member", team=team)
    for round_name in ("first", "steady"):
        login_s = record_s = 0.0
        for n in range(args.users):
            login = ProviderLogin(source="oidc", provider="keycloak",
                                  issuer="https://sso.example.org/realms/x",
                                  subject=f"user-{n}", claims=claims(n),
                                  username=f"user{n}")
            began = time.perf_counter()
            sso_login(login=login)
            login_s += time.perf_counter() - began
            began = time.perf_counter()
            claim_shapes_record(provider="keycloak", claims=login.claims, now=timezone.now())
            record_s += time.perf_counter() - began
        print(f"RESULT round={round_name} users={args.users} login_ms="
              f"{login_s / args.users * 1000:.2f} record_ms={record_s / args.users * 1000:.2f} "
              f"share={record_s / login_s:.1%}")
    began = time.perf_counter()
    for n in range(args.users):
        claim_shapes_record(provider=f"new-{n}", claims=claims(n), now=timezone.now())
    print(f"RESULT record_write_ms={(time.perf_counter() - began) / args.users * 1000:.2f}")


if __name__ == "__main__":
    main()
