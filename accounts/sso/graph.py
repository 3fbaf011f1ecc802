"""The groups of an Entra ID user whose ID token carries the group overage (more groups
than fit: `_claim_names: {"groups": ...}` or `hasgroups`), asked of Microsoft Graph with
the login's own access token: `GET <graph>/me/transitiveMemberOf?$select=id`, page by page
through `@odata.nextLink`, the groups' ids kept (directory roles and administrative units
are not groups). The token's `_claim_sources` endpoint is never called: it names Azure AD
Graph, which Microsoft retired, and a URL is asked only under the configured Graph base.

Graph is a configured, trusted endpoint (like the provider's own), not an admin's URL, so
the telemetry sources' network guard does not apply; the bearer token is sent only to the
configured scheme, host and port, redirects are not followed, and the whole fetch has one
deadline (`GPUQUOTA_OIDC_TIMEOUT_S`). Graph failing never locks anyone out: the groups
stay unread, their memberships are kept, and the reason says why (docs/sso-entra-id.md)."""

import logging
import time
from urllib.parse import urlsplit

import requests

from accounts.sso import conf
from accounts.sso.claims import CUT, DISTRIBUTED, HAS_GROUPS, claim_withheld

logger = logging.getLogger(__name__)
#: At most this many pages of 999 (transitiveMemberOf's largest page) are read.
GRAPH_PAGES_MAX = 50
GRAPH_PAGE_SIZE = 999
GRAPH_GROUP_TYPE = "#microsoft.graph.group"
#: gpuquota's mark, kept with the claims: claim -> where its value came from.
FILLED = "_gpuquota_filled"


class GraphError(Exception):
    """Microsoft Graph did not give the groups; the message says why, never quoting
    the answer nor the token."""


def _same_origin(url: str, base: str) -> bool:
    a, b = urlsplit(url), urlsplit(base)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port) \
        and a.path.startswith(b.path) and "@" not in a.netloc


def _page(session: requests.Session, url: str, deadline: float) -> dict:
    left = deadline - time.monotonic()
    if left <= 0:
        raise GraphError(f"no complete answer within {conf.oidc_timeout_s()} s")
    try:
        answer = session.get(url, timeout=left, allow_redirects=False)
    except requests.Timeout as exc:
        raise GraphError(f"no answer within {conf.oidc_timeout_s()} s") from exc
    except requests.RequestException as exc:
        raise GraphError(f"cannot connect ({type(exc).__name__})") from exc
    if answer.status_code in (401, 403):
        raise GraphError(f"refused with {answer.status_code}: the app registration needs "
                         "the delegated permission User.Read (or GroupMember.Read.All) with "
                         "consent, and the access token must be Graph's")
    if answer.status_code != 200:
        raise GraphError(f"answered {answer.status_code}")
    try:
        body = answer.json()
    except ValueError as exc:
        raise GraphError("answered something else than JSON") from exc
    if not isinstance(body, dict) or not isinstance(body.get("value"), list):
        raise GraphError("answered JSON without a list of memberships")
    return body


def graph_groups(*, base_url: str, access_token: str) -> list[str]:
    """The ids of every group the token's user is in, directly or through other groups;
    GraphError when Graph does not give them all in time."""
    session = requests.Session()
    session.headers.update({"Authorization": f"Bearer {access_token}",
                            "Accept": "application/json"})
    deadline = time.monotonic() + conf.oidc_timeout_s()
    url = f"{base_url}/me/transitiveMemberOf?$select=id&$top={GRAPH_PAGE_SIZE}"
    groups: list[str] = []
    for _ in range(GRAPH_PAGES_MAX):
        body = _page(session, url, deadline)
        for item in body["value"]:
            if isinstance(item, dict) and item.get("@odata.type") == GRAPH_GROUP_TYPE:
                if not isinstance(item.get("id"), str):
                    raise GraphError("answered a group without an id")
                groups.append(item["id"])
        url = body.get("@odata.nextLink")
        if not url:
            return list(dict.fromkeys(groups))
        if not isinstance(url, str) or not _same_origin(url, base_url):
            raise GraphError("pointed its next page outside the configured Graph URL; "
                             "not followed (the access token goes nowhere else)")
    raise GraphError(f"had more than {GRAPH_PAGES_MAX} pages of memberships")


def claims_with_graph_groups(claims: dict, *, provider: conf.OidcProvider,
                             access_token: str | None) -> dict:
    """The claims with `groups` from Microsoft Graph when the token withheld them (Entra
    ID's overage) and the provider has a Graph URL; when Graph fails, the claims still
    withhold them, marked with why (the rules then keep what `groups` decides)."""
    if not provider.graph_url or provider.groups_claim != "groups" \
            or not claim_withheld(claims, "groups"):
        return claims
    found = dict(claims)
    try:
        if not access_token:
            raise GraphError("the provider sent no access token to ask it with")
        groups = graph_groups(base_url=provider.graph_url, access_token=access_token)
    except GraphError as exc:
        logger.warning("sso: %s withheld the groups of %s (group overage) and Microsoft "
                       "Graph did not give them: %s; the memberships they decide are kept",
                       provider.name, claims.get("sub"), exc)
        found[CUT] = {"groups": "the provider sent only a link to the groups (Entra ID's "
                                f"“group overage”) and Microsoft Graph did not give them: {exc}"}
        return found
    names = found.get(DISTRIBUTED)
    rest = {k: v for k, v in names.items() if k != "groups"} if isinstance(names, dict) else {}
    found.pop(DISTRIBUTED, None)
    found.pop(HAS_GROUPS, None)
    if rest:
        found[DISTRIBUTED] = rest
    found["groups"] = groups
    found[FILLED] = {"groups": "Microsoft Graph (the token's group overage)"}
    logger.info("sso: %s withheld the groups of %s (group overage); Microsoft Graph gave %d",
                provider.name, claims.get("sub"), len(groups))
    return found
