"""The side-effecting tools the framework workers give their agents, as plain functions: each
worker wraps them in its framework's own tool decorator (``function_tool``, ``tool``,
``tool_plain``), so the kill tests of every framework stop inside the same tool."""

from __future__ import annotations

import os
import time
from pathlib import Path


def delete_branch(branch: str) -> str:
    """Delete a git branch; with a ready file, say the deletion started and wait to be killed."""
    ready = os.environ.get("CONVSTORE_READY_FILE")
    if ready:
        Path(ready).write_text(branch)
        time.sleep(120)
    return f"deleted {branch}"


def slow_lookup(what: str) -> str:
    """Look something up, slowly (a tenth of a second), so two runs' turns overlap."""
    time.sleep(0.1)
    return f"found {what}"
