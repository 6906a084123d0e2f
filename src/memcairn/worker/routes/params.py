"""Reading a request: its JSON body, its query parameters, its path id, and the worker's shared state."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import MAX_ITEM_ID
from memcairn.worker.fields import parse_json
from memcairn.worker.state import WorkerState


def state_of(request: Request) -> WorkerState:
    return request.app.state.worker


async def read_json(request: Request) -> dict[str, Any]:
    return parse_json(await request.body())


def raw_param(request: Request, name: str) -> str | None:
    """The one value of a single-valued parameter as sent (blank included); None when absent.

    Raises:
        ValidationError: the parameter is given more than once (which value was meant cannot be known).
    """
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise ValidationError(f"{name} was given {len(values)} times; give it once")
    return values[0] if values else None


def param(request: Request, *names: str) -> str | None:
    """The value of the first of ``names`` given and not blank, stripped; None when absent."""
    for name in names:
        value = raw_param(request, name)
        if value is not None and value.strip():
            return value.strip()
    return None


def params(request: Request, *names: str) -> list[str] | None:
    """Every value of the parameters, repeated or comma-separated; None when absent."""
    out: list[str] = []
    for name in names:
        for value in request.query_params.getlist(name):
            out += [v.strip() for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(out)) or None


def project_names(request: Request) -> list[str] | None:
    """``projects`` is a comma-separated list; each ``project`` is one whole name, so a name holding a comma
    (a directory named ``client,server``) is not read as other projects."""
    whole = [v.strip() for v in request.query_params.getlist("project") if v.strip()]
    return list(dict.fromkeys([*(params(request, "projects") or []), *whole])) or None


def flag(request: Request, name: str) -> bool:
    value = (request.query_params.get(name) or "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValidationError(f"{name} must be true or false, got {value!r}")


def answer_format(request: Request) -> str:
    value = param(request, "format") or "index"
    if value not in ("index", "json"):
        raise ValidationError(f"format must be index or json, got {value!r}")
    return value


def path_id(request: Request) -> int:
    item_id = request.path_params["id"]
    if not 0 < item_id <= MAX_ITEM_ID:
        raise NotFoundError(f"no memory with id {item_id}")
    return item_id
