"""Hand models from one app to another without touching their tables.

The re-cut moved the models of ``agents`` into ``registry``, ``runs`` and
``effects`` and the audit log from ``traces`` into ``audit``. Their tables keep
their names (each model sets ``db_table``), so a database of any age needs no data
moved: the new apps' first migrations only take the models over in Django's
migration state, derived here from the migration that first created them (one
definition of each model's history, not a copy), and move the content types so
that permissions granted on them stay granted.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.conf import settings
from django.db import migrations
from django.db.migrations.operations.base import Operation


def take_over(
    *, source: str, migration: str, owners: dict[str, str], owner: str
) -> list[Operation]:
    """State-only operations that recreate in ``owner`` the models it now holds.

    ``owners`` maps every model of ``source`` (lower-case name) to its new app,
    so that relations between the moved models point at their new homes.
    """
    module = importlib.import_module(f"{source}.migrations.{migration}")
    mine = {name for name, app in owners.items() if app == owner}
    state: list[Operation] = []
    for op in module.Migration.operations:
        if isinstance(op, migrations.CreateModel) and op.name_lower in mine:
            state.append(
                migrations.CreateModel(
                    name=op.name,
                    fields=[
                        (name, _retarget(field, source, owners))
                        for name, field in op.fields
                    ],
                    options={**op.options, "db_table": f"{source}_{op.name_lower}"},
                    bases=op.bases,
                    managers=op.managers,
                )
            )
        elif isinstance(op, migrations.AddField) and op.model_name_lower in mine:
            state.append(
                migrations.AddField(
                    model_name=op.model_name,
                    name=op.name,
                    field=_retarget(op.field, source, owners),
                )
            )
        elif (
            isinstance(op, migrations.AddIndex | migrations.AddConstraint)
            and op.model_name_lower in mine
        ):
            state.append(op)
    return [migrations.SeparateDatabaseAndState(state_operations=state)]


def _retarget(field: Any, source: str, owners: dict[str, str]) -> Any:
    name, path, args, kwargs = field.deconstruct()
    target = kwargs.get("to")
    if isinstance(target, str) and target.lower().startswith(f"{source}."):
        model = target.split(".", 1)[1].lower()
        kwargs["to"] = f"{owners[model]}.{model}"
    return field.__class__(*args, **kwargs)


def relabel_content_types(*, old: str, new: str, models: list[str]) -> Operation:
    """Move the models' content types (and so the permissions granted) to ``new``."""

    def forward(apps: Any, schema_editor: Any) -> None:
        content_type = apps.get_model("contenttypes", "ContentType")
        content_type.objects.filter(app_label=old, model__in=models).update(
            app_label=new
        )

    def backward(apps: Any, schema_editor: Any) -> None:
        content_type = apps.get_model("contenttypes", "ContentType")
        content_type.objects.filter(app_label=new, model__in=models).update(
            app_label=old
        )

    return migrations.RunPython(forward, backward)


#: Where each model of the ``agents`` app went.
AGENTS_MODELS = {
    **dict.fromkeys(
        ["agent", "tool", "toolversion", "mcpserver", "secret"], "registry"
    ),
    **dict.fromkeys(["conversation", "message", "task", "step", "apitoken"], "runs"),
    **dict.fromkeys(["note", "ticket", "toolexecution", "outbox"], "effects"),
}
#: Where each model of the ``traces`` app went.
TRACES_MODELS = dict.fromkeys(["auditevent", "audithead"], "audit")


def hand_over(*, source: str, migration: str, owner: str) -> list[Operation]:
    """Every operation of ``owner``'s first migration: take over, then relabel."""
    owners = AGENTS_MODELS if source == "agents" else TRACES_MODELS
    models = sorted(name for name, app in owners.items() if app == owner)
    return [
        *take_over(source=source, migration=migration, owners=owners, owner=owner),
        relabel_content_types(old=source, new=owner, models=models),
    ]


def handover_migration(
    *, source: str, owner: str, after: tuple[str, ...] = ()
) -> type[migrations.Migration]:
    """The whole first migration of ``owner``: it depends on the migration that
    created the tables, on the apps named in ``after``, and takes its models over.
    """
    first = "0001_initial"
    return type(
        "Migration",
        (migrations.Migration,),
        {
            "initial": True,
            "dependencies": [
                (source, first),
                ("contenttypes", "0002_remove_content_type_name"),
                migrations.swappable_dependency(settings.AUTH_USER_MODEL),
                *((app, first) for app in after),
            ],
            "operations": hand_over(source=source, migration=first, owner=owner),
        },
    )


def handoff_migration(
    *, source: str, after: tuple[tuple[str, str], ...]
) -> type[migrations.Migration]:
    """The migration after which ``source`` holds none of the models its first
    migration created: their relations, then the models, leave its state only.
    """
    module = importlib.import_module(f"{source}.migrations.0001_initial")
    operations = module.Migration.operations
    created = [op for op in operations if isinstance(op, migrations.CreateModel)]
    relations = [
        migrations.RemoveField(model_name=op.name_lower, name=name)
        for op in created
        for name, field in op.fields
        if field.is_relation
    ] + [
        migrations.RemoveField(model_name=op.model_name_lower, name=op.name)
        for op in operations
        if isinstance(op, migrations.AddField) and op.field.is_relation
    ]
    models = [migrations.DeleteModel(name=op.name) for op in created]
    return type(
        "Migration",
        (migrations.Migration,),
        {
            "dependencies": [(source, "0001_initial"), *after],
            "operations": [
                migrations.SeparateDatabaseAndState(
                    state_operations=[*relations, *models]
                )
            ],
        },
    )
