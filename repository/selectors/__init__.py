"""The registry's reads (HackSoft-style selectors): querysets with their joins already applied."""

from repository.selectors.audit import event_list
from repository.selectors.catalog import (
    model_get,
    model_list,
    model_version_get,
    model_version_list,
    model_version_promoted,
)
from repository.selectors.golden import golden_request_get, golden_request_list
from repository.selectors.serving import replica_list, servable_version_list
from repository.selectors.tokens import api_token_list
from repository.selectors.users import user_get, user_list

__all__ = [
    "api_token_list",
    "event_list",
    "golden_request_get",
    "golden_request_list",
    "model_get",
    "model_list",
    "model_version_get",
    "model_version_list",
    "model_version_promoted",
    "replica_list",
    "servable_version_list",
    "user_get",
    "user_list",
]
