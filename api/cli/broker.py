"""``oncelog broker``: serve the Kafka protocol over the store (docs/guide-broker.md)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from oncelog.cli.context import CliContext
from oncelog.errors import ConfigurationError
from oncelog.store import create_engine
from oncelog.store.engine import Timeouts

if TYPE_CHECKING:
    from oncelog.broker import Broker

#: Each store call the broker makes is bounded like a client's request (statement and lock
#: timeouts, keepalives): a Kafka client's own request timeout is 30 s.
_REQUEST_TIMEOUT_MS = 30_000
#: Where the passphrase of an encrypted --tls-key comes from (never the command line).
TLS_KEY_PASSWORD_ENV = "ONCELOG_BROKER_TLS_KEY_PASSWORD"  # noqa: S105 - a variable name, not a password


@click.command()
@click.option("--listen", default="127.0.0.1:9092", show_default=True, help="HOST:PORT to accept Kafka clients on.")
@click.option(
    "--advertised-listener",
    default=None,
    help="HOST:PORT clients are told to connect to (Metadata); by default the --listen address.",
)
@click.option("--node-id", default=1, show_default=True, help="This broker's node id in Metadata.")
@click.option(
    "--auto-create-topics",
    "auto_create",
    type=click.IntRange(min=1),
    default=None,
    metavar="PARTITIONS",
    help="Create a topic a client asks Metadata for and that does not exist, with this many partitions "
    "(Kafka's auto.create.topics.enable); needs the admin role. Off by default.",
)
@click.option(
    "--sasl-plain",
    is_flag=True,
    help="Clients authenticate with SASL/PLAIN as PostgreSQL roles (user name and password), and reach the "
    "store as their role: its ACLs and ownership rules apply to them.",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PEM certificate chain: clients connect with TLS (security.protocol SSL, or SASL_SSL with "
    "--sasl-plain). A passphrase of the key is read from ONCELOG_BROKER_TLS_KEY_PASSWORD.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PEM private key of --tls-cert, when it is not in the same file.",
)
@click.option(
    "--allow-unauthenticated",
    is_flag=True,
    help="Listen on an address other than loopback without --sasl-plain: every client then acts as the "
    "broker's own database role.",
)
@click.pass_obj
def broker(  # noqa: PLR0917 - click passes each option as an argument
    obj: CliContext,
    listen: str,
    advertised_listener: str | None,
    node_id: int,
    auto_create: int | None,
    sasl_plain: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    allow_unauthenticated: bool,
) -> None:
    """Serve the Kafka protocol on --listen: Kafka's clients write and read the store's log.
    Stops on SIGINT/SIGTERM."""
    # Here, not at the top: the broker's codec is the optional broker extra, and every other
    # command runs without it.
    try:
        from oncelog.broker import Broker, parse_listener  # noqa: PLC0415
        from oncelog.broker.auth import Principals  # noqa: PLC0415
        from oncelog.broker.tls import server_tls_context  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        missing = (exc.name or "a module").partition(".")[0]
        raise ConfigurationError(
            f"oncelog broker needs Kafka's protocol codec ({missing} is not installed): pip install 'oncelog[broker]'"
        ) from exc
    try:
        where = parse_listener(listen)
        advertised = parse_listener(advertised_listener) if advertised_listener else None
    except ConfigurationError as exc:
        raise click.BadParameter(exc.message) from None
    if not (sasl_plain or allow_unauthenticated or _loopback(where.host)):
        raise click.BadParameter(
            "without authentication the broker listens on loopback only: add --sasl-plain (clients log in as "
            "PostgreSQL roles) or --allow-unauthenticated",
            param_hint="--listen",
        )
    if tls_key is not None and tls_cert is None:
        raise click.BadParameter("a key needs its certificate: add --tls-cert", param_hint="--tls-key")
    tls = (
        server_tls_context(tls_cert, tls_key, key_password=os.environ.get(TLS_KEY_PASSWORD_ENV))
        if tls_cert is not None
        else None
    )
    obj.engine()  # start and migrate the embedded server if that is what we use
    principals = Principals(obj.url(), schema=obj.schema) if sasl_plain else None
    engine = create_engine(
        obj.url(), schema=obj.schema, timeouts=Timeouts.for_request(_REQUEST_TIMEOUT_MS), pool_size=8, max_overflow=8
    )
    try:
        server = Broker(
            engine,
            where,
            advertised=advertised,
            node_id=node_id,
            auto_create_partitions=auto_create,
            principals=principals,
            tls=tls,
        )
        asyncio.run(_serve(server))
    finally:
        engine.dispose()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _serve(server: Broker) -> None:
    await server.start()
    here = server.address
    click.echo(f"oncelog broker: Kafka clients may connect to {here.host}:{here.port}", err=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(server.serve_forever())
    await stop.wait()
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    await server.close()
