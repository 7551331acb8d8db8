"""The agents app hands its models to registry, runs and effects: state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('registry', '0001_initial'),
        ('runs', '0001_initial'),
        ('effects', '0001_initial'),
        ('approvals', '0003_point_at_runs'),
        ('agents', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.RemoveField(
                model_name='agent',
                name='tools',
            ),
            migrations.RemoveField(
                model_name='task',
                name='agent',
            ),
            migrations.RemoveField(
                model_name='conversation',
                name='agent',
            ),
            migrations.RemoveField(
                model_name='apitoken',
                name='user',
            ),
            migrations.RemoveField(
                model_name='conversation',
                name='owner',
            ),
            migrations.RemoveField(
                model_name='message',
                name='conversation',
            ),
            migrations.RemoveField(
                model_name='task',
                name='conversation',
            ),
            migrations.RemoveField(
                model_name='tool',
                name='mcp_server',
            ),
            migrations.RemoveField(
                model_name='message',
                name='task',
            ),
            migrations.RemoveField(
                model_name='note',
                name='author',
            ),
            migrations.DeleteModel(
                name='Outbox',
            ),
            migrations.DeleteModel(
                name='Secret',
            ),
            migrations.RemoveField(
                model_name='step',
                name='task',
            ),
            migrations.RemoveField(
                model_name='task',
                name='owner',
            ),
            migrations.RemoveField(
                model_name='task',
                name='parent',
            ),
            migrations.RemoveField(
                model_name='toolexecution',
                name='task',
            ),
            migrations.RemoveField(
                model_name='ticket',
                name='task',
            ),
            migrations.RemoveField(
                model_name='toolversion',
                name='tool',
            ),
            migrations.RemoveField(
                model_name='toolversion',
                name='changed_by',
            ),
            migrations.DeleteModel(
                name='Agent',
            ),
            migrations.DeleteModel(
                name='ApiToken',
            ),
            migrations.DeleteModel(
                name='Conversation',
            ),
            migrations.DeleteModel(
                name='MCPServer',
            ),
            migrations.DeleteModel(
                name='Message',
            ),
            migrations.DeleteModel(
                name='Note',
            ),
            migrations.DeleteModel(
                name='Step',
            ),
            migrations.DeleteModel(
                name='ToolExecution',
            ),
            migrations.DeleteModel(
                name='Task',
            ),
            migrations.DeleteModel(
                name='Ticket',
            ),
            migrations.DeleteModel(
                name='Tool',
            ),
            migrations.DeleteModel(
                name='ToolVersion',
            ),
            ],
        ),
    ]
