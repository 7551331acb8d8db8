"""The effects' models, taken over from the agents app: same tables, no data moved."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
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
        ('agents', '0001_initial'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('runs', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='Outbox',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('idempotency_key', models.CharField(max_length=200, unique=True)),
                    ('message_id', models.CharField(max_length=300, unique=True)),
                    ('to', models.CharField(max_length=320)),
                    ('subject', models.CharField(max_length=500)),
                    ('body', models.TextField()),
                    ('status', models.CharField(choices=[('pending', 'Pending'), ('sending', 'Sending'), ('sent', 'Sent'), ('failed', 'Failed')], default='pending', max_length=10)),
                    ('attempts', models.PositiveSmallIntegerField(default=0)),
                    ('last_error', models.TextField(blank=True)),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('sent_at', models.DateTimeField(blank=True, null=True)),
                ],
                options={
                    'db_table': 'agents_outbox',
                },
            ),
            migrations.CreateModel(
                name='Note',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('title', models.CharField(max_length=200)),
                    ('content', models.TextField()),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('author', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'agents_note',
                    'ordering': ['-created_at', '-id'],
                },
            ),
            migrations.CreateModel(
                name='Ticket',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('title', models.CharField(max_length=200)),
                    ('body', models.TextField()),
                    ('idempotency_key', models.CharField(max_length=200, unique=True)),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('task', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to='runs.task')),
                ],
                options={
                    'db_table': 'agents_ticket',
                    'ordering': ['-created_at'],
                },
            ),
            migrations.CreateModel(
                name='ToolExecution',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('idempotency_key', models.CharField(max_length=200, unique=True)),
                    ('tool', models.CharField(max_length=64)),
                    ('arguments_hash', models.CharField(max_length=64)),
                    ('status', models.CharField(choices=[('done', 'Done'), ('unknown', 'Unknown')], max_length=10)),
                    ('result', models.JSONField(blank=True, null=True)),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('task', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to='runs.task')),
                ],
                options={
                    'db_table': 'agents_toolexecution',
                },
            ),
            ],
        ),
        _relabel('agents', 'effects', ['note', 'ticket', 'toolexecution', 'outbox']),
    ]
