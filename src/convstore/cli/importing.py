"""`convstore import`: histories from other systems, recorded as new conversations."""

from __future__ import annotations

import json
from typing import Any

import click

from convstore.cli.inputs import parse_json, read_input
from convstore.cli.options import input_argument, json_option, store_from
from convstore.cli.output import counted
from convstore.store.importing import (
    IMPORT_FORMATS,
    LINE_FORMATS,
    ImportFormat,
    ImportReport,
    detect_format,
    read_histories,
    sources_for,
)


@click.command("import")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(IMPORT_FORMATS),
    default=None,
    help="claude-code: a session transcript (JSON lines); openai-chat: a Chat Completions "
    "body or message list; anthropic: a Messages body, message list or response; "
    "responses: a Responses API body or input item list; codex: a Codex CLI rollout "
    "(JSON lines); gemini-cli: a Gemini CLI session (session-*.json or .jsonl); "
    "pydantic-ai: ModelMessagesTypeAdapter JSON; vercel-ai: an AI SDK UIMessage array. "
    "Default: detected from the content (named on stderr; ambiguous input is refused).",
)
@input_argument
@click.option("--again", is_flag=True, help="Record a new copy of a history imported before.")
@json_option
@click.pass_context
def import_(
    ctx: click.Context, fmt: ImportFormat | None, source: str | None, again: bool, as_json: bool
) -> None:
    """Record another system's history as new conversations; print their ids.

    Stdout carries only the new conversation ids, one per line, the main conversation
    first (a Claude Code session's subagents follow it, linked to it). The summary
    (messages, blocks by kind, calls without a result, lines skipped and why, line types
    ignored) goes to stderr, or with --json to stdout as one JSON object. An input is
    recorded whole or not at all; importing the same history twice is refused unless
    --again.

    Without --format the format is detected from the content and named on stderr
    ("detected format: codex"); input that more than one format reads (a list of plain
    role/content messages) is refused with the candidates, to be settled with --format.

    \b
    Example:
        convstore import --format claude-code ~/.claude/projects/myproj/SESSION.jsonl
        convstore import --format openai-chat request.json --json | jq -r '.conversations[].id'
        convstore import ~/.codex/sessions/2026/01/02/rollout-2026-01-02T10-00-00-ID.jsonl
        convstore import ~/.gemini/tmp/PROJECT/chats/session-2026-01-02T10-00-ID.jsonl
    """
    text, where = read_input(source, f"a {fmt} history" if fmt else "a history")
    if fmt is None:
        fmt = detect_format(text)
        click.echo(f"detected format: {fmt}", err=True)
    data = None if fmt in LINE_FORMATS else parse_json(text, where)
    histories = read_histories(fmt, text, data)
    store = store_from(ctx, create=True)
    sources = sources_for(fmt, histories, text.encode())
    report = store.import_histories(histories, sources=sources, again=again)
    if as_json:
        payload: dict[str, Any] = {"format": fmt, "input": where, **report.as_json()}
        click.echo(json.dumps(payload, ensure_ascii=False, indent=2))
        return
    for conversation_id in report.ids:
        click.echo(conversation_id)
    for line in summary_lines(report, fmt, where):
        click.echo(line, err=True)


def summary_lines(report: ImportReport, fmt: str, where: str) -> list[str]:
    """The human summary of an import: one line per conversation, then what was left out."""
    count = len(report.conversations)
    lines = [f"imported {counted(count, 'conversation')} from {where} ({fmt})"]
    for conversation in report.conversations:
        kinds = ", ".join(f"{kind} {n}" for kind, n in conversation.blocks.items() if n)
        role = f"subagent of {conversation.parent_id}" if conversation.parent_id else "main"
        line = (
            f"  {conversation.id} ({role}): {counted(conversation.messages, 'message')}, "
            f"{counted(sum(conversation.blocks.values()), 'block')} ({kinds or 'none'})"
        )
        if conversation.images_in_results:
            line += f", {counted(conversation.images_in_results, 'image')} inside tool results"
        if conversation.calls_without_result:
            line += f"; {counted(conversation.calls_without_result, 'call')} without a result"
        if conversation.results_without_call:
            line += f"; {counted(conversation.results_without_call, 'result')} without its call"
        lines.append(line)
        if conversation.previous_response_id:
            lines.append(
                f"  history continues in a stored response convstore does not have "
                f"(previous_response_id {conversation.previous_response_id}): only what "
                "the input holds was imported"
            )
    if report.skipped:
        lines.append(f"skipped {counted(len(report.skipped), 'part')} of the input:")
        lines.extend(
            f"  line {s.line}: {s.reason}" if s.line is not None else f"  {s.reason}"
            for s in report.skipped
        )
    if report.ignored:
        ignored = ", ".join(f"{kind} {n}" for kind, n in sorted(report.ignored.items()))
        lines.append(f"ignored (no conversational content): {ignored}")
    return lines
