"""Anthropic blocks for tools the provider ran itself, as hosted blocks: pure, no I/O.

- ``server_tool_use`` (web search, web fetch, code execution, tool search, the advisor …) and
  ``mcp_tool_use`` (a remote MCP server's tool, ``server`` its ``server_name``) →
  :class:`~convstore.domain.blocks.HostedToolUseBlock`; the block verbatim in
  ``provider_data`` only when it holds something the fields do not (a ``caller``).
- every server ``*_tool_result`` block (:data:`SERVER_RESULT_TYPES`) →
  :class:`~convstore.domain.blocks.HostedToolResultBlock`: readable ``content`` (search hits
  one a line, a fetched page as a document, code output as text and its files as documents by
  ``file_id``, an error as ``is_error`` with its code), and the whole block verbatim in
  ``provider_data`` (encrypted search content, file ids, statuses).
- ``mcp_tool_result`` → a hosted result of its text (``is_error`` kept).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from convstore.convert.anthropic_parts import (
    checked,
    document,
    kind_name,
    parts_json,
    plain,
    string,
    tool_output,
)
from convstore.convert.parts import document_from
from convstore.domain.blocks import Block, DocumentBlock, TextBlock, ToolResultPart
from convstore.domain.errors import InvalidInput

ENCRYPTED = "[encrypted by the provider]"
"""What readable content says where the provider returned only encrypted output."""

Output = str | list[ToolResultPart]
Reader = Callable[[Mapping[str, Any], str], Output]
"""Reads a server result's (successful) ``content`` object into readable output."""


def _inner(content: Mapping[str, Any], accepted: tuple[str, ...], where: str) -> str:
    """The ``type`` of a result's content object, refused in one line unless ``accepted``."""
    kind = content.get("type")
    if kind not in accepted:
        msg = f"{where}: unsupported result content type {kind!r} (accepted: {', '.join(accepted)})"
        raise InvalidInput(msg)
    return str(kind)


def _files(content: Mapping[str, Any], output_type: str, where: str) -> list[DocumentBlock]:
    """The files a run produced (``{"type": output_type, "file_id": …}``), as documents."""
    files = []
    for index, item in enumerate(plain(content.get("content")) or []):
        here = f"{where}, file {index}"
        if not isinstance(item, Mapping) or item.get("type") != output_type:
            found = item.get("type") if isinstance(item, Mapping) else kind_name(item)
            msg = f"{here}: expected a {output_type!r} object, not {found!r}"
            raise InvalidInput(msg)
        files.append(document_from(here, file_id=string(item, "file_id", here)))
    return files


def _run_output(content: Mapping[str, Any], stdout: str) -> str:
    """A run's output as text: ``stdout:``, ``stderr:`` (each when there is any) and the
    return code."""
    lines = []
    if stdout:
        lines.append(f"stdout:\n{stdout}")
    stderr = content.get("stderr")
    if isinstance(stderr, str) and stderr:
        lines.append(f"stderr:\n{stderr}")
    lines.append(f"return code: {content.get('return_code')}")
    return "\n".join(lines)


def _web_search(content: object, where: str) -> Output:
    if not isinstance(content, list):
        msg = f"{where}: web search results must be a list, not {kind_name(content)}"
        raise InvalidInput(msg)
    lines = []
    for index, item in enumerate(content):
        hit = plain(item)
        here = f"{where}, result {index}"
        if not isinstance(hit, Mapping) or hit.get("type") != "web_search_result":
            found = hit.get("type") if isinstance(hit, Mapping) else kind_name(hit)
            msg = f"{here}: expected a 'web_search_result', not {found!r}"
            raise InvalidInput(msg)
        line = f"{string(hit, 'title', here)} ({string(hit, 'url', here)})"
        age = hit.get("page_age")
        lines.append(f"{line}, page age: {age}" if isinstance(age, str) and age else line)
    return "\n".join(lines) if lines else "No results."


def _web_fetch(content: Mapping[str, Any], where: str) -> Output:
    _inner(content, ("web_fetch_result",), where)
    url = string(content, "url", where)
    page = plain(content.get("content"))
    if not isinstance(page, Mapping) or page.get("type") != "document":
        msg = f"{where}: a web_fetch_result needs a document as its content"
        raise InvalidInput(msg)
    retrieved = content.get("retrieved_at")
    head = f"Fetched {url}" + (f" (retrieved {retrieved})" if isinstance(retrieved, str) else "")
    return [TextBlock(text=head), document(page, f"{where}, document", name=url)]


def _code_run(content: Mapping[str, Any], where: str) -> Output:
    kind = _inner(
        content,
        ("code_execution_result", "encrypted_code_execution_result", "bash_code_execution_result"),
        where,
    )
    if kind == "encrypted_code_execution_result":
        stdout = ENCRYPTED
    else:
        stdout = string(content, "stdout", where)
    output_type = (
        "bash_code_execution_output" if kind.startswith("bash") else "code_execution_output"
    )
    return [TextBlock(text=_run_output(content, stdout)), *_files(content, output_type, where)]


def _text_editor(content: Mapping[str, Any], where: str) -> Output:
    kind = _inner(
        content,
        (
            "text_editor_code_execution_view_result",
            "text_editor_code_execution_create_result",
            "text_editor_code_execution_str_replace_result",
        ),
        where,
    )
    match kind:
        case "text_editor_code_execution_view_result":
            if content.get("file_type", "text") == "text":
                return string(content, "content", where)
            return f"Viewed a {content.get('file_type')} file."
        case "text_editor_code_execution_create_result":
            return "File updated." if content.get("is_file_update") else "File created."
        case _:
            old = f"-{content.get('old_start')},{content.get('old_lines')}"
            new = f"+{content.get('new_start')},{content.get('new_lines')}"
            lines = content.get("lines") or []
            return "\n".join([f"Replaced: @@ {old} {new} @@", *map(str, lines)])


def _tool_search(content: Mapping[str, Any], where: str) -> Output:
    _inner(content, ("tool_search_tool_search_result",), where)
    names = [
        string(reference, "tool_name", where)
        for reference in plain(content.get("tool_references")) or []
    ]
    return f"Tools found: {', '.join(names)}" if names else "No tools found."


def _advisor(content: Mapping[str, Any], where: str) -> Output:
    kind = _inner(content, ("advisor_result", "advisor_redacted_result"), where)
    if kind == "advisor_redacted_result":
        return ENCRYPTED
    return string(content, "text", where)


def _as_object(read: Reader) -> Callable[[object, str], Output]:
    """``read`` for a result whose content must be one object."""

    def reader(content: object, where: str) -> Output:
        if not isinstance(content, Mapping):
            msg = f"{where}: the result's content must be an object, not {kind_name(content)}"
            raise InvalidInput(msg)
        return read(content, where)

    return reader


SERVER_RESULTS: dict[str, Callable[[object, str], Output]] = {
    "web_search_tool_result": _web_search,
    "web_fetch_tool_result": _as_object(_web_fetch),
    "code_execution_tool_result": _as_object(_code_run),
    "bash_code_execution_tool_result": _as_object(_code_run),
    "text_editor_code_execution_tool_result": _as_object(_text_editor),
    "tool_search_tool_result": _as_object(_tool_search),
    "advisor_tool_result": _as_object(_advisor),
}
"""How each server tool result's content reads (its error objects are read alike, below)."""

SERVER_RESULT_TYPES: tuple[str, ...] = tuple(SERVER_RESULTS)
"""Every server ``*_tool_result`` block type the converters accept (a test holds this to the
SDK's content block unions)."""


def _error(content: object) -> str | None:
    """An error object's text (``error_code``, then ``: error_message`` when given), or
    ``None`` when ``content`` is no error."""
    if not isinstance(content, Mapping):
        return None
    kind = content.get("type")
    if not (isinstance(kind, str) and kind.endswith("_error")):
        return None
    code, message = content.get("error_code"), content.get("error_message")
    return f"{code}: {message}" if isinstance(message, str) and message else str(code)


def hosted_result(data: Mapping[str, Any], where: str) -> Block:
    """A server ``*_tool_result`` block as a hosted result, the block verbatim kept."""
    kind = str(data.get("type"))
    content = plain(data.get("content"))
    error = _error(content)
    output = error if error is not None else SERVER_RESULTS[kind](content, where)
    return checked(
        {
            "type": "hosted_tool_result",
            "tool_use_id": data.get("tool_use_id"),
            "content": parts_json(output),
            "is_error": error is not None,
            "provider_data": dict(data),
        },
        where,
    )


USE_KEYS: dict[str, frozenset[str]] = {
    "server_tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "mcp_tool_use": frozenset({"type", "id", "name", "input", "server_name", "cache_control"}),
}
"""What a hosted call's fields hold; a block with any other key is kept verbatim too."""


def hosted_use(data: Mapping[str, Any], where: str, raw_input: object) -> Block:
    """A ``server_tool_use`` or ``mcp_tool_use`` block as a hosted call; ``raw_input`` is its
    input as the converter read it (an object, or the raw text of one that never parsed)."""
    kind = str(data.get("type"))
    fields: dict[str, Any] = {
        "type": "hosted_tool_use",
        "id": data.get("id"),
        "name": data.get("name"),
        "input": raw_input,
    }
    if kind == "mcp_tool_use":
        fields["server"] = data.get("server_name")
    if set(data) - USE_KEYS[kind]:
        fields["provider_data"] = dict(data)
    return checked(fields, where)


MCP_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"})


def mcp_result(data: Mapping[str, Any], where: str) -> Block:
    """An ``mcp_tool_result`` as a hosted result: its text, ``is_error`` kept (the block
    verbatim in ``provider_data`` when it holds anything else)."""
    is_error = data.get("is_error")
    fields: dict[str, Any] = {
        "type": "hosted_tool_result",
        "tool_use_id": data.get("tool_use_id"),
        "content": parts_json(tool_output(data.get("content"), where)),
        "is_error": is_error if isinstance(is_error, bool) else False,
    }
    if set(data) - MCP_RESULT_KEYS:
        fields["provider_data"] = dict(data)
    return checked(fields, where)
