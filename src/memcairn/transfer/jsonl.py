"""memcairn's own export format: JSON Lines holding every project, session, item and provenance row, and the
marks of content the user deleted.

The first line is ``{"record": "header", "format": "memcairn-export", "version": 1, "exported_at": <ms>}``;
then ``project``, ``session`` and ``item`` records (in that order, each in id order), then ``forgotten``
records, ``{"record": "forgotten", "project": <name>, "content_hash": ..., "kind": ..., "forgotten_at_epoch":
<ms>}`` (one per ``forgotten_items`` row); the last line is ``{"record": "end", "projects": n, "sessions": n,
"items": n}``, with ``"forgotten": n`` too when the file holds forgotten records, so a file without it was cut
short. The text is UTF-8 also on standard output; an export to a ``.gz`` path is gzip-compressed, and an import
reads a gzip'd file (found by its magic bytes) as well as a plain one.

An item keeps its uuid, content hash, timestamps and memory_sources rows: importing an export into an empty
store reproduces the store, and importing it into a store that already holds those uuids adds nothing. A
forgotten record is recorded as a mark unless the receiving store holds an item with that (project, content
hash) now: then the item stays and the mark is skipped (the receiving store's own state wins). An existing mark
keeps its time, so importing the same file twice adds nothing. Marks make a restored store refuse deleted
content again when the same claude-mem database or transcripts are imported into it.

The version stays 1: forgotten records only add to the format. A file of an earlier release (no forgotten
records, no ``forgotten`` count) imports exactly as before, and an export of a store with no marks is such a
file. An earlier release reading a newer file imports everything else and counts each forgotten record as a
malformed line ("unknown record type"), as every release does with a record type it does not know; a version
2 would make it refuse the whole file instead.
Operational tables (the ingest queue, model usage, notices, the mirror's watermarks) are not exported: the
vector mirror of the receiving store rebuilds itself from the imported items.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import secrets
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memcairn.core.clock import now_ms
from memcairn.core.errors import ValidationError
from memcairn.core.fields import FIELD, FIELDS, NAMES, Field
from memcairn.core.models import KINDS, NewItem
from memcairn.store.transfer_state import (
    TransferForgotten,
    TransferItem,
    TransferProject,
    TransferRecord,
    TransferSession,
)
from memcairn.store.validation import validate_item

if TYPE_CHECKING:
    from memcairn.store.protocols import Transfer

FORMAT = "memcairn-export"
VERSION = 1
BATCH_SIZE = 500
REPORTED_LINES = 10

_ITEM_FIELDS = (
    "uuid", "project", "session", "kind", "type", *NAMES, "content_hash", "created_at_epoch", "updated_at_epoch",
    "sources",
)
_END = object()
_GZIP_MAGIC = b"\x1f\x8b"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclass
class ImportReport:
    """Counts of one import. ``existing``: records already in the store (same uuid, session or project);
    ``duplicates``: items whose content another stored item already had (they add their provenance only);
    ``forgotten``: items whose content the user deleted from this store (they stay deleted);
    ``forgotten_marks``: deletion marks recorded (an existing mark counts as ``existing``);
    ``forgotten_marks_skipped``: marks of content this store holds now (the item is kept)."""

    projects: int = 0
    sessions: int = 0
    items: int = 0
    existing: int = 0
    duplicates: int = 0
    forgotten: int = 0
    forgotten_marks: int = 0
    forgotten_marks_skipped: int = 0
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def reject(self, line: int, reason: str) -> None:
        self.malformed += 1
        if len(self.malformed_lines) < REPORTED_LINES:
            self.malformed_lines.append(line)
            self.errors.append(f"line {line}: {reason}")

    def sort_rejections(self) -> None:
        """Store refusals are known only when a batch is written, after later lines were parsed."""
        pairs = sorted(zip(self.malformed_lines, self.errors, strict=True))
        self.malformed_lines = [line for line, _ in pairs]
        self.errors = [error for _, error in pairs]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- export ---------------------------------------------------------------------------------------
def export_jsonl(store: Transfer, out: IO[str]) -> dict[str, int]:
    """Write the whole store to ``out``, streaming page by page from one consistent snapshot. The counts (also
    the end record's) name ``forgotten`` only when there are marks, as a file of an earlier release has none."""
    counts = {"projects": 0, "sessions": 0, "items": 0}
    marks = 0
    _write(out, {"record": "header", "format": FORMAT, "version": VERSION, "exported_at": now_ms()})
    with store.export_snapshot():
        for row in store.export_projects():
            _write(out, {"record": "project", **row})
            counts["projects"] += 1
        for row in store.export_sessions():
            _write(out, {"record": "session", **row})
            counts["sessions"] += 1
        for row in store.export_items():
            _write(out, _item_record(row))
            counts["items"] += 1
        for row in store.export_forgotten():
            _write(out, {"record": "forgotten", **row})
            marks += 1
    if marks:
        counts["forgotten"] = marks
    _write(out, {"record": "end", **counts})
    return counts


def export_to_stdout(store: Transfer) -> dict[str, int]:
    """Export to standard output as UTF-8, whatever encoding the console or ``PYTHONIOENCODING`` would give."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        return export_jsonl(store, sys.stdout)
    sys.stdout.flush()
    out = io.TextIOWrapper(buffer, encoding="utf-8", newline="\n")
    try:
        counts = export_jsonl(store, out)
        out.flush()
    finally:
        out.detach()  # standard output stays open
    return counts


def export_to_file(store: Transfer, path: Path) -> dict[str, int]:
    """Export to ``path`` (gzip-compressed when it ends in ``.gz``) through a temporary file beside it, synced
    to disk before it replaces ``path``: a failed or interrupted export (or a crash) never leaves half a file,
    nor an empty one, where a complete one was."""
    path = Path(path)
    # a name of its own (created exclusively), so a concurrent export or a user's file is never taken over
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    created = False
    try:
        with open(tmp, "xb") as raw:
            created = True
            counts = _export_into(store, raw, compress=path.suffix == ".gz", name=path.name)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if created:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ValidationError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise
    return counts


def _export_into(store: Transfer, raw: IO[bytes], *, compress: bool, name: str) -> dict[str, int]:
    """Write the export into the open binary file ``raw`` and leave it open, for the caller to sync."""
    # the gzip header names the file the export will be (not the temporary one), as gzip.open(path) would
    packed = gzip.GzipFile(filename=name, mode="wb", fileobj=raw) if compress else None
    out = io.TextIOWrapper(packed if packed is not None else raw, encoding="utf-8", newline="\n")
    try:
        counts = export_jsonl(store, out)
        out.flush()
    finally:
        out.detach()
    if packed is not None:
        packed.close()  # writes the gzip trailer; ``raw`` stays open
    return counts


def _write(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    out.write("\n")


def _item_record(row: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {"record": "item"}
    for name in _ITEM_FIELDS:
        value = row.get(name)
        if name in FIELD:
            value = FIELD[name].from_column(value)
        elif name == "session" and value is not None:
            value = list(value)
        record[name] = value
    for name, value in row.items():  # columns a newer schema added travel as they are
        if name not in record:
            record[name] = value
    return record


# -- import ---------------------------------------------------------------------------------------
def read_header(path: Path) -> dict[str, Any]:
    """Check that ``path`` is an export this memcairn reads; return its header. Nothing is written.

    Raises:
        ValidationError: the file is missing, unreadable, empty, or not a memcairn export of version 1.
    """
    try:
        with _open_for_reading(path) as fh:
            for raw in fh:
                if raw.strip():
                    return _check_header(_decode(raw), path)
    except (OSError, EOFError) as exc:
        raise ValidationError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except ValueError:
        raise ValidationError(f"{path} is not a memcairn export: its first line is not JSON") from None
    raise ValidationError(f"{path} is empty, not a memcairn export")


def import_jsonl(store: Transfer, path: Path) -> ImportReport:
    """Import an export file into ``store``, batch by batch; malformed lines are counted and skipped.

    Raises:
        ValidationError: the file is not a memcairn export (nothing is written then).
    """
    read_header(path)
    report = ImportReport()
    batch: list[tuple[int, TransferRecord]] = []
    seen_end = False
    with _open_for_reading(path) as fh:
        header_line = True
        for lineno, raw in _lines(fh, report):
            if not raw.strip():
                continue
            if header_line:
                header_line = False
                continue
            try:
                record = _parse(_decode(raw), path)
            except (ValueError, ValidationError, RecursionError) as exc:
                report.reject(lineno, _reason(exc))
                continue
            if record is _END:
                seen_end = True
                continue
            if record is None:
                continue
            seen_end = False
            batch.append((lineno, record))
            if len(batch) >= BATCH_SIZE:
                _flush(store, batch, report)
    _flush(store, batch, report)
    report.sort_rejections()
    if not seen_end:
        report.notes.append("the file has no end record after its last line: it may have been cut short")
    return report


def _open_for_reading(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it is gzip'd."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == _GZIP_MAGIC else open(path, "rb")


def _lines(fh: IO[bytes], report: ImportReport) -> Iterator[tuple[int, bytes]]:
    """Numbered lines; a compressed file that breaks off (cut short, damaged) ends them with a note."""
    lineno = 0
    try:
        for lineno, raw in enumerate(fh, 1):
            yield lineno, raw
    except (OSError, EOFError) as exc:
        report.notes.append(f"reading stopped after line {lineno}: the compressed data is damaged or cut short "
                            f"({exc})")


def _decode(raw: bytes) -> Any:
    # utf-8-sig: an export opened and saved by an editor that adds a byte-order mark is still an export
    obj = json.loads(raw.decode("utf-8-sig"))
    if _SURROGATE_ESCAPE.search(raw):  # json.loads keeps a lone "\ud800", which no store can hold
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text that is not valid Unicode (a lone surrogate)") from None
    return obj


def _reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg})"
    return str(exc) or type(exc).__name__


def _check_header(obj: Any, path: Path) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("record") != "header" or obj.get("format") != FORMAT:
        raise ValidationError(
            f"{path} is not a memcairn export: its first line must be a header "
            f'{{"record": "header", "format": "{FORMAT}", "version": {VERSION}}} (made by `memcairn export`)'
        )
    version = obj.get("version")
    if version != VERSION:
        if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
            raise ValidationError(f"{path} was written by a newer memcairn (export version {version}; this one "
                                  f"reads version {VERSION}); upgrade memcairn to import it")
        raise ValidationError(f"{path} has export version {version!r}; this memcairn reads version {VERSION}")
    return obj


def _flush(store: Transfer, batch: list[tuple[int, TransferRecord]], report: ImportReport) -> None:
    if not batch:
        return
    outcomes = store.import_records([record for _, record in batch])
    for (lineno, record), outcome in zip(batch, outcomes, strict=True):
        if outcome.status == "created":
            if isinstance(record, TransferProject):
                report.projects += 1
            elif isinstance(record, TransferSession):
                report.sessions += 1
            elif isinstance(record, TransferForgotten):
                report.forgotten_marks += 1
            else:
                report.items += 1
        elif outcome.status == "skipped":
            report.forgotten_marks_skipped += 1
        elif outcome.status == "existing":
            report.existing += 1
        elif outcome.status == "duplicate":
            report.duplicates += 1
        elif outcome.status == "forgotten":
            report.forgotten += 1
        else:
            report.reject(lineno, f"refused by the store: {outcome.detail}")
    batch.clear()


def _parse(obj: Any, path: Path) -> TransferRecord | object | None:
    """The record a line holds; ``_END`` for the end marker, None for a repeated header (two exports joined)."""
    if not isinstance(obj, dict):
        raise ValidationError("not a JSON object")
    kind = obj.get("record")
    if kind == "item":
        return _parse_item(obj)
    if kind == "session":
        return _parse_session(obj)
    if kind == "project":
        return TransferProject(_text(obj, "name"), _opt_text(obj, "merged_into_project"),
                               _epoch(obj, "created_at_epoch"))
    if kind == "forgotten":
        return _parse_forgotten(obj)
    if kind == "end":
        return _END
    if kind == "header":
        _check_header(obj, path)
        return None
    raise ValidationError(f"unknown record type {kind!r}")


def _parse_forgotten(obj: dict[str, Any]) -> TransferForgotten:
    kind = _text(obj, "kind")
    if kind not in KINDS:
        raise ValidationError(f"unknown kind {kind!r}; use one of: {', '.join(KINDS)}")
    return TransferForgotten(_text(obj, "project"), _text(obj, "content_hash"), kind,
                             _epoch(obj, "forgotten_at_epoch"))


def _parse_session(obj: dict[str, Any]) -> TransferSession:
    project = _text(obj, "project")
    _text(obj, "agent_session_id")
    _text(obj, "platform_source")
    _epoch(obj, "started_at_epoch")
    if obj.get("ended_at_epoch") is not None:
        _epoch(obj, "ended_at_epoch")
    columns = {}
    for key, value in obj.items():
        if key in ("record", "project"):
            continue
        if not _scalar(value):
            raise ValidationError(f"session field {key} must be text, a number or null")
        columns[key] = value
    return TransferSession(project, columns)


def _parse_item(obj: dict[str, Any]) -> TransferItem:
    uuid = _text(obj, "uuid")
    platform = _opt_text(obj, "platform_source")
    session = obj.get("session")
    agent = None
    if session is not None:
        if not (isinstance(session, list) and len(session) == 2 and all(isinstance(s, str) and s for s in session)):
            raise ValidationError("session must be [platform_source, agent_session_id] or null")
        if session[0] != (platform or "unknown"):
            raise ValidationError(f"session platform {session[0]!r} differs from the item's {platform!r}")
        agent = session[1]
    values = {f.name: _field_value(obj, f) for f in FIELDS if f.name != "platform_source"}
    item = validate_item(NewItem(
        project=_text(obj, "project"), kind=_text(obj, "kind"), type=_text(obj, "type"), **values,
        session=agent, platform_source=platform, created_at_epoch=_epoch(obj, "created_at_epoch"),
    ))
    return TransferItem(
        item=item, uuid=uuid, content_hash=_text(obj, "content_hash"), updated_at_epoch=_epoch(obj, "updated_at_epoch"),
        sources=_sources(obj.get("sources", [])),
        extra={k: v for k, v in obj.items() if k not in _ITEM_FIELDS and k != "record" and _scalar(v)},
    )


def _field_value(obj: dict[str, Any], f: Field) -> Any:
    """A record field of an item line; a field a file of an earlier release does not hold reads as empty."""
    if f.shape == "list":
        value = obj.get(f.name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValidationError(f"{f.name} must be a list of strings")
        return tuple(value)
    if f.shape == "object":
        value = obj.get(f.name, {})
        if not isinstance(value, dict):
            raise ValidationError(f"{f.name} must be an object")
        return value
    if f.shape == "count":
        value = obj.get(f.name)
        if value is not None and not _is_int(value):
            raise ValidationError(f"{f.name} must be a whole number or null")
        return value
    return _opt_text(obj, f.name)


def _sources(value: Any) -> tuple[tuple[str, str, str, int], ...]:
    if not isinstance(value, list):
        raise ValidationError("sources must be a list")
    out = []
    for src in value:
        if not isinstance(src, dict):
            raise ValidationError("each source must be an object")
        out.append((_text(src, "source_type"), _text(src, "source_table"), _text(src, "source_id"),
                    _epoch(src, "created_at_epoch")))
    return tuple(out)


def _text(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{name} must be non-empty text")
    return value


def _opt_text(obj: dict[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise ValidationError(f"{name} must be text or null")
    return value


def _epoch(obj: dict[str, Any], name: str) -> int:
    value = obj.get(name)
    if not _is_int(value) or value < 0:
        raise ValidationError(f"{name} must be milliseconds since 1970 (a whole number >= 0)")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float)
