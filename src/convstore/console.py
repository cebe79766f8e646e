"""The ``convstore`` console script's entry point, kept apart from the CLI package.

The command line needs no third-party pydantic plugins, and discovering them scans every
installed package's metadata (about 20 ms of each command's start-up). So the script, and only
the script, sets ``PYDANTIC_DISABLE_PLUGINS`` before anything imports pydantic: this module
imports nothing but ``os`` until then, and ``import convstore.cli`` (an application embedding
the CLI, or a test) leaves the process environment alone. Set the variable yourself to decide
otherwise.

A plain ``convstore --db PATH replay CONV`` whose stored replay model is caught up is answered
by :mod:`convstore.app.quick_replay` before the command line is imported at all.
"""

import os


def main() -> None:
    """Run the ``convstore`` command line (the ``[project.scripts]`` entry)."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    import sys  # noqa: PLC0415

    from convstore.app.quick_replay import quick_replay  # noqa: PLC0415 - imports no model

    try:
        if quick_replay(sys.argv[1:]):
            return
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    from convstore.cli.app import main as run  # noqa: PLC0415 - only after the line above

    run()
