"""The registry's reads (HackSoft-style selectors): querysets with their joins already applied."""

from repository.selectors.audit import event_actor_names, event_list, event_list_after
from repository.selectors.catalog import (
    model_get,
    model_list,
    model_version_get,
    model_version_get_by_id,
    model_version_list,
    model_version_promoted,
)
from repository.selectors.golden import golden_request_get, golden_request_list
from repository.selectors.lifecycle import (
    APPROVABLE_STATES,
    PROMOTABLE_STATES,
    model_rollback_target,
    model_version_allowed_actions,
    model_versions_allowed_actions,
)
from repository.selectors.roles import user_has_role, user_role
from repository.selectors.serving import (
    LIVE_REPLICA_MAX_AGE_S,
    replica_is_live,
    replica_list,
    replica_ready_counts,
    servable_version_list,
)
from repository.selectors.tokens import (
    api_token_get,
    api_token_inference_scope,
    api_token_list,
    api_token_live_list,
)
from repository.selectors.users import user_get, user_list

__all__ = [
    "APPROVABLE_STATES",
    "LIVE_REPLICA_MAX_AGE_S",
    "PROMOTABLE_STATES",
    "api_token_get",
    "api_token_inference_scope",
    "api_token_list",
    "api_token_live_list",
    "event_actor_names",
    "event_list",
    "event_list_after",
    "golden_request_get",
    "golden_request_list",
    "model_get",
    "model_list",
    "model_rollback_target",
    "model_version_allowed_actions",
    "model_version_get",
    "model_version_get_by_id",
    "model_version_list",
    "model_version_promoted",
    "model_versions_allowed_actions",
    "replica_is_live",
    "replica_list",
    "replica_ready_counts",
    "servable_version_list",
    "user_get",
    "user_has_role",
    "user_list",
    "user_role",
]
