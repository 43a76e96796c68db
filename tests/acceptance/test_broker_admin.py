"""``oncelog broker``: Kafka's admin and inspection APIs (DescribeGroups, ListGroups,
DescribeProducers, DescribeTransactions, ListTransactions, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs) through kafka-python's and confluent-kafka's admin clients, each answer
checked against what oncelog's own API says of the same store."""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata
from kafka import TopicPartition as KTopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    MemberToRemove,
    NewPartitions,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KResourceType
from kafka.errors import InvalidRequestError

import oncelog
from oncelog.store import create_engine, txn
from oncelog.types import AclBindingFilter
from tests.support.broker import running_broker
from tests.support.roles import login_roles

TOPIC = "ledger"
#: confluent_kafka.admin: it re-exports its classes without an __all__, which mypy does not count
#: as exported, so they are reached through the module.
CK: Any = importlib.import_module("confluent_kafka.admin")
CKAFKA: Any = importlib.import_module("confluent_kafka")


@pytest.fixture
def broker(db_url: str) -> Iterator[str]:
    """A broker over this test's database, with a two-partition topic; its bootstrap address."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(TOPIC, partitions=2)
    with running_broker(db_url) as address:
        yield address


@pytest.fixture
def kadmin(broker: str) -> Iterator[KafkaAdminClient]:
    """kafka-python's admin client of the broker."""
    admin = KafkaAdminClient(bootstrap_servers=broker)
    try:
        yield admin
    finally:
        admin.close()


@pytest.mark.timeout(120)
def test_transactions_and_producer_state_are_described_as_the_store_holds_them(
    db_url: str, broker: str, kadmin: KafkaAdminClient
) -> None:
    done = KafkaProducer(bootstrap_servers=broker, transactional_id="tx-done")
    done.init_transactions()
    done.begin_transaction()
    done.send(TOPIC, b"kept", partition=0)
    done.commit_transaction()
    done.close()
    open_ = KafkaProducer(bootstrap_servers=broker, transactional_id="tx-open")
    open_.init_transactions()
    open_.begin_transaction()
    open_.send(TOPIC, b"pending", partition=1)
    open_.flush()
    try:
        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                ours = {tid: txn.describe_transaction(conn, transactional_id=tid) for tid in ("tx-done", "tx-open")}
        finally:
            engine.dispose()

        listed = {t.transactional_id: t for t in kadmin.list_transactions()[1]}
        assert {tid: (t.producer_id, str(t.state.value)) for tid, t in listed.items()} == {
            tid: (s.producer_id, s.state) for tid, s in ours.items()
        }
        assert ours["tx-open"].state == "Ongoing" and ours["tx-done"].state == "CompleteCommit"
        only_open = kadmin.list_transactions(state_filters=["Ongoing"])[1]
        assert [t.transactional_id for t in only_open] == ["tx-open"]
        by_producer = kadmin.list_transactions(producer_id_filters=[ours["tx-done"].producer_id])[1]
        assert [t.transactional_id for t in by_producer] == ["tx-done"]

        described = kadmin.describe_transactions(["tx-open"])["tx-open"]
        assert described.producer_id == ours["tx-open"].producer_id
        assert described.producer_epoch == ours["tx-open"].producer_epoch
        assert described.topic_partitions == {KTopicPartition(TOPIC, 1)}
        assert described.transaction_start_time_ms > 0
        with pytest.raises(Exception, match=r"(?i)TransactionalIdNotFound"):
            kadmin.describe_transactions(["tx-never"])

        producers = kadmin.describe_producers([KTopicPartition(TOPIC, 0), KTopicPartition(TOPIC, 1)])
        on_1 = producers[KTopicPartition(TOPIC, 1)].active_producers
        assert [(p.producer_id, p.last_sequence, p.current_transaction_start_offset) for p in on_1] == [
            (ours["tx-open"].producer_id, 0, 0)
        ]
        on_0 = producers[KTopicPartition(TOPIC, 0)].active_producers
        assert [(p.producer_id, p.current_transaction_start_offset) for p in on_0] == [
            (ours["tx-done"].producer_id, -1)  # its transaction is over
        ]
    finally:
        open_.abort_transaction()
        open_.close()


@pytest.mark.timeout(120)
def test_groups_are_listed_and_described_with_the_stores_assignment(
    db_url: str, broker: str, kadmin: KafkaAdminClient
) -> None:
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=broker, group_id="auditors", client_id="auditor-1")
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(200)
        assert consumer.assignment() == {KTopicPartition(TOPIC, 0), KTopicPartition(TOPIC, 1)}
        with oncelog.Admin(db_url) as admin:
            ours = admin.describe_group("auditors")

        described = kadmin.describe_groups(["auditors", "nobody-here"])
        group = described["auditors"]
        assert (group["group_state"], group["protocol_type"], group["protocol_data"]) == (
            "Stable",
            "consumer",
            ours.assignor,
        )
        (member,) = group["members"]
        assert (member["member_id"], member["client_id"]) == (ours.members[0].member_id, "auditor-1")
        assert member["member_metadata"]["topics"] == [TOPIC]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": TOPIC, "partitions": [0, 1]}]
        assert described["nobody-here"]["group_state"] == "Dead"  # as Kafka describes an unknown group

        assert {"group_id": "auditors", "protocol_type": "consumer", "group_state": "Stable"} in kadmin.list_groups()

        ck_admin = AdminClient({"bootstrap.servers": broker})
        listed = ck_admin.list_consumer_groups().result(30)
        assert [(g.group_id, g.state) for g in listed.valid] == [("auditors", ConsumerGroupState.STABLE)]
        ck_group = ck_admin.describe_consumer_groups(["auditors"])["auditors"].result(30)
        assert ck_group.state == ConsumerGroupState.STABLE
        assert sorted((tp.topic, tp.partition) for tp in ck_group.members[0].assignment.topic_partitions) == [
            (TOPIC, 0),
            (TOPIC, 1),
        ]
    finally:
        consumer.close()


@pytest.mark.timeout(120)
def test_partitions_and_configs_change_through_both_admin_clients(
    db_url: str, broker: str, kadmin: KafkaAdminClient
) -> None:
    kadmin.create_partitions({TOPIC: NewPartitions(4)})
    with pytest.raises(Exception, match=r"(?i)partition"):
        kadmin.create_partitions({TOPIC: NewPartitions(3)})  # fewer than it has
    kadmin.create_partitions({TOPIC: NewPartitions(9)}, validate_only=True)

    ck_admin = AdminClient({"bootstrap.servers": broker})
    change = CK.ConfigResource(
        CK.ResourceType.TOPIC,
        TOPIC,
        incremental_configs=[
            CK.ConfigEntry("retention.ms", "5000", incremental_operation=CK.AlterConfigOpType.SET),
            CK.ConfigEntry("retention.bytes", "4096", incremental_operation=CK.AlterConfigOpType.SET),
        ],
    )
    for future in ck_admin.incremental_alter_configs([change]).values():
        future.result(30)
    with oncelog.Admin(db_url) as admin:
        described = admin.describe_topic(TOPIC)
    assert len(described.partitions) == 4
    assert (described.config["retention_ms"], described.config["retention_bytes"]) == (5000, 4096)

    # AlterConfigs (not incremental) replaces the whole set. kafka-python's client resends the
    # settings the topic has of its own, so they stay; librdkafka's sends only what it is given,
    # so the rest returns to the defaults (retention.bytes: no limit).
    kadmin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={"retention.ms": "6000"})], incremental=False
    )
    with oncelog.Admin(db_url) as admin:
        described = admin.describe_topic(TOPIC)
    assert (described.config["retention_ms"], described.config["retention_bytes"]) == (6000, 4096)
    replace = CK.ConfigResource(CK.ResourceType.TOPIC, TOPIC, set_config={"retention.ms": "7000"})
    with pytest.deprecated_call():  # librdkafka keeps AlterConfigs, deprecated for the incremental one
        futures = ck_admin.alter_configs([replace])
    for future in futures.values():
        future.result(30)
    with oncelog.Admin(db_url) as admin:
        described = admin.describe_topic(TOPIC)
    assert (described.config["retention_ms"], described.config["retention_bytes"]) == (7000, None)

    # Compaction's settings (issue #22), in Kafka's names and spellings.
    compact = CK.ConfigResource(
        CK.ResourceType.TOPIC,
        TOPIC,
        incremental_configs=[
            CK.ConfigEntry("cleanup.policy", "delete,compact", incremental_operation=CK.AlterConfigOpType.SET),
            CK.ConfigEntry("min.cleanable.dirty.ratio", "0.25", incremental_operation=CK.AlterConfigOpType.SET),
            CK.ConfigEntry("max.compaction.lag.ms", str(2**63 - 1), incremental_operation=CK.AlterConfigOpType.SET),
        ],
    )
    for future in ck_admin.incremental_alter_configs([compact]).values():
        future.result(30)
    with oncelog.Admin(db_url) as admin:
        config = admin.describe_topic(TOPIC).config
    assert (config["cleanup_policy"], config["min_cleanable_dirty_ratio"]) == ("compact,delete", 0.25)
    assert config["max_compaction_lag_ms"] is None  # Kafka's Long.MAX_VALUE is "no limit"
    shown = ck_admin.describe_configs([CK.ConfigResource(CK.ResourceType.TOPIC, TOPIC)])
    entries = next(iter(shown.values())).result(30)
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["max.compaction.lag.ms"].value == str(2**63 - 1) and entries["max.compaction.lag.ms"].is_default
    assert entries["delete.retention.ms"].value == "86400000" and entries["delete.retention.ms"].is_default

    for name, value in (("segment.bytes", "1024"), ("cleanup.policy", "shred"), ("min.cleanable.dirty.ratio", "x")):
        bad = CK.ConfigResource(
            CK.ResourceType.TOPIC,
            TOPIC,
            incremental_configs=[CK.ConfigEntry(name, value, incremental_operation=CK.AlterConfigOpType.SET)],
        )
        with pytest.raises(Exception, match=r"segment\.bytes|cleanup_policy|min\.cleanable\.dirty\.ratio"):
            for future in ck_admin.incremental_alter_configs([bad]).values():
                future.result(30)
    with oncelog.Admin(db_url) as admin:
        config = admin.describe_topic(TOPIC).config
    assert (config["retention_ms"], config["cleanup_policy"]) == (7000, "compact,delete")  # refusals changed nothing


@pytest.mark.timeout(120)
def test_a_client_role_may_list_transactions_but_not_read_producer_state(db_url: str, engine: Any, broker: str) -> None:
    with login_roles(engine, db_url, ("client",)) as urls, running_broker(urls["client"]) as address:
        producer = KafkaProducer(bootstrap_servers=address, transactional_id="tx-client")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"x", partition=0)
        producer.commit_transaction()
        producer.close()
        admin = KafkaAdminClient(bootstrap_servers=address)
        try:
            assert [t.transactional_id for t in admin.list_transactions()[1]] == ["tx-client"]
            with pytest.raises(Exception, match=r"(?i)TopicAuthorization"):
                admin.describe_producers([KTopicPartition(TOPIC, 0)])
            with pytest.raises(Exception, match=r"(?i)authoriz"):
                admin.create_partitions({TOPIC: NewPartitions(3)})
        finally:
            admin.close()
    with oncelog.Admin(db_url) as ours:
        assert len(ours.describe_topic(TOPIC).partitions) == 2


@pytest.mark.timeout(120)
def test_acls_are_the_stores_through_both_admin_clients(
    db_url: str, engine: Any, broker: str, kadmin: KafkaAdminClient
) -> None:
    with login_roles(engine, db_url, ("client",)) as urls:
        role = sa.make_url(urls["client"]).username or ""
        principal = f"User:{role}"
        read_topic = ACL(
            principal=principal,
            host="*",
            operation=ACLOperation.READ,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(KResourceType.TOPIC, TOPIC),
        )
        write_prefixed = ACL(
            principal=principal,
            host="*",
            operation=ACLOperation.WRITE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(KResourceType.TOPIC, "led", ACLResourcePatternType.PREFIXED),
        )
        created = kadmin.create_acls([read_topic, write_prefixed])
        assert not created["failed"], created["failed"]
        with oncelog.Admin(db_url) as admin:
            assert sorted(
                (a.principal, a.resource_name, a.pattern_type, a.operation) for a in admin.describe_acls()
            ) == [(role, "led", "prefixed", "write"), (role, TOPIC, "literal", "read")]

        # What the store cannot hold is refused, each with its reason, and nothing is stored.
        deny = ACL(
            principal=principal,
            host="*",
            operation=ACLOperation.READ,
            permission_type=ACLPermissionType.DENY,
            resource_pattern=ResourcePattern(KResourceType.TOPIC, "other"),
        )
        one_host = ACL(
            principal=principal,
            host="10.0.0.1",
            operation=ACLOperation.READ,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(KResourceType.TOPIC, "other"),
        )
        refused = kadmin.create_acls([deny, one_host])
        assert refused["failed"] == [InvalidRequestError, InvalidRequestError]
        ck_admin = AdminClient({"bootstrap.servers": broker})
        ck_deny = CK.AclBinding(
            CK.ResourceType.TOPIC,
            "other",
            CK.ResourcePatternType.LITERAL,
            principal,
            "*",
            CK.AclOperation.READ,
            CK.AclPermissionType.DENY,
        )
        with pytest.raises(KafkaException, match="DENY"):
            ck_admin.create_acls([ck_deny])[ck_deny].result(30)

        everything_of_role = ACLFilter(
            principal=principal,
            host="*",
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        described, error = kadmin.describe_acls(everything_of_role)
        assert error.errno == 0
        assert sorted((a.resource_pattern.resource_name, a.operation) for a in described) == [
            ("led", ACLOperation.WRITE),
            (TOPIC, ACLOperation.READ),
        ]
        only_reads = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.READ,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KResourceType.TOPIC, None, ACLResourcePatternType.ANY),
        )
        ((_, deleted, delete_error),) = kadmin.delete_acls([only_reads])
        assert delete_error.errno == 0 and [a.resource_pattern.resource_name for a in deleted] == [TOPIC]
        with oncelog.Admin(db_url) as admin:
            assert [(a.resource_name, a.operation) for a in admin.describe_acls()] == [("led", "write")]
            admin.delete_acls([AclBindingFilter(principal=role)])  # before the role goes


@pytest.mark.timeout(120)
def test_the_brokers_settings_and_paged_partitions(db_url: str, broker: str, kadmin: KafkaAdminClient) -> None:
    described = kadmin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
    entries = next(iter(next(iter(described.values())).values()))
    assert entries["advertised.listeners"]["value"] == f"PLAINTEXT://{broker}"
    assert entries["advertised.listeners"]["read_only"] is True
    topic_resource = ConfigResource(ConfigResourceType.TOPIC, TOPIC)
    topic_entries = next(
        iter(next(iter(kadmin.describe_configs([topic_resource], config_filter="all").values())).values())
    )
    # A topic created without settings has every one at its default (retention.bytes: no limit).
    assert {e["config_source"] for e in topic_entries.values()} == {"DEFAULT_CONFIG"}
    assert topic_entries["retention.bytes"]["value"] == "-1"
    assert (topic_entries["max.message.bytes"]["config_type"], topic_entries["retention.ms"]["config_type"]) == (
        "INT",
        "LONG",
    )

    with oncelog.Admin(db_url) as admin:
        admin.create_topic("wide", partitions=5)
    # DescribeTopicPartitions pages by partition, topics in name order, with a cursor to go on from.
    pages, cursor = [], None
    while True:
        page = kadmin.describe_topic_partitions(["wide", TOPIC], response_partition_limit=3, cursor=cursor)
        pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [[(TOPIC, [0, 1]), ("wide", [0])], [("wide", [1, 2, 3])], [("wide", [4])]]


@pytest.mark.timeout(120)
def test_records_and_groups_are_deleted_through_the_admin_clients(
    db_url: str, broker: str, kadmin: KafkaAdminClient
) -> None:
    with oncelog.Producer(db_url) as producer:
        for i in range(6):
            producer.send(TOPIC, b"r%d" % i, partition=0)
        producer.flush()
    deleted = kadmin.delete_records({KTopicPartition(TOPIC, 0): 4})
    assert deleted[KTopicPartition(TOPIC, 0)]["low_watermark"] == 4
    with pytest.raises(Exception, match=r"(?i)OffsetOutOfRange"):
        kadmin.delete_records({KTopicPartition(TOPIC, 0): 99})
    with oncelog.Admin(db_url) as admin:
        assert {(o.partition, o.log_start_offset) for o in admin.list_offsets(TOPIC)} == {(0, 4), (1, 0)}

    consumer = KafkaConsumer(TOPIC, bootstrap_servers=broker, group_id="leaving", enable_auto_commit=False)
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(200)
        consumer.commit({KTopicPartition(TOPIC, 0): OffsetAndMetadata(5, "", -1)})
        assert dict(kadmin.delete_groups(["leaving"])) == {"leaving": "NonEmptyGroupError"}
        # OffsetDelete: a live member subscribes to TOPIC, so its offsets stay (Kafka's rule).
        subscribed = kadmin.delete_group_offsets("leaving", [KTopicPartition(TOPIC, 0), KTopicPartition(TOPIC, 9)])
        assert {tp.partition: err.__name__ for tp, err in subscribed.items()} == {
            0: "GroupSubscribedToTopicError",
            9: "UnknownTopicOrPartitionError",
        }
    finally:
        consumer.close()
    static = KafkaConsumer(
        TOPIC, bootstrap_servers=broker, group_id="static", group_instance_id="rack-1", enable_auto_commit=False
    )
    try:
        deadline = time.monotonic() + 30
        while not static.assignment() and time.monotonic() < deadline:
            static.poll(200)
        # LeaveGroup v3 (KIP-345): the admin removes a static member by its instance id.
        removed = kadmin.remove_group_members("static", [MemberToRemove(group_instance_id="rack-1")])
        assert {k: err.__name__ for k, err in removed.items()} == {"rack-1": "NoError"}
        with oncelog.Admin(db_url) as admin:
            assert admin.describe_group("static").members == ()
    finally:
        static.close()
    gone = kadmin.delete_group_offsets("leaving", [KTopicPartition(TOPIC, 0)])
    assert {tp.partition: err.__name__ for tp, err in gone.items()} == {0: "NoError"}
    with oncelog.Admin(db_url) as admin:
        assert admin.describe_group("leaving").offsets == ()
    with pytest.raises(Exception, match="GroupIdNotFound"):
        kadmin.delete_group_offsets("never-was", [KTopicPartition(TOPIC, 0)])
    outcome = dict(kadmin.delete_groups(["leaving", "never-was"]))
    assert outcome == {"leaving": "OK", "never-was": "GroupIdNotFoundError"}
    with oncelog.Admin(db_url) as admin:
        assert "leaving" not in [g.group_id for g in admin.list_groups()]


@pytest.mark.timeout(120)
def test_list_offsets_answers_every_offset_spec_of_confluent_kafkas_admin(db_url: str, broker: str) -> None:
    """AdminClient.list_offsets with earliest, latest, a time and the largest timestamp
    (KIP-734's -3), each for both isolation levels; an aborted record counts for
    read_uncommitted only."""
    base = 1_767_225_600_000  # 2026-01-01 in milliseconds
    with oncelog.Producer(db_url, linger_ms=0) as producer:
        for i, minutes in enumerate((0, 20, 5, 20, 10)):
            producer.send(TOPIC, b"r%d" % i, partition=0, timestamp=base + minutes * 60_000)
        producer.flush()
    with oncelog.Producer(db_url, transactional_id="ck-aborted") as aborted:
        aborted.init_transactions()
        aborted.begin_transaction()
        aborted.send(TOPIC, b"aborted", partition=0, timestamp=base + 30 * 60_000).get(timeout=30)
        aborted.abort_transaction()
    ck_admin = AdminClient({"bootstrap.servers": broker})
    tp = CKAFKA.TopicPartition(TOPIC, 0)

    def listed(spec: Any, level: Any) -> tuple[int, int]:
        future = ck_admin.list_offsets({tp: spec}, isolation_level=level)[tp]
        info = future.result(timeout=30)
        return info.offset, info.timestamp

    committed, uncommitted = CKAFKA.IsolationLevel.READ_COMMITTED, CKAFKA.IsolationLevel.READ_UNCOMMITTED
    assert listed(CK.OffsetSpec.max_timestamp(), committed) == (1, base + 20 * 60_000)  # the first of equals
    assert listed(CK.OffsetSpec.max_timestamp(), uncommitted) == (5, base + 30 * 60_000)  # the aborted record
    assert listed(CK.OffsetSpec.earliest(), committed)[0] == 0
    assert listed(CK.OffsetSpec.latest(), committed)[0] == 7  # past the abort marker
    assert listed(CK.OffsetSpec.for_timestamp(base + 6 * 60_000), committed) == (1, base + 20 * 60_000)
