"""Record the decision itself, not only the status it led to.

Mark done and retry both leave a recovery request ``approved``; from now on the
request says which one it was. Requests decided before keep what can be told
for certain: a rejection, an approval of an action, and for a recovery request
the decision its step recorded (``mark_done`` there; otherwise a retry).
"""

from typing import Any

from django.db import migrations, models


def _backfill(apps: Any, schema_editor: Any) -> None:
    approval_model = apps.get_model("approvals", "ApprovalRequest")
    decided = approval_model.objects.filter(status__in=("approved", "rejected"))
    for approval in decided.select_related("step").iterator():
        if approval.status == "rejected":
            decision = "reject"
        elif approval.kind != "recovery":
            decision = "approve"
        else:
            recorded = (approval.step.detail or {}).get("decision") or {}
            mine = recorded.get("approval") == str(approval.pk)
            done = mine and recorded.get("decision") == "mark_done"
            decision = "mark_done" if done else "retry"
        approval_model.objects.filter(pk=approval.pk).update(decision=decision)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0003_point_at_runs")]

    operations = [
        migrations.AddField(
            model_name="approvalrequest",
            name="decision",
            field=models.CharField(
                blank=True,
                choices=[
                    ("approve", "approved"),
                    ("reject", "rejected"),
                    ("mark_done", "marked done"),
                    ("retry", "retried"),
                ],
                max_length=10,
            ),
        ),
        migrations.RunPython(_backfill, migrations.RunPython.noop),
    ]
