"""Forms for the console's POSTs: they check shape; the registry services check the rules."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from console.permissions import ROLES
from repository.models import Role
from repository.services.tokens import DEFAULT_EXPIRY_DAYS

INVOKER = Role.INVOKER.value


class GoldenRecordForm(forms.Form):
    """Record a golden request: KServe v2 JSON inputs run on one version of the model."""

    name = forms.SlugField(max_length=128)
    version = forms.IntegerField(min_value=1)
    inputs = forms.CharField(widget=forms.Textarea)
    rtol = forms.FloatField(min_value=0, initial=1e-5)
    atol = forms.FloatField(min_value=0, initial=1e-6)

    def clean_inputs(self) -> str:
        text: str = self.cleaned_data["inputs"]
        try:
            data: Any = json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(f"not valid JSON ({error})") from error
        if isinstance(data, list):
            data = {"inputs": data}
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("inputs"), list)
            or not data["inputs"]
        ):
            raise forms.ValidationError(
                'expected {"inputs": [{"name", "shape", "datatype", "data"}]}'
            )
        for item in data["inputs"]:
            if (
                not isinstance(item, dict)
                or not {"name", "shape", "datatype", "data"} <= item.keys()
            ):
                raise forms.ValidationError("each input needs name, shape, datatype and data")
        return json.dumps(data)


class TokenCreateForm(forms.Form):
    """A new API token for a user, with a role no higher than the user's own (and only viewer
    for someone else: the registry's ``api_token_create`` refuses more)."""

    name = forms.CharField(max_length=128)
    role = forms.ChoiceField(choices=[(r, r) for r in (*ROLES, INVOKER)])
    username = forms.CharField(
        max_length=150,
        required=False,
        help_text="Leave empty for a token of your own; a token for someone else can only be a "
        "viewer token.",
    )
    models = forms.CharField(
        max_length=2000, required=False, help_text="Invoker: models it may call, comma-separated."
    )
    expires_days = forms.IntegerField(min_value=1, required=False)
    rate_limit_rps = forms.FloatField(required=False, min_value=0.001)
    max_concurrency = forms.IntegerField(required=False, min_value=1)

    def clean_expires_days(self) -> int:
        return self.cleaned_data["expires_days"] or DEFAULT_EXPIRY_DAYS

    def clean_models(self) -> list[str]:
        return [m.strip() for m in self.cleaned_data["models"].split(",") if m.strip()]


class EventFilterForm(forms.Form):
    """Audit log filters (all optional)."""

    model = forms.CharField(required=False)
    user = forms.CharField(required=False)
    action = forms.CharField(required=False)
