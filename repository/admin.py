"""Read-mostly admin pages for the registry (state moves go through the console and services)."""

from django.contrib import admin

from repository.models import (
    ApiToken,
    Blob,
    Event,
    GoldenRequest,
    Model,
    ModelVersion,
    ServingReplica,
    ServingRevision,
    VersionFile,
)


class VersionFileInline(admin.TabularInline):
    model = VersionFile
    extra = 0
    readonly_fields = ["path", "blob", "model_level"]
    can_delete = False


@admin.register(Model)
class ModelAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "owner", "created_at"]
    search_fields = ["name", "description"]


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    list_display = [
        "model",
        "number",
        "state",
        "backend",
        "needs_approval",
        "approved_by",
        "uploaded_by",
        "created_at",
    ]
    list_filter = ["state", "backend", "needs_approval"]
    search_fields = ["model__name"]
    readonly_fields = [f.name for f in ModelVersion._meta.fields]
    inlines = [VersionFileInline]


@admin.register(Blob)
class BlobAdmin(admin.ModelAdmin):
    list_display = ["sha256", "size", "created_at"]
    readonly_fields = ["sha256", "size", "created_at"]


@admin.register(GoldenRequest)
class GoldenRequestAdmin(admin.ModelAdmin):
    list_display = ["model", "name", "state", "recorded_from", "rtol", "atol", "created_at"]
    list_filter = ["state"]


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "actor_name",
        "action",
        "model_name",
        "from_version",
        "to_version",
    ]
    list_filter = ["action"]
    search_fields = ["model_name", "actor_name"]

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(ServingRevision)
class ServingRevisionAdmin(admin.ModelAdmin):
    list_display = ["value", "changed_at"]


@admin.register(ServingReplica)
class ServingReplicaAdmin(admin.ModelAdmin):
    list_display = ["replica_id", "address", "http_url", "started_at", "last_seen"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "name", "role", "created_at", "last_used", "revoked_at"]
    readonly_fields = ["key_hash", "prefix"]
