from django.db import models
from django.utils import timezone

from gpuquota.core.models import AuditEntry


def audit_record(
    *,
    actor,
    action: str,
    obj: models.Model,
    team=None,
    changes: dict | None = None,
    reason: str = "",
) -> AuditEntry:
    """Append one audit entry; call it inside the transaction of the change it records."""
    return AuditEntry.objects.create(
        at=timezone.now(),
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        team=team,
        changes=changes or {},
        reason=reason,
    )
