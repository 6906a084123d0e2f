"""Hook events put in the durable queue as the ingest route does (admission, then the queue), for the capture
pipeline's tests."""

from __future__ import annotations

from memcairn.capture.admission import admit
from memcairn.store import Store
from memcairn.wire.config import Settings

SESSION = "sess-1"


def body(event: str, **fields: object) -> dict[str, object]:
    return {"event": event, "session_id": SESSION, "cwd": "/work/shop", "project": "shop", "projects": ["shop"],
            "platform_source": "claude-code", **fields}


QUEUE = {"session_start": "session_init", "user_prompt": "session_init", "tool_use": "observation",
         "stop": "summarize", "session_end": "summarize"}


def send(store: Store, settings: Settings, event: str, **fields: object) -> tuple[int, bool] | None:
    """What the ingest route does: admission, then the durable queue."""
    admitted = admit(QUEUE[event], body(event, **fields), settings)
    if admitted.body is None:
        return None
    tool_use_id = fields.get("tool_use_id")
    return store.enqueue_ingest_event(SESSION, "claude-code", QUEUE[event], admitted.body,
                                      tool_use_id if isinstance(tool_use_id, str) else None)


def edit(tool_use_id: str, path: str = "/work/shop/cart.py") -> dict[str, object]:
    return {"tool_name": "Edit", "tool_use_id": tool_use_id,
            "tool_input": {"file_path": path, "old_string": "total = 0", "new_string": "total = Decimal(0)"},
            "tool_response": {"filePath": path, "oldString": "total = 0", "newString": "total = Decimal(0)"}}
