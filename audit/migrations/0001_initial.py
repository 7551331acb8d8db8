"""The audit log, taken over from the traces app: same tables, no data moved."""

import django.utils.timezone
from django.db import migrations, models


def _relabel(old: str, new: str, models: list[str]):
    """Move the content types (and so the permissions granted) to the new app."""

    def forward(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        ContentType.objects.filter(app_label=old, model__in=models).update(
            app_label=new
        )

    def backward(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        ContentType.objects.filter(app_label=new, model__in=models).update(
            app_label=old
        )

    return migrations.RunPython(forward, backward)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('traces', '0001_initial'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='AuditEvent',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('position', models.PositiveBigIntegerField(unique=True)),
                    ('kind', models.CharField(db_index=True, max_length=50)),
                    ('actor', models.CharField(blank=True, max_length=150)),
                    ('task_id', models.CharField(blank=True, db_index=True, max_length=64)),
                    ('object_type', models.CharField(blank=True, max_length=50)),
                    ('object_id', models.CharField(blank=True, max_length=200)),
                    ('data', models.JSONField(blank=True, default=dict)),
                    ('at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('prev_hash', models.CharField(max_length=64)),
                    ('hash', models.CharField(max_length=64, unique=True)),
                ],
                options={
                    'db_table': 'traces_auditevent',
                    'ordering': ['position'],
                },
            ),
            migrations.CreateModel(
                name='AuditHead',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('position', models.PositiveBigIntegerField(default=0)),
                    ('hash', models.CharField(default='0000000000000000000000000000000000000000000000000000000000000000', max_length=64)),
                ],
                options={
                    'db_table': 'traces_audithead',
                },
            ),
            ],
        ),
        _relabel('traces', 'audit', ['auditevent', 'audithead']),
    ]
