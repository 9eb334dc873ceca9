"""Who uploaded each version's code, and the hashes of the files an approval covered.

Backfill: a version's code uploaders are its uploader, except for a config change (an ``upload``
event with ``"source": "config_change"``), which carries over those of the version it was derived
from. Versions approved before this migration get the hashes of the files they hold now, so they
keep serving; from here on a change to those files stops them.
"""

from collections import defaultdict

from django.conf import settings
from django.db import migrations, models


def backfill(apps, schema_editor):
    version_model = apps.get_model("repository", "ModelVersion")
    event_model = apps.get_model("repository", "Event")
    derived = _config_changes(event_model)
    uploaders: dict[tuple[int, int], set[int]] = {}
    versions = version_model.objects.order_by("model_id", "number")
    for version in versions.prefetch_related("files"):
        key = (version.model_id, version.number)
        source = derived.get(key)
        if source is not None and source in uploaders:
            uploaders[key] = set(uploaders[source])
        else:
            uploaders[key] = {version.uploaded_by_id} if version.uploaded_by_id else set()
        if uploaders[key]:
            version.code_uploaders.add(*uploaders[key])
        if version.approved_at is not None:
            version.approved_code = _code(version)
            version.save(update_fields=["approved_code"])


def _config_changes(event_model):
    """(model id, new number) -> (model id, number it was derived from)."""
    derived = {}
    events = event_model.objects.filter(action="upload", model__isnull=False)
    for event in events.exclude(from_version__isnull=True).exclude(to_version__isnull=True):
        if (event.detail or {}).get("source") == "config_change":
            derived[(event.model_id, event.to_version)] = (event.model_id, event.from_version)
    return derived


def _code(version):
    code = defaultdict(dict)
    for f in version.files.all():
        code["model_files" if f.model_level else "files"][f.path] = f.blob_id
    return {"files": dict(code["files"]), "model_files": dict(code["model_files"])}


class Migration(migrations.Migration):
    dependencies = [
        ("repository", "0005_event_detach_on_delete"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="modelversion",
            name="approved_code",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="modelversion",
            name="code_uploaders",
            field=models.ManyToManyField(
                blank=True, related_name="code_uploaded_versions", to=settings.AUTH_USER_MODEL
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
