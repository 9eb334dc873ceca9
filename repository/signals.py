"""Changes to who may infer that bypass the services: Django's admin, a shell, a cascade.

The services bump the serving revision themselves. These receivers cover the same facts changed
directly on the models, so a user deactivated or demoted in the admin, or a token deleted there,
stops working on every replica at once instead of at the next unrelated change.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from repository.models import ApiToken
from repository.services.revision import serving_revision_bump

# The user fields the token table reads (repository/selectors/tokens.py); a save that touches
# none of them (a login's last_login) changes nothing that replicas hold.
ACCESS_FIELDS = ("is_active", "is_superuser")


def connect() -> None:
    user_model = get_user_model()
    pre_save.connect(_remember_access, sender=user_model, dispatch_uid="portico-user-pre")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid="portico-user-post")
    post_delete.connect(_bump, sender=user_model, dispatch_uid="portico-user-delete")
    post_delete.connect(_bump, sender=ApiToken, dispatch_uid="portico-token-delete")
    m2m_changed.connect(
        _groups_changed, sender=user_model.groups.through, dispatch_uid="portico-user-groups"
    )


def _remember_access(sender: Any, instance: Any, update_fields: Any = None, **_: Any) -> None:
    if instance.pk is None or (update_fields and not set(update_fields) & set(ACCESS_FIELDS)):
        instance._access_before = None
        return
    before = sender.objects.filter(pk=instance.pk).values_list(*ACCESS_FIELDS).first()
    instance._access_before = before


def _user_saved(sender: Any, instance: Any, created: bool, **_: Any) -> None:
    before = getattr(instance, "_access_before", None)
    if created or before is None:
        return  # a new user has no tokens yet; an untouched one changes nothing
    if before != tuple(getattr(instance, field) for field in ACCESS_FIELDS):
        _bump()


def _groups_changed(action: str, **_: Any) -> None:
    # Roles are groups; the roles service bumps too, a second bump costs one refresh.
    if action in ("post_add", "post_remove", "post_clear"):
        _bump()


def _bump(*_: Any, **__: Any) -> None:
    with transaction.atomic():
        serving_revision_bump()
