"""Which objects gpuquota created (recorded, no longer inferred from a name or a
description), the site's own settings before its first write, and a Slurm account's default
QOS as its own object (`default_qos`)."""

from django.db import migrations, models


def forwards(apps, schema_editor):
    ManagedObject = apps.get_model("schedulers", "ManagedObject")
    for managed in ManagedObject.objects.all():
        # Before this, ownership was inferred: `gq-` names and the associations gpuquota
        # recorded. A team's account is left the site's (never deleted): the safe side.
        managed.created = managed.name.startswith("gq-") or managed.kind == "association"
        if managed.kind == "account" and "defaultqos" in managed.fields:
            default = managed.fields.pop("defaultqos")
            ManagedObject.objects.get_or_create(
                cluster_id=managed.cluster_id, kind="default_qos", name=managed.name,
                defaults={"fields": {"defaultqos": default}, "applied_at": managed.applied_at,
                          "created": managed.created})
        managed.save()


class Migration(migrations.Migration):
    dependencies = [("schedulers", "0004_api_url_bare_hosts")]

    operations = [
        migrations.AddField(
            model_name="managedobject", name="created", field=models.BooleanField(default=False)),
        migrations.AddField(
            model_name="managedobject", name="site_fields",
            field=models.JSONField(blank=True, default=dict)),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
