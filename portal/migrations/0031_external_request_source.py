"""``ExternalRequest.source``: which door an outside agent came through (its own client,
the LangGraph adapter, the MCP gateway or the OpenAI Agents SDK adapter). Existing rows
were raised by the client or the LangGraph adapter; they are counted as the client's."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0030_worker_heartbeat_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="externalrequest",
            name="source",
            field=models.CharField(
                choices=[
                    ("client", "Python client or plain HTTP"),
                    ("langgraph", "LangGraph adapter"),
                    ("mcp", "MCP approval gateway"),
                    ("openai-agents", "OpenAI Agents SDK adapter"),
                ],
                default="client",
                max_length=16,
            ),
        ),
    ]
