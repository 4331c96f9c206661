"""The node agent: kernel-log source → pre-filter → spool → Kafka, plus the evidence collector and
the sensors of `agents.signals` (NVML, PodResources, ...) as side paths. Each path runs in its own
thread; none of them can block the kernel path. A sensor never sees the agent: it gets the narrow
callables `agents.main` lends it (`emit`, `trigger_evidence`, `gpus.report`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agents.cursors import CursorTracker, later_cursor
from agents.gpus import NodeGpus
from agents.health import HealthServer, ThreadWatch
from agents.identity import NodeToken
from agents.kernlog.base import KernelLogSource, SourceGap, SourceLine, SourceSkip
from agents.kernlog.prefilter import PreFilter
from agents.metrics import Metrics
from agents.publisher import Publisher
from agents.settings import AgentSettings
from agents.spool import Spool
from models.node_records import (
    KernelGap,
    KernelLine,
    NodeRecord,
    SpoolDrops,
    encode_node_record,
)
from models.topics import record_key
from models.wire import record_kind, topic_for

if TYPE_CHECKING:
    from agents.evidence import EvidenceCollector, FaultContext

log = logging.getLogger(__name__)

DROP_REPORT_INTERVAL_S = 10.0


def build_source(
    settings: AgentSettings,
    cursor: dict[str, Any] | None,
    line_filter: Callable[[str], bool] | None = None,
    block_filter: Callable[[str], bool] | None = None,
    on_foreign: Callable[[], None] | None = None,
) -> KernelLogSource:
    if settings.source == "kmsg":
        from agents.kernlog.kmsg import KmsgSource

        return KmsgSource(settings.kmsg_path, settings.boot_id_path, cursor, follow=settings.follow,
                          on_foreign=on_foreign)
    if settings.source == "journald":
        from agents.kernlog.journald import JournaldSource

        return JournaldSource(
            cursor,
            journalctl=settings.journalctl,
            journal_file=settings.journal_file,
            journal_directory=settings.journal_directory,
            follow=settings.follow,
            on_foreign=on_foreign,
        )
    from agents.kernlog.filetail import FileSource

    return FileSource(settings.log_file, cursor, follow=settings.follow, replay_rate=settings.replay_rate,
                      line_filter=line_filter, block_filter=block_filter, boot_time=settings.boot_time,
                      on_foreign=on_foreign)


def _security(settings: AgentSettings) -> dict[str, Any]:
    """kafka-python's TLS and SASL options (`models.kafka_security`)."""
    return settings.kafka_python_options()


def _identity(settings: AgentSettings) -> NodeToken | None:
    """The node identity token sent with every record, when the DaemonSet projects one."""
    if settings.identity_token_file is None:
        return None
    return NodeToken(settings.identity_token_file)


class Agent:
    def __init__(self, settings: AgentSettings, *, source: KernelLogSource | None = None) -> None:
        self.settings = settings
        self.node = settings.node
        self.metrics = Metrics()
        self.stop_event = threading.Event()
        state = settings.state_dir
        state.mkdir(parents=True, exist_ok=True)
        self.spool = Spool(
            state / "spool",
            self.metrics,
            max_bytes=settings.spool_max_bytes,
            fault_reserve_bytes=settings.spool_fault_reserve_bytes,
        )
        self.tracker = CursorTracker(state / f"cursor-{settings.source}.json")
        self.prefilter = PreFilter(settings.keep_patterns, settings.fault_patterns)
        self.gpus = NodeGpus(self.prefilter.set_gpu_pci_addresses)  # what the sensors report of the GPUs
        self.publisher = Publisher(
            self.spool,
            self.metrics,
            node=self.node,
            bootstrap_servers=settings.bootstrap_servers,
            on_acked=self.tracker.acked_through,
            linger_ms=settings.linger_ms,
            security=_security(settings),
            identity=_identity(settings),
        )
        self._source = source
        self._resume: dict[str, Any] | None = None  # where the kernel log resumes, read at `start`
        self._threads: list[threading.Thread] = []
        self._kernel_thread: threading.Thread | None = None
        self._publisher_thread: threading.Thread | None = None
        self.thread_watch = ThreadWatch()
        self._kernel_error: BaseException | None = None
        self._side: list[Any] = []  # the sensors: objects with start(stop) / close()
        self.evidence: EvidenceCollector | None = None
        self.health_server: HealthServer | None = None
        self._last_drop_report = time.monotonic()
        self._read_count = self._kept_count = 0
        self.kernel_done = threading.Event()

    # --- publishing -----------------------------------------------------------------------
    def publish(
        self,
        record: NodeRecord,
        *,
        fault: bool = True,
        cursor: dict[str, Any] | None = None,
    ) -> int | None:
        """Hand a record to the spool (thread-safe). Fault records are never dropped."""
        return self.spool.append(
            topic_for(record),
            record_key(record),
            encode_node_record(record).decode(),
            fault=fault,
            record_id=record.record_id,
            source=self.settings.source if cursor is not None else None,
            cursor=cursor,
            stop=self.stop_event,
        )

    def emit(self, record: NodeRecord) -> None:
        """Publish a side path's record: a full spool may drop the snapshots of droppable kinds
        (they are republished periodically), never anything else."""
        self.publish(record, fault=not record_kind(record.kind).droppable)

    def trigger_evidence(self, fault: FaultContext) -> None:
        """Capture evidence for a fault a sensor saw (thread-safe, never blocks); nothing when capture is off."""
        if self.evidence is not None:
            self.evidence.trigger(fault)

    # --- kernel path ----------------------------------------------------------------------
    def resume_cursor(self) -> dict[str, Any] | None:
        """The persisted cursor, or the last line already spooled when that is further along."""
        persisted = self.tracker.load()
        spooled = None
        for entry in self.spool.pending_entries():
            if entry.source == self.settings.source and entry.cursor is not None:
                spooled = entry.cursor
        return later_cursor(persisted, spooled) if persisted else spooled

    def _kernel_loop(self) -> None:
        try:
            source = self._source or build_source(
                self.settings,
                self._resume if self._resume is not None else self.resume_cursor(),
                lambda message: self.prefilter(message).keep,
                self.prefilter.may_match,
                lambda: self.metrics.inc("xidpipe_agent_kernel_foreign_dropped_total"),
            )
            self._source = source
            for item in source.items():
                if self.stop_event.is_set():
                    break
                if item is None:
                    self._flush_counts()
                    self.tracker.maybe_flush()
                    self._maybe_report_drops()
                    continue
                if isinstance(item, SourceSkip):
                    self._on_skip(item)
                elif isinstance(item, SourceGap):
                    self._on_gap(item)
                else:
                    self._on_line(item)
            self._flush_counts()
            self.tracker.flush()
        except BaseException as exc:
            self._kernel_error = exc
            log.exception("kernel-log path failed")
        finally:
            if self._source is not None:
                self._source.close()
            self.kernel_done.set()

    def _on_gap(self, gap: SourceGap) -> None:
        self.metrics.inc("xidpipe_agent_kernel_gaps_total")
        self.metrics.inc("xidpipe_agent_kernel_lost_records_total", gap.lost)
        log.warning("kernel log gap", extra={"reason": gap.reason, "lost": gap.lost, "boot_id": gap.boot_id})
        record = KernelGap(
            node=self.node,
            record_id=gap.record_id,
            source=gap.source,
            boot_id=gap.boot_id,
            after_seq=gap.after_seq,
            next_seq=gap.next_seq,
            lost=gap.lost,
            reason=gap.reason,  # type: ignore[arg-type]
        )
        number = self.publish(record, fault=True, cursor=gap.cursor)
        self.tracker.note(number, gap.cursor)

    def _flush_counts(self) -> None:
        """Per-line counters are kept locally by the kernel thread and added in bulk."""
        read, kept = self._read_count, self._kept_count
        if read:
            self.metrics.inc("xidpipe_agent_kernel_lines_read_total", read)
            self.metrics.inc("xidpipe_agent_prefilter_kept_total", kept)
            self.metrics.inc("xidpipe_agent_prefilter_dropped_total", read - kept)
            self._read_count = self._kept_count = 0
        self._maybe_report_drops()

    def _on_skip(self, skip: SourceSkip) -> None:
        self._read_count += len(skip.messages)
        if self.evidence is not None:
            self.evidence.observe_lines(skip.messages)
        self.tracker.note(None, skip.cursor)
        if self._read_count >= 256:
            self._flush_counts()

    def _on_line(self, line: SourceLine) -> None:
        self._read_count += 1
        if self._read_count >= 256:
            self._flush_counts()
        if self.evidence is not None:
            self.evidence.observe_line(line.message, line.event_at)
        verdict = self.prefilter(line.message)
        if not verdict.keep:
            self.tracker.note(None, line.cursor)
            return
        self._kept_count += 1
        record = KernelLine(
            node=self.node,
            record_id=line.record_id,
            source=line.source,
            message=line.message,
            fault=verdict.fault,
            boot_id=line.boot_id,
            seq=line.seq,
            cursor=line.journal_cursor,
            file_path=line.file_path,
            file_offset=line.file_offset,
            content_hash=line.content_hash,
            priority=line.priority,
            monotonic_us=line.monotonic_us,
            continuation=line.continuation,
            event_at=line.event_at,
            boot_time=line.boot_time,
        )
        number = self.publish(record, fault=verdict.fault, cursor=line.cursor)
        self.tracker.note(number, line.cursor)
        if verdict.fault and self.evidence is not None:
            self.evidence.on_kernel_fault(line.record_id, line.message)

    def _maybe_report_drops(self) -> None:
        if time.monotonic() - self._last_drop_report < DROP_REPORT_INTERVAL_S:
            return
        self._last_drop_report = time.monotonic()
        total, since = self.spool.take_drop_report()
        if since:
            log.warning("spool full: non-fault records dropped", extra={"dropped": since, "total": total})
            self.publish(
                SpoolDrops(node=self.node, record_id=f"spool-drops:{time.time_ns()}",
                           dropped_total=total, dropped_since_last=since),
                fault=True,
            )

    # --- lifecycle ------------------------------------------------------------------------
    def add_side_path(self, component: Any) -> None:
        self._side.append(component)

    def health(self) -> dict[str, Any]:
        kernel_alive = self._kernel_thread is not None and self._kernel_thread.is_alive()
        dead = self.thread_watch.dead({} if self.stop_event.is_set() else {"publisher": self._publisher_thread})
        if self._kernel_error is not None:
            dead["kernel-log"] = repr(self._kernel_error)[:300]
        return {
            "ok": (kernel_alive or (self.kernel_done.is_set() and self._kernel_error is None)) and not dead,
            "dead_threads": dead,
            "node": self.node,
            "kernel_source": self.settings.source,
            "kernel_path_alive": kernel_alive,
            "kafka_connected": self.publisher.connected,
            "spool_pending": self.spool.pending_count(),
            "spool_bytes": self.spool.size,
        }

    def _spawn(self, name: str, target: Callable[[], None]) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def start(self) -> None:
        if self.settings.metrics_port is not None:
            self.health_server = HealthServer(
                self.settings.metrics_host, self.settings.metrics_port, self.metrics, self.health
            )
            self.health_server.start()
        self.thread_watch.install()
        # Where the kernel log resumes, read before the publisher starts: once it runs it may find the
        # unacknowledged records in Kafka and acknowledge them, and the spool would no longer say how
        # far the log was read (lines past the persisted cursor would be read and sent again).
        self._resume = self.resume_cursor()
        self._publisher_thread = self._spawn("publisher", lambda: self.publisher.run(self.stop_event))
        for component in self._side:
            component.start(self.stop_event)
        self._kernel_thread = self._spawn("kernel-log", self._kernel_loop)

    def run(self, *, drain_timeout_s: float = 30.0) -> int:
        """Run until stopped; with `follow=False`, until the source is read and the spool drained."""
        self.start()
        try:
            while not self.stop_event.is_set():
                if self.kernel_done.wait(0.5):
                    break
            if self._kernel_error is None and not self.stop_event.is_set():
                deadline = time.monotonic() + drain_timeout_s
                while self.spool.pending_count() and time.monotonic() < deadline:
                    time.sleep(0.05)
        finally:
            self.stop()
        return 1 if self._kernel_error is not None else 0

    def stop(self) -> None:
        self.stop_event.set()
        self.spool.notify()
        for component in self._side:
            component.close()
        for thread in self._threads:
            thread.join(timeout=10)
        self.publisher.close()
        self.tracker.flush()
        self.spool.close()
        if self.health_server is not None:
            self.health_server.stop()
        self.thread_watch.uninstall()
