"""The Chroma mirror, embedded (a directory) or against a Chroma server.

This is the only module that imports ``chromadb``, and only when a `ChromaIndex` is built, so the
package stays optional (``pip install 'memcairn[chroma]'``).

One collection per project, named ``mc_<slug>_<hash>`` (Chroma allows only a few characters in a
collection name; the hash keeps two projects with the same slug apart). The real project name, the
vector dimension and the embedding model live in the collection metadata; the space is cosine.

A server is shared: several memcairn stores (a team, each with its own SQLite) may use one. Document ids
name SQLite rows, so two stores must never write into one collection: a server index is given the
store's id (``store_id``), which goes into the hash and the metadata, and it sees, resets and writes only
its own collections. A server that does not answer when the index is opened is not an error yet: the
index connects on its first use, so a mirror degrades and catches up instead of staying off.

Chroma trap: a collection opened without an embedding function falls back to Chroma's default model,
which downloads weights the first time it is called. Every collection here is opened with
`PrecomputedOnly`, an embedding function that refuses to run: memcairn passes embeddings for every
document and query, so it is never called, and if it ever were the call fails loudly instead of
fetching a model.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np

from memcairn.core.errors import ConfigError, EmbeddingError, MemcairnError, VectorIndexUnavailableError
from memcairn.vectors.base import VectorMatch, VectorRecord, model_mismatch
from memcairn.vectors.memory import as_vector, check_dimension, check_record, last_wins, merge_matches

PREFIX = "mc_"
GUARD_NAME = "memcairn-precomputed-only"
_BATCH = 1000  # ids per Chroma call, under any server's max batch size
_INSTALL_HINT = "pip install 'memcairn[chroma]'"

T = TypeVar("T")

_guard_class: type | None = None
_guard_lock = threading.Lock()


def collection_name(project: str, store_id: str | None = None) -> str:
    """A Chroma-valid collection name for ``project`` (3-63 chars of ``[a-z0-9_-]``, alnum ends)."""
    slug = re.sub(r"[^a-z0-9]+", "-", project.lower()).strip("-")[:40].strip("-") or "project"
    key = project if store_id is None else f"{store_id}\0{project}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:10]
    return f"{PREFIX}{slug}_{digest}"


class ServerUnreachableError(VectorIndexUnavailableError):
    """The Chroma server did not accept the client (down, wrong URL, refused credentials)."""


def _one_line(exc: BaseException | str, limit: int = 200) -> str:
    """An exception as one short line (a wrong URL can answer with a whole HTML page)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if text.lower().startswith(("<!doctype", "<html")):
        text = "the server answered with an HTML page, not the Chroma API"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_auth_error(exc: BaseException) -> bool:
    return type(exc).__name__ in ("ChromaAuthError", "AuthorizationError")


def parse_chroma_url(url: str) -> tuple[str, int, bool]:
    """``http://host:port`` -> (host, port, ssl)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"chroma_url {url!r} is not an http(s)://host:port URL (e.g. http://127.0.0.1:8000)")
    ssl = parts.scheme == "https"
    try:
        port = parts.port or (443 if ssl else 8000)
    except ValueError as exc:
        raise ConfigError(f"chroma_url {url!r} has an invalid port") from exc
    return parts.hostname, port, ssl


def _import_chromadb() -> Any:
    try:
        import chromadb
    except ImportError as exc:
        raise VectorIndexUnavailableError(
            f"the chroma vector backend needs the chromadb package ({exc}); {_INSTALL_HINT}"
        ) from exc
    return chromadb


def precomputed_only_class() -> type:
    """The embedding function class given to every collection (built once chromadb is imported)."""
    global _guard_class
    with _guard_lock:
        if _guard_class is not None:
            return _guard_class
        from chromadb.api.types import EmbeddingFunction
        from chromadb.utils.embedding_functions import register_embedding_function

        class PrecomputedOnly(EmbeddingFunction):  # type: ignore[type-arg]
            """Never embeds: memcairn supplies every vector. Counts and refuses any call."""

            calls = 0

            def __init__(self) -> None:
                pass

            def __call__(self, input: Any) -> Any:  # noqa: A002 - the name Chroma requires
                type(self).calls += 1
                raise EmbeddingError(
                    "Chroma tried to embed text itself; memcairn always passes embeddings, so this is a "
                    "bug (refusing rather than downloading Chroma's default model)"
                )

            def embed_query(self, input: Any) -> Any:  # noqa: A002
                return self.__call__(input)

            @staticmethod
            def name() -> str:
                return GUARD_NAME

            def get_config(self) -> dict[str, Any]:
                return {}

            @staticmethod
            def build_from_config(config: dict[str, Any]) -> PrecomputedOnly:
                return PrecomputedOnly()

            def default_space(self) -> str:
                return "cosine"

            def supported_spaces(self) -> list[str]:
                return ["cosine"]

        # Registered so a collection reopened from its stored configuration gets this guard too.
        register_embedding_function(PrecomputedOnly)
        _guard_class = PrecomputedOnly
        return _guard_class


class ChromaIndex:
    """A `VectorIndex` on Chroma: ``path`` for an embedded store, or ``url`` for a server."""

    name = "chroma"

    def __init__(
        self,
        dimension: int,
        *,
        path: Path | None = None,
        url: str | None = None,
        verify_dimension: bool = True,
        store_id: str | None = None,
        model: str | None = None,
    ) -> None:
        if (path is None) == (url is None):
            raise ConfigError("ChromaIndex needs exactly one of path (embedded) or url (server)")
        self.dimension = check_dimension(dimension)
        self.path = Path(path) if path is not None else None
        self.url = url
        self.store_id = store_id
        self.model = model  # the embedding model of the vectors: recorded per collection, checked (factory doc)
        self._where = f"chroma server at {url}" if url else f"chroma store {self.path}"
        self._lock = threading.RLock()
        self._cache: dict[str, Any] = {}
        self._chromadb = _import_chromadb()
        from chromadb.errors import NotFoundError

        self._not_found: type[BaseException] = NotFoundError
        self.embedding_function = precomputed_only_class()()
        self._verify = verify_dimension
        self._client: Any = None
        self._closed = False
        self._address = parse_chroma_url(url) if url is not None else None
        try:
            self.connect()
        except ServerUnreachableError:
            pass  # a server may come up later: the first use connects (and fails until then)

    # -- protocol

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        by_project: dict[str, list[tuple[VectorRecord, np.ndarray, dict[str, Any]]]] = {}
        for record in last_wins(records):
            vec, meta = check_record(record, self.dimension)
            by_project.setdefault(record.project, []).append((record, vec, meta))
        for project, rows in by_project.items():
            for start in range(0, len(rows), _BATCH):
                part = rows[start : start + _BATCH]

                def write(col: Any, part: list[tuple[VectorRecord, np.ndarray, dict[str, Any]]] = part) -> None:
                    col.upsert(
                        ids=[r.id for r, _, _ in part],
                        embeddings=np.stack([v for _, v, _ in part]),
                        documents=[str(r.document) for r, _, _ in part],
                        metadatas=[m for _, _, m in part],
                    )

                self._on_collection(project, write, "upsert", create=True)

    def delete(self, ids: Sequence[str], *, project: str | None = None) -> None:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return
        for name in self._targets(project):
            for start in range(0, len(ids), _BATCH):
                part = ids[start : start + _BATCH]
                self._on_collection(name, lambda col, part=part: col.delete(ids=part), "delete")

    def delete_where_sqlite_ids(self, sqlite_ids: Sequence[int], *, project: str | None = None) -> None:
        wanted = sorted({int(s) for s in sqlite_ids})
        if not wanted:
            return
        for name in self._targets(project):
            for start in range(0, len(wanted), _BATCH):
                where = {"sqlite_id": {"$in": wanted[start : start + _BATCH]}}
                self._on_collection(name, lambda col, where=where: col.delete(where=where), "delete")

    def query(self, vector: Sequence[float], *, projects: Sequence[str] | None, limit: int,
              metadata: bool = True) -> list[VectorMatch]:
        q = as_vector(vector, self.dimension, what="query vector").reshape(1, -1)
        if limit <= 0:
            return []
        names = self._targets(None) if projects is None else list(dict.fromkeys(projects))
        found: list[VectorMatch] = []
        include = ["distances", "metadatas"] if metadata else ["distances"]
        for name in names:
            result = self._on_collection(
                name,
                lambda col: col.query(query_embeddings=q, n_results=int(limit), include=include),
                "query",
            )
            if result is None:
                continue
            ids = result["ids"][0]
            distances = result["distances"][0]
            metas = (result.get("metadatas") or [[None] * len(ids)])[0]
            for doc_id, distance, meta in zip(ids, distances, metas, strict=True):
                found.append(VectorMatch(id=doc_id, distance=max(0.0, float(distance)), metadata=dict(meta or {})))
        return merge_matches(found, int(limit))

    def max_sqlite_id(self, project: str, kind: str) -> int:
        result = self._on_collection(project, lambda col: col.get(where={"kind": kind}, include=["metadatas"]), "get")
        if result is None:
            return 0
        values = [m.get("sqlite_id") for m in result.get("metadatas") or [] if m]
        return max((v for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0)

    def count(self, project: str | None = None) -> int:
        names = self._targets(project)
        return sum(self._on_collection(n, lambda col: col.count(), "count") or 0 for n in names)

    def projects(self) -> list[str]:
        names = self._targets(None)
        return sorted(n for n in names if self._on_collection(n, lambda col: col.count(), "count"))

    def connect(self) -> None:
        """Reach the store or server now (opening the index tries once; later uses retry).

        Raises:
            VectorIndexUnavailableError: it cannot be reached, or it holds vectors of another dimension.
        """
        self._require_client()

    def reset(self) -> None:
        client = self._require_client()
        listed = self._list_collections()
        with self._lock:
            self._cache.clear()
        for name, _project, _meta in listed:
            try:
                client.delete_collection(name)
            except self._not_found:
                pass
            except Exception as exc:
                raise self._unavailable(exc, "reset") from exc

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._drop_client()

    def _drop_client(self) -> None:
        with self._lock:
            client, self._client = getattr(self, "_client", None), None
            self._cache.clear()
        if client is None:
            return
        servers = [getattr(client, "_server", None), getattr(getattr(client, "_admin_client", None), "_server", None)]
        try:
            client.close()
        except Exception:
            pass
        if self.url is not None:
            self._release_http(servers)

    @staticmethod
    def _release_http(servers: list[Any]) -> None:
        """Close what ``Client.close()`` leaves open for an HTTP client.

        Each HttpClient gets a Chroma "system" of its own (and its admin client another), each with an
        httpx connection pool that ``close()`` does not shut, and one of them stays registered in
        Chroma's process-wide system cache. Nothing else shares them, so shut and unregister them here.
        """
        try:
            from chromadb.api.shared_system_client import SharedSystemClient
        except Exception:  # pragma: no cover - layout of another chromadb version
            return
        for server in servers:
            session = getattr(server, "_session", None)
            if session is not None:
                try:
                    session.close()
                except Exception:
                    pass
        try:
            registry = SharedSystemClient._identifier_to_system
            systems = {id(getattr(server, "_system", None)) for server in servers if server is not None}
            for key in [k for k, system in registry.items() if id(system) in systems]:
                registry.pop(key, None)
        except Exception:
            pass

    # -- internals

    def _unavailable(
        self, exc: BaseException | str, what: str,
        cls: type[VectorIndexUnavailableError] = VectorIndexUnavailableError,
    ) -> VectorIndexUnavailableError:
        if self.url and isinstance(exc, BaseException) and _is_auth_error(exc):
            hint = ("the server wants credentials: set CHROMA_CLIENT_AUTH_PROVIDER and "
                    "CHROMA_CLIENT_AUTH_CREDENTIALS in memcairn's environment")
        elif self.url:
            hint = "is a Chroma server running there (`chroma run --path DIR --port N`) and is chroma_url right?"
        else:
            hint = "`memcairn sync rebuild` recreates the mirror"
        return cls(f"{self._where} is unavailable during {what} ({_one_line(exc)}); {hint}")

    def _require_client(self) -> Any:
        with self._lock:
            if self._closed:
                raise VectorIndexUnavailableError(f"{self._where}: this index is closed")
            if self._client is None:
                self._client = self._new_client()
                if self._verify:
                    try:
                        self._verify_dimensions()
                    except BaseException:
                        self._drop_client()
                        raise
            return self._client

    def _new_client(self) -> Any:
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False, allow_reset=True)
        try:
            if self._address is not None:
                host, port, ssl = self._address
                client = self._chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings)
                self._set_http_timeout(client)
                return client
            assert self.path is not None
            self.path.mkdir(parents=True, exist_ok=True)
            return self._chromadb.PersistentClient(path=str(self.path), settings=settings)
        except MemcairnError:
            raise
        except Exception as exc:
            cls = ServerUnreachableError if self.url else VectorIndexUnavailableError
            raise self._unavailable(exc, "connect", cls) from exc

    @staticmethod
    def _set_http_timeout(client: Any) -> None:
        try:
            import httpx

            client._server._session.timeout = httpx.Timeout(60.0, connect=5.0)
        except Exception:  # a client without an httpx session: keep its defaults
            pass

    def _list_collections(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(collection name, project, metadata) of every memcairn collection."""
        client = self._require_client()
        try:
            listed = client.list_collections()
        except Exception as exc:
            raise self._unavailable(exc, "list_collections") from exc
        out = []
        for col in listed:
            name = col if isinstance(col, str) else col.name
            meta = {} if isinstance(col, str) else dict(col.metadata or {})
            project = meta.get("project")
            if (name.startswith(PREFIX) and isinstance(project, str) and meta.get("store") == self.store_id
                    and collection_name(project, self.store_id) == name):
                out.append((name, project, meta))
        return out

    def _targets(self, project: str | None) -> list[str]:
        if project is not None:
            return [project]
        return sorted({p for _, p, _ in self._list_collections()})

    def _verify_dimensions(self) -> None:
        for name, project, meta in self._list_collections():
            stored = meta.get("dimension")
            if stored is not None and stored != self.dimension:
                raise VectorIndexUnavailableError(
                    f"{self._where}: collection {name} (project {project!r}) holds {stored}-d vectors but "
                    f"the embedder gives {self.dimension}-d ones; `memcairn sync rebuild` recreates it"
                )
            self._check_model(name, meta)

    def _check_model(self, name: str, meta: dict[str, Any]) -> None:
        """A collection recorded with another embedding model is refused (one recorded with none is accepted)."""
        stored = meta.get("model")
        if self.model and stored is not None and stored != self.model:
            raise model_mismatch(f"{self._where}: collection {name}", str(stored), self.model)

    def _collection(self, project: str, *, create: bool) -> Any | None:
        with self._lock:
            cached = self._cache.get(project)
        if cached is not None:
            return cached
        client = self._require_client()
        name = collection_name(project, self.store_id)
        if create:
            owner = {} if self.store_id is None else {"store": self.store_id}
            col = client.get_or_create_collection(
                name,
                metadata={"project": project, "dimension": self.dimension, **owner,
                          **({"model": self.model} if self.model else {})},
                configuration={"hnsw": {"space": "cosine"}},
                embedding_function=self.embedding_function,
            )
        else:
            try:
                col = client.get_collection(name, embedding_function=self.embedding_function)
            except self._not_found:
                return None
        meta = col.metadata or {}
        if meta.get("store") != self.store_id:
            raise VectorIndexUnavailableError(
                f"{self._where}: collection {name} belongs to another memcairn store "
                f"({meta.get('store')!r}, not {self.store_id!r}); refusing to mix their vectors"
            )
        if meta.get("project") != project:
            raise VectorIndexUnavailableError(
                f"{self._where}: collection {name} belongs to project {meta.get('project')!r}, "
                f"not {project!r}; `memcairn sync rebuild` recreates the mirror"
            )
        if meta.get("dimension") not in (None, self.dimension):
            raise VectorIndexUnavailableError(
                f"{self._where}: collection {name} holds {meta.get('dimension')}-d vectors but the embedder "
                f"gives {self.dimension}-d ones; `memcairn sync rebuild` recreates it"
            )
        self._check_model(name, meta)
        with self._lock:
            self._cache[project] = col
        return col

    def _on_collection(self, project: str, op: Callable[[Any], T], what: str, *, create: bool = False) -> T | None:
        """Run ``op`` on the project's collection (None when it does not exist and ``create`` is off).

        A cached handle whose collection was dropped meanwhile (another process rebuilt the mirror,
        the server lost its data) is refreshed once.
        """
        for attempt in range(2):
            try:
                col = self._collection(project, create=create)
                if col is None:
                    return None
                return op(col)
            except MemcairnError:
                raise
            except self._not_found as exc:
                with self._lock:
                    self._cache.pop(project, None)
                if attempt:
                    raise self._unavailable(exc, what) from exc
            except Exception as exc:
                raise self._unavailable(exc, what) from exc
        return None  # pragma: no cover - the loop always returns or raises
