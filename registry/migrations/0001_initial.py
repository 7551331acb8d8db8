"""The registry app takes over its models from the agents app: same tables, no data moved
(infra/handover.py)."""

from django.conf import settings
from django.db import migrations

from infra.handover import hand_over


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("agents", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = hand_over(source="agents", migration="0001_initial", owner="registry")
