"""The runs' models, taken over from the agents app: same tables, no data moved."""

import django.db.models.deletion
import django.utils.timezone
import uuid
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
        ('registry', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='ApiToken',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(blank=True, max_length=100)),
                    ('key_hash', models.CharField(max_length=64, unique=True)),
                    ('prefix', models.CharField(max_length=12)),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('last_used_at', models.DateTimeField(blank=True, null=True)),
                    ('revoked_at', models.DateTimeField(blank=True, null=True)),
                    ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'agents_apitoken',
                },
            ),
            migrations.CreateModel(
                name='Conversation',
                fields=[
                    ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                    ('title', models.CharField(blank=True, max_length=200)),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('agent', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, to='registry.agent')),
                    ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='conversations', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'agents_conversation',
                    'ordering': ['-updated_at'],
                },
            ),
            migrations.CreateModel(
                name='Task',
                fields=[
                    ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                    ('model', models.CharField(max_length=200)),
                    ('goal', models.TextField()),
                    ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('waiting_approval', 'Waiting Approval'), ('succeeded', 'Succeeded'), ('stopped', 'Stopped'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], db_index=True, default='queued', max_length=20)),
                    ('stop_reason', models.CharField(blank=True, choices=[('final_answer', 'Final Answer'), ('max_steps', 'Max Steps'), ('max_tool_calls', 'Max Tool Calls'), ('repeated_call', 'Repeated Call'), ('tool_error_limit', 'Tool Error Limit'), ('time_budget', 'Time Budget'), ('token_budget', 'Token Budget'), ('approval_expired', 'Approval Expired'), ('model_error', 'Model Error'), ('internal_error', 'Internal Error'), ('cancelled', 'Cancelled')], max_length=30, null=True)),
                    ('final_answer', models.TextField(blank=True, null=True)),
                    ('error_message', models.TextField(blank=True)),
                    ('prompt_tokens', models.PositiveIntegerField(default=0)),
                    ('completion_tokens', models.PositiveIntegerField(default=0)),
                    ('total_tokens', models.PositiveIntegerField(default=0)),
                    ('step_count', models.PositiveIntegerField(default=0)),
                    ('rev', models.PositiveBigIntegerField(default=0)),
                    ('lease_owner', models.CharField(blank=True, max_length=100)),
                    ('lease_epoch', models.PositiveIntegerField(default=0)),
                    ('lease_expires_at', models.DateTimeField(blank=True, null=True)),
                    ('active_seconds', models.FloatField(default=0.0)),
                    ('cancel_requested', models.BooleanField(default=False)),
                    ('tainted_by', models.JSONField(blank=True, default=list)),
                    ('agent_snapshot', models.JSONField(blank=True, default=dict)),
                    ('parent_seq', models.PositiveIntegerField(blank=True, null=True)),
                    ('origin', models.JSONField(blank=True, null=True)),
                    ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                    ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('started_at', models.DateTimeField(blank=True, null=True)),
                    ('finished_at', models.DateTimeField(blank=True, null=True)),
                    ('agent', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='tasks', to='registry.agent')),
                    ('conversation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tasks', to='runs.conversation')),
                    ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tasks', to=settings.AUTH_USER_MODEL)),
                    ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='forks', to='runs.task')),
                ],
                options={
                    'db_table': 'agents_task',
                    'ordering': ['-created_at'],
                    'permissions': [('audit_task', 'Can read every task, trace and approval')],
                },
            ),
            migrations.CreateModel(
                name='Step',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('seq', models.PositiveIntegerField()),
                    ('rev', models.PositiveBigIntegerField()),
                    ('kind', models.CharField(choices=[('model_call', 'Model Call'), ('tool_call', 'Tool Call'), ('compaction', 'Compaction'), ('note', 'Note')], max_length=20)),
                    ('status', models.CharField(choices=[('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('waiting_approval', 'Waiting Approval'), ('approved', 'Approved'), ('rejected', 'Rejected'), ('expired', 'Expired'), ('denied', 'Denied'), ('deduplicated', 'Deduplicated'), ('cached', 'Cached'), ('skipped', 'Skipped')], max_length=20)),
                    ('tool', models.CharField(blank=True, db_index=True, max_length=64, null=True)),
                    ('tool_version', models.PositiveIntegerField(blank=True, null=True)),
                    ('call_id', models.CharField(blank=True, max_length=200, null=True)),
                    ('call_index', models.PositiveIntegerField(blank=True, null=True)),
                    ('parent_seq', models.PositiveIntegerField(blank=True, null=True)),
                    ('arguments', models.JSONField(blank=True, null=True)),
                    ('raw_arguments', models.TextField(blank=True, null=True)),
                    ('proposed_arguments', models.JSONField(blank=True, null=True)),
                    ('result', models.JSONField(blank=True, null=True)),
                    ('error', models.TextField(blank=True, null=True)),
                    ('error_class', models.CharField(blank=True, max_length=50, null=True)),
                    ('attempts', models.JSONField(blank=True, default=list)),
                    ('model', models.CharField(blank=True, max_length=200, null=True)),
                    ('request_id', models.CharField(blank=True, max_length=200, null=True)),
                    ('response', models.JSONField(blank=True, null=True)),
                    ('usage', models.JSONField(blank=True, null=True)),
                    ('idempotency_key', models.CharField(blank=True, max_length=200, null=True)),
                    ('tainted_by', models.JSONField(blank=True, default=list)),
                    ('detail', models.JSONField(blank=True, default=dict)),
                    ('started_at', models.DateTimeField(blank=True, null=True)),
                    ('finished_at', models.DateTimeField(blank=True, null=True)),
                    ('task', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='runs.task')),
                ],
                options={
                    'db_table': 'agents_step',
                    'ordering': ['seq'],
                },
            ),
            migrations.CreateModel(
                name='Message',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('role', models.CharField(choices=[('user', 'User'), ('assistant', 'Assistant')], max_length=10)),
                    ('content', models.TextField()),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('conversation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='messages', to='runs.conversation')),
                    ('task', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='runs.task')),
                ],
                options={
                    'db_table': 'agents_message',
                    'ordering': ['created_at', 'id'],
                },
            ),
            migrations.AddIndex(
                model_name='conversation',
                index=models.Index(fields=['owner', '-updated_at'], name='agents_conv_owner_i_06442d_idx'),
            ),
            migrations.AddIndex(
                model_name='task',
                index=models.Index(fields=['owner', '-created_at'], name='agents_task_owner_i_4a3741_idx'),
            ),
            migrations.AddIndex(
                model_name='task',
                index=models.Index(fields=['status', 'lease_expires_at'], name='agents_task_status_cbdd4f_idx'),
            ),
            migrations.AddIndex(
                model_name='step',
                index=models.Index(fields=['task', 'rev'], name='agents_step_task_id_30e012_idx'),
            ),
            migrations.AddConstraint(
                model_name='step',
                constraint=models.UniqueConstraint(fields=('task', 'seq'), name='uniq_step_seq'),
            ),
            ],
        ),
        _relabel('agents', 'runs', ['conversation', 'message', 'task', 'step', 'apitoken']),
    ]
