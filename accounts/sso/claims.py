"""Reading a claim as identity providers send it: by name, or by a dotted path into objects
(`realm_access.roles`, `resource_access.gpuquota.roles`) and through lists of objects
(`groups.name`); a claim the provider left out of the token on purpose (Entra ID's group
overage) is told apart from one that is not there, and a value that is not names (an
object) is a problem named with the paths inside it that are names. Pure: the login,
the rules' save check and the preview read the very same answer."""

from dataclasses import dataclass

MISSING = object()
#: OpenID Connect's distributed claims (Core 1.0 §5.6.2): a claim named here and absent
#: from the token is held elsewhere (Entra ID sends `groups` so when a user has too many).
DISTRIBUTED = "_claim_names"
#: Entra ID's overage mark of the implicit flow.
HAS_GROUPS = "hasgroups"
#: gpuquota's own mark, kept with the claims: claim -> why the provider's value is not all.
CUT = "_gpuquota_cut"


@dataclass(frozen=True)
class ClaimRead:
    """A claim read as names; `problem` says why it could not be (then `values` is empty)."""

    values: tuple[str, ...] = ()
    problem: str = ""


def _is_name(value) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _names(value) -> list[str] | None:
    """`value` as a list of names, or None when it is not a name or a list of names."""
    if _is_name(value):
        return [str(value)]
    if isinstance(value, list) and all(_is_name(v) for v in value):
        return [str(v) for v in value]
    return None


def _walk(node, parts: list[str]):
    """The value at `parts` under `node`: a key may hold dots itself (the longest key that
    is there wins), and a list of objects gives each object's value, flattened."""
    if not parts:
        return node
    if isinstance(node, list):
        found = []
        for item in node:
            value = _walk(item, parts)
            if value is MISSING:
                continue
            found.extend(value if isinstance(value, list) else [value])
        return found if found or not node else MISSING
    if not isinstance(node, dict):
        return MISSING
    for size in range(len(parts), 0, -1):
        key = ".".join(parts[:size])
        if key in node:
            return _walk(node[key], parts[size:])
    return MISSING


def claim_value(claims: dict, path: str):
    """The raw value of `path`: the claim of exactly that name (names may hold dots:
    `https://example.org/groups`), else the dotted path; MISSING when not there."""
    if not isinstance(claims, dict) or not path:
        return MISSING
    if path in claims:
        return claims[path]
    return _walk(claims, path.split("."))


def claim_withheld(claims: dict, path: str) -> str:
    """Why the provider did not send all of `path` (empty when it did): the claim, or the
    object holding it, is a distributed claim (Entra ID's group overage), or it was cut at
    the provider's limit."""
    if not isinstance(claims, dict):
        return ""
    top = path.split(".")[0]
    cut = claims.get(CUT) if isinstance(claims.get(CUT), dict) else {}
    if cut.get(path) or cut.get(top):
        return str(cut.get(path) or cut.get(top))
    if claim_value(claims, path) is not MISSING:
        return ""
    distributed = claims.get(DISTRIBUTED)
    names = distributed if isinstance(distributed, dict) else {}
    if path in names or top in names or (top == "groups" and claims.get(HAS_GROUPS) is True):
        return (f"the provider did not send “{path}” in the token but only a link to it "
                "(the user has more groups than fit in a token: Entra ID's “group "
                "overage”)")
    return ""


def _inner_names(value, path: str, depth: int = 2) -> list[str]:
    """Paths inside an object (or a list of objects) that hold names, to suggest."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, dict)), None)
    if not isinstance(value, dict) or depth == 0:
        return []
    found = []
    for key, inner in value.items():
        inner_path = f"{path}.{key}"
        if _names(inner) is not None:
            found.append(inner_path)
        else:
            found.extend(_inner_names(inner, inner_path, depth - 1))
    return found


def claim_shape_problem(value, path: str) -> str:
    """Why `value` (found at `path`) cannot be read as names, or ''."""
    if value is MISSING or value is None or _names(value) is not None:
        return ""
    if isinstance(value, dict):
        kind = "an object"
    elif isinstance(value, list):
        kind = "a list of objects" if all(isinstance(v, dict) for v in value) else \
            "a list holding other things than names"
    else:
        kind = f"a {type(value).__name__}"
    hint = _inner_names(value, path)
    suggestion = (f"; name a path inside it, e.g. {', '.join(f'“{p}”' for p in hint[:3])}"
                  if hint else "")
    return f"“{path}” is {kind}, not a name or a list of names{suggestion}"


def claim_read(claims: dict, path: str) -> ClaimRead:
    """`path` of `claims` as names: [] when not there, a problem when the provider withheld
    it or it holds something else than names."""
    withheld = claim_withheld(claims, path)
    if withheld:
        return ClaimRead(problem=withheld)
    value = claim_value(claims, path)
    problem = claim_shape_problem(value, path)
    if problem:
        return ClaimRead(problem=problem)
    names = [] if value is MISSING or value is None else _names(value)
    return ClaimRead(values=tuple(names))


def claims_with_groups(claims: dict, groups_claim: str, groups_max: int = 0) -> dict:
    """The claims with `groups` read from the provider's groups claim (a name or a path,
    `GPUQUOTA_OIDC_<NAME>_GROUPS_CLAIM`): the rules' `groups` is that claim, or nothing.
    With `groups_max`, a claim of that many groups or more is marked cut."""
    found = dict(claims)
    if groups_claim != "groups":
        value = claim_value(claims, groups_claim)
        found.pop("groups", None)
        if value is not MISSING:
            found["groups"] = value
        elif claim_withheld(claims, groups_claim):
            names = claims.get(DISTRIBUTED)
            found[DISTRIBUTED] = {**(names if isinstance(names, dict) else {}),
                                  "groups": groups_claim}
    groups = found.get("groups")
    if groups_max and isinstance(groups, list) and len(groups) >= groups_max:
        found[CUT] = {"groups": f"the provider sent {len(groups)} groups, its limit, and may "
                                "have left others out"}
    return found
