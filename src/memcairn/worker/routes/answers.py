"""JSON answers, and the one mapping of errors to them every route goes through (``endpoint``).

Errors are ``{"error", "detail"}``: 400 for a malformed request (``ValidationError``), 404 for an unknown item,
503 while starting or stopping, 507 ``disk_full`` when the disk is full, 500 ``store_damaged`` while the file
fails SQLite's check (writes refused; ``/api/health`` names the fix), else a generic 500 (trace in the log only).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memcairn.core.errors import (
    DiskFullError,
    MemcairnError,
    NotFoundError,
    StoreDamagedError,
    StoreError,
    ValidationError,
)
from memcairn.store.db import describe_open_error, error_kind
from memcairn.store.integrity import damaged_file_advice
from memcairn.worker import remote_reads
from memcairn.worker.routes.disk_full import on_disk_full
from memcairn.worker.state import NotReady, WorkerState

log = logging.getLogger("memcairn.worker")


def _clean(value: Any) -> Any:
    """NaN and infinities (which strict JSON cannot carry) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=False, allow_nan=False, default=str, separators=(",", ":"))
        except ValueError:
            text = json.dumps(_clean(content), ensure_ascii=False, allow_nan=False, default=str,
                              separators=(",", ":"))
        return text.encode("utf-8")


def error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSON:
    return JSON({"error": code, "detail": detail}, status_code=status, headers=headers)


def team_failed(exc: remote_reads.TeamReadFailed) -> Response:
    """Not connected: a request this worker cannot answer (400); else the team server failed it (502: this
    worker is fine, so no 503 that clients read as a worker still starting)."""
    if isinstance(exc, remote_reads.NotConnected):
        return error(400, "invalid_request", str(exc))
    return error(502, remote_reads.FALLBACK_REASON, str(exc))


Endpoint = Callable[[Request], Awaitable[Response]]


def endpoint(fn: Endpoint) -> Endpoint:
    """Translate errors into JSON answers; nothing but a generic message leaves the process on a bug."""

    @functools.wraps(fn)
    async def wrapper(request: Request) -> Response:
        try:
            return await fn(request)
        except NotReady as exc:
            return error(503, exc.error, exc.detail, {"Retry-After": "1"})
        except ValidationError as exc:
            return error(400, "invalid_request", str(exc))
        except NotFoundError as exc:
            return error(404, "not_found", str(exc))
        except OverflowError:
            return error(400, "invalid_request", "a number in the request is out of range")
        except DiskFullError as exc:
            log.error("disk full on %s %s: %s", request.method, request.url.path, exc)
            return await on_disk_full(request, str(exc)) or error(507, "disk_full", str(exc))
        except StoreDamagedError as exc:
            return error(500, "store_damaged", str(exc))
        except StoreError as exc:
            log.error("store error on %s %s: %s", request.method, request.url.path, exc)
            return error(500, "store_error", str(exc))
        except sqlite3.DatabaseError as exc:  # a state of the file (a damaged page, a full disk) or a defect
            answer = _database_error(request, exc)
            if answer is not None:
                return answer
            log.exception("unexpected error on %s %s", request.method, request.url.path)
            return error(500, "internal_error", "unexpected error; the details are in the worker log")
        except MemcairnError as exc:
            log.error("error on %s %s: %s", request.method, request.url.path, exc)
            return error(500, "error", str(exc))
        except Exception:
            log.exception("unexpected error on %s %s", request.method, request.url.path)
            return error(500, "internal_error", "unexpected error; the details are in the worker log")

    return wrapper


def _database_error(request: Request, exc: sqlite3.DatabaseError) -> Response | None:
    """The answer for an SQLite error that names a state of the file, else None. Damage is reported to the
    store, whose upkeep checks the file and repairs the keyword index at once."""
    state: WorkerState = request.app.state.worker
    runtime = state.runtime
    kind = runtime.store.note_error(exc) if runtime is not None else error_kind(exc)
    path = str(state.settings.db_path)
    if kind == "full":
        log.error("disk full on %s %s: %s", request.method, request.url.path, exc)
        return error(507, "disk_full", describe_open_error(path, exc))
    if kind == "corrupt":
        log.error("damaged database on %s %s: %s", request.method, request.url.path, exc)
        return error(500, "store_damaged", f"{path} is damaged ({exc}); the worker checks it now; "
                     f"{damaged_file_advice(path)}")
    if kind == "missing_fts":
        log.error("keyword index missing on %s %s: %s", request.method, request.url.path, exc)
        return error(500, "keyword_index_damaged", f"the keyword index is missing ({exc}); the worker rebuilds "
                     "it now, else `memcairn doctor --fix`")
    return None
