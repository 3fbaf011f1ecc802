"""Names a cluster would refuse, found before any call (kubernetes.md#names): a team slug that
cannot name its queues (`gq-<slug>`) or be a label value, a namespace that is not a DNS-1123
label. Forms, the API and the services refuse such names where they enter
(`gpuquota.core.names`); these checks keep names entered before that, or by hand in the
database, from reaching the API server, and make each one a problem of its own team."""

from __future__ import annotations

from gpuquota.core.names import dns1123_label_error, label_value_error, team_slug_error

TEAM_LABEL = "gpuquota.io/team"


def namespaces_usable(namespaces) -> tuple[str, ...]:
    """The namespaces that are Kubernetes names (the others are refused one by one)."""
    return tuple(ns for ns in namespaces if dns1123_label_error(ns) is None)


def manifest_refusal(manifest: dict) -> str | None:
    """Why the cluster would refuse `manifest` for a name, in words naming the team, or
    None."""
    meta = manifest["metadata"]
    team = (meta.get("labels") or {}).get(TEAM_LABEL)
    whose = f"Team {team!r}" if team else f"{manifest['kind']} {meta['name']}"
    error = team_slug_error(team) if team is not None else None
    if error is None and meta.get("namespace") is not None:
        error = dns1123_label_error(meta["namespace"],
                                    what=f"Its namespace {meta['namespace']!r}")
    if error is None:
        error = next(filter(None, (label_value_error(v, what=f"The label {k}")
                                   for k, v in (meta.get("labels") or {}).items())), None)
    if error is None:
        return None
    return (f"{whose}: {error} Nothing of it is written to the cluster until an admin "
            "corrects the name; the other teams' objects are.")
