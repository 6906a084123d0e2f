"""``memcairn sync ...``: the semantic mirror's backfill, rebuild and status."""

from __future__ import annotations

import click

from memcairn.cli.common import emit_json, settings
from memcairn.core.errors import MemcairnError, VectorIndexUnavailableError

EXIT_INCOMPLETE = 1  # the run ended but the mirror still lacks something (a failed batch, an unreachable index)


def _progress_run(action: str, run, total: int) -> object:  # noqa: ANN001
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(f"{action}: memories"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        task = bar.add_task(action, total=total or None)
        return run(lambda _project, n: bar.advance(task, n))


def _lag_items(mirror) -> int:  # noqa: ANN001
    return sum(r["lag"] for r in mirror.status()["rows"])


@click.group()
def sync() -> None:
    """The semantic mirror of the store (rebuildable from SQLite at any time)."""


def _open(rebuild: bool = False):  # noqa: ANN202
    from memcairn.mirror.runtime import open_runtime

    cfg = settings()
    if cfg.vector_backend == "none":
        raise MemcairnError("the vector mirror is disabled (MEMCAIRN_VECTOR_BACKEND=none)")
    runtime = open_runtime(cfg)
    if runtime.mirror is not None:
        try:
            _reach(runtime.mirror.index)
        except VectorIndexUnavailableError as exc:
            runtime.mirror, runtime.mirror_error = None, str(exc)
        except BaseException:
            runtime.close()
            raise
    if runtime.mirror is None and rebuild:
        # The index cannot be opened (corrupt, other dimension): throw it away and start from nothing.
        try:
            _replace_index(runtime)
        except BaseException:
            runtime.close()
            raise
    if runtime.mirror is None:
        runtime.close()
        raise MemcairnError(f"{runtime.mirror_error}")
    return runtime


def _replace_index(runtime) -> None:  # noqa: ANN001
    """Throw the mirror away, even one that cannot be opened or read, and open an empty one in its place.

    The model is loaded first: a model that cannot load (a setting naming one not installed) makes the
    mirror unavailable too, and must not cost the vectors already there when the rebuild cannot run anyway.
    """
    from memcairn.mirror.runtime import open_embedder, open_mirror
    from memcairn.vectors.factory import destroy_index

    cfg = runtime.settings
    embedder = runtime.mirror.embedder if runtime.mirror is not None else open_embedder(cfg)
    if runtime.mirror is not None:
        index, runtime.mirror = runtime.mirror.index, None
        runtime._closers.remove(index.close)
        index.close()
    destroy_index(cfg.vector_backend, home=cfg.home, chroma_url=cfg.chroma_url or None)
    runtime.mirror = open_mirror(cfg, runtime.store, embedder)
    runtime._closers.append(runtime.mirror.index.close)
    _reach(runtime.mirror.index)
    _note_running_worker(cfg)


def _note_running_worker(cfg) -> None:  # noqa: ANN001
    """A running worker keeps an embedded Chroma it opened (a directory replaced here stays open there): say to
    restart it. A sqlite-vec index notices a replaced file by itself and reopens it."""
    from memcairn.vectors.factory import normalise_backend
    from memcairn.wire.lifecycle import worker_lock_held

    if normalise_backend(cfg.vector_backend) != "sqlite-vec" and worker_lock_held(cfg):
        click.echo("note: the mirror was replaced while a worker runs for this home; it keeps the old one open "
                   "until `memcairn worker restart`", err=True)


def _reach(index) -> None:  # noqa: ANN001
    """Fail now, with the backend's reason, when the index cannot be reached (a server opens lazily)."""
    connect = getattr(index, "connect", None)
    if callable(connect):
        connect()


def _report(result, as_json: bool, mirror) -> int:  # noqa: ANN001
    status = mirror.status()
    if as_json:
        emit_json({"documents": result.documents, "items": result.items, "failed_batches": result.failed_batches,
                   "skipped": result.skipped, "errors": result.sample_errors, "state": status["state"]})
    else:
        click.echo(f"{result.documents} documents for {result.items} memories written; "
                   f"{result.failed_batches} failed batch(es); mirror {status['state']}")
        for err in result.sample_errors:
            click.echo(f"  error: {err}", err=True)
    return EXIT_INCOMPLETE if result.failed_batches or status["state"] != "ok" else 0


@sync.command("backfill")
@click.option("--json", "as_json", is_flag=True)
def backfill(as_json: bool) -> int:
    """Mirror every memory the index does not hold yet (never re-embeds what is there).

    Example:

    \b
        memcairn sync backfill
    """
    runtime = _open()
    try:
        mirror = runtime.mirror
        mirror.bootstrap()
        result = (mirror.backfill() if as_json else
                  _progress_run("backfill", lambda cb: mirror.backfill(cb), _lag_items(mirror)))
        return _report(result, as_json, mirror)
    finally:
        runtime.close()


@sync.command("rebuild")
@click.option("--json", "as_json", is_flag=True)
def rebuild(as_json: bool) -> int:
    """Drop the mirror and refill it from SQLite (also repairs a corrupt or deleted mirror).

    Example:

    \b
        memcairn sync rebuild
    """
    runtime = _open(rebuild=True)
    try:
        total = runtime.store.stats()["items"]

        def run() -> object:
            mirror = runtime.mirror
            return mirror.rebuild() if as_json else _progress_run("rebuild", lambda cb: mirror.rebuild(cb), total)

        try:
            result = run()
        except VectorIndexUnavailableError:
            # Opening reads only the file's first pages: a page broken further in shows when the rebuild clears it.
            _replace_index(runtime)
            result = run()
        return _report(result, as_json, runtime.mirror)
    finally:
        runtime.close()


@sync.command("status")
@click.option("--json", "as_json", is_flag=True)
def status(as_json: bool) -> None:
    """Per project and kind: watermark, highest id, lag, and the mirror's state.

    Example:

    \b
        memcairn sync status --json
    """
    runtime = _open()
    try:
        runtime.mirror.bootstrap()  # a mirror removed or restored by hand: the lag is what the index lacks now
        data = runtime.mirror.status()
    finally:
        runtime.close()
    if as_json:
        emit_json(data)
        return
    click.echo(f"mirror: {data['backend']} ({data['state']}), model {data['model']}, outbox {data['outbox']}")
    for row in data["rows"]:
        click.echo(f"  {row['project']:<30} {row['kind']:<12} watermark {row['watermark']:>8}  "
                   f"max {row['max_id']:>8}  lag {row['lag']}")
