"""The traces app hands the audit log to the audit app: state only."""

from infra.migration_handover import handoff_migration

Migration = handoff_migration(source="traces", after=(("audit", "0001_initial"),))
