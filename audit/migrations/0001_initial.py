"""The audit app takes over its models from the traces app (infra/migration_handover.py)."""

from infra.migration_handover import handover_migration

Migration = handover_migration(source="traces", owner="audit")
