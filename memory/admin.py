"""Admin of memory: what agents remember for everyone (written here), and users'
items (read-only here: their owners correct them on the Memory page; an admin
may delete a poisoned one). Every change goes through the services, audited."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from memory import services
from memory.models import MemoryItem
from memory.permissions import can_manage_agent_memory


class TaintedFilter(admin.SimpleListFilter):
    title = "tainted"
    parameter_name = "tainted"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Any:
        return [("yes", "tainted"), ("no", "trusted")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        if self.value() == "yes":
            return queryset.exclude(tainted_by=[])
        if self.value() == "no":
            return queryset.filter(tainted_by=[])
        return queryset


class AgentMemoryForm(forms.ModelForm):
    text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), max_length=services.MAX_TEXT_CHARS
    )

    class Meta:
        model = MemoryItem
        fields = ("agent", "subject", "text", "expires_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance._state.adding:
            # Written here: what an agent knows for everyone.
            self.instance.scope = MemoryItem.Scope.AGENT
            self.instance.source_kind = MemoryItem.SourceKind.PERSON

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        item = self.instance
        agent = data.get("agent") if item._state.adding else item.agent
        if agent is None:
            self.add_error("agent", "Name the agent that remembers this.")
            return data
        key = services.subject_key(data.get("subject") or "")
        holder = (
            MemoryItem.objects.filter(
                scope=MemoryItem.Scope.AGENT,
                agent=agent,
                subject_key=key,
                status=MemoryItem.Status.LIVE,
            )
            .exclude(pk=item.pk)
            .first()
        )
        if key and holder is not None and not item._state.adding:
            self.add_error(
                "subject", f"memory:{holder.short_id} holds that subject already."
            )
        return data


@admin.register(MemoryItem)
class MemoryItemAdmin(admin.ModelAdmin):
    form = AgentMemoryForm
    list_display = (
        "short",
        "scope",
        "owner",
        "state",
        "is_tainted",
        "source_label",
        "updated_at",
        "expires_at",
    )
    list_filter = ("scope", "status", TaintedFilter, "agent")
    search_fields = ("subject", "text")
    list_select_related = ("user", "agent")
    readonly_fields = (
        "scope",
        "user",
        "status",
        "supersedes",
        "source_kind",
        "source_task",
        "source_seq",
        "source_user",
        "source_label",
        "forgotten_by",
        "tainted_by",
        "created_at",
        "updated_at",
    )

    @admin.display(description="item")
    def short(self, item: MemoryItem) -> str:
        return f"{item.subject or '(no subject)'}: {item.text[:60]}"

    @admin.display(description="owner")
    def owner(self, item: MemoryItem) -> str:
        return str(item.agent if item.scope == MemoryItem.Scope.AGENT else item.user)

    @admin.display(description="tainted", boolean=True)
    def is_tainted(self, item: MemoryItem) -> bool:
        return item.tainted

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ()
        # The agent of a written item stays; a new fact for another agent is new.
        return (*self.readonly_fields, "agent")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return can_manage_agent_memory(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and (
            obj.scope != MemoryItem.Scope.AGENT or obj.status != MemoryItem.Status.LIVE
        ):
            return False
        return can_manage_agent_memory(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage_agent_memory(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_manage_agent_memory(request.user)

    def save_model(
        self, request: HttpRequest, obj: MemoryItem, form: Any, change: bool
    ) -> None:
        data = form.cleaned_data
        if change:
            item = services.memory_update(
                item=obj,
                actor=request.user,
                text=data["text"],
                subject=data.get("subject", ""),
                expires_at=data.get("expires_at"),
            )
        else:
            item = services.memory_write(
                scope=MemoryItem.Scope.AGENT,
                agent=data["agent"],
                subject=data.get("subject", ""),
                text=data["text"],
                expires_at=data.get("expires_at"),
                source=services.Source.person(request.user),
            )
        # The admin logs and redirects with the object it was given.
        obj.pk = item.pk
        obj._state.adding = False

    def delete_model(self, request: HttpRequest, obj: MemoryItem) -> None:
        services.memory_delete(item=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for item in list(queryset):
            if MemoryItem.objects.filter(pk=item.pk).exists():
                services.memory_delete(item=item, actor=request.user)
