"""Spool → Kafka with kafka-python: `acks=all`, idempotent, keyed by node, in order.

A record's key is its node, or (node, kind) on the compacted state topic (`models.topics.record_key`);
`NodePartitioner` hashes only the node part, so every record of one node lands on the node's partition.

The producer retries for as long as Kafka is away (its delivery timeout is days, not minutes), so
records leave the spool in order and a broker restart causes no duplicates. After a crash, the
records the spool still holds as unacknowledged may already be in Kafka (acknowledged just before
the crash): at start the publisher reads back the node's partition from shortly before the last
acknowledgement it persisted, and again after a pause until the partition's end holds none of its
node's records more (a request the dead process had sent may land late), and skips the records it
finds there.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kafka.partitioner import DefaultPartitioner

from agents.identity import NodeToken
from agents.metrics import Metrics
from agents.spool import Spool, SpoolEntry
from models.topics import key_node

log = logging.getLogger(__name__)

WINDOW = 2000  # records in flight at most
READBACK_MARGIN_S = 60.0
READBACK_SETTLE_S = (1.0, 2.0)  # pauses before reading the partition's end again after a crash
READBACK_RETRY_S = (1.0, 2.0, 4.0, 8.0)  # pauses between read-backs that failed, before resending instead
STALL_S = 5.0
PERSIST_EVERY_S = 0.5
SPOOL_SYNC_S = 5.0  # fsync of the spool for power loss; a process crash loses nothing written
_PERMANENT = ("RecordTooLargeError", "MessageSizeTooLargeError", "InvalidRecordError", "CorruptRecordError",
              "RecordListTooLargeError", "TopicAuthorizationFailedError", "InvalidTopicError")


class NodePartitioner(DefaultPartitioner):  # type: ignore[misc]
    """Kafka's default partitioner (murmur2 of the key, as the Java client) over the node part of the key
    only: a record keyed `<node>/<kind>` goes where a record keyed `<node>` goes."""

    def partition(self, topic: str, key: Any, serialized_key: bytes | None, value: Any, serialized_value: Any,
                  cluster: Any) -> int:
        node = (key_node(serialized_key) or serialized_key) if serialized_key is not None else None
        return int(super().partition(topic, key, node, value, serialized_value, cluster))


def producer_config(
    bootstrap_servers: str, *, linger_ms: int = 2, security: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap_servers.split(","),
        "acks": "all",
        "enable_idempotence": True,
        "max_in_flight_requests_per_connection": 5,
        "linger_ms": linger_ms,
        "retries": 2**31 - 1,
        "delivery_timeout_ms": 7 * 24 * 3600 * 1000,
        "request_timeout_ms": 10_000,
        "max_block_ms": 2_000,
        # The constructor waits this long for a first broker; short, so shutdown is never held up.
        "bootstrap_timeout_ms": 2_000,
        "reconnect_backoff_ms": 100,
        "reconnect_backoff_max_ms": 1_000,
        "retry_backoff_ms": 100,
        "max_request_size": 4 * 1024 * 1024,
        "client_id": "xidpipe-agent",
        # kafka-python's own metrics sensors cost CPU on every request; the agent exports its own.
        "metrics_enabled": False,
        "partitioner": NodePartitioner(),
        **(security or {}),
    }


class Publisher:
    def __init__(
        self,
        spool: Spool,
        metrics: Metrics,
        *,
        node: str,
        bootstrap_servers: str,
        on_acked: Callable[[int], None],
        linger_ms: int = 2,
        security: dict[str, Any] | None = None,
        identity: NodeToken | None = None,
    ) -> None:
        self._spool = spool
        self._identity = identity
        self._metrics = metrics
        self._node = node
        self._bootstrap = bootstrap_servers
        self._on_acked = on_acked
        self._config = producer_config(bootstrap_servers, linger_ms=linger_ms, security=security)
        self._security = security or {}
        self._producer: Any = None
        self._cond = threading.Condition()
        self._inflight: deque[tuple[int, Any]] = deque()
        self._unsent: deque[SpoolEntry] = deque()
        self._recovered = False
        self._recover_through = spool.last_number_at_open  # records that may already be in Kafka
        self._delivered: set[str] = set()
        self._pending_ack: int | None = None
        self._persisted_at = 0.0
        self.connected = False
        self._connected_at: float | None = None
        self.last_ack_at: float | None = None

    # --- producer lifecycle ---------------------------------------------------------------
    def _connect(self) -> bool:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        try:
            self._producer = KafkaProducer(**self._config)
        except (KafkaError, OSError, ValueError) as exc:
            if self.connected or self._producer is None:
                log.warning("Kafka unreachable; records stay in the spool", extra={"error": repr(exc)})
            self._set_connected(False)
            return False
        self._set_connected(True)
        log.info("Kafka producer connected", extra={"bootstrap": self._bootstrap})
        return True

    def _set_connected(self, value: bool) -> None:
        if value and not self.connected:
            self._connected_at = time.time()
        self.connected = value
        self._metrics.set("xidpipe_agent_kafka_connected", 1.0 if value else 0.0)

    def _reset(self, reason: str) -> None:
        log.warning("resetting the Kafka producer; resending from the first unacknowledged record",
                    extra={"reason": reason})
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=1)
            except Exception:
                log.debug("producer close failed", exc_info=True)
        self._inflight.clear()
        self._unsent.clear()
        self._persist_acks()  # resend from after the last acknowledged record, not the last persisted
        self._spool.rewind()
        # Records in flight at the reset may have reached Kafka: read back before resending them.
        self._recover_through = self._spool.last_number
        self._recovered = False
        self._set_connected(False)

    # --- crash recovery -------------------------------------------------------------------
    def _recover(self) -> None:
        """Find which unacknowledged spool records are already in Kafka."""
        self._recovered = True
        through = self._recover_through
        if through <= self._spool.acked:
            return
        pending = self._spool.pending_entries(through=through)
        if not pending:
            return
        since = self._spool.state_written_at
        topics = sorted({e.topic for e in pending})
        for attempt, pause in enumerate((*READBACK_RETRY_S, None), start=1):
            try:
                self._delivered = self._read_back(topics, since)
                break
            except Exception as exc:  # a broker still starting, or too busy to answer in time: again
                if pause is None:
                    log.warning("read-back after restart failed %d times; unacknowledged records will be resent",
                                attempt, extra={"error": repr(exc)})
                    return
                log.info("read-back after restart failed; again in %.0f s", pause, extra={"error": repr(exc)})
                time.sleep(pause)
        found = sum(1 for e in pending if e.record_id in self._delivered)
        log.info("recovered spool after restart",
                 extra={"pending": len(pending), "already_in_kafka": found})

    def _read_back(self, topics: list[str], since: float | None) -> set[str]:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.partitioner.default import murmur2

        consumer = KafkaConsumer(
            bootstrap_servers=self._bootstrap.split(","), enable_auto_commit=False, group_id=None,
            consumer_timeout_ms=2000, bootstrap_timeout_ms=5000, **self._security,
        )
        found: set[str] = set()
        try:
            key = self._node.encode()
            for topic in topics:
                parts = consumer.partitions_for_topic(topic)
                if not parts:
                    continue
                all_parts = sorted(parts)
                # NodePartitioner's choice for the node (murmur2, as the Java client's default).
                tp = TopicPartition(topic, all_parts[(murmur2(key) & 0x7FFFFFFF) % len(all_parts)])
                consumer.assign([tp])
                end = consumer.end_offsets([tp])[tp]
                start = 0
                if since is not None:
                    found_offset = consumer.offsets_for_times({tp: int((since - READBACK_MARGIN_S) * 1000)})[tp]
                    if found_offset is None:
                        continue
                    start = found_offset.offset
                consumer.seek(tp, start)
                deadline = time.monotonic() + 60
                # A produce request the crashed process had sent may reach the log after the first end
                # offset was read (the kernel still delivers a dead process's socket buffer; a busy
                # broker appends it later): read again from there after a pause, until a pass adds none.
                for settle in (0.0, *READBACK_SETTLE_S):
                    if settle:
                        time.sleep(settle)
                        end = consumer.end_offsets([tp])[tp]
                    before = len(found)
                    while consumer.position(tp) < end and time.monotonic() < deadline:
                        for records in consumer.poll(timeout_ms=500).values():
                            for rec in records:
                                if rec.key is None or key_node(rec.key) != key:
                                    continue
                                try:
                                    found.add(json.loads(rec.value)["record_id"])
                                except (ValueError, KeyError, TypeError):
                                    continue
                    if settle and len(found) == before:
                        break
        finally:
            consumer.close()
        return found

    # --- main loop ------------------------------------------------------------------------
    def _done(self, *_: Any) -> None:
        with self._cond:
            self._cond.notify_all()
        self._spool.notify()

    def run(self, stop: threading.Event) -> None:
        last_sync = time.monotonic()
        while not stop.is_set():
            if self._producer is None and not self._connect():
                stop.wait(1.0)
                continue
            if not self._recovered:
                self._recover()
            self._send_more()
            self._collect_acks()
            if self._pending_ack is not None and time.monotonic() - self._persisted_at >= PERSIST_EVERY_S:
                self._persist_acks()
            if time.monotonic() - last_sync > SPOOL_SYNC_S:
                self._spool.sync()
                last_sync = time.monotonic()
            self._watch_stall()
            idle = 0.2 if self._pending_ack is None else PERSIST_EVERY_S
            if self._inflight:
                with self._cond:
                    if self._inflight and self._inflight[0][1] is not None and not self._inflight[0][1].is_done:
                        self._cond.wait(min(idle, 0.05))
            elif not self._unsent:
                self._spool.wait_for_data(self._spool_read_mark(), idle)
            else:
                stop.wait(0.2)

    def _watch_stall(self) -> None:
        """No acknowledgement for STALL_S while records are in flight: report Kafka as away."""
        if not self._inflight or not self.connected:
            return
        since = self.last_ack_at or self._connected_at
        if since is not None and time.time() - since > STALL_S:
            log.warning("Kafka is not acknowledging; records stay in the spool",
                        extra={"in_flight": len(self._inflight), "spool_pending": self._spool.pending_count()})
            self._set_connected(False)

    def _spool_read_mark(self) -> int:
        return self._spool._rlast

    def _send_more(self) -> None:
        from kafka.errors import KafkaError

        room = WINDOW - len(self._inflight) - len(self._unsent)
        if room > 0:
            self._unsent.extend(self._spool.read(room))
        while self._unsent:
            entry = self._unsent[0]
            if entry.record_id in self._delivered:
                self._delivered.discard(entry.record_id)
                self._inflight.append((entry.number, None))
                self._unsent.popleft()
                continue
            try:
                headers = self._identity.headers() if self._identity is not None else None
                fut = self._producer.send(entry.topic, key=entry.key.encode(), value=entry.value.encode(),
                                          headers=headers)
            except KafkaError as exc:  # metadata not available yet, buffer full: retry later
                if self.connected:
                    log.warning("Kafka send deferred", extra={"error": repr(exc)})
                self._set_connected(False)
                return
            fut.add_both(self._done)
            self._inflight.append((entry.number, fut))
            self._unsent.popleft()

    def _collect_acks(self) -> None:
        acked: int | None = None
        while self._inflight:
            number, fut = self._inflight[0]
            if fut is not None:
                if not fut.is_done:
                    break
                if fut.failed():
                    exc = fut.exception
                    if type(exc).__name__ in _PERMANENT:
                        log.error("Kafka rejected a record permanently; skipped",
                                  extra={"spool_number": number, "error": repr(exc)})
                        self._metrics.inc("xidpipe_agent_records_failed_total")
                    else:
                        if acked is not None:
                            self._ack(acked)
                        self._reset(repr(exc))
                        return
                else:
                    self._metrics.inc("xidpipe_agent_records_acked_total")
                    if not self.connected:
                        log.info("Kafka acknowledges again; draining the spool",
                                 extra={"spool_pending": self._spool.pending_count()})
                        self._set_connected(True)
            acked = number
            self._inflight.popleft()
        if acked is not None:
            self._ack(acked)

    def _ack(self, number: int) -> None:
        """Persist acknowledgements at most every PERSIST_EVERY_S (a crash in between resends at most
        that much, which the read-back at start finds in Kafka)."""
        self.last_ack_at = time.time()
        self._pending_ack = number
        if time.monotonic() - self._persisted_at >= PERSIST_EVERY_S:
            self._persist_acks()

    def _persist_acks(self) -> None:
        number, self._pending_ack = self._pending_ack, None
        if number is None:
            return
        self._persisted_at = time.monotonic()
        self._on_acked(number)
        self._spool.ack(number)

    def close(self, timeout: float = 5.0) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.flush(timeout=timeout)
                self._collect_acks_from(producer)
            finally:
                producer.close(timeout=timeout)
        self._persist_acks()

    def _collect_acks_from(self, producer: Any) -> None:
        self._producer = producer
        try:
            self._collect_acks()
        finally:
            self._producer = None
