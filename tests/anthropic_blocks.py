"""Synthetic Anthropic content blocks of every kind real responses carry, written as the SDK's
``*Param`` TypedDicts (so mypy checks their keys) and shaped after the SDK's types and the
Messages API docs: server tool calls and each server tool's result (success and error), MCP
calls and results, container uploads, citations of every location type, and the parts a
``tool_result`` may hold. ``tests/test_anthropic_hosted.py`` checks each against the SDK's
block union with unknown keys forbidden."""

from __future__ import annotations

from typing import Any

from anthropic.types import (
    CitationCharLocationParam,
    CitationContentBlockLocationParam,
    CitationPageLocationParam,
    CitationSearchResultLocationParam,
    CitationWebSearchResultLocationParam,
    CodeExecutionToolResultBlockParam,
    ContainerUploadBlockParam,
    SearchResultBlockParam,
    ServerToolUseBlockParam,
    TextBlockParam,
    ToolResultBlockParam,
    WebFetchToolResultBlockParam,
    WebSearchToolResultBlockParam,
)
from anthropic.types.bash_code_execution_tool_result_block_param import (
    BashCodeExecutionToolResultBlockParam,
)
from anthropic.types.beta import (
    BetaAdvisorToolResultBlockParam,
    BetaMCPToolUseBlockParam,
    BetaRequestMCPToolResultBlockParam,
)
from anthropic.types.text_editor_code_execution_tool_result_block_param import (
    TextEditorCodeExecutionToolResultBlockParam,
)
from anthropic.types.tool_search_tool_result_block_param import ToolSearchToolResultBlockParam

ENCRYPTED = "EpMCCioIBxgCIiQ4YjE5NzFhNS1iZjYwLTQ3ZmMtOTZjMC0xZjU1MzU1ZmE2OWISDGa+/=="
"""An opaque encrypted payload, as search results carry (byte-for-byte what must survive)."""

SEARCH: ServerToolUseBlockParam = {
    "type": "server_tool_use",
    "id": "srvtoolu_01",
    "name": "web_search",
    "input": {"query": "convstore event sourcing"},
}
SEARCH_RESULTS: WebSearchToolResultBlockParam = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {
            "type": "web_search_result",
            "title": "Event Sourcing",
            "url": "https://example.com/es",
            "encrypted_content": ENCRYPTED,
            "page_age": "April 30, 2025",
        },
        {
            "type": "web_search_result",
            "title": "Stores",
            "url": "https://example.com/stores",
            "encrypted_content": ENCRYPTED[::-1],
        },
    ],
}
SEARCH_ERROR: WebSearchToolResultBlockParam = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
}

FETCH: ServerToolUseBlockParam = {
    "type": "server_tool_use",
    "id": "srvtoolu_02",
    "name": "web_fetch",
    "input": {"url": "https://example.com/page"},
    "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_00"},
}
FETCHED: WebFetchToolResultBlockParam = {
    "type": "web_fetch_tool_result",
    "tool_use_id": "srvtoolu_02",
    "content": {
        "type": "web_fetch_result",
        "url": "https://example.com/page",
        "retrieved_at": "2025-08-25T10:30:02Z",
        "content": {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "The page's text."},
            "title": "A page",
        },
    },
}
FETCH_ERROR: WebFetchToolResultBlockParam = {
    "type": "web_fetch_tool_result",
    "tool_use_id": "srvtoolu_02",
    "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"},
}

CODE_RUN: CodeExecutionToolResultBlockParam = {
    "type": "code_execution_tool_result",
    "tool_use_id": "srvtoolu_03",
    "content": {
        "type": "code_execution_result",
        "stdout": "4\n",
        "stderr": "",
        "return_code": 0,
        "content": [{"type": "code_execution_output", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}],
    },
}
CODE_ENCRYPTED: CodeExecutionToolResultBlockParam = {
    "type": "code_execution_tool_result",
    "tool_use_id": "srvtoolu_03",
    "content": {
        "type": "encrypted_code_execution_result",
        "encrypted_stdout": ENCRYPTED,
        "stderr": "warning: x\n",
        "return_code": 1,
        "content": [],
    },
}
CODE_ERROR: CodeExecutionToolResultBlockParam = {
    "type": "code_execution_tool_result",
    "tool_use_id": "srvtoolu_03",
    "content": {"type": "code_execution_tool_result_error", "error_code": "unavailable"},
}
BASH_RUN: BashCodeExecutionToolResultBlockParam = {
    "type": "bash_code_execution_tool_result",
    "tool_use_id": "srvtoolu_04",
    "content": {
        "type": "bash_code_execution_result",
        "stdout": "",
        "stderr": "ls: cannot access 'x'\n",
        "return_code": 2,
        "content": [{"type": "bash_code_execution_output", "file_id": "file_bash_1"}],
    },
}
BASH_ERROR: BashCodeExecutionToolResultBlockParam = {
    "type": "bash_code_execution_tool_result",
    "tool_use_id": "srvtoolu_04",
    "content": {
        "type": "bash_code_execution_tool_result_error",
        "error_code": "output_file_too_large",
    },
}
EDITOR_VIEW: TextEditorCodeExecutionToolResultBlockParam = {
    "type": "text_editor_code_execution_tool_result",
    "tool_use_id": "srvtoolu_05",
    "content": {
        "type": "text_editor_code_execution_view_result",
        "content": "print('hi')\n",
        "file_type": "text",
        "num_lines": 1,
        "start_line": 1,
        "total_lines": 1,
    },
}
EDITOR_CREATE: TextEditorCodeExecutionToolResultBlockParam = {
    "type": "text_editor_code_execution_tool_result",
    "tool_use_id": "srvtoolu_05",
    "content": {"type": "text_editor_code_execution_create_result", "is_file_update": False},
}
EDITOR_REPLACE: TextEditorCodeExecutionToolResultBlockParam = {
    "type": "text_editor_code_execution_tool_result",
    "tool_use_id": "srvtoolu_05",
    "content": {
        "type": "text_editor_code_execution_str_replace_result",
        "lines": ["-print('hi')", "+print('hello')"],
        "old_start": 1,
        "old_lines": 1,
        "new_start": 1,
        "new_lines": 1,
    },
}
EDITOR_ERROR: TextEditorCodeExecutionToolResultBlockParam = {
    "type": "text_editor_code_execution_tool_result",
    "tool_use_id": "srvtoolu_05",
    "content": {
        "type": "text_editor_code_execution_tool_result_error",
        "error_code": "file_not_found",
        "error_message": "no such file: a.py",
    },
}
TOOLS_FOUND: ToolSearchToolResultBlockParam = {
    "type": "tool_search_tool_result",
    "tool_use_id": "srvtoolu_06",
    "content": {
        "type": "tool_search_tool_search_result",
        "tool_references": [
            {"type": "tool_reference", "tool_name": "get_weather"},
            {"type": "tool_reference", "tool_name": "get_time"},
        ],
    },
}
TOOLS_ERROR: ToolSearchToolResultBlockParam = {
    "type": "tool_search_tool_result",
    "tool_use_id": "srvtoolu_06",
    "content": {"type": "tool_search_tool_result_error", "error_code": "too_many_requests"},
}
ADVICE: BetaAdvisorToolResultBlockParam = {
    "type": "advisor_tool_result",
    "tool_use_id": "srvtoolu_07",
    "content": {"type": "advisor_result", "text": "Check the index first."},
}
ADVICE_REDACTED: BetaAdvisorToolResultBlockParam = {
    "type": "advisor_tool_result",
    "tool_use_id": "srvtoolu_07",
    "content": {"type": "advisor_redacted_result", "encrypted_content": ENCRYPTED},
}

MCP_USE: BetaMCPToolUseBlockParam = {
    "type": "mcp_tool_use",
    "id": "mcptoolu_01",
    "name": "echo",
    "server_name": "example-mcp",
    "input": {"text": "ping"},
}
MCP_RESULT: BetaRequestMCPToolResultBlockParam = {
    "type": "mcp_tool_result",
    "tool_use_id": "mcptoolu_01",
    "is_error": False,
    "content": [{"type": "text", "text": "pong"}],
}
MCP_ERROR: BetaRequestMCPToolResultBlockParam = {
    "type": "mcp_tool_result",
    "tool_use_id": "mcptoolu_01",
    "is_error": True,
    "content": "server unreachable",
}
UPLOAD: ContainerUploadBlockParam = {"type": "container_upload", "file_id": "file_upload_1"}

CHAR: CitationCharLocationParam = {
    "type": "char_location",
    "cited_text": "The grass is green.",
    "document_index": 0,
    "document_title": "Facts",
    "start_char_index": 0,
    "end_char_index": 19,
}
PAGE: CitationPageLocationParam = {
    "type": "page_location",
    "cited_text": "Revenue rose.",
    "document_index": 1,
    "document_title": None,
    "start_page_number": 2,
    "end_page_number": 3,
}
BLOCKS: CitationContentBlockLocationParam = {
    "type": "content_block_location",
    "cited_text": "Chunk one.",
    "document_index": 2,
    "document_title": "Chunks",
    "start_block_index": 0,
    "end_block_index": 1,
}
WEB: CitationWebSearchResultLocationParam = {
    "type": "web_search_result_location",
    "cited_text": "Event sourcing stores every change.",
    "encrypted_index": ENCRYPTED,
    "title": "Event Sourcing",
    "url": "https://example.com/es",
}
HIT: CitationSearchResultLocationParam = {
    "type": "search_result_location",
    "cited_text": "Use the index.",
    "source": "https://docs.example.com/guide",
    "title": None,
    "search_result_index": 0,
    "start_block_index": 0,
    "end_block_index": 1,
}
CITED: TextBlockParam = {
    "type": "text",
    "text": "Event sourcing stores every change.",
    "citations": [CHAR, PAGE, BLOCKS, WEB, HIT],
}

GUIDE: SearchResultBlockParam = {
    "type": "search_result",
    "source": "https://docs.example.com/guide",
    "title": "Guide",
    "content": [{"type": "text", "text": "Use the index."}, {"type": "text", "text": "Then X."}],
    "citations": {"enabled": True},
}
RICH_RESULT: ToolResultBlockParam = {
    "type": "tool_result",
    "tool_use_id": "toolu_01",
    "content": [
        {"type": "text", "text": "Found:"},
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
            "title": "notes.txt",
        },
        {"type": "document", "source": {"type": "file", "file_id": "file_doc_1"}},
        GUIDE,
        {"type": "tool_reference", "tool_name": "get_weather"},
    ],
}

SERVER_RESULTS: dict[str, Any] = {
    "web_search": SEARCH_RESULTS,
    "web_search_error": SEARCH_ERROR,
    "web_fetch": FETCHED,
    "web_fetch_error": FETCH_ERROR,
    "code_run": CODE_RUN,
    "code_encrypted": CODE_ENCRYPTED,
    "code_error": CODE_ERROR,
    "bash_run": BASH_RUN,
    "bash_error": BASH_ERROR,
    "editor_view": EDITOR_VIEW,
    "editor_create": EDITOR_CREATE,
    "editor_replace": EDITOR_REPLACE,
    "editor_error": EDITOR_ERROR,
    "tools_found": TOOLS_FOUND,
    "tools_error": TOOLS_ERROR,
    "advice": ADVICE,
    "advice_redacted": ADVICE_REDACTED,
}
"""Every server tool result fixture, by a short name."""

ALL_BLOCKS: dict[str, Any] = {
    **SERVER_RESULTS,
    "search": SEARCH,
    "fetch": FETCH,
    "mcp_use": MCP_USE,
    "mcp_result": MCP_RESULT,
    "mcp_error": MCP_ERROR,
    "upload": UPLOAD,
    "cited": CITED,
    "guide": GUIDE,
    "rich_result": RICH_RESULT,
}
"""Every fixture above, by a short name."""
