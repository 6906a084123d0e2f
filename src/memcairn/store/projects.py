"""Projects and sessions of the store: ids made on first use, merges, and the projects table read at most once every
``PROJECTS_TTL`` seconds. Mixed into ``Store`` so the store stays the only owner of connections and SQL."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from memcairn.core.clock import now_ms
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import CONTROL_CHARACTER
from memcairn.store.db import atomic
from memcairn.store.records import ProjectInfo

PROJECTS_TTL = 1.0  # seconds a read of the projects table serves (see Store.project_rows)


class ProjectsMixin:
    _conn: sqlite3.Connection
    _project_ids: dict[str, int]
    _projects_seen: tuple[float, tuple[tuple[int, str, str | None], ...]] | None

    def _project_id(self, conn: sqlite3.Connection, name: str) -> int:
        """The id of the project ``name``, created if new. A new name may not hold a control character (one an
        earlier release stored keeps working)."""
        cached = self._project_ids.get(name)
        if cached is not None:
            return cached
        if CONTROL_CHARACTER.search(name):
            known = conn.execute("SELECT id FROM projects WHERE name = ?", (name,)).fetchone()
            if known is None:
                raise ValidationError(f"project name {name!r} contains a control character (a newline, tab or "
                                      "NUL...); use printable text")
        row = conn.execute(
            "INSERT INTO projects(name, created_at_epoch) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET name = excluded.name RETURNING id",
            (name, now_ms()),
        ).fetchone()
        self._project_ids[name] = row[0]
        self._projects_seen = None  # maybe a new project
        return row[0]

    def _session_id(self, conn: sqlite3.Connection, project_id: int, agent_session_id: str,
                    platform_source: str, started: int) -> int:
        row = conn.execute(
            "INSERT INTO sessions(project_id, agent_session_id, platform_source, started_at_epoch) "
            "VALUES (?, ?, ?, ?) ON CONFLICT(platform_source, agent_session_id) DO NOTHING RETURNING id",
            (project_id, agent_session_id, platform_source, started),
        ).fetchone()
        if row is not None:
            return row[0]
        return conn.execute(
            "SELECT id FROM sessions WHERE platform_source = ? AND agent_session_id = ?",
            (platform_source, agent_session_id),
        ).fetchone()[0]

    def ensure_session(self, agent_session_id: str, project: str, platform_source: str = "unknown",
                       started_at_epoch: int | None = None) -> int:
        with atomic(self._conn) as conn:
            pid = self._project_id(conn, project)
            return self._session_id(conn, pid, agent_session_id, platform_source, started_at_epoch or now_ms())

    def end_session(self, agent_session_id: str, platform_source: str = "unknown", status: str = "completed",
                    ended_at_epoch: int | None = None) -> bool:
        with atomic(self._conn) as conn:
            return self._close_session(conn, agent_session_id, platform_source, status, ended_at_epoch or now_ms())

    @staticmethod
    def _close_session(conn: sqlite3.Connection, agent_session_id: str, platform_source: str, status: str,
                       ended_at_epoch: int) -> bool:
        """Set a session's end status and time inside the caller's transaction; False when there is none."""
        cur = conn.execute(
            "UPDATE sessions SET status = ?, ended_at_epoch = ? WHERE platform_source = ? AND agent_session_id = ?",
            (status, int(ended_at_epoch), platform_source, agent_session_id),
        )
        return cur.rowcount > 0

    def merge_project(self, source: str, into: str) -> None:
        """Record that ``source`` was renamed or merged into ``into``; its memories answer to both. Content the
        user deleted under ``source`` stays deleted under ``into`` too: ``_insert`` reads the marks of every
        project merged into an item's project (see `_is_forgotten`), so no mark is copied here."""
        if source == into:
            raise ValidationError("a project cannot be merged into itself")
        with atomic(self._conn) as conn:
            if not conn.execute("SELECT 1 FROM projects WHERE name = ?", (source,)).fetchone():
                raise NotFoundError(f"no project named {source!r}; see `memcairn stats` for the list")
            self._project_id(conn, into)
            conn.execute("UPDATE projects SET merged_into_project = ? WHERE name = ?", (into, source))
        self._projects_seen = None

    def projects(self) -> list[ProjectInfo]:
        rows = self._conn.execute(
            "SELECT p.name, p.merged_into_project, COUNT(m.id), MAX(m.created_at_epoch) FROM projects p "
            "LEFT JOIN memory_items m ON m.project_id = p.id GROUP BY p.id ORDER BY p.name"
        ).fetchall()
        return [ProjectInfo(r[0], r[1], r[2], r[3]) for r in rows]

    def set_project_root(self, name: str, root: str | None) -> None:
        """Record where the project ``name``'s working directory is on this machine (None: where each memory was
        captured, the default); the freshness check reads its files there."""
        with atomic(self._conn) as conn:
            if not conn.execute("SELECT 1 FROM projects WHERE name = ?", (name,)).fetchone():
                raise NotFoundError(f"no project named {name!r}; see `memcairn stats` for the list")
            conn.execute("UPDATE projects SET root = ? WHERE name = ?", (root, name))

    def project_roots(self) -> dict[str, str]:
        """Project name -> its recorded root: its own, else that of the project it was merged into."""
        rows = self._conn.execute("SELECT name, merged_into_project, root FROM projects").fetchall()
        into = {name: merged for name, merged, _ in rows}
        own = {name: root for name, _, root in rows if root}
        if not own:
            return {}
        out = {}
        for name in into:
            at, hops = name, 0
            while at is not None and at not in own and hops < 32:
                at, hops = into.get(at), hops + 1
            if at is not None and at in own:
                out[name] = own[at]
        return out

    def project_names(self) -> list[str]:
        """Every project's name, sorted (cheap: no counting, unlike ``projects``)."""
        return sorted(name for _, name, _ in self.project_rows())

    def project_rows(self, wanted: Sequence[str] = ()) -> tuple[tuple[int, str, str | None], ...]:
        """(id, name, merged_into_project) of every project: every search asks for these several times, so
        they are read at most every ``PROJECTS_TTL`` seconds, at once after this store added or merged a
        project, and again when one of the ``wanted`` names is missing (another process may have added it).
        A merge made by another process is therefore seen within ``PROJECTS_TTL``."""
        seen = self._projects_seen
        now = time.monotonic()
        if seen is not None and now - seen[0] < PROJECTS_TTL:
            names = {name for _, name, _ in seen[1]}
            if all(w in names for w in wanted):
                return seen[1]
        rows = tuple(
            (r[0], r[1], r[2]) for r in self._conn.execute("SELECT id, name, merged_into_project FROM projects")
        )
        self._projects_seen = (now, rows)
        return rows

    def resolve_projects(self, names: Sequence[str]) -> list[tuple[int, str]]:
        """(id, name) of the named projects and of every project merged into them (transitively)."""
        rows = self.project_rows(names)
        wanted = set(names)
        merged_into = {name: into for _, name, into in rows}
        found = []
        for pid, row_name, _ in rows:
            name, hops = row_name, 0
            while name is not None and hops < 32:
                if name in wanted:
                    found.append((pid, row_name))
                    break
                name, hops = merged_into.get(name), hops + 1
        return found

    def resolve_project_ids(self, names: Sequence[str]) -> list[int]:
        return [pid for pid, _ in self.resolve_projects(names)]
