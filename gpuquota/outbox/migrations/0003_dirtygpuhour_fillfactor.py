"""The outbox's pages keep half their space free, so the generation bump of a mark that is
already due is a HOT update on its own page (PostgreSQL only; SQLite has no fillfactor)."""

from django.db import migrations

TABLE = "usage_dirtygpuhour"


def fillfactor_set(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} SET (fillfactor = 50)")


def fillfactor_reset(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (fillfactor)")


class Migration(migrations.Migration):

    dependencies = [
        ("outbox", "0002_dirtygpuhour_due_at"),
    ]

    operations = [migrations.RunPython(fillfactor_set, fillfactor_reset)]
