import errno
import json
import os
import threading
from pathlib import Path

from agents.kernlog.base import SourceGap, SourceLine, SourceSkip
from agents.kernlog.kmsg import KmsgSource, parse_kmsg_record
from agents.runtime import Agent
from agents.settings import AgentSettings
from tests.agents.kmsg_records import XID79, boot_stream, record

BOOT_A = "6f3b2a8e-0c51-4d7e-9a53-0d8a1f0e2b11"
BOOT_B = "a1b2c3d4-0000-4000-8000-123456789abc"


def _boot(tmp_path: Path, boot: str) -> Path:
    p = tmp_path / "boot_id"
    p.write_text(boot + "\n")
    return p


def _read_all(src: KmsgSource) -> list[SourceLine | SourceGap]:
    return [i for i in src.items() if i is not None]


def test_parse_record_with_continuation_and_unknown_fields() -> None:
    raw = record(339, XID79, prio=3, ts=12345, cont={"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"},
                 extra_fields=",caller=T123")
    prio, seq, ts, msg, cont = parse_kmsg_record(raw)  # type: ignore[misc]
    assert (prio, seq, ts, msg) == (3, 339, 12345, XID79)
    assert cont == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}
    assert parse_kmsg_record(b"garbage without header\n") is None


def test_recorded_stream_with_continuations_and_a_gap(tmp_path: Path) -> None:
    stream = tmp_path / "kmsg"
    stream.write_bytes(boot_stream([*range(0, 30), *range(42, 60)]))
    items = _read_all(KmsgSource(stream, _boot(tmp_path, BOOT_A), None, follow=False))
    lines = [i for i in items if isinstance(i, SourceLine)]
    gaps = [i for i in items if isinstance(i, SourceGap)]
    assert [ln.seq for ln in lines] == [*range(0, 30), *range(42, 60)]
    assert len(gaps) == 1 and gaps[0].lost == 12 and gaps[0].after_seq == 29 and gaps[0].next_seq == 42
    assert gaps[0].reason == "seq_jump"
    xid = next(ln for ln in lines if ln.seq == 5)
    assert xid.message == XID79 and xid.continuation["DEVICE"] == "+pci:0000:3b:00.0"
    assert xid.record_id == f"kmsg:{BOOT_A}:5" and xid.cursor == {"boot_id": BOOT_A, "seq": 5}


def test_resume_in_same_boot_skips_handled_records(tmp_path: Path) -> None:
    stream = tmp_path / "kmsg"
    stream.write_bytes(boot_stream(range(0, 50)))
    src = KmsgSource(stream, _boot(tmp_path, BOOT_A), {"boot_id": BOOT_A, "seq": 24}, follow=False)
    items = _read_all(src)
    assert [i.seq for i in items if isinstance(i, SourceLine)] == list(range(25, 50))
    assert not [i for i in items if isinstance(i, SourceGap)]


def test_resume_after_ring_buffer_wrapped_reports_lost_records(tmp_path: Path) -> None:
    stream = tmp_path / "kmsg"
    stream.write_bytes(boot_stream(range(100, 120)))  # records 25..99 were overwritten meanwhile
    items = _read_all(KmsgSource(stream, _boot(tmp_path, BOOT_A), {"boot_id": BOOT_A, "seq": 24}, follow=False))
    gap = items[0]
    assert isinstance(gap, SourceGap) and gap.lost == 75 and gap.cursor == {"boot_id": BOOT_A, "seq": 99}


def test_new_boot_starts_at_the_first_record(tmp_path: Path) -> None:
    stream = tmp_path / "kmsg"
    stream.write_bytes(boot_stream(range(0, 10)))
    src = KmsgSource(stream, _boot(tmp_path, BOOT_B), {"boot_id": BOOT_A, "seq": 500}, follow=False)
    items = _read_all(src)
    assert [i.seq for i in items if isinstance(i, SourceLine)] == list(range(10))
    assert all(i.record_id.startswith(f"kmsg:{BOOT_B}:") for i in items)


def test_epipe_reports_an_overrun_gap(tmp_path: Path) -> None:
    stream = tmp_path / "kmsg"
    chunks = [record(0, "a"), record(1, "b"), OSError(errno.EPIPE, "Broken pipe"), record(7, XID79), b""]

    def fake_read(_fd: int, _n: int) -> bytes:
        # Stands in for the device's read(): one record per call, EPIPE once when overwritten.
        nxt = chunks.pop(0)
        if isinstance(nxt, Exception):
            raise nxt
        return nxt

    stream.write_bytes(b"")
    items = _read_all(KmsgSource(stream, _boot(tmp_path, BOOT_A), None, follow=False, read=fake_read,
                                  one_record_per_read=True))
    gap = next(i for i in items if isinstance(i, SourceGap))
    assert gap.reason == "overrun" and gap.lost == 5 and gap.after_seq == 1 and gap.next_seq == 7


def test_fifo_stream_is_read_as_it_is_written(tmp_path: Path) -> None:
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    src = KmsgSource(fifo, _boot(tmp_path, BOOT_A), None, follow=True)
    data = boot_stream(range(0, 40))

    def writer() -> None:
        with open(fifo, "wb") as fh:
            for i in range(0, len(data), 97):  # split records across writes on purpose
                fh.write(data[i : i + 97])
                fh.flush()

    t = threading.Thread(target=writer)
    t.start()
    seen: list[int] = []
    for item in src.items():
        if isinstance(item, SourceLine):
            seen.append(item.seq or 0)
            if item.seq == 5:
                assert item.continuation == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}
        if len(seen) == 40:
            break
    src.close()
    t.join(5)
    assert seen == list(range(40))


def test_a_recording_that_spans_a_reboot_is_read_into_the_new_boot(tmp_path: Path) -> None:
    stream = tmp_path / "kmsg"
    stream.write_bytes(boot_stream(range(0, 10)))
    boot = _boot(tmp_path, BOOT_A)
    it = KmsgSource(stream, boot, None, follow=True).items()
    first = [next(i for i in it if i is not None) for _ in range(10)]
    assert [x.record_id for x in first][-1] == f"kmsg:{BOOT_A}:9"
    boot.write_text(BOOT_B + "\n")  # the machine rebooted; the recording goes on
    with open(stream, "ab") as fh:
        fh.write(boot_stream(range(0, 5)) + record(3, "a replayed duplicate of boot B's seq 3"))
    after = [next(i for i in it if i is not None) for _ in range(5)]
    assert [x.record_id for x in after] == [f"kmsg:{BOOT_B}:{s}" for s in range(5)]
    assert next(it) is None  # the duplicate of seq 3 in the same boot is skipped


def test_records_user_space_wrote_are_dropped_counted_and_passed(tmp_path: Path) -> None:
    # `echo '<4>NVRM: Xid ...' > /dev/kmsg` arrives with the user facility: priority 8 + 4 = 12
    stream = tmp_path / "kmsg"
    stream.write_bytes(record(0, "eth0: up", prio=6) + record(1, XID79, prio=12) + record(2, XID79, prio=3)
                       + record(3, XID79, prio=(23 << 3) | 4))
    foreign: list[int] = []
    src = KmsgSource(stream, _boot(tmp_path, BOOT_A), None, follow=False, on_foreign=lambda: foreign.append(1))
    items = _read_all(src)
    lines = [i for i in items if isinstance(i, SourceLine)]
    assert [ln.seq for ln in lines] == [0, 2]
    assert len(foreign) == 2
    skips = [i for i in items if isinstance(i, SourceSkip)]
    assert [s.cursor for s in skips] == [{"boot_id": BOOT_A, "seq": 1}, {"boot_id": BOOT_A, "seq": 3}]
    assert all(not s.messages for s in skips)  # not even kept for the evidence window
    assert not [i for i in items if isinstance(i, SourceGap)]  # dropped, not lost


def test_the_agent_publishes_no_fault_for_a_line_written_from_user_space(tmp_path: Path) -> None:
    stream = tmp_path / "kmsg"
    stream.write_bytes(record(0, XID79, prio=12) + record(1, "NVRM: loading NVIDIA UNIX driver", prio=14)
                       + record(2, XID79, prio=4))
    settings = AgentSettings(node="n1", bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "s", source="kmsg",
                             kmsg_path=stream, boot_id_path=_boot(tmp_path, BOOT_A), follow=False,
                             nvml_enabled=False, podresources_enabled=False, evidence_enabled=False,
                             metrics_port=None)
    agent = Agent(settings)
    try:
        agent._kernel_loop()
        spooled = [json.loads(e.value) for e in agent.spool.pending_entries()]
        assert [(r["seq"], r["fault"]) for r in spooled] == [(2, True)]
        assert agent.metrics.get("xidpipe_agent_kernel_foreign_dropped_total") == 2
    finally:
        agent.stop()
