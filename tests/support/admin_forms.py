"""Post admin change forms the way a browser would: every field as rendered."""

from __future__ import annotations

from typing import Any

from django import forms


def _field_data(form: forms.BaseForm, data: dict[str, Any]) -> None:
    for name, field in form.fields.items():
        bound = form[name]
        value = bound.value()
        key = form.add_prefix(name)
        if isinstance(field, forms.BooleanField):
            if value:
                data[key] = "on"
            continue
        if isinstance(field, forms.ModelMultipleChoiceField):
            data[key] = [str(v) for v in (value or [])]
            continue
        # value() is already prepared for the widget (JSON fields as text).
        data[key] = "" if value is None else value


def admin_form_data(response: Any) -> dict[str, Any]:
    """The POST data of the admin change form in ``response`` (a GET of the page)."""
    data: dict[str, Any] = {}
    _field_data(response.context["adminform"].form, data)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        _field_data(formset.management_form, data)
        for form in formset.forms:
            _field_data(form, data)
    return data
