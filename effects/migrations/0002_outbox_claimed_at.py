"""Record when a dispatcher claimed an outbox row (the stuck-send reset uses it)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("effects", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="outbox",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
