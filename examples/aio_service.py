"""An asyncio web service on ``oncelog.aio``: a FastAPI app whose endpoint appends orders to a
topic (idempotent: a retried batch never lands twice) and whose background task keeps each
customer's total from what read_committed readers see, as a member of a consumer group.

    pip install fastapi uvicorn
    export ONCELOG_DATABASE_URL=$(oncelog dev-db url)
    uvicorn --factory examples.aio_service:main_app

    curl -X POST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"customer": "ada", "amount": 12.5}'
    curl localhost:8000/totals

The producer, the consumer and the tally share the server's event loop: no call blocks it, and
none starts a thread. ONCELOG_DATABASE_URL is read in :func:`main_app` (the entry point) only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import defaultdict
from collections.abc import AsyncIterator

from fastapi import FastAPI
from pydantic import BaseModel, Field

from oncelog import errors
from oncelog.aio import Admin, Consumer, Producer


class Order(BaseModel):
    """What a client posts."""

    customer: str = Field(min_length=1, max_length=100)
    amount: float = Field(gt=0)


class Placed(BaseModel):
    """Where the order landed."""

    partition: int
    offset: int


async def tally(consumer: Consumer, totals: dict[str, float], stop: asyncio.Event) -> None:
    """Add up the committed orders as they come (the group commits the positions by itself)."""
    while not stop.is_set():
        for record in await consumer.poll(0.5):
            order = json.loads(record.value or b"{}")
            totals[order["customer"]] += order["amount"]


def create_app(database_url: str, *, topic: str = "orders", group: str = "order-totals") -> FastAPI:
    """The service, writing to and reading ``topic`` (created with 3 partitions if missing)."""
    totals: dict[str, float] = defaultdict(float)
    clients: dict[str, Producer] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Admin(database_url, client_id="order-service") as admin:
            with contextlib.suppress(errors.TopicAlreadyExistsError):
                await admin.create_topic(topic, partitions=3)
        stop = asyncio.Event()
        async with (
            Producer(database_url, linger_ms=1, client_id="order-service") as producer,
            Consumer(database_url, group_id=group, client_id="order-service") as consumer,
        ):
            await consumer.subscribe([topic])
            clients["producer"] = producer
            task = asyncio.create_task(tally(consumer, totals, stop))
            try:
                yield
            finally:
                stop.set()  # the tally finishes its poll; closing the consumer commits its positions
                await task

    app = FastAPI(title="orders", lifespan=lifespan)

    @app.post("/orders")
    async def place(order: Order) -> Placed:
        # Keyed by customer: one customer's orders stay in order on one partition.
        meta = await clients["producer"].send_and_wait(
            topic, order.model_dump_json().encode(), key=order.customer.encode()
        )
        return Placed(partition=meta.partition, offset=meta.offset)

    @app.get("/totals")
    async def read_totals() -> dict[str, float]:
        return dict(totals)

    return app


def main_app() -> FastAPI:
    """The entry point for ``uvicorn --factory``: the database from ONCELOG_DATABASE_URL."""
    url = os.environ.get("ONCELOG_DATABASE_URL")
    if not url:
        raise SystemExit("set ONCELOG_DATABASE_URL (export ONCELOG_DATABASE_URL=$(oncelog dev-db url))")
    return create_app(url)
