"""Prometheus metrics of ``memcairn server`` (``GET /metrics``, prometheus_client's text format): requests by
route template and status, latency histograms, and, read from the database at each scrape, the ingest queue and
the embedding backlog per tenant (counts and ages only, never content) and the connection pool's state.

Who may scrape: the metrics span all tenants, so no tenant's key opens them (an admin key of one tenant would
learn the others' volumes). A peer on the loopback interface may, unless the request came through a proxy
(``Forwarded`` / ``X-Forwarded-For``); from elsewhere only with ``Authorization: Bearer`` and the token in
``MEMCAIRN_SERVER_METRICS_TOKEN``. ``MEMCAIRN_SERVER_METRICS=off`` turns the route off (404).

Several server processes (``--workers``) count into files of one folder (prometheus_client's multiprocess mode,
``PROMETHEUS_MULTIPROC_DIR``, made fresh by ``share_across_processes`` before they start): a scrape, whichever
process takes it, reads the counts of all of them.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from memcairn.core.errors import ConfigError

log = logging.getLogger("memcairn.server")
TOKEN_ENV = "MEMCAIRN_SERVER_METRICS_TOKEN"
SWITCH_ENV = "MEMCAIRN_SERVER_METRICS"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# request latency (time until the answer's head is sent): fine steps where searches and reads fall
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0)

# per tenant: waiting events and the oldest one's age, failed events; items waiting for their vector
_QUEUE = "SELECT tenant_id, pending, oldest_seconds, failed FROM memcairn_ingest_lag()"  # owner's functions:
_BACKLOG = "SELECT tenant_id, pending, oldest_seconds FROM memcairn_backlog_lag()"  # the queues are under RLS


MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def share_across_processes() -> str:
    """Before starting several server processes: a new, empty folder for their counts (one the operator named in
    ``PROMETHEUS_MULTIPROC_DIR`` is kept; it must then be emptied before each start)."""
    if not os.environ.get(MULTIPROCESS_ENV):
        os.environ[MULTIPROCESS_ENV] = tempfile.mkdtemp(prefix="memcairn-metrics-")
    return os.environ[MULTIPROCESS_ENV]


def pool_state(pool: Any) -> dict[str, int]:
    """``size``, ``in_use``, ``idle`` and ``waiting`` (callers waiting for a connection) of the server's pool
    (``pgstore.db.Pool.stats``)."""
    return {state: int(count) for state, count in pool.stats().items()}


class _DatabaseCollector(Collector):
    """The gauges read at each scrape: the queues per tenant and the pool. A database that cannot be reached
    gives ``memcairn_database_up 0`` and the pool's state, not a failed scrape."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("memcairn_database_up", "1 when the last scrape could read the database")
        queue = GaugeMetricFamily("memcairn_ingest_queue_depth", "Events accepted and not yet stored",
                                  labels=["tenant"])
        age = GaugeMetricFamily("memcairn_ingest_queue_oldest_seconds", "Age of the oldest event waiting",
                                labels=["tenant"])
        failed = GaugeMetricFamily("memcairn_ingest_failed", "Events that could not be stored", labels=["tenant"])
        backlog = GaugeMetricFamily("memcairn_embedding_backlog", "Items waiting for their vector",
                                    labels=["tenant"])
        backlog_age = GaugeMetricFamily("memcairn_embedding_backlog_oldest_seconds",
                                        "Age of the oldest item waiting for its vector", labels=["tenant"])
        try:
            with self.pool.connection() as conn:
                queued = conn.execute(_QUEUE).fetchall()
                waiting = conn.execute(_BACKLOG).fetchall()
        except (ConfigError, psycopg.Error) as exc:
            log.warning("metrics: the database cannot be read: %s", exc)
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
            for tenant, depth, oldest, gave_up in queued:
                queue.add_metric([str(tenant)], depth)
                age.add_metric([str(tenant)], float(oldest))
                failed.add_metric([str(tenant)], gave_up)
            for tenant, pending, oldest in waiting:
                backlog.add_metric([str(tenant)], pending)
                backlog_age.add_metric([str(tenant)], float(oldest))
        pool = GaugeMetricFamily("memcairn_pool_connections", "PostgreSQL connections of this process's pool",
                                 labels=["state"])
        for state, count in pool_state(self.pool).items():
            pool.add_metric([state], count)
        yield from (up, queue, age, failed, backlog, backlog_age, pool)


class Metrics:
    """One server process's registry (its own, so two apps in one process never share counts)."""

    def __init__(self, pool: Any) -> None:
        self.shared = os.environ.get(MULTIPROCESS_ENV) or None
        if self.shared and values.ValueClass is values.MutexValue:  # prometheus_client was imported before it was set
            values.ValueClass = values.MultiProcessValue()
        self.registry = CollectorRegistry(auto_describe=False)
        self.database = _DatabaseCollector(pool)
        self.requests = Counter("memcairn_http_requests", "Requests answered, by route template and status",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("memcairn_http_request_duration_seconds",
                                 "Time until the answer's status and headers were sent, by route template",
                                 ["route", "method"], buckets=BUCKETS, registry=self.registry)
        if not self.shared:
            self.registry.register(self.database)
        self.enabled = os.environ.get(SWITCH_ENV, "").strip().lower() not in ("off", "0", "false", "no")
        self.token = os.environ.get(TOKEN_ENV, "").strip()

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "OTHER"  # a client's made-up methods add no series
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def render(self) -> bytes:
        if not self.shared:
            return generate_latest(self.registry)
        every = CollectorRegistry(auto_describe=False)  # all processes' files, and this one's database gauges
        multiprocess.MultiProcessCollector(every, path=self.shared)
        every.register(self.database)
        return generate_latest(every)

    def allows(self, client_host: str | None, headers: Any) -> bool:
        """Whether this request may read the metrics (see the module's docstring)."""
        presented = headers.get("authorization", "")
        scheme, _, value = presented.partition(" ")
        if self.token and scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                                            self.token.encode()):
            return True
        if "forwarded" in headers or "x-forwarded-for" in headers:
            return False
        try:
            return client_host is not None and ipaddress.ip_address(client_host).is_loopback
        except ValueError:
            return False
