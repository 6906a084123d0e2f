"""API keys and the audit log.

A key is ``mck_<id>_<secret>``: the id is public (it names the key in lists, the audit log and revocation),
the whole key is shown once and stored only as HMAC-SHA256 under the server secret (``secret.py``), so a copy
of the database alone lets nobody forge or test keys offline. A key belongs to one tenant, holds scopes
(``memories:read``, ``memories:write``, ``admin``), may be pinned to one project, may expire, and records its
last use (at most once a minute, so reads do not become writes). Every write and every administrative action
is recorded in ``audit_log`` with the key (or ``cli``), the action and the request id.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.pgstore.audit import Actor, audit
from memcairn.pgstore.db import LOOP_LOCK_TIMEOUT, Pool, Unauthorized, forget_keys, hold_key, tenant_transaction
from memcairn.pgstore.waits import may_wait

SCOPES = ("memories:read", "memories:write", "admin")
DEFAULT_SCOPES = ("memories:read", "memories:write")
PREFIX = "mck"
_KEY = re.compile(r"^mck_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})$")
_KEY_ID = re.compile(r"[0-9a-f]{12}")
_RELATIVE = re.compile(r"^(\d{1,6})([mhd])$")


__all__ = ["Unauthorized"]  # defined in ``db`` (a tenant transaction refuses a key revoked meanwhile)


@dataclass(frozen=True)
class KeyInfo:
    id: str
    tenant_id: int
    scopes: tuple[str, ...]
    project_id: int | None
    digest: str = field(default="", repr=False, compare=False)  # what enters the tenant (``db.act_as``)

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


def digest(secret: bytes, key: str) -> str:
    return hmac.new(secret, key.encode("utf-8"), hashlib.sha256).hexdigest()


def parse_scopes(text: str | Sequence[str] | None) -> tuple[str, ...]:
    parts = text.split(",") if isinstance(text, str) else list(text or DEFAULT_SCOPES)
    scopes = tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise ValidationError(f"unknown scope {', '.join(unknown) or '(none)'}; use one or more of: {', '.join(SCOPES)}"
                              " (comma-separated)")
    return scopes


def parse_expiry(text: str | None, *, now: datetime | None = None) -> datetime | None:
    """``30d``, ``12h``, ``90m`` from now, or an ISO date/time (UTC unless it names a zone); None for never."""
    if not text:
        return None
    now = now or datetime.now(UTC)
    relative = _RELATIVE.match(text.strip())
    if relative:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[relative.group(2)]
        return now + timedelta(**{unit: int(relative.group(1))})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValidationError(f"expiry {text!r} is neither a duration (30d, 12h, 90m) nor an ISO date/time "
                              "(2027-01-31 or 2027-01-31T12:00:00+00:00)") from None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    if when <= now:
        raise ValidationError(f"expiry {text!r} is in the past")
    return when


def tenant_named(conn: psycopg.Connection, name: str, *, create: bool = False) -> int:
    """The id of the tenant named ``name``, made first with ``create``; NotFoundError when there is none (the
    owner's connection: tenants have no row-level security)."""
    with conn.transaction():
        if create:
            conn.execute("INSERT INTO tenants (name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (name,))
        row = conn.execute("SELECT id FROM tenants WHERE name = %s", (name,)).fetchone()
    if not row:
        raise NotFoundError(f"no tenant {name!r}")
    return int(row[0])


def _new_key() -> tuple[str, str]:
    key_id = secrets.token_hex(6)
    return key_id, f"{PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"


def _insert_key(cur: psycopg.Cursor, secret: bytes, tenant_id: int, scopes: Sequence[str], project_id: int | None,
                expires_at: datetime | None, label: str | None) -> tuple[str, str]:
    key_id, key = _new_key()
    cur.execute("INSERT INTO api_keys (id, tenant_id, project_id, digest, scopes, label, expires_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (key_id, tenant_id, project_id, digest(secret, key), list(scopes), label, expires_at))
    return key_id, key


def create_key(conn: psycopg.Connection, secret: bytes, tenant: str, *, scopes: Sequence[str] = DEFAULT_SCOPES,
               project: str | None = None, expires_at: datetime | None = None, label: str | None = None
               ) -> dict[str, Any]:
    """Create a key for the tenant named ``tenant``, made when new (the owner's connection: the command line).
    Returns the key, shown this once."""
    if not tenant.strip() or len(tenant) > 200 or "\x00" in tenant:
        raise ValidationError("tenant must be a name of 1 to 200 characters (no NUL)")
    tenant_id = tenant_named(conn, tenant.strip(), create=True)
    made = create_tenant_key(conn, secret, tenant_id, scopes=scopes, project=project, expires_at=expires_at,
                             label=label)
    return {**made, "tenant": tenant.strip()}


def create_tenant_key(conn: psycopg.Connection, secret: bytes, tenant_id: int, *,
                      scopes: Sequence[str] = DEFAULT_SCOPES, project: str | None = None,
                      expires_at: datetime | None = None, label: str | None = None,
                      actor: Actor | None = None) -> dict[str, Any]:
    """Create a key of tenant ``tenant_id`` (an admin key over HTTP acts for its own tenant: ``actor``)."""
    scopes = parse_scopes(scopes)
    if project is not None and (not 1 <= len(project.strip()) <= 200 or "\x00" in project):
        raise ValidationError("project must be a name of 1 to 200 characters (no NUL)")
    if label is not None and "\x00" in label:
        raise ValidationError("label contains a NUL character")
    with tenant_transaction(conn, tenant_id) as cur:
        project_id = None
        if project:
            cur.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                        (tenant_id, project.strip()))
            row = cur.execute("SELECT id FROM projects WHERE tenant_id = %s AND name = %s",
                              (tenant_id, project.strip())).fetchone()
            project_id = row[0] if row else None
        new_id, key = _insert_key(cur, secret, tenant_id, scopes, project_id, expires_at, label)
        audit(cur, tenant_id, "keys.create", actor, new_id)
    return {"id": new_id, "key": key, "scopes": list(scopes), "project": project,
            "expires_at": expires_at.isoformat() if expires_at else None}


def _key_row(conn: psycopg.Connection, key_id: str, tenant_id: int | None) -> tuple[Any, ...] | None:
    """A key's row found by its id: within ``tenant_id`` (an admin key), else as the owner (the command line,
    whose policy reaches every key)."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("a key is looked up in a transaction of its own")
    if not _KEY_ID.fullmatch(key_id):
        return None
    query = ("SELECT id, tenant_id, project_id, scopes, expires_at, revoked_at, last_used_at FROM api_keys"
             " WHERE id = %s")
    if tenant_id is None:
        with conn.transaction():
            return conn.execute(query, (key_id,)).fetchone()
    with tenant_transaction(conn, tenant_id) as cur:
        return cur.execute(query + " AND tenant_id = %s", (key_id, tenant_id)).fetchone()


_LIST = ("SELECT k.id, k.scopes, p.name, k.label, k.created_at, k.expires_at, k.revoked_at, k.last_used_at,"
         " k.replaced_by FROM api_keys k LEFT JOIN projects p ON p.id = k.project_id AND p.tenant_id = k.tenant_id"
         " WHERE k.tenant_id = %s ORDER BY k.created_at, k.id")


def list_keys(conn: psycopg.Connection, tenant: str | None = None, *, tenant_id: int | None = None
              ) -> list[dict[str, Any]]:
    """Keys (never their secrets) of one tenant, or of every tenant when the owner asks without one."""
    if tenant_id is not None:
        tenants = [(tenant_id, None)]
    elif tenant is not None:
        tenants = [(tenant_named(conn, tenant), tenant)]
    else:
        with conn.transaction():
            tenants = [(r[0], r[1]) for r in conn.execute("SELECT id, name FROM tenants ORDER BY name")]
    out = []
    for tid, name in tenants:
        with tenant_transaction(conn, tid) as cur:
            for row in cur.execute(_LIST, (tid,)).fetchall():
                key_id, scopes, project, label, created, expires, revoked, used, replaced = row
                status = "revoked" if revoked else "expired" if expires and expires <= datetime.now(UTC) else "active"
                out.append({"id": key_id, "tenant": name, "scopes": list(scopes), "project": project,
                            "label": label, "status": status, "created_at": _iso(created),
                            "expires_at": _iso(expires), "revoked_at": _iso(revoked), "last_used_at": _iso(used),
                            "replaced_by": replaced})
    return out


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def revoke_key(conn: psycopg.Connection, key_id: str, *, tenant_id: int | None = None,
               actor: Actor | None = None) -> None:
    """Revoke ``key_id``; with ``tenant_id`` (an admin key) only a key of that tenant."""
    row = _key_row(conn, key_id, tenant_id)
    if row is None:
        raise NotFoundError(f"no key {key_id!r}")
    with tenant_transaction(conn, row[1]) as cur:
        cur.execute("UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE tenant_id = %s AND id = %s",
                    (row[1], key_id))
        audit(cur, row[1], "keys.revoke", actor, key_id)


MAX_GRACE = timedelta(days=30)


def parse_grace(text: str | None) -> timedelta:
    """How long a rotated key keeps working: ``0`` (default: not at all), ``24h``, ``90m``, ``7d``; at most 30 days."""
    if text is None or not text.strip() or text.strip() == "0":
        return timedelta(0)
    relative = _RELATIVE.match(text.strip())
    if not relative:
        raise ValidationError(f"grace {text!r} is not a duration: use 0, 90m, 24h or 7d")
    unit = {"m": "minutes", "h": "hours", "d": "days"}[relative.group(2)]
    grace = timedelta(**{unit: int(relative.group(1))})
    if grace > MAX_GRACE:
        raise ValidationError(f"grace {text!r} is over 30 days; rotate with a shorter overlap")
    return grace


def rotate_key(conn: psycopg.Connection, secret: bytes, key_id: str, *, tenant_id: int | None = None,
               actor: Actor | None = None, grace: timedelta = timedelta(0)) -> dict[str, Any]:
    """A new key with the same tenant, scopes, pin and expiry. Without ``grace`` the old one is revoked in the
    same transaction; with it the old one keeps working until then (its expiry, never later than it was), so
    clients can be moved over without an outage."""
    row = _key_row(conn, key_id, tenant_id)
    if row is None:
        raise NotFoundError(f"no key {key_id!r}")
    _, tid, project_id, scopes, expires_at, revoked_at, _ = row
    if revoked_at is not None:
        raise ValidationError(f"key {key_id!r} is revoked; create a new one instead")
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise ValidationError(f"key {key_id!r} has expired; create a new one instead")
    with tenant_transaction(conn, tid) as cur:
        new_id, key = _insert_key(cur, secret, tid, scopes, project_id, expires_at, None)
        if grace > timedelta(0):
            old_until = cur.execute(
                "UPDATE api_keys SET expires_at = least(expires_at, now() + %s), replaced_by = %s"
                " WHERE tenant_id = %s AND id = %s RETURNING expires_at", (grace, new_id, tid, key_id)).fetchone()
        else:
            cur.execute("UPDATE api_keys SET revoked_at = now(), replaced_by = %s WHERE tenant_id = %s AND id = %s",
                        (new_id, tid, key_id))
            old_until = None
        audit(cur, tid, "keys.rotate", actor, f"{key_id}->{new_id}")
    return {"id": new_id, "key": key, "replaces": key_id, "scopes": list(scopes),
            "expires_at": _iso(expires_at), "replaced_works_until": _iso(old_until[0]) if old_until else None}


def key_refusal(conn: psycopg.Connection, key: KeyInfo) -> str | None:
    """Why the key may no longer be used (revoked, expired or gone), or None while it may: what an open stream
    checks before it delivers (the owner's function finds the key by its digest)."""
    with conn.transaction():
        row = conn.execute("SELECT revoked_at, expires_at, now() FROM memcairn_enter_tenant(%s)",
                           (key.digest,)).fetchone()
    if row is None:
        return f"the API key {key.id} no longer exists"
    revoked_at, expires_at, now = row
    if revoked_at is not None:
        return f"the API key {key.id} was revoked"
    if expires_at is not None and expires_at <= now:
        return f"the API key {key.id} expired at {expires_at.isoformat()}"
    return None


class KeyStates:
    """Keys' refusals as last read, shared by a process's open streams: one row read a second per key however
    many streams it has open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[str, tuple[float, str | None]] = {}

    def refusal(self, pool: Pool, key: KeyInfo, *, max_age: float) -> str | None:
        """``key_refusal``, read again unless a reading younger than ``max_age`` seconds is at hand."""
        key_id = key.id
        with self._lock:
            seen = self._read.get(key_id)
        if seen is not None and time.monotonic() - seen[0] < max_age:
            return seen[1]
        started = time.monotonic()
        with pool.connection() as conn:
            found = key_refusal(conn, key)
        with self._lock:
            if len(self._read) >= _STATES_KEEP:
                self._read.clear()
            self._read[key_id] = (started, found)
        return found


KEY_STATES = KeyStates()


def authenticate(conn: psycopg.Connection, secret: bytes, presented: str | None) -> KeyInfo:
    """The key behind an ``Authorization: Bearer`` value, or Unauthorized saying why (a transaction of its own)."""
    with conn.transaction(), conn.cursor() as cur:
        return authenticate_in(cur, secret, presented)


_STATES_KEEP = 10_000


def authenticate_in(cur: psycopg.Cursor, secret: bytes, presented: str | None) -> KeyInfo:
    """``authenticate`` in the open transaction, which then acts for the key's tenant: a request's reads follow
    its key check on the same connection, in one snapshot. The key is found by its digest and its tenant entered
    in one call of the owner's ``memcairn_enter_tenant``; this context holds the digest from then on
    (``db.hold_key``), so the request's other transactions enter the same tenant the same way."""
    forget_keys()  # whatever this context held before, it holds no key unless this one is valid
    if not presented:
        raise Unauthorized("an API key is required: send Authorization: Bearer <key> "
                           "(create one with `memcairn server keys create --tenant NAME`)")
    match = _KEY.match(presented.strip())
    if not match:
        raise Unauthorized("the API key is malformed: it looks like mck_<id>_<secret>")
    if not may_wait():  # on the event loop a lock is waited for only briefly (``db.LOOP_LOCK_TIMEOUT``)
        cur.execute("SELECT set_config('lock_timeout', %s, true)", (LOOP_LOCK_TIMEOUT,))
    key_digest = digest(secret, presented.strip())
    row = cur.execute("SELECT key_id, tenant_id, project_id, scopes, expires_at, revoked_at, last_used_at, entered"
                      " FROM memcairn_enter_tenant(%s)", (key_digest,)).fetchone()
    if row is None or row[0] != match.group(1):
        raise Unauthorized("the API key is not valid")
    key_id, tenant_id, project_id, scopes, expires_at, revoked_at, last_used, entered = row
    if revoked_at is not None:
        raise Unauthorized(f"the API key {key_id} was revoked")
    if not entered:
        raise Unauthorized(f"the API key {key_id} expired at {expires_at.isoformat() if expires_at else '?'}")
    now = datetime.now(UTC)
    hold_key(tenant_id, key_digest)
    if last_used is None or now - last_used > timedelta(minutes=1):
        # never waits for another request recording the same key's use (its row lock lasts until that request's
        # reads commit): in a pipeline the wait would come at a later statement's fetch, perhaps under a lock of
        # this process the other request waits for (the project copies'), and the two would wait for each other
        cur.execute("UPDATE api_keys SET last_used_at = now() WHERE tenant_id = %s AND id = (SELECT id FROM"
                    " api_keys WHERE tenant_id = %s AND id = %s FOR UPDATE SKIP LOCKED)",
                    (tenant_id, tenant_id, key_id))
    return KeyInfo(key_id, int(tenant_id), tuple(scopes), project_id, key_digest)
