"""Requests point at runs.Task and runs.Step (the same tables as before)."""

import django.db.models.deletion
from django.db import migrations, models


def _to(model: str) -> models.ForeignKey:
    return models.ForeignKey(
        on_delete=django.db.models.deletion.CASCADE,
        related_name="approvals",
        to=f"runs.{model}",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0002_step_may_have_several_requests"),
        ("runs", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField("approvalrequest", name, _to(name))
                for name in ("step", "task")
            ]
        )
    ]
