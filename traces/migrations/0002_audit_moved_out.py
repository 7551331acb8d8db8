"""The traces app hands the audit log to the audit app: state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0001_initial'),
        ('traces', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.DeleteModel(
                name='AuditEvent',
            ),
            migrations.DeleteModel(
                name='AuditHead',
            ),
            ],
        ),
    ]
