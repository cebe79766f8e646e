"""Each integration imported without its framework fails with one line naming the extra that
installs it (``convstore.ports.extras.missing_extra``), whatever else it imports first."""

from __future__ import annotations

import subprocess
import sys

import pytest

HINTS = {
    "convstore.integrations.pydantic_ai": (
        "pydantic_ai",
        "convstore.integrations.pydantic_ai (Pydantic AI 2.78 or newer) needs convstore's "
        "'pydantic-ai' extra: pip install -e '.[pydantic-ai]' in the convstore checkout, or "
        "pip install 'pydantic-ai-slim>=2.78'",
    ),
    "convstore.integrations.pydantic_ai_store": (
        "pydantic_ai",
        "convstore.integrations.pydantic_ai_store (Pydantic AI 2.78 or newer) needs "
        "convstore's 'pydantic-ai' extra: pip install -e '.[pydantic-ai]' in the convstore "
        "checkout, or pip install 'pydantic-ai-slim>=2.78'",
    ),
    "convstore.integrations.openai_agents": (
        "agents",
        "convstore.integrations.openai_agents (the OpenAI Agents SDK) needs convstore's "
        "'openai-agents' extra: pip install -e '.[openai-agents]' in the convstore checkout, "
        "or pip install 'openai-agents>=0.24'",
    ),
    "convstore.integrations.claude_agent": (
        "claude_agent_sdk",
        "convstore.integrations.claude_agent (the Claude Agent SDK) needs convstore's "
        "'claude-agent' extra: pip install -e '.[claude-agent]' in the convstore checkout, or "
        "pip install 'claude-agent-sdk>=0.2.189'",
    ),
    "convstore.integrations.langchain": (
        "langchain_core",
        "convstore.integrations.langchain (langchain-core 1.8 or newer) needs convstore's "
        "'langchain' extra: pip install -e '.[langchain]' in the convstore checkout, or "
        "pip install 'langchain-core>=1.8'",
    ),
    "convstore.integrations.google_adk": (
        "google.adk",
        "convstore.integrations.google_adk (Google ADK) needs convstore's 'google-adk' extra: "
        "pip install -e '.[google-adk]' in the convstore checkout, or pip install "
        "'google-adk>=2.13'",
    ),
    "convstore.integrations.agent_framework": (
        "agent_framework",
        "convstore.integrations.agent_framework (Microsoft Agent Framework) needs convstore's "
        "'agent-framework' extra: pip install -e '.[agent-framework]' in the convstore "
        "checkout, or pip install 'agent-framework-core>=1.26'",
    ),
}
"""Each integration module: the framework package hidden, and the line its import gives."""


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(HINTS))
def test_importing_an_integration_without_its_framework_names_the_extra(module: str) -> None:
    hidden, hint = HINTS[module]
    code = f"import sys; sys.modules[{hidden!r}] = None\nimport {module}\n"
    failed = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1] == f"ImportError: {hint}"
