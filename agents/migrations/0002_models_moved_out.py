"""The agents app hands its models to registry, runs and effects: state only."""

from infra.migration_handover import handoff_migration

Migration = handoff_migration(
    source="agents",
    after=(
        ("registry", "0001_initial"),
        ("runs", "0001_initial"),
        ("effects", "0001_initial"),
        ("approvals", "0003_point_at_runs"),
    ),
)
