"""A viewer reads everything, sees no actions, and gets 403 on the action URLs."""

from __future__ import annotations

import pytest

from tests.factories import ModelFactory, ModelVersionFactory, UserFactory, VersionFileFactory

pytestmark = pytest.mark.browser


def test_viewer_sees_no_actions_and_gets_403(console_only, session_factory):
    deployer = UserFactory(username="dana", role="deployer")
    UserFactory(username="vera", role="viewer")
    model = ModelFactory(name="mlp")
    v1 = ModelVersionFactory(model=model, number=1, state="retired", uploaded_by=deployer)
    ModelVersionFactory(
        model=model, number=2, state="promoted", uploaded_by=deployer, previous_promoted=v1
    )
    VersionFileFactory(
        version=ModelVersionFactory(model=model, number=3, state="ready", uploaded_by=deployer)
    )

    session = session_factory(console_only.console_url)
    session.sign_in("vera")
    page = session.page
    assert page.locator("nav >> text=Upload").count() == 0
    assert page.locator("nav >> text=API tokens").count() == 0
    page.click("text=mlp")
    page.wait_for_selector("#versions")
    assert page.locator("[data-action]").count() == 0
    assert page.locator("text=Record a golden request").count() == 0
    session.shot("viewer-model")

    for path in (
        "/models/mlp/versions/3/promote/",
        "/models/mlp/rollback/",
        "/upload/",
        "/tokens/",
    ):
        response = page.goto(path)
        assert response.status == 403, path
        assert page.locator("h1", has_text="Not allowed").is_visible()
    session.shot("viewer-403")
    # The action itself, posted with the page's own CSRF token, is refused too.
    page.goto("/models/mlp/")
    status = page.evaluate("""async () => {
        const token = document.cookie.split('; ')
            .find(c => c.startsWith('csrftoken=')).split('=')[1];
        const r = await fetch('/models/mlp/versions/3/promote/', {method: 'POST',
            headers: {'X-CSRFToken': token}});
        return r.status; }""")
    assert status == 403
    assert session.errors == []
