"""Deterministic synthetic memories whose text resembles what coding agents record."""

from __future__ import annotations

import random
from collections.abc import Iterator

from memcairn.core.models import NewItem

_AREAS = ["auth", "billing", "search", "cache", "parser", "scheduler", "api", "cli", "worker", "storage",
          "migrations", "ui", "logging", "config", "payments", "notifications", "metrics", "router", "sync",
          "importer"]
_FILES = ["service.py", "models.py", "handlers.py", "utils.py", "test_{a}.py", "{a}/__init__.py", "routes.ts",
          "index.ts", "schema.sql", "Cargo.toml", "main.go", "README.md", "settings.json", "Dockerfile"]
_ACTIONS = [
    ("bugfix", "Fixed {err} in {a} {f}", "The {a} module raised {err} when {cond}; the fix {fix}."),
    ("feature", "Added {feat} to {a}", "Implemented {feat} for the {a} layer so that {goal}; covered by tests."),
    ("refactor", "Refactored {a} {f}",
     "Split the {a} code in {f} into smaller functions; {fix} without changing behaviour."),
    ("discovery", "How {a} handles {topic}", "Reading {f} showed that {a} {finding}; this matters because {goal}."),
    ("decision", "Chose {choice} for {a}",
     "Decided to use {choice} in {a} because {reason}; the alternative was {alt}."),
    ("change", "Updated {a} configuration", "Changed {topic} settings in {f}: {fix}."),
]
_ERR = ["a KeyError", "a race condition", "an off-by-one error", "a timeout", "a null pointer dereference",
        "a deadlock", "an encoding error", "a memory leak", "a stale cache entry", "a missing migration",
        "database is locked", "a 500 response", "a flaky test", "an import cycle", "a timezone bug"]
_COND = ["the input was empty", "two requests arrived at once", "the token expired", "the file was missing",
         "the queue was full", "the config had unicode", "the network dropped", "retries overlapped"]
_FIX = ["adds a guard and a regression test", "uses a lock around the write", "normalises timestamps to UTC",
        "retries with exponential backoff", "validates input before parsing", "moves the call off the hot path",
        "caches the compiled regex", "closes the connection in a finally block"]
_FEAT = ["pagination", "rate limiting", "retry logic", "a health endpoint", "bulk import", "CSV export",
         "dark mode", "webhooks", "full-text search", "audit logging", "feature flags", "OAuth login"]
_GOAL = ["users can resume interrupted work", "latency stays under budget", "errors are visible",
         "the tests are deterministic", "memory use stays bounded", "deploys are safe to roll back"]
_TOPIC = ["connection pooling", "error handling", "retries", "serialisation", "pagination", "locking",
          "timeouts", "logging levels", "environment variables", "schema versions"]
_FINDING = ["keeps one connection per thread", "swallows exceptions silently", "reads settings at import time",
            "batches writes by 100", "sorts results by insertion order", "uses a global singleton"]
_CHOICE = ["SQLite", "PostgreSQL", "a background thread", "an LRU cache", "JSON lines", "msgpack",
           "server-sent events", "a message queue"]
_REASON = ["it needs no server", "it is already a dependency", "it keeps the hot path simple",
           "it survives restarts", "it is easy to test"]


def synthetic_items(n: int, *, seed: int = 7, projects: int = 20, start_ms: int = 1_700_000_000_000,
                    step_ms: int = 60_000) -> Iterator[NewItem]:
    rng = random.Random(seed)
    for i in range(n):
        area = rng.choice(_AREAS)
        file = rng.choice(_FILES).format(a=area)
        path = f"src/{area}/{file}"
        kind_type, title_t, narr_t = rng.choice(_ACTIONS)
        values = dict(a=area, f=path, err=rng.choice(_ERR), cond=rng.choice(_COND), fix=rng.choice(_FIX),
                      feat=rng.choice(_FEAT), goal=rng.choice(_GOAL), topic=rng.choice(_TOPIC),
                      finding=rng.choice(_FINDING), choice=rng.choice(_CHOICE), reason=rng.choice(_REASON),
                      alt=rng.choice(_CHOICE))
        project = f"project-{i % projects:02d}"
        yield NewItem(
            project=project,
            kind="observation",
            type=kind_type,
            title=title_t.format(**values) + f" (#{i})",
            subtitle=f"{area} · {path}",
            narrative=narr_t.format(**values),
            facts=[f"{path} was {'modified' if kind_type != 'discovery' else 'read'}",
                   f"{rng.choice(_TOPIC)} in {area} {rng.choice(_FINDING)}"],
            concepts=[rng.choice(["how-it-works", "problem-solution", "gotcha", "pattern", "trade-off"])],
            files_read=[path],
            files_modified=[path] if kind_type != "discovery" else [],
            session=f"{project}-session-{i // 25}",
            platform_source="claude-code",
            created_at_epoch=start_ms + i * step_ms,
        )


def synthetic_queries(n: int, *, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    templates = ["{err} in {a}", "how does {a} handle {topic}", "{feat}", "why {choice} for {a}",
                 "{a} {topic} {fix}", "fix {err}"]
    out = []
    for _ in range(n):
        out.append(rng.choice(templates).format(
            a=rng.choice(_AREAS), err=rng.choice(_ERR), topic=rng.choice(_TOPIC), feat=rng.choice(_FEAT),
            choice=rng.choice(_CHOICE), fix=rng.choice(_FIX)))
    return out
