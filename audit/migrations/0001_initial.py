"""The audit app takes over its models from the traces app (infra/handover.py)."""

from infra.handover import handover_migration

Migration = handover_migration(source="traces", owner="audit")
