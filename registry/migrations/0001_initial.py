"""The registry's models, taken over from the agents app: same tables, no data moved."""

import django.db.models.deletion
import django.utils.timezone
import engine.spec
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
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='MCPServer',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.SlugField(max_length=64, unique=True)),
                    ('transport', models.CharField(choices=[('stdio', 'stdio command'), ('http', 'Streamable HTTP')], max_length=10)),
                    ('command', models.JSONField(blank=True, default=list, help_text='argv list (stdio)')),
                    ('url', models.URLField(blank=True)),
                    ('enabled', models.BooleanField(default=True)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                ],
                options={
                    'db_table': 'agents_mcpserver',
                },
            ),
            migrations.CreateModel(
                name='Secret',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=64, unique=True)),
                    ('ciphertext', models.TextField()),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                ],
                options={
                    'db_table': 'agents_secret',
                },
            ),
            migrations.CreateModel(
                name='Tool',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=64, unique=True)),
                    ('description', models.TextField()),
                    ('parameters', models.JSONField(default=dict)),
                    ('kind', models.CharField(choices=[('python', 'Python (built-in handler)'), ('http', 'HTTP endpoint'), ('mcp', 'MCP server tool')], default='python', max_length=10)),
                    ('handler', models.CharField(blank=True, help_text='For python tools: the name of a handler registered in code.', max_length=100)),
                    ('http', models.JSONField(blank=True, default=dict)),
                    ('mcp_tool', models.CharField(blank=True, max_length=200)),
                    ('risk', models.CharField(choices=[('read_only', 'Read Only'), ('write', 'Write'), ('irreversible', 'Irreversible')], default=engine.spec.Risk['READ_ONLY'], max_length=20)),
                    ('approval', models.CharField(choices=[('never', 'Never'), ('always', 'Always'), ('rule', 'Rule')], default=engine.spec.ApprovalMode['NEVER'], max_length=10)),
                    ('approval_rule', models.TextField(blank=True, null=True)),
                    ('approvals_required', models.PositiveSmallIntegerField(default=1)),
                    ('approval_ttl_s', models.PositiveIntegerField(default=3600)),
                    ('untrusted_output', models.BooleanField(default=False)),
                    ('idempotent', models.BooleanField(default=False, help_text='Honours idempotency keys (safe to retry).')),
                    ('timeout_s', models.FloatField(default=10.0)),
                    ('max_retries', models.PositiveSmallIntegerField(default=0)),
                    ('max_result_chars', models.PositiveIntegerField(default=4000)),
                    ('result_fields', models.JSONField(blank=True, default=list)),
                    ('cache_ttl_s', models.PositiveIntegerField(default=0)),
                    ('rate_limit_per_min', models.PositiveIntegerField(default=0)),
                    ('preview_template', models.CharField(blank=True, max_length=300)),
                    ('tags', models.JSONField(blank=True, default=list)),
                    ('enabled', models.BooleanField(default=True)),
                    ('confirmed', models.BooleanField(default=True, help_text='Imported tools start unconfirmed: an operator reviews the policy.')),
                    ('version', models.PositiveIntegerField(default=1)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('mcp_server', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, to='registry.mcpserver')),
                ],
                options={
                    'db_table': 'agents_tool',
                    'ordering': ['name'],
                },
            ),
            migrations.CreateModel(
                name='Agent',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.SlugField(max_length=64, unique=True)),
                    ('description', models.CharField(blank=True, max_length=500)),
                    ('instructions', models.TextField(blank=True)),
                    ('model', models.CharField(blank=True, help_text='Blank means OPENAI_MODEL.', max_length=200)),
                    ('tool_tags', models.JSONField(blank=True, default=list, help_text='Also offer every enabled tool with a tag.')),
                    ('is_default', models.BooleanField(default=False)),
                    ('max_steps', models.PositiveIntegerField(default=12)),
                    ('max_tool_calls', models.PositiveIntegerField(default=30)),
                    ('tool_error_limit', models.PositiveIntegerField(default=8)),
                    ('consecutive_failure_limit', models.PositiveIntegerField(default=3)),
                    ('time_budget_s', models.PositiveIntegerField(default=600)),
                    ('token_budget', models.PositiveIntegerField(default=200000)),
                    ('context_budget_tokens', models.PositiveIntegerField(default=3500)),
                    ('parallel_tool_calls', models.PositiveIntegerField(default=4)),
                    ('on_approval_expired', models.CharField(choices=[('tell_model', 'Tell the model the action expired'), ('stop', 'Stop the task (approval_expired)')], default='tell_model', max_length=20)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('tools', models.ManyToManyField(blank=True, related_name='agents', to='registry.tool')),
                ],
                options={
                    'db_table': 'agents_agent',
                    'ordering': ['name'],
                },
            ),
            migrations.CreateModel(
                name='ToolVersion',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('version', models.PositiveIntegerField()),
                    ('definition', models.JSONField()),
                    ('changed_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('changed_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                    ('tool', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='versions', to='registry.tool')),
                ],
                options={
                    'db_table': 'agents_toolversion',
                    'ordering': ['-version'],
                    'constraints': [models.UniqueConstraint(fields=('tool', 'version'), name='uniq_tool_version')],
                },
            ),
            ],
        ),
        _relabel('agents', 'registry', ['agent', 'tool', 'toolversion', 'mcpserver', 'secret']),
    ]
