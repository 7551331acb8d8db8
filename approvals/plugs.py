"""What approvals plugs into a run (runs/ports.py): a parked call opens its
approval request, a cancelled run withdraws its pending ones."""

from __future__ import annotations

from approvals.services import approval_create, approvals_cancel_for_task
from runs.ports import ApprovalPort, plug_approvals

plug_approvals(
    ApprovalPort(open=approval_create, cancel_for_task=approvals_cancel_for_task)
)
