"""``manage.py mcp_gateway --config FILE``: the MCP approval gateway, as
``python -m agents.mcp_gateway`` runs it (docs/mcp-gateway.md). It speaks MCP on stdin and
stdout and reaches the portal over its API, like any outside agent: it reads no table."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents import mcp_gateway


class Command(BaseCommand):
    help = "Serve the MCP approval gateway on stdio (docs/mcp-gateway.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", required=True, help="the gateway's TOML or JSON file")

    def handle(self, *args: Any, **options: Any) -> None:
        status = mcp_gateway.main(["--config", options["config"]])
        if status:
            raise CommandError(f"the gateway stopped (exit status {status})", returncode=status)
