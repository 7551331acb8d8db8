"""The operator dashboard: tool registry, agent profiles, notes, runs."""

from __future__ import annotations

import difflib
import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from audit.models import AuditKind
from audit.services import audit_append
from engine.planning import InvalidArguments, parse_arguments, validate_arguments
from infra.admin import ReadOnlyAdmin
from registry import versions
from registry.access import access_summary
from registry.adapters.http import http_tool_try, sample_arguments
from registry.adapters.mcp import MCPUnavailable, env_errors
from registry.admin_versions import AgentVersionInline
from registry.lint import lint_registry, lint_tool_in_registry
from registry.mcp_import import IMPORT_WARNINGS, mcp_import_tools
from registry.models import (
    Agent,
    Handoff,
    MCPServer,
    ModelPrice,
    Secret,
    Tool,
    ToolVersion,
)
from registry.payloads import (
    TOOL_IMPLEMENTATION_FIELDS,
    ToolSection,
    tool_fields_in,
)
from registry.permissions import can_register_tools
from registry.secrets import secret_set
from registry.services import (
    agent_handoffs_sync,
    handoffs_of,
    model_price,
    tool_clean,
    tool_confirm,
    tool_save,
)


class PrettyJSONField(forms.JSONField):
    """JSON shown indented, so a schema can be read and edited in the admin."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


JSON_FIELDS = {
    models.JSONField: {
        "form_class": PrettyJSONField,
        "widget": forms.Textarea(attrs={"rows": 8, "cols": 80}),
    }
}


#: Kept by the registry, shown read-only.
TOOL_HISTORY_FIELDS = ("version", "created_at", "updated_at")
#: Fields only the admin has, by the section they are shown in.
_ADMIN_ONLY_FIELDS = {
    ToolSection.IMPLEMENTATION: TOOL_IMPLEMENTATION_FIELDS,
    ToolSection.POLICY: ("confirmed",),
}
#: The tool form: a fieldset per section of the definition, then the history.
TOOL_FIELDSETS = (
    *(
        (
            section.value,
            {"fields": tool_fields_in(section) + _ADMIN_ONLY_FIELDS.get(section, ())},
        )
        for section in ToolSection
    ),
    ("History", {"fields": TOOL_HISTORY_FIELDS}),
)


#: Who may use an agent or a tool (registry.access).
ACCESS_FIELDS = ("allowed_users", "allowed_groups")
ACCESS_FIELDSET = (
    "Who may use it",
    {
        "fields": ACCESS_FIELDS,
        "description": "Leave both empty for everyone. Otherwise only these users "
        "and the members of these groups see and use it (superusers always may). "
        "A tool a user may not use is never offered to their runs, and a call of "
        "it is refused as a call of an unknown tool. Changes apply from the next "
        "run on.",
    },
)


class AuditedAdmin(admin.ModelAdmin):
    """An admin whose every save appends an audit event: who changed what.

    Set the event's kinds and object type; say how a row is named (and what
    the event records of it) in :meth:`audit_object_id` and :meth:`audit_data`.
    """

    #: The kind of a change, and of an addition (None: the same kind).
    audit_kind: AuditKind
    audit_added_kind: AuditKind | None = None
    audit_object_type: str

    def audit_object_id(self, obj: Any) -> str:
        raise NotImplementedError

    def audit_data(self, obj: Any) -> dict[str, Any] | None:
        return None

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        added_kind = self.audit_added_kind or self.audit_kind
        audit_append(
            kind=self.audit_kind if change else added_kind,
            actor=request.user,
            object_type=self.audit_object_type,
            object_id=self.audit_object_id(obj),
            data=self.audit_data(obj),
        )


class AccessAdminMixin:
    """Who may use an agent or a tool: the form's fields, a list column, and an
    audit event whenever the lists change."""

    filter_horizontal: tuple[str, ...] = ACCESS_FIELDS

    def get_queryset(self, request: HttpRequest) -> Any:
        rows = super().get_queryset(request)  # type: ignore[misc]
        return rows.prefetch_related(*ACCESS_FIELDS)

    @admin.display(description="who may use it")
    def who_may_use(self, obj: Agent | Tool) -> str:
        return access_summary(obj)

    def save_related(
        self, request: HttpRequest, form: Any, formsets: Any, change: bool
    ) -> None:
        before = _access_of(form.instance) if change else None
        super().save_related(request, form, formsets, change)  # type: ignore[misc]
        after = _access_of(form.instance)
        if before is None and after == {"users": [], "groups": []}:
            return
        if after != before:
            audit_append(
                kind=AuditKind.ACCESS_CHANGED,
                actor=request.user,
                object_type=form.instance._meta.model_name,
                object_id=form.instance.name,
                data=after,
            )


def _access_of(obj: Agent | Tool) -> dict[str, list[str]]:
    return {
        "users": sorted(obj.allowed_users.values_list("username", flat=True)),
        "groups": sorted(obj.allowed_groups.values_list("name", flat=True)),
    }


class ToolForm(forms.ModelForm):
    class Meta:
        model = Tool
        exclude = ("version",)
        widgets = {
            "description": forms.Textarea(attrs={"rows": 4, "cols": 80}),
            "approval_rule": forms.TextInput(attrs={"size": 80}),
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        candidate = self.instance
        for name, value in cleaned.items():
            if name in ACCESS_FIELDS:
                # Relations are saved after the tool; they are no part of it.
                continue
            setattr(candidate, name, value)
        for field, problems in tool_clean(candidate).items():
            target = field if field in self.fields else None
            for message in problems:
                self.add_error(target, message)
        return cleaned


def _diff_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def version_changes(
    before: dict[str, Any] | None, after: dict[str, Any]
) -> list[dict[str, Any]]:
    """Field-level changes between two tool definitions (``version`` aside).

    Short text fields get a word diff (``segments``), JSON and multi-line values a
    line diff (``lines``); ``before`` None means everything was added.
    """
    before = before or {}
    changes: list[dict[str, Any]] = []
    keys = [*after, *(k for k in before if k not in after)]
    for key in keys:
        if key == "version" or before.get(key) == after.get(key):
            continue
        if key not in before:
            kind = "added"
        else:
            kind = "removed" if key not in after else "changed"
        old = _diff_text(before.get(key)) if key in before else ""
        new = _diff_text(after.get(key)) if key in after else ""
        change: dict[str, Any] = {
            "field": key,
            "kind": kind,
            "segments": [],
            "lines": [],
        }
        if isinstance(after.get(key, before.get(key)), str) and "\n" not in old + new:
            old_words, new_words = old.split(" "), new.split(" ")
            matcher = difflib.SequenceMatcher(a=old_words, b=new_words, autojunk=False)
            for op, a1, a2, b1, b2 in matcher.get_opcodes():
                if op in ("delete", "replace") and a2 > a1:
                    change["segments"].append(("delete", " ".join(old_words[a1:a2])))
                if op in ("insert", "replace") and b2 > b1:
                    change["segments"].append(("insert", " ".join(new_words[b1:b2])))
                if op == "equal":
                    change["segments"].append(("equal", " ".join(old_words[a1:a2])))
            change["segments"] = [s for s in change["segments"] if s[1]] or [
                ("insert", '""')
            ]
        else:
            diff = difflib.unified_diff(
                old.splitlines(), new.splitlines(), lineterm="", n=2
            )
            for line in list(diff)[2:]:
                mark = line[:1] if line[:1] in "+-@" else " "
                text = line if mark == "@" else line[1:]
                change["lines"].append((mark, text))
        changes.append(change)
    return changes


def changes_from_previous(
    version: ToolVersion,
) -> tuple[ToolVersion | None, list[dict[str, Any]]]:
    """The version before ``version`` (None for the first) and what changed since."""
    previous = (
        ToolVersion.objects.filter(tool_id=version.tool_id, version__lt=version.version)
        .order_by("-version")
        .first()
    )
    return previous, version_changes(
        previous.definition if previous else None, version.definition or {}
    )


def render_version_diff(version: ToolVersion) -> str:
    """HTML (escaped, from a template) of what ``version`` changed."""
    previous, changes = changes_from_previous(version)
    return render_to_string(
        "admin/registry/toolversion/_diff.html",
        {
            "changes": changes,
            "previous": previous.version if previous else None,
            "current": version.version,
            "empty_message": "No field changed.",
        },
    )


class ToolVersionInline(admin.TabularInline):
    model = ToolVersion
    extra = 0
    can_delete = False
    fields = ("version", "changed_by", "changed_at", "changed_fields")
    readonly_fields = fields
    ordering = ("-version",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="changes")
    def changed_fields(self, obj: ToolVersion) -> str:
        previous, changes = changes_from_previous(obj)
        summary = (
            "first version"
            if previous is None
            else ", ".join(c["field"] for c in changes) or "no field changed"
        )
        url = reverse("admin:registry_toolversion_change", args=[obj.pk])
        return format_html('{} — <a href="{}">diff</a>', summary, url)


class HasLintWarningsFilter(admin.SimpleListFilter):
    """Tools with or without description-lint warnings."""

    title = "lint warnings"
    parameter_name = "lint"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Has warnings"), ("no", "Clean")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() not in ("yes", "no"):
            return queryset
        warned = [name for name, found in _lint_for(request).items() if found]
        if self.value() == "yes":
            return queryset.filter(name__in=warned)
        return queryset.exclude(name__in=warned)


def _lint_for(request: HttpRequest) -> dict[str, list[Any]]:
    """Lint of the whole registry, computed once per request."""
    cached = getattr(request, "_reach_lint", None)
    if cached is None:
        cached = lint_registry()
        request._reach_lint = cached  # type: ignore[attr-defined]
    return cached


class ToolQualityMixin:
    """Registry quality on the tool admin: lint warnings, confirmation, versions.

    Adds to whatever the admin declares (list column and filters, a read-only
    field on the change form, the "Confirm policy and enable" action).
    """

    def get_list_display(self, request: HttpRequest) -> Any:
        found = _lint_for(request)

        @admin.display(description="lint")
        def lint_column(obj: Tool) -> str:
            count = len(found.get(obj.name, []))
            return f"{count} warning{'s' if count != 1 else ''}" if count else "—"

        base = super().get_list_display(request)  # type: ignore[misc]
        return (*base, "confirmed", lint_column)

    def get_list_filter(self, request: HttpRequest) -> Any:
        base = super().get_list_filter(request)  # type: ignore[misc]
        return (*base, "confirmed", "mcp_server", HasLintWarningsFilter)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        base = super().get_readonly_fields(request, obj)  # type: ignore[misc]
        return (*base, "lint_warnings")

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        base = list(super().get_fieldsets(request, obj))  # type: ignore[misc]
        quality = ("Description lint", {"fields": ("lint_warnings",)})
        return [*base[:1], quality, *base[1:]]

    @admin.display(description="warnings")
    def lint_warnings(self, obj: Tool) -> str:
        if obj is None or not obj.pk:
            return "Shown after the tool is saved."
        found = lint_tool_in_registry(obj)
        if not found:
            return "No warnings."
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "", "<li>{}: {}</li>", ((w.rule.value, w.message) for w in found)
            ),
        )

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)  # type: ignore[misc]
        model_admin: Any = self
        if model_admin.has_change_permission(request):
            action = model_admin.get_action("confirm_and_enable")
            if action is not None:
                actions["confirm_and_enable"] = action
        return actions

    @admin.action(description="Confirm policy and enable")
    def confirm_and_enable(self, request: HttpRequest, queryset: Any) -> None:
        model_admin: Any = self
        done = []
        for tool in queryset:
            try:
                tool_confirm(tool=tool, user=request.user)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{field}: {' '.join(messages_)}"
                    for field, messages_ in exc.message_dict.items()
                )
                model_admin.message_user(
                    request, f"{tool.name} not enabled: {problems}", messages.ERROR
                )
            else:
                done.append(tool.name)
        if done:
            model_admin.message_user(
                request,
                "Confirmed and enabled: " + ", ".join(done),
                messages.SUCCESS,
            )


class TryItForm(forms.Form):
    """Sample arguments for an HTTP tool, checked against its schema."""

    arguments = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 10, "cols": 80, "spellcheck": "false"}),
        help_text="A JSON object of arguments, as the model would send them.",
    )

    def __init__(self, *args: Any, tool: Tool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tool = tool

    def clean_arguments(self) -> dict[str, Any]:
        try:
            arguments = parse_arguments(self.cleaned_data["arguments"])
            validate_arguments(self.tool.parameters, arguments)
        except InvalidArguments as exc:
            raise forms.ValidationError(str(exc)) from exc
        return arguments


class HttpTryItMixin:
    """A "Try it" page for HTTP tools: run once with sample arguments.

    Reads are sent and show request and response; writes are a dry run that
    only shows the request. Admin-only (tool registrars), CSRF-protected.
    """

    def get_urls(self) -> list[URLPattern]:
        admin_site = self.admin_site  # type: ignore[attr-defined]
        opts = self.opts  # type: ignore[attr-defined]
        name = f"{opts.app_label}_{opts.model_name}_try"
        urls = super().get_urls()  # type: ignore[misc]
        return [
            path(
                "<path:object_id>/try/",
                admin_site.admin_view(self.try_it_view),
                name=name,
            ),
            *urls,
        ]

    def try_it_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        model_admin: Any = self
        tool = model_admin.get_object(request, unquote(object_id))
        if tool is None or tool.kind != Tool.Kind.HTTP:
            raise Http404("No HTTP tool with that id.")
        if not (
            can_register_tools(request.user)
            and model_admin.has_change_permission(request, tool)
        ):
            raise PermissionDenied
        report = None
        if request.method == "POST":
            form = TryItForm(request.POST, tool=tool)
            if form.is_valid():
                report = http_tool_try(
                    tool=tool,
                    arguments=form.cleaned_data["arguments"],
                    user=request.user,
                )
        else:
            sample = json.dumps(
                sample_arguments(tool.parameters), ensure_ascii=False, indent=2
            )
            form = TryItForm(initial={"arguments": sample}, tool=tool)

        def pretty(value: Any) -> str:
            return json.dumps(value, ensure_ascii=False, indent=2)

        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "original": tool,
            "title": f"Try {tool.name}",
            "form": form,
            "report": report,
            "is_write": tool.risk != Tool.Risk.READ_ONLY,
            "requests": [
                {**r, "body_json": pretty(r["body"]) if r["body"] is not None else ""}
                for r in (report.requests if report else [])
            ],
            "result_json": pretty(report.result) if report else "",
        }
        return TemplateResponse(request, "admin/registry/tool/try_it.html", context)


@admin.register(Tool)
class ToolAdmin(AccessAdminMixin, ToolQualityMixin, HttpTryItMixin, admin.ModelAdmin):
    formfield_overrides = JSON_FIELDS
    form = ToolForm
    list_display = (
        "name",
        "kind",
        "risk",
        "approval",
        "enabled",
        "version",
        "tag_list",
        "who_may_use",
    )
    list_filter = ("kind", "risk", "approval", "enabled", "untrusted_output")
    search_fields = ("name", "description")
    readonly_fields = TOOL_HISTORY_FIELDS
    inlines = [ToolVersionInline]
    fieldsets = (*TOOL_FIELDSETS[:-1], ACCESS_FIELDSET, TOOL_FIELDSETS[-1])

    @admin.display(description="tags")
    def tag_list(self, obj: Tool) -> str:
        return ", ".join(obj.tags or [])

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Never deleted, so never offered: steps name a tool by name and version,
        # and a tool made again under its name would number its versions anew.
        return False

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        if "enabled" in form.base_fields:
            form.base_fields["enabled"].help_text = (
                "Untick to retire the tool: it is offered to no agent and runs for "
                "nobody. Tools are not deleted; their versions are the history "
                "that traces name."
            )
        return form

    def save_model(
        self, request: HttpRequest, obj: Tool, form: Any, change: bool
    ) -> None:
        tool_save(tool=obj, user=request.user)


class HandoffInline(admin.TabularInline):
    """The agents this one may hand its conversations to, each offered to the
    model as ``transfer_to_<agent>`` with the description."""

    model = Handoff
    fk_name = "source"
    extra = 0
    verbose_name = "handoff target"
    verbose_name_plural = (
        "Handoffs: agents it may hand the conversation to (the model is offered "
        "transfer_to_<agent> with the description; the run's user must be allowed "
        "to use the target)"
    )


@admin.register(Agent)
class AgentAdmin(AccessAdminMixin, AuditedAdmin):
    formfield_overrides = JSON_FIELDS
    inlines = (HandoffInline, AgentVersionInline)
    audit_kind = AuditKind.AGENT_CHANGED
    audit_added_kind = AuditKind.AGENT_CREATED
    audit_object_type = "agent"
    list_display = (
        "name",
        "model",
        "is_default",
        "max_steps",
        "token_budget",
        "max_cost_usd",
        "who_may_use",
    )
    filter_horizontal = ("tools", *ACCESS_FIELDS)

    def save_model(
        self, request: HttpRequest, obj: Agent, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if obj.max_cost_usd is not None and model_price(obj.effective_model) is None:
            messages.warning(
                request,
                f"No price names the model '{obj.effective_model}', so its runs' "
                "cost is unknown and the cost budget cannot apply. Add one under "
                "Model prices.",
            )

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        # The row and then its tools are saved: one version, made at the end.
        with versions.versions_deferred():
            return super().changeform_view(request, *args, **kwargs)

    def save_related(
        self, request: HttpRequest, form: Any, formsets: Any, change: bool
    ) -> None:
        before = handoffs_of(form.instance) if change else []
        super().save_related(request, form, formsets, change)
        agent_handoffs_sync(agent=form.instance, user=request.user, before=before)
        made = versions.version_record(form.instance, user=request.user)
        if made is not None and change:
            labelled = versions.version_resolve(form.instance)
            if labelled is not None and labelled.pk != made.pk:
                messages.info(
                    request,
                    f"Saved as v{made.number}. Chats still run v{labelled.number} "
                    "(labelled production) until you move the label: compare "
                    f"them (manage.py eval SUITE --agent {form.instance.name}"
                    f"@v{made.number} --compare production), then promote.",
                )

    def audit_object_id(self, obj: Agent) -> str:
        return obj.name


@admin.register(ModelPrice)
class ModelPriceAdmin(AuditedAdmin):
    """The price table: list prices per million tokens, editable in the list."""

    audit_kind = AuditKind.PRICE_CHANGED
    audit_object_type = "model_price"

    list_display = (
        "pattern",
        "input_usd_per_m",
        "cached_input_usd_per_m",
        "output_usd_per_m",
        "note",
        "updated_at",
    )
    list_editable = (
        "input_usd_per_m",
        "cached_input_usd_per_m",
        "output_usd_per_m",
    )
    search_fields = ("pattern", "note")

    def audit_object_id(self, obj: ModelPrice) -> str:
        return obj.pattern

    def audit_data(self, obj: ModelPrice) -> dict[str, Any]:
        return {
            "input_usd_per_m": str(obj.input_usd_per_m),
            "cached_input_usd_per_m": (
                str(obj.cached_input_usd_per_m)
                if obj.cached_input_usd_per_m is not None
                else None
            ),
            "output_usd_per_m": str(obj.output_usd_per_m),
        }


class SecretForm(forms.ModelForm):
    value = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text=(
            "Write-only: never shown again. Leave blank to keep the current value."
        ),
    )

    class Meta:
        model = Secret
        fields = ("name",)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.instance.pk and not cleaned.get("value"):
            self.add_error("value", "A new secret needs a value.")
        return cleaned


@admin.register(Secret)
class SecretAdmin(admin.ModelAdmin):
    form = SecretForm
    # key_id: which key of the keyring encrypted it (README.md "Rotating the
    # secrets key"); a hash, nothing of the key or the value.
    list_display = ("name", "key_id", "updated_at")

    def save_model(
        self, request: HttpRequest, obj: Secret, form: Any, change: bool
    ) -> None:
        value = form.cleaned_data.get("value")
        if value:
            saved = secret_set(name=obj.name, value=value)
            obj.pk = saved.pk
        elif change:
            obj.save(update_fields=["name"])


@admin.register(ToolVersion)
class ToolVersionAdmin(ReadOnlyAdmin):
    """Every version of every tool, read-only, with a diff from the one before."""

    list_display = ("tool", "version", "changed_by", "changed_at")
    list_filter = ("tool",)
    list_select_related = ("tool", "changed_by")
    fields = ("tool", "version", "changed_by", "changed_at", "diff", "definition_json")
    readonly_fields = fields
    ordering = ("tool__name", "-version")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="changes from the previous version")
    def diff(self, obj: ToolVersion) -> str:
        return render_version_diff(obj)

    @admin.display(description="definition")
    def definition_json(self, obj: ToolVersion) -> str:
        text = json.dumps(obj.definition, ensure_ascii=False, indent=2, sort_keys=True)
        return format_html("<pre>{}</pre>", text)


class MCPServerForm(forms.ModelForm):
    url = forms.URLField(
        required=False,
        assume_scheme="https",
        help_text="The streamable HTTP endpoint, e.g. https://mcp.example.com/mcp.",
    )

    class Meta:
        model = MCPServer
        fields = ("name", "transport", "command", "url", "env", "enabled")
        help_texts = {
            "command": 'The argv list to start it, e.g. ["npx", "-y", "some-server"].',
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        transport = cleaned.get("transport")
        command = cleaned.get("command")
        if transport == MCPServer.Transport.STDIO:
            if not (
                isinstance(command, list)
                and command
                and all(isinstance(part, str) and part for part in command)
            ):
                self.add_error(
                    "command", "A stdio server needs its command as a list of strings."
                )
        elif transport == MCPServer.Transport.HTTP and not cleaned.get("url"):
            self.add_error("url", "An HTTP server needs its URL.")
        env = cleaned.get("env")
        for problem in env_errors(env if env is not None else {}):
            self.add_error("env", problem)
        if env and transport == MCPServer.Transport.HTTP:
            self.add_error("env", "Only a stdio server gets an environment.")
        return cleaned


@admin.register(MCPServer)
class MCPServerAdmin(admin.ModelAdmin):
    form = MCPServerForm
    list_display = ("name", "transport", "target", "enabled", "tool_count")
    list_filter = ("transport", "enabled")
    actions = ["import_tools"]

    @admin.display(description="command or URL")
    def target(self, obj: MCPServer) -> str:
        if obj.transport == MCPServer.Transport.HTTP:
            return obj.url
        return " ".join(str(part) for part in obj.command or [])

    @admin.display(description="imported tools")
    def tool_count(self, obj: MCPServer) -> int:
        return Tool.objects.filter(mcp_server=obj).count()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Its imported tools are never deleted (ToolAdmin): a server that has
        # some is disabled instead.
        if obj is not None and Tool.objects.filter(mcp_server=obj).exists():
            return False
        return super().has_delete_permission(request, obj)

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        return [
            path(
                "<path:object_id>/import/",
                self.admin_site.admin_view(self.import_view),
                name="registry_mcpserver_import",
            ),
            *urls,
        ]

    def import_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: import the server's tools, then show them in the tool list."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        server = self.get_object(request, unquote(object_id))
        if server is None:
            raise Http404("No MCP server with that id.")
        if not self._may_import(request, server):
            raise PermissionDenied
        self._import(request, server)
        url = reverse("admin:registry_tool_changelist")
        return HttpResponseRedirect(f"{url}?mcp_server__id__exact={server.pk}")

    def _may_import(self, request: HttpRequest, server: MCPServer | None) -> bool:
        return can_register_tools(request.user) and self.has_change_permission(
            request, server
        )

    def _import(self, request: HttpRequest, server: MCPServer) -> None:
        try:
            outcomes = mcp_import_tools(server=server, user=request.user)
        except MCPUnavailable as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        if not outcomes:
            self.message_user(
                request, f"{server.name} lists no tools.", messages.WARNING
            )
        for outcome in outcomes:
            warn = outcome.status in IMPORT_WARNINGS
            level = messages.WARNING if warn else messages.SUCCESS
            self.message_user(request, f"{server.name}: {outcome.line()}", level)

    @admin.action(description="Import tools (disabled until confirmed)")
    def import_tools(self, request: HttpRequest, queryset: Any) -> None:
        for server in queryset:
            if not self._may_import(request, server):
                raise PermissionDenied
            self._import(request, server)
