"""TLS for ``memcairn server --tls-cert FILE --tls-key FILE``: the pair is checked before anything starts (a
wrong path or a key that does not match the certificate is a clear error, not a traceback from every process),
then handed to uvicorn as its ``ssl_certfile``/``ssl_keyfile``, in each server process alike."""

from __future__ import annotations

import ssl
from pathlib import Path

from memcairn.core.errors import ConfigError


def uvicorn_ssl_options(cert: str | None, key: str | None) -> dict[str, str]:
    """uvicorn's options for the certificate chain ``cert`` (PEM) and its private key ``key`` (PEM, unencrypted);
    empty when neither is given.

    Raises:
        ConfigError: only one is given, a file cannot be read, or they do not make a usable pair.
    """
    if cert is None and key is None:
        return {}
    if cert is None or key is None:
        raise ConfigError("give both --tls-cert FILE and --tls-key FILE (PEM), or neither (plain HTTP, e.g. behind "
                          "a proxy that terminates TLS)")
    for what, path in (("certificate", cert), ("private key", key)):
        if not Path(path).is_file():
            raise ConfigError(f"the TLS {what} {path!r} is not a readable file")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot use {cert!r} with {key!r} for TLS ({exc}); give a PEM certificate (chain) and "
                          "the unencrypted PEM private key that belongs to it") from None
    return {"ssl_certfile": str(Path(cert).resolve()), "ssl_keyfile": str(Path(key).resolve())}
