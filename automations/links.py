"""What a run's ``source`` names, for the trace page (``runs.ports.source_link``)."""

from __future__ import annotations

from django.urls import reverse

from automations.models import Schedule, Trigger
from runs.ports import SourceLink


def source_link(source: str) -> SourceLink | None:
    """The schedule or trigger a run's ``source`` names: its label and page."""
    kind, _, key = source.partition(":")
    model = {"schedule": Schedule, "trigger": Trigger}.get(kind)
    if model is None or not key:
        return None
    found = model.objects.filter(pk=key).only("name").first()
    if found is None:
        return SourceLink(label=f"{kind} (deleted)", url=None)
    url = reverse(f"admin:automations_{kind}_change", args=[found.pk])
    return SourceLink(label=f"{kind} {found.name}", url=url)
