"""The console's page routes (namespace ``console``), included from ``console/urls.py``."""

from django.urls import path

from console.uploads import views as uploads
from console.views import (
    actions,
    events,
    golden,
    models,
    replicas,
    sample_inputs,
    tokens,
    tryit,
    tuning,
    upload,
    users,
    versions,
)

app_name = "console"

urlpatterns = [
    path("", models.model_list, name="model-list"),
    path("models/<str:name>/", models.model_detail, name="model-detail"),
    path("models/<str:name>/serving/", models.model_serving, name="model-serving"),
    path("models/<str:name>/rollback/", actions.model_rollback, name="model-rollback"),
    path("models/<str:name>/try/", tryit.model_try, name="model-try"),
    path("models/<str:name>/golden/", golden.golden_record, name="golden-record"),
    path(
        "models/<str:name>/golden/<int:golden_id>/delete/",
        golden.golden_delete,
        name="golden-delete",
    ),
    path(
        "models/<str:name>/versions/<int:number>/", versions.version_detail, name="version-detail"
    ),
    path(
        "models/<str:name>/versions/<int:number>/promote/",
        actions.version_promote,
        name="version-promote",
    ),
    path(
        "models/<str:name>/versions/<int:number>/approve/",
        actions.version_approve,
        name="version-approve",
    ),
    path(
        "models/<str:name>/versions/<int:number>/tuning/",
        tuning.version_tuning,
        name="version-tuning",
    ),
    path(
        "models/<str:name>/versions/<int:number>/sample-inputs/",
        sample_inputs.sample_input_upload,
        name="sample-input-upload",
    ),
    path(
        "models/<str:name>/versions/<int:number>/sample-inputs/<int:sample_id>/delete/",
        sample_inputs.sample_input_remove,
        name="sample-input-delete",
    ),
    path("versions/<int:version_id>/progress/", versions.version_progress, name="version-progress"),
    path("upload/", upload.upload_page, name="upload"),
    path("uploads/sessions/", uploads.session_create, name="upload-session-create"),
    path(
        "uploads/sessions/<str:session_id>/", uploads.session_detail, name="upload-session-detail"
    ),
    path("uploads/config/", uploads.config_suggest, name="upload-config"),
    path("uploads/finish/", uploads.finish, name="upload-finish"),
    path("events/", events.event_list, name="event-list"),
    path("tokens/", tokens.token_list, name="token-list"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke, name="token-revoke"),
    path("replicas/", replicas.replica_list, name="replica-list"),
    path("users/", users.user_list, name="user-list"),
    path("users/<int:user_id>/role/", users.user_role_update, name="user-role"),
]
