"""The ``convstore`` console script's entry point, kept apart from the CLI package.

The command line needs no third-party pydantic plugins, and discovering them scans every
installed package's metadata (about 20 ms of each command's start-up). So the script, and only
the script, sets ``PYDANTIC_DISABLE_PLUGINS`` before anything imports pydantic: this module
imports nothing but ``os`` until then, and ``import convstore.cli`` (an application embedding
the CLI, or a test) leaves the process environment alone. Set the variable yourself to decide
otherwise.
"""

import os


def main() -> None:
    """Run the ``convstore`` command line (the ``[project.scripts]`` entry)."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from convstore.cli.app import main as run  # noqa: PLC0415 - only after the line above

    run()
