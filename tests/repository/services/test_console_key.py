"""The console's inference key reaches serving as an ordinary token row of a system account: its
hash only, every model, no quota, no console rights, hidden from the lists people manage."""

from __future__ import annotations

import pytest

from repository.console_key import console_authorization, console_inference_key
from repository.facade import access_snapshot
from repository.models import ApiToken
from repository.models.tokens import CONSOLE_ACCOUNT
from repository.selectors import api_token_list, user_list
from repository.selectors.roles import user_role
from repository.services import console_key_ensure, serving_revision_current
from repository.services.tokens import api_token_hash

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_the_key_is_published_as_an_every_model_invoker_row_of_a_system_account() -> None:
    before = serving_revision_current()
    token = console_key_ensure()
    assert token.key_hash == api_token_hash(console_inference_key())
    assert (token.role, token.model_names, token.rate_limit_rps, token.max_concurrency) == (
        "invoker", ["*"], None, None)  # fmt: skip
    assert token.user.username == CONSOLE_ACCOUNT
    assert not token.user.has_usable_password() and user_role(token.user) is None
    assert serving_revision_current() == before + 1
    served = {t.key_hash: (t.models, t.may_infer) for t in access_snapshot().tokens}
    assert served == {token.key_hash: (None, True)}


def test_publishing_again_changes_nothing_and_a_new_secret_key_replaces_the_hash(
    settings,
) -> None:  # type: ignore[no-untyped-def]
    first = console_key_ensure()
    revision = serving_revision_current()
    assert console_key_ensure().key_hash == first.key_hash
    assert serving_revision_current() == revision
    settings.SECRET_KEY = "a-rotated-console-secret-key"
    rotated = console_key_ensure()
    assert rotated.pk == first.pk and rotated.key_hash != first.key_hash
    assert rotated.key_hash == api_token_hash(console_inference_key())
    assert serving_revision_current() == revision + 1
    assert ApiToken.objects.count() == 1


def test_the_console_publishes_once_per_process_and_key(
    settings, django_assert_num_queries
) -> None:  # type: ignore[no-untyped-def]
    assert console_authorization() == {"Authorization": f"Bearer {console_inference_key()}"}
    assert ApiToken.objects.count() == 1
    with django_assert_num_queries(0):
        console_authorization()
    settings.SECRET_KEY = "a-rotated-console-secret-key"
    console_authorization()
    assert ApiToken.objects.get().key_hash == api_token_hash(console_inference_key())


def test_the_system_account_and_its_row_are_left_out_of_managed_lists(deployer) -> None:  # type: ignore[no-untyped-def]
    console_key_ensure()
    assert [u.username for u in user_list()] == ["deployer"]
    assert not api_token_list(include_revoked=True).exists()
