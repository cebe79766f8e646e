"""A synthetic hosted round, shaped like what the providers return, for the tests of every
surface that reads it (the audit, the store contract, the SDK validation of replays).

The assistant's turn holds a web search the provider ran (Anthropic's ``server_tool_use`` and
``web_search_tool_result`` kept in ``provider_data``, with an encrypted page), a web fetch that
failed, a remote MCP call whose result never came, a text citing the search, and a call of the
caller's own tool; the user's turn answers that call with a PDF. Written from the Messages
API's documented block shapes (``anthropic.types``), not copied from a real response.
"""

from __future__ import annotations

from uuid import UUID

from pydantic import JsonValue

from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.events import Role
from convstore.store import Store
from tests.strategies import TINY_PDF

TITLE = "PEP 750 \u2013 Template Strings"
"""A title with an en dash: a round trip must keep it byte for byte."""
PEP = "https://peps.python.org/pep-0750/"

SEARCH_RESULT: dict[str, JsonValue] = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {
            "type": "web_search_result",
            "url": PEP,
            "title": TITLE,
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2",
            "page_age": "April 10, 2025",
        }
    ],
}
"""The provider's own search result block, kept whole on the hosted result."""

CITATIONS: list[dict[str, JsonValue]] = [
    {
        "type": "web_search_result_location",
        "url": PEP,
        "title": TITLE,
        "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
        "cited_text": "This PEP introduces template strings for custom string processing.",
    }
]

FETCH_ERROR: dict[str, JsonValue] = {
    "type": "web_fetch_tool_result",
    "tool_use_id": "srvtoolu_02",
    "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"},
}

ASSISTANT: list[Block] = [
    TextBlock(text="Let me look that up."),
    HostedToolUseBlock(
        id="srvtoolu_01",
        name="web_search",
        input={"query": "PEP 750 template strings"},
        provider_data={"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search"},
    ),
    HostedToolResultBlock(
        tool_use_id="srvtoolu_01",
        content=[TextBlock(text=f"{TITLE} ({PEP})")],
        provider_data=SEARCH_RESULT,
    ),
    HostedToolUseBlock(
        id="srvtoolu_02", name="web_fetch", input={"url": "https://intranet.example/x"}
    ),
    HostedToolResultBlock(
        tool_use_id="srvtoolu_02",
        content="url_not_accessible",
        is_error=True,
        provider_data=FETCH_ERROR,
    ),
    HostedToolUseBlock(
        id="mcptoolu_03",
        name="ask_question",
        input={"repoName": "python/peps", "question": "Who wrote PEP 750?"},
        server="deepwiki",
    ),
    TextBlock(text="PEP 750 adds template strings.", annotations=CITATIONS),
    ToolUseBlock(id="toolu_04", name="read_report", input={"path": "report.pdf"}),
]

REPORT = DocumentBlock(media_type="application/pdf", data=TINY_PDF, name="report.pdf")

ROUND: list[tuple[Role, list[Block]]] = [
    ("user", [TextBlock(text="What is PEP 750? Then read my report.")]),
    ("assistant", ASSISTANT),
    (
        "user",
        [ToolResultBlock(tool_use_id="toolu_04", content=[TextBlock(text="The report:"), REPORT])],
    ),
    ("assistant", [TextBlock(text="Done.")]),
]
"""The hosted round, message by message."""

SEARCH_USE = 'Tool use (run by the provider): web_search({"query":"PEP 750 template strings"})'
SEARCH_RESULT_TEXT = f"Result (web_search, run by the provider): {TITLE} ({PEP})"
FETCH_ERROR_TEXT = "Error (web_fetch, run by the provider): url_not_accessible"
MCP_USE = (
    "Tool use (run by the provider, MCP server deepwiki): "
    'ask_question({"repoName":"python/peps","question":"Who wrote PEP 750?"})'
)
NO_RESULT = "[No result was recorded for this call.]"
CITED = f"PEP 750 adds template strings.\n[Sources: {TITLE} ({PEP})]"
ASSISTANT_TEXT = "\n\n".join(
    [
        "Let me look that up.",
        SEARCH_USE,
        SEARCH_RESULT_TEXT,
        'Tool use (run by the provider): web_fetch({"url":"https://intranet.example/x"})',
        FETCH_ERROR_TEXT,
        MCP_USE,
        NO_RESULT,
        CITED,
        'Tool use: read_report({"path":"report.pdf"})',
    ]
)
"""The first assistant message as replay sends it (in either shape, whatever ``vision``)."""


def record_round(store: Store) -> UUID:
    """Record :data:`ROUND` in a new conversation of ``store``; returns its id."""
    conversation = store.new_conversation("hosted round")
    for role, blocks in ROUND:
        store.append_message(conversation, role, blocks)
    return conversation
