"""On PostgreSQL, let a deleted user or model detach from its events.

The append-only trigger refused every UPDATE of an event, so the ``ON DELETE SET NULL`` of
``actor`` and ``model`` failed and such a user or model could not be deleted. The recorded
``actor_name`` and ``model_name`` keep the trail readable; the trigger now allows exactly that
update (a foreign key set to NULL, nothing else changed) and still refuses any other change.
"""

from django.db import migrations

DETACH_SQL = """
CREATE OR REPLACE FUNCTION portico_event_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE'
        AND (NEW.actor_id IS NULL OR NEW.actor_id = OLD.actor_id)
        AND (NEW.model_id IS NULL OR NEW.model_id = OLD.model_id)
        AND (NEW.id, NEW.actor_name, NEW.action, NEW.model_name, NEW.from_version,
             NEW.to_version, NEW.detail, NEW.created_at)
            IS NOT DISTINCT FROM
            (OLD.id, OLD.actor_name, OLD.action, OLD.model_name, OLD.from_version,
             OLD.to_version, OLD.detail, OLD.created_at)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '%% rows are immutable', TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS repository_event_append_only ON repository_event;
CREATE TRIGGER repository_event_append_only BEFORE UPDATE OR DELETE ON repository_event
    FOR EACH ROW EXECUTE FUNCTION portico_event_append_only();
"""

STRICT_SQL = """
DROP TRIGGER IF EXISTS repository_event_append_only ON repository_event;
CREATE TRIGGER repository_event_append_only BEFORE UPDATE OR DELETE ON repository_event
    FOR EACH ROW EXECUTE FUNCTION portico_refuse_change();
DROP FUNCTION IF EXISTS portico_event_append_only();
"""


def allow_detach(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DETACH_SQL)


def refuse_detach(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(STRICT_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("repository", "0004_event_role_set"),
    ]

    operations = [
        migrations.RunPython(allow_detach, refuse_detach),
    ]
