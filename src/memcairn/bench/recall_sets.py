"""The data sets of ``memcairn bench recall``: each one or more QA files with the transcripts they ask about.

A set is given as ``[NAME=]QA.json[,QA2.json...]:TRANSCRIPTS[,TRANSCRIPTS2...]`` (``--set``, repeatable); its
name defaults to the first QA file's name. Every session is filed under a project of its own, so that a question
is asked, and its SessionStart context read, where a developer of that project would ask it:

- a session a question names (``session``: the transcript's file name, with or without ``.jsonl``, or the
  session id recorded inside it) goes under that question's ``project`` when it gives one, else under the name
  of its file; a session no question names, under the name of its file;
- a question is asked in its ``project`` or its session's project; a question naming neither, in every project
  of its set.

A ``<session>/subagents/`` file goes with its session. A QA file's question ids need only be unique in its set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from memcairn.bench.recall_facts import Question, load_questions
from memcairn.transfer.transcript_files import UnsupportedTranscript, transcript_shape, transcripts_under

SESSION_ID_LINES = 200  # lines of a JSON Lines transcript read for the session ids it records


@dataclass
class DataSet:
    name: str
    qa: list[Path]
    transcripts: list[Path]
    files: list[Path] = field(default_factory=list)
    projects: dict[Path, str] = field(default_factory=dict)  # each file's project
    questions: list[Question] = field(default_factory=list)

    @property
    def project_names(self) -> list[str]:
        return sorted(set(self.projects.values()))


def parse_set(spec: str) -> DataSet:
    """``[NAME=]QA.json[,...]:TRANSCRIPTS[,...]`` read as a :class:`DataSet` (paths not checked yet).

    Raises:
        ValueError: no ``.json`` QA file before a colon, or nothing after it.
    """
    name = ""
    head, eq, rest = spec.partition("=")
    if eq and "/" not in head and ":" not in head and not head.endswith(".json"):
        name, spec = head.strip(), rest
    split = next((i for i in range(len(spec)) if spec[i] == ":" and spec[:i].endswith(".json")), -1)
    if split < 0 or not spec[split + 1:].strip():
        raise ValueError(f"--set {spec!r}: expected QA.json[,QA2.json]:TRANSCRIPTS[,MORE] (QA files end in .json; "
                         "transcripts are files or folders)")
    qa = [Path(p).expanduser() for p in spec[:split].split(",") if p.strip()]
    transcripts = [Path(p).expanduser() for p in spec[split + 1:].split(",") if p.strip()]
    return DataSet(name or qa[0].stem, qa, transcripts)


def transcript_files(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for every transcript under it (as ``memcairn import transcripts``)
    and for each Gemini CLI chat (``*.json``) directly in it."""
    out: list[Path] = []
    for path in paths:
        path = Path(path).expanduser().absolute()
        if path.is_dir():
            out += transcripts_under(path)
            out += [p for p in sorted(path.glob("*.json")) if p not in out and _shape(p) == "gemini-cli"]
        elif path.is_file():
            out.append(path)
        else:
            raise ValueError(f"{path} does not exist; give transcript files (*.jsonl) or directories")
    return out


def _shape(path: Path) -> str | None:
    try:
        return transcript_shape(path)
    except (OSError, UnsupportedTranscript):
        return None


def _session_file(path: Path) -> Path:
    """The session file a file belongs to: a subagent's is its session's ``<dir>/<session>.jsonl``."""
    if path.parent.name == "subagents":
        return path.parent.parent.with_suffix(".jsonl")
    return path


def _stem(path: Path) -> str:
    return path.name.removesuffix(".jsonl").removesuffix(".json")


def session_ids(path: Path) -> set[str]:
    """The session ids ``path`` records (Claude Code's ``sessionId``, Codex's ``session_meta`` id, Gemini's)."""
    ids: set[str] = set()
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
            sid = data.get("sessionId") if isinstance(data, dict) else None
            return {sid} if isinstance(sid, str) else set()
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, raw in enumerate(fh):
                if n >= SESSION_ID_LINES:
                    break
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(entry, dict):
                    continue
                payload = entry.get("payload")
                for sid in (entry.get("sessionId"),
                            payload.get("id") if entry.get("type") == "session_meta" and isinstance(payload, dict)
                            else None):
                    if isinstance(sid, str) and sid:
                        ids.add(sid)
    except (OSError, ValueError):
        pass
    return ids


def prepare(sets: Sequence[DataSet]) -> list[DataSet]:
    """Each set with its questions loaded, its transcript files found and every file given its project.

    Raises:
        ValueError: a bad QA file, a set without transcripts, two sets with one name, a question naming a session
            none of its set's files holds, or a session two questions (or sets) file under different projects.
    """
    out: list[DataSet] = []
    owner: dict[Path, str] = {}  # project of every file over all sets
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise ValueError(f"two data sets share a name ({', '.join(names)}); name them: --set NAME=QA.json:DIR")
    for given in sets:
        questions = [replace(q, dataset=given.name) for q in load_questions(given.qa)]
        files = transcript_files(given.transcripts)
        if not files:
            where = ", ".join(map(str, given.transcripts))
            raise ValueError(f"set {given.name}: no transcript files (*.jsonl) in {where}")
        by_name: dict[str, Path] = {}
        for f in files:
            session = _session_file(f)
            by_name.setdefault(_stem(session), session)
            if session == f:
                for sid in session_ids(f):
                    by_name.setdefault(sid, session)
        chosen: dict[Path, str] = {}
        for q in questions:
            if q.session is None:
                continue
            session = by_name.get(q.session)
            if session is None:
                raise ValueError(f"set {given.name}, question {q.id}: session {q.session!r} is in none of its "
                                 "transcripts (give the file name or the session id it records)")
            project = q.project or chosen.get(session) or _stem(session)
            if chosen.get(session, project) != project:
                raise ValueError(f"set {given.name}, question {q.id}: session {q.session!r} is filed under "
                                 f"{chosen[session]!r} by another question, not {project!r}")
            chosen[session] = project
        projects = {f: chosen.get(_session_file(f)) or _stem(_session_file(f)) for f in files}
        for f, project in projects.items():
            if owner.setdefault(f, project) != project:
                raise ValueError(f"{f} is in two sets under different projects ({owner[f]!r}, {project!r})")
        asked = []
        for q in questions:
            project = q.project or (chosen.get(by_name[q.session]) if q.session else None)
            asked.append(replace(q, project=project))
        out.append(DataSet(given.name, given.qa, given.transcripts, files, projects, asked))
    return out


def single(qa: Sequence[Path], transcripts: Sequence[Path]) -> DataSet:
    """Today's one-set form: QA files and transcripts given apart."""
    return DataSet(Path(qa[0]).stem, list(qa), list(transcripts))
