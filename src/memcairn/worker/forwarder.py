"""Remote mode's write side: the worker forwards the memories it stored locally to the team server.

Hooks keep talking to the local worker, which captures and stores exactly as in local mode (the local copy is
the fallback). This thread sends the store's items above the server's watermark (``remote_sync_state``, in the
same SQLite file) in id order, ``BATCH`` at a time, to ``POST /v1/events``. The watermark moves only after the
server acknowledged the batch, so nothing is lost while the server is down: the items wait in the store.

- **No duplicates**: the ``Idempotency-Key`` is derived from the batch's item uuids and content hashes, so a
  retry of an unacknowledged batch is recognised by the server; the server also keeps one item per content
  hash and project, so a batch cut differently after a restart stores nothing twice.
- **Backoff**: a failure (no answer, 5xx) waits 1, 2, 4 ... up to ``MAX_BACKOFF`` seconds; a 429 waits what
  its ``Retry-After`` says.
- **Deletions**: the event the server acknowledged for each item is kept (``remote_sent``); deleting the item
  here (a forget, a delete, the capture pipeline replacing a growing turn's memory with its new version) moves
  it to ``remote_deletions`` by trigger (an item deleted while its batch was on its way is queued by
  ``acknowledge_forwarded``). Every pass first sends what is queued to ``POST /v1/events/forget``, the very
  events sent before (an item edited here since still names what the server stored): the server marks each
  content forgotten in its project (a copy still in its ingest queue is then refused) and deletes the stored
  item, so a forgotten memory does not stay readable there and a replaced one is not kept twice.
- **Edits**: an update of a sent memory marks it (``remote_edited``, by trigger); when the event it would make
  now differs from the one sent, the forwarder sends the pair (``replacements``) and the server swaps the
  versions in one transaction. An
  event the server finds invalid on its own is dropped from the queue (logged); a server without the route
  (404) keeps them queued without holding up new items.
- **Refusals**: a batch the server refuses as invalid (400, e.g. content forgotten on the server) is sent item
  by item; an item refused on its own is passed over and counted (``refused`` in the status), never retried
  for ever. 401/403 (key revoked, scope or pin) stop forwarding until the link is changed: nothing moves.

Remote mode is read from ``$MEMCAIRN_HOME/remote.json`` on every pass, so ``memcairn connect``/``disconnect``
take effect in a running worker within ``IDLE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from memcairn.core.background import BackgroundLoop
from memcairn.core.clock import now_ms
from memcairn.core.errors import ConfigError
from memcairn.store.protocols import RemoteState
from memcairn.wire.team_client import (
    RemoteConfig,
    TeamClient,
    TeamResponse,
    TeamUnavailable,
    error_detail,
    load_remote,
    write_status,
)

log = logging.getLogger("memcairn.forwarder")
BATCH = 100  # the server's limit per request
IDLE_SECONDS = 1.0
MAX_BACKOFF = 60.0
MAX_RETRY_AFTER = 300.0
SEND_TIMEOUT = 10.0


def batch_key(items: list[dict[str, Any]]) -> str:
    """The same items, the same key: what makes a retried batch a replay on the server."""
    digest = hashlib.sha256("\n".join(f"{i['uuid']}:{i['content_hash']}" for i in items).encode()).hexdigest()
    return f"memcairn-fwd-{digest[:48]}"


def as_event(item: dict[str, Any], cfg: RemoteConfig) -> dict[str, Any]:
    event = {"project": cfg.server_project(item["project"]), "kind": item["kind"], "type": item["type"],
             "title": item["title"], "text": item["text"], "session": item["session"],
             "platform": item["platform"], "created_at_epoch": item["created_at_epoch"],
             "anchors": item.get("anchors") or None}  # what it rests on, checked where the code is
    return {k: v for k, v in event.items() if v is not None}


class Forwarder(BackgroundLoop):
    """One daemon thread per worker; ``nudge()`` (after a store write) makes it look at once."""

    thread_name = "memcairn-forwarder"

    def __init__(self, store: RemoteState, home: Path) -> None:
        self.store = store
        self.home = home
        super().__init__()
        self.failures = 0
        self.status: dict[str, Any] = {"mode": "local"}
        self._forwarded = 0
        self._refused = 0
        self._deleted = 0
        self._edited = 0

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.run_once()
            except Exception as exc:  # noqa: BLE001 - the thread must live; the store or the disk may recover
                log.exception("forwarding failed")
                delay = self._failed(f"forwarding failed: {exc}")
            self._wake.clear()
            self._wake.wait(delay) if delay <= IDLE_SECONDS else self._stop.wait(delay)

    def run_once(self) -> float:
        """One pass: send what waits, batch after batch, until caught up or refused; seconds to wait after."""
        try:
            cfg = load_remote(self.home)
        except ConfigError as exc:
            self._set({"mode": "remote", "state": "misconfigured", "last_error": str(exc)})
            return MAX_BACKOFF
        if cfg is None:
            self.status = {"mode": "local"}
            return IDLE_SECONDS
        client = TeamClient(cfg.url, cfg.key, timeout=SEND_TIMEOUT)
        while not self._stop.is_set():
            try:
                refused = self._send_deletions(client, cfg) or self._send_edits(client, cfg)
            except TeamUnavailable as exc:
                return self._failed(f"the team server does not answer: {exc}", cfg)
            if refused is not None and refused.status in (401, 403):
                self._set({**self._base(cfg), "state": "refused", "last_error": f"{refused.status}: "
                           f"{error_detail(refused)}; check the key (`memcairn connect`)"})
                return MAX_BACKOFF
            if refused is not None and refused.status != 404:
                return self._failed(f"{refused.status} from the server on forgetting: {error_detail(refused)}",
                                    cfg)
            mark = self.store.remote_watermark(cfg.url)
            items = self.store.items_to_forward(mark, BATCH)
            if not items:
                self.failures = 0
                self._set({"mode": "remote", "url": cfg.url, "state": "synced", "pending": 0,
                           "last_sync_epoch": now_ms(), "last_error": None})
                return IDLE_SECONDS
            try:
                resp = self._post(client, cfg, items)
            except TeamUnavailable as exc:
                return self._failed(f"the team server does not answer: {exc}", cfg)
            if resp.status in (200, 201, 202):  # 202: queued on the server, durably
                self._acknowledged(cfg, items)
                continue
            if resp.status == 429:
                wait = min(resp.retry_after(self._backoff()), MAX_RETRY_AFTER)
                self._set({**self._base(cfg), "state": "throttled", "retry_in_seconds": wait,
                           "last_error": f"429 from the server; retrying after {wait:g} s"})
                return wait
            if resp.status == 400:
                try:
                    if not self._one_by_one(client, cfg, items):
                        return self._failed("the server refused a batch and did not take its items one by one", cfg)
                except TeamUnavailable as exc:
                    return self._failed(f"the team server does not answer: {exc}", cfg)
                continue
            if resp.status in (401, 403):
                self._set({**self._base(cfg), "state": "refused",
                           "last_error": f"{resp.status}: {error_detail(resp)}; check the key (`memcairn connect`)"})
                return MAX_BACKOFF
            return self._failed(f"{resp.status} from the server: {error_detail(resp)}", cfg)
        return IDLE_SECONDS

    def _send_deletions(self, client: TeamClient, cfg: RemoteConfig) -> TeamResponse | None:
        """Send the queued deletions, ``BATCH`` at a time; the first answer that is not a success, else None.

        Raises:
            TeamUnavailable: no answer (what was not acknowledged stays queued)."""
        while not self._stop.is_set():
            queued = self.store.deletions_to_forward(cfg.url, BATCH)
            if not queued:
                return None
            events = [event for _, _, event in queued]
            resp = client.request("POST", "/v1/events/forget", body={"events": events})
            if resp.status == 400 and len(queued) > 1:  # one invalid event: find it, send the others
                for entry, event in zip(queued, events, strict=True):
                    one = client.request("POST", "/v1/events/forget", body={"events": [event]})
                    if one.status == 400:
                        log.warning("the team server cannot forget memory #%d (%s); dropped", entry[1],
                                    error_detail(one))
                    elif one.status != 200:
                        return one
                    else:
                        self._deleted += 1
                    self.store.deletions_forwarded(cfg.url, [entry[0]])
                continue
            if resp.status == 400:
                log.warning("the team server cannot forget memory #%d (%s); dropped", queued[0][1],
                            error_detail(resp))
            elif resp.status != 200:
                return resp
            else:
                self._deleted += len(queued)
            self.store.deletions_forwarded(cfg.url, [seq for seq, *_ in queued])
        return None

    def _send_edits(self, client: TeamClient, cfg: RemoteConfig) -> TeamResponse | None:
        """Have the server replace the version it holds of each memory edited here since it was sent (when the
        event would differ); the first answer that is not a success, else None.

        Raises:
            TeamUnavailable: no answer (the marks stay)."""
        while not self._stop.is_set():
            marked = self.store.edits_to_forward(cfg.url, BATCH)
            if not marked:
                return None
            changed = []
            for item_id, sent, current in marked:
                now = as_event(current, cfg) if current is not None else None
                if now is None or now == sent or not sent:  # gone (its deletion says so), or nothing to send
                    self.store.edit_forwarded(cfg.url, item_id, None)
                else:
                    changed.append((item_id, sent, now))
            for item_id, sent, now in changed:  # one at a time: an edit is rare, and one bad event stays alone
                resp = client.request("POST", "/v1/events/forget", body={"events": [sent], "replacements": [now]})
                if resp.status == 400:
                    log.warning("the team server cannot take the edit of memory #%d (%s); it keeps the version "
                                "it has", item_id, error_detail(resp))
                    self.store.edit_forwarded(cfg.url, item_id, None)
                elif resp.status != 200:
                    return resp
                else:
                    self.store.edit_forwarded(cfg.url, item_id, now)
                    self._edited += 1
        return None

    def _post(self, client: TeamClient, cfg: RemoteConfig, items: list[dict[str, Any]]) -> TeamResponse:
        return client.request("POST", "/v1/events", body={"events": [as_event(i, cfg) for i in items]},
                              headers={"Idempotency-Key": batch_key(items)})

    def _one_by_one(self, client: TeamClient, cfg: RemoteConfig, items: list[dict[str, Any]]) -> bool:
        for item in items:
            resp = self._post(client, cfg, [item])
            if resp.status == 400:
                self._refused += 1
                log.warning("the team server refused memory #%d (%s); it stays local only", item["id"],
                            error_detail(resp))
            elif resp.status not in (200, 201, 202):
                return False
            self._acknowledged(cfg, [item], refused=resp.status == 400)
        return True

    def _acknowledged(self, cfg: RemoteConfig, items: list[dict[str, Any]], *, refused: bool = False) -> None:
        """The watermark past ``items``; those deleted here meanwhile are queued for deletion there (not an item
        the server refused: it holds nothing of it)."""
        sent = {} if refused else {int(i["id"]): as_event(i, cfg) for i in items}
        self.store.acknowledge_forwarded(cfg.url, items[-1]["id"], sent)
        self._forwarded += len(items)
        self.failures = 0

    def _backoff(self) -> float:
        return min(MAX_BACKOFF, 2.0 ** max(0, self.failures - 1))

    def _failed(self, reason: str, cfg: RemoteConfig | None = None) -> float:
        self.failures += 1
        wait = self._backoff()
        log.warning("%s; retrying in %g s", reason, wait)
        self._set({**(self._base(cfg) if cfg else {"mode": "remote"}), "state": "retrying",
                   "retry_in_seconds": wait, "last_error": reason})
        return wait

    def _base(self, cfg: RemoteConfig) -> dict[str, Any]:
        return {"mode": "remote", "url": cfg.url,
                "pending": self.store.count_to_forward(self.store.remote_watermark(cfg.url)),
                "pending_deletions": self.store.count_deletions_to_forward(cfg.url),
                "last_sync_epoch": self.status.get("last_sync_epoch")}

    def _set(self, status: dict[str, Any]) -> None:
        status = {**status, "forwarded": self._forwarded, "refused": self._refused, "deleted": self._deleted,
                  "edited": self._edited,
                  "updated_epoch": now_ms()}
        if status.get("state") == "synced" and self.status.get("state") == "synced" \
                and self.status.get("forwarded") == status["forwarded"] \
                and self.status.get("deleted") == status["deleted"] \
                and self.status.get("edited") == status["edited"]:
            self.status = {**status, "updated_epoch": self.status.get("updated_epoch")}
            return  # nothing new: no file write every second
        self.status = status
        try:
            write_status(self.home, status)
        except OSError as exc:
            log.warning("cannot write the remote status file: %s", exc)
