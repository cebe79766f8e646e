"""Responses API tool items other than function calls, into convstore blocks.

Two families, told apart by who ran the tool:

- **Run by the provider** (hosted): ``web_search_call``, ``file_search_call``,
  ``code_interpreter_call``, ``image_generation_call``, ``mcp_call``, ``mcp_list_tools``,
  ``program`` / ``program_output`` and a ``tool_search_call`` / ``tool_search_output`` whose
  ``execution`` is ``server``. Each is a ``hosted_tool_use`` (the tool's name, its input) and,
  when the outcome came with it, a ``hosted_tool_result`` with the readable outcome (a
  ``status:`` line, sources and search results one a line, code output as text and images, the
  generated image as an image part (its ``output_format``, else the format its bytes show;
  with no image, its status), an MCP tool's output or its error with ``is_error``), both
  in the assistant's message. The whole item, exactly as it came, is the use block's
  ``provider_data`` (so its ``id``, ``status``, ``container_id``… survive); an image
  generation's base64 ``result`` is left out of it, being the image part itself. A hosted
  item's keys are not checked: nothing of it can be dropped.
- **Run by the caller's code**: ``computer_call``, ``local_shell_call``, ``shell_call``,
  ``apply_patch_call``, ``custom_tool_call`` (and a client-run ``tool_search_call``) are
  ``tool_use`` blocks, their outputs (``…_output``) ``tool_result`` blocks in the user's
  message, a screenshot as an image. Their item ``id``, ``status``, ``caller`` and
  ``created_by``, and a screenshot's ``acknowledged_safety_checks``, have no place on those
  blocks and are dropped; any other key is refused.

MCP approvals: an ``mcp_approval_request`` is a ``hosted_tool_use`` with no result (the call
it asks about runs, if approved, as its own ``mcp_call``); an ``mcp_approval_response`` is
the caller's decision, a user text ``[MCP approval: approved request ID (reason)]`` (its own
``id`` is dropped).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from convstore.convert.parts import (
    arguments_text,
    as_dict,
    as_list,
    check_keys,
    checked,
    document_from,
    image_from_url,
    refuse,
    responses_parts,
    text_of,
    tool_arguments,
)
from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.images import sniff_media_type

Side = Literal["assistant", "results", "user", "system"]
"""Where an item's blocks belong: the assistant's turn, a user message of tool results, a
user message, or a system message."""

Item = Mapping[str, Any]
Converter = Callable[[Item, str], tuple[Side, list[Block]]]

OUTPUT_PARTS = ("input_text", "input_image", "input_file")
"""Part types accepted in a tool output's ``output`` list."""

_CALL = frozenset({"type", "id", "call_id", "status"})
_RUN = _CALL | {"caller", "created_by"}
CALLER_KEYS: dict[str, frozenset[str]] = {
    "computer_call": _CALL | {"action", "actions", "pending_safety_checks"},
    "computer_call_output": _CALL | {"output", "acknowledged_safety_checks", "created_by"},
    "local_shell_call": _CALL | {"action"},
    "local_shell_call_output": frozenset({"type", "id", "output", "status"}),
    "shell_call": _RUN | {"action", "environment"},
    "shell_call_output": _RUN | {"output", "max_output_length"},
    "apply_patch_call": _RUN | {"operation"},
    "apply_patch_call_output": _RUN | {"output"},
    "custom_tool_call": frozenset({"type", "id", "call_id", "caller"})
    | {"name", "input", "namespace", "async"},
    "custom_tool_call_output": _RUN | {"output"},
}
"""The keys each caller-run item may have; any other is refused, never dropped."""

IMAGE_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif"}
IMAGE_SETTINGS = ("revised_prompt", "action", "size", "quality", "background", "output_format")
"""What of an ``image_generation_call`` is its input (the model's prompt, as rewritten, and
the settings it ran with)."""


def _status(item: Item) -> list[str]:
    status = item.get("status")
    return [f"status: {status}"] if isinstance(status, str) else []


def _failed(item: Item) -> bool:
    return item.get("status") == "failed"


def _use(
    item: Item,
    where: str,
    *,
    name: object,
    tool_input: object,
    call_id: object = None,
    server: object = None,
    provider_data: Item | None = None,
) -> HostedToolUseBlock:
    data = {
        "id": call_id if call_id is not None else item.get("id"),
        "name": name,
        "input": tool_input,
        "server": server,
        "provider_data": dict(item if provider_data is None else provider_data),
    }
    given = {key: value for key, value in data.items() if value is not None}
    return checked(lambda: HostedToolUseBlock.model_validate(given), where)


def _result(
    where: str,
    call_id: object,
    content: str | list[TextBlock | ImageBlock | DocumentBlock],
    *,
    is_error: bool = False,
    provider_data: Item | None = None,
) -> HostedToolResultBlock:
    data = {"tool_use_id": call_id, "content": content, "is_error": is_error}
    if provider_data is not None:
        data["provider_data"] = dict(provider_data)
    return checked(lambda: HostedToolResultBlock.model_validate(data), where)


def _pair(
    use: HostedToolUseBlock,
    content: str | list[TextBlock | ImageBlock | DocumentBlock],
    where: str,
    *,
    is_error: bool = False,
) -> tuple[Side, list[Block]]:
    return "assistant", [use, _result(where, use.id, content, is_error=is_error)]


def _web_search(item: Item, where: str) -> tuple[Side, list[Block]]:
    action = as_dict(item.get("action") or {}, f"{where} action")
    lines = _status(item)
    for index, raw in enumerate(as_list(action.get("sources") or [], f"{where} sources")):
        source = as_dict(raw, f"{where} source {index}")
        lines.append(f"source: {text_of(source.get('url'), f'{where} source {index} url')}")
    query = {key: value for key, value in action.items() if key != "sources"}
    use = _use(item, where, name="web_search", tool_input=query)
    return _pair(use, "\n".join(lines), where, is_error=_failed(item))


def _file_search(item: Item, where: str) -> tuple[Side, list[Block]]:
    lines = _status(item)
    for index, raw in enumerate(as_list(item.get("results") or [], f"{where} results")):
        found = as_dict(raw, f"{where} result {index}")
        label = found.get("filename") or found.get("file_id") or "a file"
        about = [str(found["file_id"])] if found.get("filename") and found.get("file_id") else []
        if found.get("score") is not None:
            about.append(f"score {found['score']}")
        detail = f" ({', '.join(about)})" if about else ""
        lines.append(f"result: {label}{detail}: {found.get('text') or ''}".rstrip())
    queries = {"queries": as_list(item.get("queries") or [], f"{where} queries")}
    use = _use(item, where, name="file_search", tool_input=queries)
    return _pair(use, "\n".join(lines), where, is_error=_failed(item))


def _code_interpreter(item: Item, where: str) -> tuple[Side, list[Block]]:
    parts: list[TextBlock | ImageBlock | DocumentBlock] = [
        TextBlock(text=line) for line in _status(item)
    ]
    for index, raw in enumerate(as_list(item.get("outputs") or [], f"{where} outputs")):
        at = f"{where} output {index}"
        output = as_dict(raw, at)
        match output.get("type"):
            case "logs":
                parts.append(TextBlock(text=text_of(output.get("logs"), f"{at} logs")))
            case "image":
                parts.append(image_from_url(output.get("url"), f"{at} url"))
            case other:
                refuse("output type", other, at, ("logs", "image"))
    code = item.get("code")
    use = _use(
        item, where, name="code_interpreter", tool_input={} if code is None else {"code": code}
    )
    return _pair(use, parts, where, is_error=_failed(item))


def _image_generation(item: Item, where: str) -> tuple[Side, list[Block]]:
    settings = {key: item[key] for key in IMAGE_SETTINGS if item.get(key) is not None}
    kept = {key: value for key, value in item.items() if key != "result"}
    use = _use(item, where, name="image_generation", tool_input=settings, provider_data=kept)
    error, data = item.get("error"), item.get("result")
    if error is not None:
        fields = as_dict(error, f"{where} error")
        message = fields.get("message") if isinstance(fields.get("message"), str) else None
        return _pair(use, message or json.dumps(fields), where, is_error=True)
    if data is None or data == "":  # Codex writes "" for an image not (yet) made
        return _pair(use, "\n".join(_status(item)), where, is_error=_failed(item))
    encoded = text_of(data, f"{where} result")
    image_format = item.get("output_format")
    part: ImageBlock | DocumentBlock
    if image_format == "svg":
        part = document_from(f"{where} result", data=encoded, media_type="image/svg+xml")
    else:
        media = _sniffed(encoded) if image_format is None else IMAGE_FORMATS.get(str(image_format))
        if media is None:
            refuse("output_format", image_format, where, (*IMAGE_FORMATS, "svg"))
        part = image_from_url(f"data:{media};base64,{encoded}", f"{where} result")
    return _pair(use, [part], where)


def _sniffed(encoded: str) -> str:
    """The format of an image whose item names none: what its bytes say, else PNG (the
    API's default)."""
    try:
        raw = base64.b64decode(encoded[:64], validate=False)
    except binascii.Error:
        return "image/png"
    return sniff_media_type(raw) or "image/png"


def _mcp_call(item: Item, where: str) -> tuple[Side, list[Block]]:
    arguments = arguments_text(text_of(item.get("arguments", ""), f"{where} arguments"))
    use = _use(
        item, where, name=item.get("name"), tool_input=arguments, server=item.get("server_label")
    )
    error, output = item.get("error"), item.get("output")
    if error is not None:
        return _pair(
            use, error if isinstance(error, str) else json.dumps(error), where, is_error=True
        )
    if output is not None:
        return _pair(use, text_of(output, f"{where} output"), where, is_error=_failed(item))
    return _pair(use, "\n".join(_status(item)), where, is_error=_failed(item))


def _mcp_list_tools(item: Item, where: str) -> tuple[Side, list[Block]]:
    use = _use(item, where, name="mcp_list_tools", tool_input={}, server=item.get("server_label"))
    if item.get("error"):
        return _pair(use, text_of(item["error"], f"{where} error"), where, is_error=True)
    lines = []
    for index, raw in enumerate(as_list(item.get("tools") or [], f"{where} tools")):
        tool = as_dict(raw, f"{where} tool {index}")
        name = text_of(tool.get("name"), f"{where} tool {index} name")
        lines.append(f"{name}: {tool['description']}" if tool.get("description") else name)
    return _pair(use, "\n".join(lines), where)


def _mcp_approval_request(item: Item, where: str) -> tuple[Side, list[Block]]:
    arguments = arguments_text(text_of(item.get("arguments", ""), f"{where} arguments"))
    server = item.get("server_label")
    return "assistant", [
        _use(item, where, name=item.get("name"), tool_input=arguments, server=server)
    ]


def _mcp_approval_response(item: Item, where: str) -> tuple[Side, list[Block]]:
    approve = item.get("approve")
    if not isinstance(approve, bool):
        refuse("approve", approve, where, ("true", "false"))
    request = text_of(item.get("approval_request_id"), f"{where} approval_request_id")
    reason = item.get("reason")
    why = f" ({text_of(reason, f'{where} reason')})" if reason else ""
    decision = "approved" if approve else "denied"
    return "user", [TextBlock(text=f"[MCP approval: {decision} request {request}{why}]")]


def _program(item: Item, where: str) -> tuple[Side, list[Block]]:
    code = {"code": text_of(item.get("code"), f"{where} code")}
    use = _use(item, where, name="program", tool_input=code, call_id=item.get("call_id"))
    return "assistant", [use]


def _program_output(item: Item, where: str) -> tuple[Side, list[Block]]:
    result = text_of(item.get("result"), f"{where} result")
    block = _result(where, item.get("call_id"), result, provider_data=item)
    return "assistant", [block]


def _tool_search_call(item: Item, where: str) -> tuple[Side, list[Block]]:
    arguments = tool_arguments(item.get("arguments") or {}, f"{where} arguments")
    call_id = item.get("call_id") or item.get("id")
    if item.get("execution") == "client":
        data = {"id": call_id, "name": "tool_search", "input": arguments}
        return "assistant", [checked(lambda: ToolUseBlock.model_validate(data), where)]
    use = _use(item, where, name="tool_search", tool_input=arguments, call_id=call_id)
    return "assistant", [use]


def _tool_search_output(item: Item, where: str) -> tuple[Side, list[Block]]:
    lines = []
    for index, raw in enumerate(as_list(item.get("tools") or [], f"{where} tools")):
        tool = as_dict(raw, f"{where} tool {index}")
        kind, name = tool.get("type"), tool.get("name") or tool.get("server_label")
        lines.append(f"{kind} {name}" if name else str(kind))
    call_id = item.get("call_id") or item.get("id")
    if item.get("execution") == "client":
        # The caller's own search returned these tool definitions: its output is all of them,
        # schemas and descriptions included (a tool result has no provider_data to keep them).
        output = json.dumps(item.get("tools") or [], ensure_ascii=False, separators=(",", ":"))
        data = {"tool_use_id": call_id, "content": output}
        return "results", [checked(lambda: ToolResultBlock.model_validate(data), where)]
    return "assistant", [_result(where, call_id, "\n".join(lines), provider_data=item)]


HOSTED: dict[str, Converter] = {
    "web_search_call": _web_search,
    "file_search_call": _file_search,
    "code_interpreter_call": _code_interpreter,
    "image_generation_call": _image_generation,
    "mcp_call": _mcp_call,
    "mcp_list_tools": _mcp_list_tools,
    "mcp_approval_request": _mcp_approval_request,
    "mcp_approval_response": _mcp_approval_response,
    "program": _program,
    "program_output": _program_output,
    "tool_search_call": _tool_search_call,
    "tool_search_output": _tool_search_output,
}
"""Provider-run tool items (and MCP approvals, and tool search either way), by type."""


# -- run by the caller's code ----------------------------------------------------------------


def _call(item: Item, where: str, name: object, tool_input: object) -> tuple[Side, list[Block]]:
    data = {"id": item.get("call_id"), "name": name, "input": tool_input}
    return "assistant", [checked(lambda: ToolUseBlock.model_validate(data), where)]


def _output(
    where: str,
    call_id: object,
    content: str | list[TextBlock | ImageBlock | DocumentBlock],
    *,
    is_error: bool = False,
) -> tuple[Side, list[Block]]:
    data = {"tool_use_id": call_id, "content": content, "is_error": is_error}
    return "results", [checked(lambda: ToolResultBlock.model_validate(data), where)]


def _computer_call(item: Item, where: str) -> tuple[Side, list[Block]]:
    keys = ("action", "actions", "pending_safety_checks")
    given = {key: item[key] for key in keys if item.get(key)}
    return _call(item, where, "computer", given)


def _computer_call_output(item: Item, where: str) -> tuple[Side, list[Block]]:
    at = f"{where} output"
    screenshot = as_dict(item.get("output"), at)
    if screenshot.get("type") != "computer_screenshot":
        refuse("output type", screenshot.get("type"), at, ("computer_screenshot",))
    part: ImageBlock | DocumentBlock
    if screenshot.get("image_url") is None and screenshot.get("file_id") is not None:
        part = document_from(at, file_id=screenshot["file_id"], name="screenshot")
    else:
        part = image_from_url(screenshot.get("image_url"), f"{at} image_url")
    return _output(where, item.get("call_id"), [part], is_error=_failed(item))


def _local_shell_call(item: Item, where: str) -> tuple[Side, list[Block]]:
    return _call(item, where, "local_shell", as_dict(item.get("action"), f"{where} action"))


def _local_shell_call_output(item: Item, where: str) -> tuple[Side, list[Block]]:
    # The output names its call by ``id`` (the call's ``call_id``): the SDK's one exception.
    return _output(where, item.get("id"), text_of(item.get("output"), f"{where} output"))


def _shell_call(item: Item, where: str) -> tuple[Side, list[Block]]:
    action = as_dict(item.get("action"), f"{where} action")
    if item.get("environment") is not None:
        action = {**action, "environment": item["environment"]}
    return _call(item, where, "shell", action)


def _shell_call_output(item: Item, where: str) -> tuple[Side, list[Block]]:
    lines: list[str] = []
    failed = False
    for index, raw in enumerate(as_list(item.get("output") or [], f"{where} output")):
        at = f"{where} output {index}"
        run = as_dict(raw, at)
        outcome = as_dict(run.get("outcome") or {}, f"{at} outcome")
        if outcome.get("type") == "timeout":
            lines.append("timed out")
            failed = True
        elif outcome.get("type") == "exit":
            lines.append(f"exit code {outcome.get('exit_code')}")
            failed = failed or outcome.get("exit_code") != 0
        else:
            refuse("outcome type", outcome.get("type"), at, ("exit", "timeout"))
        if run.get("stdout"):
            lines.append(text_of(run["stdout"], f"{at} stdout"))
        if run.get("stderr"):
            lines.append(f"stderr: {text_of(run['stderr'], f'{at} stderr')}")
    return _output(where, item.get("call_id"), "\n".join(lines), is_error=failed)


def _apply_patch_call(item: Item, where: str) -> tuple[Side, list[Block]]:
    return _call(item, where, "apply_patch", as_dict(item.get("operation"), f"{where} operation"))


def _apply_patch_call_output(item: Item, where: str) -> tuple[Side, list[Block]]:
    output = text_of(item.get("output") or "", f"{where} output")
    return _output(where, item.get("call_id"), output, is_error=_failed(item))


def _custom_tool_call(item: Item, where: str) -> tuple[Side, list[Block]]:
    return _call(item, where, item.get("name"), text_of(item.get("input"), f"{where} input"))


def tool_output(item: Item, where: str) -> tuple[Side, list[Block]]:
    """A ``function_call_output`` or ``custom_tool_call_output``: its ``output`` a string or
    a list of ``input_text``, ``input_image`` and ``input_file`` parts (a document part)."""
    raw = item.get("output")
    output = raw if isinstance(raw, str) else responses_parts(raw, where, OUTPUT_PARTS)
    data = {"tool_use_id": item.get("call_id"), "content": output, "name": item.get("name")}
    given = {key: value for key, value in data.items() if value is not None}
    return "results", [checked(lambda: ToolResultBlock.model_validate(given), where)]


CALLER_RUN: dict[str, Converter] = {
    "computer_call": _computer_call,
    "computer_call_output": _computer_call_output,
    "local_shell_call": _local_shell_call,
    "local_shell_call_output": _local_shell_call_output,
    "shell_call": _shell_call,
    "shell_call_output": _shell_call_output,
    "apply_patch_call": _apply_patch_call,
    "apply_patch_call_output": _apply_patch_call_output,
    "custom_tool_call": _custom_tool_call,
    "custom_tool_call_output": tool_output,
}
"""Tool items the caller's own code runs, by type (keys checked against :data:`CALLER_KEYS`)."""


def tool_item_blocks(kind: str, item: Item, where: str) -> tuple[Side, list[Block]]:
    """A tool item of type ``kind`` (a key of :data:`HOSTED` or :data:`CALLER_RUN`)."""
    if kind in CALLER_RUN:
        check_keys(item, CALLER_KEYS[kind], where)
        return CALLER_RUN[kind](item, where)
    return HOSTED[kind](item, where)
