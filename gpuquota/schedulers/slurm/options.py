"""The Slurm backend's per-cluster options (`BackendConfig.options`), with their defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuquota.core.errors import DomainError

#: A name that reaches a command's argument: never one that splits or reads as an option.
_WORD = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
LENDING_ACCOUNT = "gq-lending"
OWNER_QOS = "gq-owner"
SCAVENGER_QOS = "gq-scavenger"


@dataclass(frozen=True)
class SlurmOptions:
    #: GPU class -> Slurm GRES type; default: the class name's first part in lower case
    #: (`H100-80GB` -> `h100`).
    gres_types: dict[str, str] = field(default_factory=dict)
    #: node host name -> Slurm node name; default: the host name up to the first dot.
    node_names: dict[str, str] = field(default_factory=dict)
    #: GraceTime of the scavenger QOS: the lending notice, in seconds.
    loan_grace_s: int = 0
    #: Flags of the node reservations gpuquota creates.
    reservation_flags: str = "MAGNETIC"
    #: The cluster's name in Slurm's accounting (ClusterName); default: detected.
    cluster_name: str = ""
    #: The slurm.conf the commands read (SLURM_CONF); default: Slurm's own.
    slurm_conf: str = ""
    #: The Slurm user slurmrestd's token was made for (X-SLURM-USER-NAME).
    rest_user: str = "root"

    @classmethod
    def parse(cls, raw: dict | None) -> SlurmOptions:
        raw = dict(raw or {})
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            name = sorted(unknown)[0]
            raise DomainError(f"Unknown Slurm option {name!r}.", field="options")
        for name in ("gres_types", "node_names"):
            value = raw.get(name, {})
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
            ):
                raise DomainError(f"{name}: an object of names to names.", field="options")
        for name in ("reservation_flags", "cluster_name", "slurm_conf"):
            if not isinstance(raw.get(name, ""), str):
                raise DomainError(f"{name}: a string.", field="options")
        if not isinstance(raw.get("rest_user", "root"), str) or not raw.get("rest_user", "root"):
            raise DomainError("rest_user: a Slurm user name.", field="options")
        for name in ("gres_types", "node_names"):
            for value in raw.get(name, {}).values():
                if not _WORD.match(value):
                    raise DomainError(f"{name}: {value[:40]!r} is no Slurm name (letters, "
                                      "digits, '_', '.', '-'; no leading '-').", field="options")
        for name in ("cluster_name", "rest_user"):
            value = raw.get(name, "")
            if value and not _WORD.match(value):
                raise DomainError(f"{name}: {value[:40]!r} is no Slurm name (letters, digits, "
                                  "'_', '.', '-'; no leading '-').", field="options")
        if not re.match(r"^[A-Za-z_,]*$", raw.get("reservation_flags", "")):
            raise DomainError("reservation_flags: Slurm's flag names, separated by commas.",
                              field="options")
        grace = raw.get("loan_grace_s", 0)
        if not isinstance(grace, int) or not 0 <= grace <= 86400:
            raise DomainError("loan_grace_s: whole seconds, 0 to 86400.", field="options")
        return cls(**raw)

    def gres_type(self, gpu_class: str) -> str:
        return self.gres_types.get(gpu_class) or gpu_class.split("-")[0].lower()

    def node_name(self, hostname: str) -> str:
        return self.node_names.get(hostname) or hostname.split(".")[0]
