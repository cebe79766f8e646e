"""One Claude Agent SDK run through ``ConvstoreSessionStore``, as its own process (no network).

``python -m tests.claude_agent_worker LOCATION PROJECT CONFIG PROMPT SEEN_FILE
[--resume=SESSION] [--ready=FILE]``

The SDK's real runner (the Claude Code CLI bundled in its wheel, in ``PROJECT``, with its
config and local transcripts in ``CONFIG``) talks to a scripted Anthropic Messages endpoint
served by this process on 127.0.0.1: a last user text that names release-7 gets a
``delete_branch`` call (the in-process MCP tool ``mcp__ops__delete_branch``), a tool result gets
"Deleted.", anything else "I cannot tell.". Every request body the endpoint is sent is appended
to SEEN_FILE as one JSON line. With ``--ready=FILE`` the tool writes FILE and then waits for
its parent to kill it. The run's answer is printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import uuid4

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ResultMessage,
    create_sdk_mcp_server,
    query,
    tool,
)

import convstore
from convstore.integrations.claude_agent import ConvstoreSessionStore

TOOL = "mcp__ops__delete_branch"


def scripted_reply(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content the scripted model answers a request body with."""
    last = body["messages"][-1]["content"]
    blocks = last if isinstance(last, list) else [{"type": "text", "text": last}]
    if any(block.get("type") == "tool_result" for block in blocks):
        return [{"type": "text", "text": "Deleted."}]
    said = [
        block["text"]
        for block in blocks
        if block.get("type") == "text" and not block["text"].startswith("<system-reminder>")
    ]
    if said and "release-7" in said[-1]:
        call_id = f"toolu_{uuid4().hex[:24]}"
        return [{"type": "tool_use", "id": call_id, "name": TOOL, "input": {"branch": "release-7"}}]
    return [{"type": "text", "text": "I cannot tell."}]


def stream_events(body: dict[str, Any], content: list[dict[str, Any]]) -> bytes:
    """``content`` as the Messages API's server-sent events (the CLI streams every request)."""
    stop = "tool_use" if content[0]["type"] == "tool_use" else "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 1}
    message: dict[str, Any] = {"id": f"msg_{uuid4().hex[:24]}", "type": "message"}
    message |= {"role": "assistant", "model": body["model"], "content": []}
    message |= {"stop_reason": None, "usage": usage}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for index, block in enumerate(content):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": index, "content_block": start},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def serve(seen: Path) -> ThreadingHTTPServer:
    """The scripted endpoint, on a free loopback port, in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            with seen.open("a", encoding="utf-8") as out:
                out.write(json.dumps(body) + "\n")
            data = stream_events(body, scripted_reply(body))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@tool("delete_branch", "Delete a git branch.", {"branch": str})
async def delete_branch(args: dict[str, Any]) -> dict[str, Any]:
    ready = os.environ.get("CONVSTORE_READY_FILE")
    if ready:
        Path(ready).write_text(args["branch"])
        time.sleep(120)
    return {"content": [{"type": "text", "text": f"deleted {args['branch']}"}]}


async def main(argv: list[str]) -> None:
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in argv[5:])
    if "ready" in flags:
        os.environ["CONVSTORE_READY_FILE"] = flags["ready"]
    location, project, config, prompt, seen = argv[:5]
    server = serve(Path(seen))
    async with await convstore.open_async_store(location) as store:
        sessions = ConvstoreSessionStore(store)
        options = ClaudeAgentOptions(
            session_store=sessions,
            hooks=sessions.hooks(),
            resume=flags.get("resume"),
            cwd=project,
            model="claude-sonnet-4-5",
            tools=[],
            setting_sources=[],
            mcp_servers={"ops": create_sdk_mcp_server("ops", tools=[delete_branch])},
            allowed_tools=[TOOL],
            env={
                "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_port}",
                "ANTHROPIC_API_KEY": "scripted",
                "CLAUDE_CONFIG_DIR": config,
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )
        answer = ""
        async for message in query(prompt=prompt, options=options):
            if isinstance(message, AssistantMessage):
                answer = " ".join(getattr(block, "text", "") for block in message.content)
            if isinstance(message, ResultMessage) and message.is_error:
                msg = f"the run failed: {message.result}"
                raise SystemExit(msg)
    print(answer)  # noqa: T201 - the test reads it


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
