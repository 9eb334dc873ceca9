"""Role groups, the single revision row, and (on PostgreSQL) triggers that keep blobs immutable
and the event log append-only."""

from django.db import migrations

ROLES = ["viewer", "deployer", "admin"]

IMMUTABLE_SQL = """
CREATE OR REPLACE FUNCTION portico_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '%% rows are immutable', TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER repository_blob_immutable BEFORE UPDATE ON repository_blob
    FOR EACH ROW EXECUTE FUNCTION portico_refuse_change();
CREATE TRIGGER repository_event_append_only BEFORE UPDATE OR DELETE ON repository_event
    FOR EACH ROW EXECUTE FUNCTION portico_refuse_change();
"""

DROP_SQL = """
DROP TRIGGER IF EXISTS repository_blob_immutable ON repository_blob;
DROP TRIGGER IF EXISTS repository_event_append_only ON repository_event;
DROP FUNCTION IF EXISTS portico_refuse_change();
"""


def create_roles_and_revision(apps, schema_editor):
    group = apps.get_model("auth", "Group")
    for name in ROLES:
        group.objects.get_or_create(name=name)
    apps.get_model("repository", "ServingRevision").objects.get_or_create(
        pk=1, defaults={"value": 0}
    )


def add_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(IMMUTABLE_SQL)


def drop_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("repository", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunPython(create_roles_and_revision, migrations.RunPython.noop),
        migrations.RunPython(add_triggers, drop_triggers),
    ]
