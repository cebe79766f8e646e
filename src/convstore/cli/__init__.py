"""The ``convstore`` command line: one click group; each module adds its commands to it."""

from convstore.cli import audit as audit
from convstore.cli import context as context
from convstore.cli import conversations as conversations
from convstore.cli import verify as verify
from convstore.cli.app import cli, main

__all__ = ["cli", "main"]
