"""Commands that move memories in and out: ``import <source>`` and ``export``.

Importers write to the store file directly, also while a worker is running (SQLite WAL lets both write);
the worker's vector mirror catches up on the new items through its watermark. A new source is one more
``@import_group.command(...)`` here or in another module.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from memcairn.cli.common import emit_json, open_store, plural, settings


@click.group("import")
def import_group() -> None:
    """Import memories from another tool or from a memcairn export.

    Example:

    \b
        memcairn import claude-mem --json
    """


@import_group.command("claude-mem")
@click.argument("db", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def import_claude_mem_cmd(db: Path | None, as_json: bool) -> None:
    """Import a claude-mem database, opened read-only.

    DB defaults to ~/.claude-mem/claude-mem.db. Sessions, observations, summaries and prompts keep their
    claude-mem ids as provenance, so running it again adds nothing. The privacy rules of live capture apply:
    <private> parts are removed, secrets redacted, and projects in exclude_projects are left out.

    Example:

    \b
        memcairn import claude-mem ~/.claude-mem/claude-mem.db --json
    """
    from memcairn.transfer.claude_mem import import_claude_mem
    from memcairn.transfer.claude_mem_rows import ClaudeMemReport
    from memcairn.transfer.claude_mem_source import DEFAULT_PATH, open_source

    path = (db or DEFAULT_PATH).expanduser()
    if db is None and not path.exists():  # nothing to import is no failure: the README runs this as optional
        note = f"no claude-mem database at {path}; nothing imported (give its path if it is elsewhere)"
        if as_json:
            emit_json({**ClaudeMemReport(notes=[note]).to_dict(), "source": str(path), "found": False})
        else:
            click.echo(f"note: {note}", err=True)
        return
    cfg = settings()
    source = open_source(path)  # checked before the store is opened: a bad file writes nothing
    try:
        with open_store(cfg) as store:
            report = import_claude_mem(store, source, cfg)
    finally:
        source.close()
    if as_json:
        emit_json(report.to_dict())
        return
    excluded = f", {report.skipped_excluded} of excluded projects" if report.skipped_excluded else ""
    click.echo(f"imported {report.sessions} sessions, {report.observations} observations, {report.summaries} "
               f"summaries, {report.prompts} prompts from {path} ({report.existing} already stored, "
               f"{_forgotten(report.forgotten)}{report.skipped} skipped{excluded}, {report.warnings} warnings)")
    for note in report.notes:
        click.echo(f"  note: {note}")


@import_group.command("transcripts")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--offline", is_flag=True, help="Use the offline extractor even when a model backend is configured.")
@click.option("--project", help="File every session under this project (default: from each session's directory).")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Where the sessions' working directory is on this machine: the files their memories rest on "
                   "are read there (default: each session's recorded directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def import_transcripts_cmd(paths: tuple[Path, ...], offline: bool, project: str | None, root: Path | None,
                           as_json: bool) -> None:
    """Replay recorded sessions of Claude Code, Codex and Gemini CLI through the capture pipeline.

    PATHS are transcript files or directories: Claude Code's *.jsonl (with a session's subagents/ files and its
    compaction summaries), Codex rollouts (~/.codex/sessions, *.jsonl) and Gemini CLI chats
    (~/.gemini/tmp/*/chats/session-*.json); each file's shape is recognised by its content. Without PATHS:
    every Claude Code transcript under ~/.claude/projects/. Each line passes the same rules as live capture
    (exclusions, <private>, secret redaction); lines are remembered by their id, so importing again adds
    nothing. Malformed lines are counted and skipped. Each memory records the files it rests on with their
    content ids, read under the session's recorded directory, or under --root DIR when the project's working
    directory is elsewhere on this machine.

    Example:

    \b
        memcairn import transcripts ~/.claude/projects/my-app --json
        memcairn import transcripts ./sessions --root ~/src/my-app
    """
    from memcairn.capture.llm import make_compressor
    from memcairn.transfer.importer import import_transcripts
    from memcairn.transfer.transcript_files import default_transcript_paths, default_transcript_root

    files = _transcript_files(paths) if paths else default_transcript_paths()
    if not paths and not files:
        root = default_transcript_root()
        why = "does not exist" if not root.exists() else "holds no transcripts (*.jsonl)"
        click.echo(f"note: {root} {why}: Claude Code keeps its transcripts there (CLAUDE_CONFIG_DIR moves it); "
                   "give transcript files or folders as arguments to import others", err=True)
    cfg = settings()
    with open_store(cfg) as store:
        compressor = None if offline else make_compressor(cfg, store)
        if as_json or not files:
            report = import_transcripts(store, cfg, files, compressor=compressor, project=project, root=root)
        else:
            with click.progressbar(length=len(files), label="importing transcripts", file=sys.stderr) as bar:
                report = import_transcripts(store, cfg, files, compressor=compressor, project=project, root=root,
                                            on_file=lambda _path, _total: bar.update(1))
    if as_json:
        emit_json(report.as_dict())
        return
    unreadable = f", {plural(report.unreadable_files, 'unreadable file')}" if report.unreadable_files else ""
    click.echo(f"imported {plural(report.files, 'transcript file')}: {plural(report.prompts, 'prompt')}, "
               f"{plural(report.observations, 'observation')}, {plural(report.summaries, 'summary', 'summaries')} "
               f"({plural(report.events, 'new event')}, {plural(report.skipped_lines, 'malformed line')} skipped"
               f"{unreadable})")
    for line in _file_lines(report.file_reports):
        click.echo(line)


def _file_lines(reports: list[dict[str, Any]]) -> list[str]:
    """Per file: what it held and made, and every line left out with why."""
    lines = []
    for r in reports:
        if "error" in r:
            lines.append(f"  {r['path']}: not imported: {r['error']}")
            continue
        held = [plural(r["prompts"], "prompt"), plural(r["tool_uses"], "tool call"),
                plural(r["compactions"], "compaction summary", "compaction summaries")]
        made = [plural(r["observations"], "observation"), plural(r["summaries"], "summary", "summaries")]
        lines.append(f"  {r['path']} ({r['shape']}): {', '.join(held)} -> {', '.join(made)} "
                     f"({plural(r['events'], 'new event')})")
        if r["left_out"]:
            lines.append("    left out: " + "; ".join(f"{n} {why}" for why, n in r["left_out"].items()))
    return lines


def _transcript_files(paths: tuple[Path, ...]) -> list[Path]:
    from memcairn.transfer.transcript_files import transcripts_under

    files: list[Path] = []
    for path in paths:
        path = path.expanduser()
        if path.is_dir():
            files += transcripts_under(path)
        elif path.exists():
            files.append(path)
        else:
            raise click.UsageError(f"{path} does not exist; give transcript files (Claude Code or Codex *.jsonl, "
                                   "Gemini CLI session-*.json) or directories")
    return files


@import_group.command("jsonl")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def import_jsonl_cmd(file: Path, as_json: bool) -> None:
    """Import a file written by `memcairn export` (plain or gzip'd).

    Items whose uuid is already stored are left alone, so importing the same file twice adds nothing.

    Example:

    \b
        memcairn import jsonl backup.jsonl --json
    """
    from memcairn.transfer.jsonl import import_jsonl, read_header

    read_header(file)  # a file that is not an export is refused before the store is opened
    with open_store() as store:
        report = import_jsonl(store, file)
    if as_json:
        emit_json(report.to_dict())
        return
    click.echo(f"imported {report.projects} projects, {report.sessions} sessions, {report.items} items from {file} "
               f"({report.existing} already stored, {report.duplicates} duplicates, {_forgotten(report.forgotten)}"
               f"{report.malformed} malformed){_marks(report.forgotten_marks, report.forgotten_marks_skipped)}")
    for error in report.errors:
        click.echo(f"  {error}")
    for note in report.notes:
        click.echo(f"  note: {note}")


@click.command("export")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              help="File to write ('-' for standard output).")
@click.option("--force", is_flag=True, help="Replace the output file when it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON (on stderr with --output -).")
def export(output: Path, force: bool, as_json: bool) -> None:
    """Export every project, session, memory and its provenance as JSON Lines (UTF-8).

    `memcairn import jsonl FILE` reads it back, with the same uuids and timestamps. An output path ending in
    .gz is gzip-compressed. An existing file is replaced only with --force (and only once the new export is
    complete).

    Example:

    \b
        memcairn export --output backup.jsonl
    """
    from memcairn.core.errors import ValidationError
    from memcairn.transfer.jsonl import export_to_file, export_to_stdout

    to_stdout = str(output) == "-"
    if not to_stdout and output.exists() and not force:
        raise ValidationError(f"{output} already exists; pass --force to replace it, or choose another --output")
    with open_store() as store:
        counts = export_to_stdout(store) if to_stdout else export_to_file(store, output)
    if as_json and not to_stdout:
        emit_json(counts)
    elif as_json:
        click.echo(json.dumps(counts), err=True)
    elif not to_stdout:
        marks = f" and {counts['forgotten']} deletion marks" if counts.get("forgotten") else ""
        click.echo(f"exported {counts['projects']} projects, {counts['sessions']} sessions, {counts['items']} items"
                   f"{marks} to {output}")


def _marks(recorded: int, skipped: int) -> str:
    """The import summary's mention of the deletion marks a file carried (none: nothing said)."""
    if not recorded and not skipped:
        return ""
    held = f" ({skipped} skipped: this store holds that content)" if skipped else ""
    return f"; {recorded} deletion marks recorded{held}"


def _forgotten(count: int) -> str:
    """The import summary's mention of items left out because the user deleted them (none: nothing said)."""
    return f"{count} deleted before and left out, " if count else ""
