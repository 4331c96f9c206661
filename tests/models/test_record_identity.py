"""One kernel record, one report (`models.record_identity`): the copies of one record in kmsg, the
journal, kern.log and syslog share its identity; other records, and other boots' records, do not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from models.kernlog import ParseOptions, parse_lines
from models.kernlog.record import FaultRecord
from models.record_identity import RecordIdentity, first_copies, record_identity, same_record
from models.scan import scan

OPTS = ParseOptions(year=2026, now=datetime(2026, 12, 1, tzinfo=UTC))
XID94 = "NVRM: Xid (PCI:0000:b7:00): 94, pid=10233, name=trainer, Contained: SM (0x1). RST: No, D-RST: No"


def parsed(line: str) -> FaultRecord:
    (rec,) = [r for r in parse_lines([line], OPTS) if r.kind != "gpu_identity"]
    return rec


KERN_LOG = f"Nov 25 12:52:03 gpu-node-02 kernel: [11123.000000] {XID94}"
SYSLOG_PRECISE = f"2026-11-25T12:52:03.391122+00:00 gpu-node-02 kernel: [11123.000000] {XID94}"
DMESG = f"[11123.000000] {XID94}"


@pytest.mark.parametrize(("a", "b", "same"), [
    (KERN_LOG, SYSLOG_PRECISE, True),  # rsyslog writes one record to kern.log and syslog, in either format
    (KERN_LOG, DMESG, True),
    (KERN_LOG, KERN_LOG.replace("[11123.000000]", "[11123.000001]"), False),  # another record: another stamp
    (KERN_LOG, KERN_LOG.replace("pid=10233", "pid=10234"), False),  # the same stamp, another text
    (KERN_LOG, KERN_LOG.replace("Contained: SM", "Contained:   SM"), True),  # spacing is no text
])
def test_copies_of_one_record_share_its_identity(a: str, b: str, same: bool) -> None:
    assert same_record(record_identity(parsed(a)), record_identity(parsed(b))) is same


def test_a_kmsg_line_matches_its_file_copy_by_the_kernel_s_stamp() -> None:
    """The agent's kmsg line is the bare message with the header's microseconds; the journal's own
    monotonic time is when it received the record, its `_SOURCE_MONOTONIC_TIMESTAMP` the kernel's stamp."""
    file_copy = record_identity(parsed(KERN_LOG))
    bare = parsed(XID94)
    kmsg = record_identity(bare, source="kmsg", boot_id="b1", seq=4711, monotonic_us=11_123_000_000)
    journal = record_identity(bare, source="journald", boot_id="b1", monotonic_us=11_123_004_512,
                              continuation={"_SOURCE_MONOTONIC_TIMESTAMP": "11123000000"})
    journal_without = record_identity(bare, source="journald", boot_id="b1", monotonic_us=11_123_004_512)
    assert same_record(kmsg, file_copy) and same_record(journal, file_copy) and same_record(kmsg, journal)
    assert journal_without.key is None  # the journal's receipt time is no kernel stamp
    # The same stamp and text in another boot is another record.
    assert not same_record(kmsg, record_identity(bare, source="kmsg", boot_id="b2", monotonic_us=11_123_000_000))


def test_without_a_stamp_the_sequence_number_else_no_identity() -> None:
    bare = parsed(XID94)
    assert record_identity(bare, source="kmsg", boot_id="b1", seq=7) == RecordIdentity("seq:7", "b1")
    no_stamp = f"Nov 25 12:52:03 gpu-node-02 kernel: {XID94}"
    # A syslog line without the kernel's uptime cannot be told from a storm that repeats it: each counts.
    assert record_identity(parsed(no_stamp)).key is None
    assert not same_record(record_identity(parsed(no_stamp)), record_identity(parsed(no_stamp)))


def test_first_copies_keeps_order_and_each_node_s_own_records() -> None:
    items = [("n1", KERN_LOG), ("n2", KERN_LOG), ("n1", SYSLOG_PRECISE), ("n1", DMESG.replace("94,", "48,"))]
    kept = first_copies(items, lambda it: (it[0], record_identity(parsed(it[1]))))
    assert kept == [items[0], items[1], items[3]]


def test_a_scan_of_kern_log_and_syslog_counts_one_contained_ecc_error() -> None:
    """Issue #23: a node whose kern.log and syslog both carry the same Xid 94 line is one contained ECC
    error, not two."""
    kern_log = [f"Nov 25 12:52:03 gpu-node-02 kernel: [11123.000000] {XID94}",
                "Nov 25 12:59:03 gpu-node-02 kernel: [11543.000000] NVRM: Xid (PCI:0000:b7:00): 13, pid=1, "
                "name=a, Graphics Exception"]
    syslog = [SYSLOG_PRECISE]
    records = [("gpu-node-02", r) for r in parse_lines(kern_log, OPTS)] + [
        ("gpu-node-02", r) for r in parse_lines(syslog, OPTS)]
    (inc,) = scan(records)
    assert inc.codes() == ["Xid 94", "Xid 13"] and inc.count == 2  # the Xid 94 once, and the Xid 13
    assert len(inc.events) == 2
