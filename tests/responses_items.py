"""Synthetic Responses API tool items, one or more per item type, written from the ``openai``
SDK's types (``openai/types/responses/``) and checked against them by the tests that use
them: every item here is a valid output item (``ResponseOutputItem``) and, where the type is
an input item too, a valid ``ResponseInputItemParam`` with no unknown key."""

from __future__ import annotations

from typing import Any

from tests.strategies import TINY_IMAGES

PNG = TINY_IMAGES["image/png"][0]

WEB_SEARCH: dict[str, Any] = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {
        "type": "search",
        "query": "convstore",
        "sources": [
            {"type": "url", "url": "https://a.example/one"},
            {"type": "url", "url": "https://b.example/two"},
        ],
    },
}
WEB_OPEN_PAGE: dict[str, Any] = {
    "type": "web_search_call",
    "id": "ws_2",
    "status": "completed",
    "action": {"type": "open_page", "url": "https://a.example/one"},
}
FILE_SEARCH: dict[str, Any] = {
    "type": "file_search_call",
    "id": "fs_1",
    "status": "completed",
    "queries": ["refund policy"],
    "results": [
        {
            "file_id": "file-1",
            "filename": "policy.md",
            "score": 0.91,
            "text": "Refunds within 30 days.",
            "attributes": {"team": "support"},
        }
    ],
}
CODE_INTERPRETER: dict[str, Any] = {
    "type": "code_interpreter_call",
    "id": "ci_1",
    "status": "completed",
    "container_id": "cntr_1",
    "code": "print(2 + 2)",
    "outputs": [
        {"type": "logs", "logs": "4"},
        {"type": "image", "url": f"data:image/png;base64,{PNG}"},
    ],
}
IMAGE_GENERATION: dict[str, Any] = {
    "type": "image_generation_call",
    "id": "ig_1",
    "status": "completed",
    "result": PNG,
    "revised_prompt": "A tiny orange square.",
    "output_format": "png",
    "size": "1024x1024",
}
MCP_CALL: dict[str, Any] = {
    "type": "mcp_call",
    "id": "mcp_1",
    "server_label": "deepwiki",
    "name": "ask_question",
    "arguments": '{"repo": "a/b", "question": "What?"}',
    "output": "It stores conversations.",
    "status": "completed",
}
MCP_CALL_FAILED: dict[str, Any] = {
    "type": "mcp_call",
    "id": "mcp_2",
    "server_label": "deepwiki",
    "name": "ask_question",
    "arguments": "{}",
    "error": {"type": "http_error", "code": 503, "message": "unavailable"},
    "status": "failed",
}
MCP_LIST_TOOLS: dict[str, Any] = {
    "type": "mcp_list_tools",
    "id": "mcpl_1",
    "server_label": "deepwiki",
    "tools": [
        {"name": "ask_question", "description": "Ask about a repo.", "input_schema": {}},
        {"name": "read_wiki", "input_schema": {"type": "object"}},
    ],
}
MCP_APPROVAL_REQUEST: dict[str, Any] = {
    "type": "mcp_approval_request",
    "id": "mcpr_1",
    "server_label": "deepwiki",
    "name": "ask_question",
    "arguments": '{"repo": "a/b"}',
}
MCP_APPROVAL_RESPONSE: dict[str, Any] = {
    "type": "mcp_approval_response",
    "id": "mcpa_1",
    "approval_request_id": "mcpr_1",
    "approve": True,
    "reason": "read only",
}
PROGRAM: dict[str, Any] = {
    "type": "program",
    "id": "prog_1",
    "call_id": "call_prog",
    "code": "await tools.ls()",
    "fingerprint": "fp-opaque",
}
PROGRAM_OUTPUT: dict[str, Any] = {
    "type": "program_output",
    "id": "progo_1",
    "call_id": "call_prog",
    "result": "a.txt b.txt",
    "status": "completed",
}
TOOL_SEARCH_CALL: dict[str, Any] = {
    "type": "tool_search_call",
    "id": "ts_1",
    "call_id": "call_ts",
    "execution": "server",
    "arguments": {"query": "weather"},
    "status": "completed",
}
TOOL_SEARCH_OUTPUT: dict[str, Any] = {
    "type": "tool_search_output",
    "id": "tso_1",
    "call_id": "call_ts",
    "execution": "server",
    "status": "completed",
    "tools": [{"type": "function", "name": "get_weather", "parameters": {}, "strict": True}],
}
COMPUTER_CALL: dict[str, Any] = {
    "type": "computer_call",
    "id": "cu_1",
    "call_id": "call_cu",
    "status": "completed",
    "action": {"type": "click", "button": "left", "x": 10, "y": 20},
    "pending_safety_checks": [],
}
COMPUTER_CALL_OUTPUT: dict[str, Any] = {
    "type": "computer_call_output",
    "id": "cuo_1",
    "call_id": "call_cu",
    "status": "completed",
    "output": {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PNG}"},
}
LOCAL_SHELL_CALL: dict[str, Any] = {
    "type": "local_shell_call",
    "id": "ls_1",
    "call_id": "call_ls",
    "status": "completed",
    "action": {"type": "exec", "command": ["ls", "-a"], "env": {}},
}
LOCAL_SHELL_CALL_OUTPUT: dict[str, Any] = {
    "type": "local_shell_call_output",
    "id": "call_ls",
    "output": '{"stdout": ".\\n..", "exit_code": 0}',
    "status": "completed",
}
SHELL_CALL: dict[str, Any] = {
    "type": "shell_call",
    "id": "sh_1",
    "call_id": "call_sh",
    "status": "completed",
    "action": {"commands": ["pwd", "false"], "timeout_ms": 1000},
}
SHELL_CALL_OUTPUT: dict[str, Any] = {
    "type": "shell_call_output",
    "id": "sho_1",
    "call_id": "call_sh",
    "status": "completed",
    "output": [
        {"stdout": "/work\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
        {"stdout": "", "stderr": "nope", "outcome": {"type": "exit", "exit_code": 1}},
    ],
}
APPLY_PATCH_CALL: dict[str, Any] = {
    "type": "apply_patch_call",
    "id": "ap_1",
    "call_id": "call_ap",
    "status": "completed",
    "operation": {"type": "update_file", "path": "a.py", "diff": "@@\n-x\n+y\n"},
}
APPLY_PATCH_CALL_OUTPUT: dict[str, Any] = {
    "type": "apply_patch_call_output",
    "id": "apo_1",
    "call_id": "call_ap",
    "status": "failed",
    "output": "a.py: no such file",
}
CUSTOM_TOOL_CALL: dict[str, Any] = {
    "type": "custom_tool_call",
    "id": "ct_1",
    "call_id": "call_ct",
    "name": "sql",
    "input": "SELECT 1",
}
CUSTOM_TOOL_CALL_OUTPUT: dict[str, Any] = {
    "type": "custom_tool_call_output",
    "id": "cto_1",
    "call_id": "call_ct",
    "output": [
        {"type": "input_text", "text": "one row"},
        {"type": "input_file", "file_id": "file-9", "filename": "rows.csv"},
    ],
}

HOSTED_ITEMS: tuple[dict[str, Any], ...] = (
    WEB_SEARCH,
    WEB_OPEN_PAGE,
    FILE_SEARCH,
    CODE_INTERPRETER,
    IMAGE_GENERATION,
    MCP_CALL,
    MCP_CALL_FAILED,
    MCP_LIST_TOOLS,
)
"""Provider-run items that carry their outcome: each is a hosted call and its result."""

CALLER_ROUNDS: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
    (COMPUTER_CALL, COMPUTER_CALL_OUTPUT),
    (LOCAL_SHELL_CALL, LOCAL_SHELL_CALL_OUTPUT),
    (SHELL_CALL, SHELL_CALL_OUTPUT),
    (APPLY_PATCH_CALL, APPLY_PATCH_CALL_OUTPUT),
    (CUSTOM_TOOL_CALL, CUSTOM_TOOL_CALL_OUTPUT),
)
"""Caller-run calls and their outputs: a tool round each."""

EVERY_ITEM: tuple[dict[str, Any], ...] = (
    *HOSTED_ITEMS,
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    PROGRAM,
    PROGRAM_OUTPUT,
    TOOL_SEARCH_CALL,
    TOOL_SEARCH_OUTPUT,
    *(item for pair in CALLER_ROUNDS for item in pair),
)
"""Every tool item here, each validated against the SDK."""
