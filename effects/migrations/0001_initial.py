"""The effects app takes over its models from the agents app (infra/handover.py)."""

from infra.handover import handover_migration

Migration = handover_migration(source="agents", owner="effects", after=("runs",))
