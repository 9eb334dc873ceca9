"""The registry's writes (HackSoft-style services): keyword-only, typed, transactional. Each state
move checks the current state and raises a named error from ``repository.errors``."""

from repository.services.approvals import model_version_approve, model_version_approve_demo
from repository.services.console_key import console_key_ensure
from repository.services.events import event_record
from repository.services.golden import (
    golden_request_delete,
    golden_request_record,
    golden_request_record_run,
)
from repository.services.gpu_checks import gpu_checks_record, model_version_gpu_check_record
from repository.services.promotion import model_rollback, model_version_promote
from repository.services.replicas import replica_heartbeat, replicas_prune_stale
from repository.services.revision import (
    REVISION_CHANNEL,
    serving_revision_bump,
    serving_revision_current,
)
from repository.services.roles import (
    role_groups_ensure,
    user_has_role,
    user_role,
    user_role_grant,
    user_role_require,
    user_role_set,
)
from repository.services.tokens import (
    api_token_authenticate,
    api_token_create,
    api_token_revoke,
    api_tokens_mark_used,
)
from repository.services.validation import (
    model_version_revalidate,
    model_version_validate,
    model_versions_requeue_stale,
)
from repository.services.versions import (
    model_name_check,
    model_version_create_from_staged,
    model_version_create_from_upload,
    model_version_create_with_config,
)

__all__ = [
    "REVISION_CHANNEL",
    "api_token_authenticate",
    "api_token_create",
    "api_token_revoke",
    "api_tokens_mark_used",
    "console_key_ensure",
    "event_record",
    "golden_request_delete",
    "gpu_checks_record",
    "golden_request_record",
    "golden_request_record_run",
    "model_name_check",
    "model_rollback",
    "model_version_approve",
    "model_version_approve_demo",
    "model_version_create_from_staged",
    "model_version_create_from_upload",
    "model_version_create_with_config",
    "model_version_promote",
    "model_version_revalidate",
    "model_version_gpu_check_record",
    "model_version_validate",
    "model_versions_requeue_stale",
    "replica_heartbeat",
    "replicas_prune_stale",
    "role_groups_ensure",
    "serving_revision_bump",
    "serving_revision_current",
    "user_has_role",
    "user_role",
    "user_role_grant",
    "user_role_require",
    "user_role_set",
]
