"""TLS for the broker's listener (Kafka's SSL and SASL_SSL security protocols).

TLS only encrypts and proves the broker's name to clients; who a client is stays SASL/PLAIN's
answer (:mod:`oncelog.broker.auth`). A private key protected by a passphrase takes it from the
caller: the CLI reads it from an environment variable, never from its command line.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from oncelog.errors import ConfigurationError

__all__ = ["server_tls_context"]


def server_tls_context(
    cert_file: Path, key_file: Path | None = None, *, key_password: str | None = None
) -> ssl.SSLContext:
    """A server context with the certificate chain of ``cert_file`` (PEM: the broker's
    certificate first, then any intermediates) and the private key of ``key_file`` (by default
    in ``cert_file`` too). TLS 1.2 at least, Python's default ciphers. ConfigurationError when a
    file is missing or unreadable, the key does not match, or the key is encrypted and
    ``key_password`` is missing or wrong."""

    def no_prompt() -> str:
        # Without a callback OpenSSL asks on the terminal, which would hang a service.
        raise ConfigurationError(
            f"the TLS key {key_file or cert_file} is encrypted: give its passphrase "
            "(oncelog broker reads ONCELOG_BROKER_TLS_KEY_PASSWORD)"
        )

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file, password=key_password if key_password is not None else no_prompt)
    except FileNotFoundError as exc:
        raise ConfigurationError(f"TLS: no such file {exc.filename}") from exc
    except ssl.SSLError as exc:
        raise ConfigurationError(
            f"TLS: cannot load the certificate {cert_file} with the key {key_file or cert_file} ({exc.reason or exc})"
        ) from exc
    except OSError as exc:
        raise ConfigurationError(f"TLS: cannot read {exc.filename or cert_file}: {exc.strerror}") from exc
    return context
