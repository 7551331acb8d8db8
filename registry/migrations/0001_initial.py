"""The registry app takes over its models from the agents app (infra/migration_handover.py)."""

from infra.migration_handover import handover_migration

Migration = handover_migration(source="agents", owner="registry")
