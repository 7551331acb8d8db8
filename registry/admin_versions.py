"""The admin of agent versions and their labels (registry.versions): every
version read-only with its diff from the one before, actions that label a
version or roll the agent back to it, and the labels themselves. Imported by
``registry.admin``, whose agent page lists an agent's versions
(:class:`AgentVersionInline`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html

from registry import versions
from registry.models import AgentLabel, AgentVersion


class AgentVersionInline(admin.TabularInline):
    """An agent's versions, newest first, each with its labels and a link to
    its diff against the one before (and the rollback)."""

    model = AgentVersion
    extra = 0
    can_delete = False
    fields = ("number", "labels_of", "note", "changed_by", "changed_at", "diff_link")
    readonly_fields = fields
    ordering = ("-number",)
    verbose_name_plural = (
        "Versions (chats run the one labelled production, else the newest)"
    )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("labels")

    @admin.display(description="labels")
    def labels_of(self, obj: AgentVersion) -> str:
        return ", ".join(label.name for label in obj.labels.all()) or "—"

    @admin.display(description="changes")
    def diff_link(self, obj: AgentVersion) -> str:
        url = reverse("admin:registry_agentversion_change", args=[obj.pk])
        return format_html('<a href="{}">diff, labels, rollback</a>', url)


@admin.register(AgentVersion)
class AgentVersionAdmin(admin.ModelAdmin):
    """Every version of every agent, read-only, with a unified diff from the one
    before; actions label a version or roll the agent back to it."""

    list_display = ("agent", "number", "labels_of", "note", "changed_by", "changed_at")
    list_filter = ("agent",)
    list_select_related = ("agent", "changed_by")
    fields = (
        "agent",
        "number",
        "labels_of",
        "note",
        "changed_by",
        "changed_at",
        "diff",
        "snapshot_text",
    )
    readonly_fields = fields
    ordering = ("agent__name", "-number")
    actions = ["label_production", "label_candidate", "rollback"]

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("labels")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Runs name the version they ran.
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Nothing on a version's page is editable; the actions need this.
        return request.user.has_perm("registry.change_agent")

    def save_model(
        self, request: HttpRequest, obj: AgentVersion, form: Any, change: bool
    ) -> None:
        # A version is never edited: what a run recorded stays what it ran.
        pass

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        read_only = {
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
        }
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), **read_only}
        )

    @admin.display(description="labels")
    def labels_of(self, obj: AgentVersion) -> str:
        return ", ".join(label.name for label in obj.labels.all()) or "—"

    @admin.display(description="changes from the previous version")
    def diff(self, obj: AgentVersion) -> str:
        previous = versions.version_previous(obj)
        text = versions.version_diff(previous, obj)
        if previous is not None and not text:
            return "No field changed (a rollback to an equal version)."
        return format_html(
            '<pre class="agent-version-diff">{}</pre>', text or "(first version)"
        )

    @admin.display(description="snapshot")
    def snapshot_text(self, obj: AgentVersion) -> str:
        return format_html("<pre>{}</pre>", versions.snapshot_text(obj.snapshot))

    def _label(self, request: HttpRequest, queryset: Any, name: str) -> None:
        chosen = list(queryset.select_related("agent"))
        if len({v.agent_id for v in chosen}) != len(chosen):
            self.message_user(request, "Choose one version per agent.", messages.ERROR)
            return
        for version in chosen:
            versions.label_move(
                agent=version.agent, name=name, version=version, user=request.user
            )
            self.message_user(
                request,
                f"{version.agent.name}: {name} is now v{version.number}.",
                messages.SUCCESS,
            )

    @admin.action(description="Label as production (chats run it)")
    def label_production(self, request: HttpRequest, queryset: Any) -> None:
        self._label(request, queryset, versions.PRODUCTION)

    @admin.action(description="Label as candidate")
    def label_candidate(self, request: HttpRequest, queryset: Any) -> None:
        self._label(request, queryset, versions.CANDIDATE)

    @admin.action(description="Roll back to this version (makes a new version)")
    def rollback(self, request: HttpRequest, queryset: Any) -> None:
        chosen = list(queryset.select_related("agent"))
        if len(chosen) != 1:
            self.message_user(request, "Choose one version.", messages.ERROR)
            return
        made = versions.version_rollback(
            agent=chosen[0].agent, version=chosen[0], user=request.user
        )
        self.message_user(
            request,
            f"{made.agent.name} is now v{made.number}, equal to v{chosen[0].number}. "
            "Chats run it where no production label points elsewhere.",
            messages.SUCCESS,
        )


class AgentLabelForm(forms.ModelForm):
    class Meta:
        model = AgentLabel
        fields = ("agent", "name", "version")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        agent, version = cleaned.get("agent"), cleaned.get("version")
        if agent is not None and version is not None and version.agent_id != agent.pk:
            self.add_error("version", f"Not a version of {agent.name}.")
        if self.instance.pk is None and agent is not None:
            # A label the agent has already is moved (label_move), not refused.
            existing = AgentLabel.objects.filter(
                agent=agent, name=cleaned.get("name")
            ).first()
            if existing is not None:
                self.instance = existing
        return cleaned


@admin.register(AgentLabel)
class AgentLabelAdmin(admin.ModelAdmin):
    """Labels of agent versions; adding one whose name the agent has moves it.
    Every move is audited (``agent.label_moved``)."""

    form = AgentLabelForm
    list_display = ("agent", "name", "version", "moved_by", "moved_at")
    list_filter = ("agent", "name")
    list_select_related = ("agent", "version", "moved_by")
    readonly_fields = ("moved_by", "moved_at")

    def save_model(
        self, request: HttpRequest, obj: AgentLabel, form: Any, change: bool
    ) -> None:
        if change and "name" in form.changed_data:
            # Renaming is a new label and the old name gone.
            AgentLabel.objects.filter(pk=obj.pk).delete()
            obj.pk = None
        saved = versions.label_move(
            agent=obj.agent, name=obj.name, version=obj.version, user=request.user
        )
        obj.pk = saved.pk
