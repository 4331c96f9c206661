"""The kernel-log evidence shows the fault's own lines and the GPU's lines around them, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from models.evidence_lines import capture_line, parse_capture, select

T = datetime(2026, 11, 25, 12, 52, 8, tzinfo=UTC)


def capture(*lines: tuple[float | None, str]) -> str:
    return "".join(capture_line(T + timedelta(seconds=s) if s is not None else None, text) + "\n"
                   for s, text in lines)


DBE = capture(
    (-900, "Nov 25 12:37:08 gpu-node-02 kernel: [10228.1] xfs filesystem being remounted at /var/lib/kubelet"),
    (-600, "Nov 25 12:42:08 gpu-node-02 kernel: [10528.1] cgroup: fork rejected by pids controller"),
    (-300, "Nov 25 12:47:08 gpu-node-02 kernel: [10828.1] NVRM: GPU 0000:18:00.0: persistence mode enabled"),
    (-200, "Nov 25 12:48:48 gpu-node-02 kernel: [10928.1] nvidia 0000:18:00.0: AER: Corrected error received"),
    (-5, "Nov 25 12:52:03 gpu-node-02 kernel: [11123.0] NVRM: Xid (PCI:0000:b7:00): 94, pid=10233, name=trainer, "
         "Contained: SM (0x1). RST: No, D-RST: No"),
    (-1, "Nov 25 12:52:07 gpu-node-02 kernel: [11127.0] pcieport 0000:00:01.0: AER: enabled with IRQ 27"),
    (0, "Nov 25 12:52:08 gpu-node-02 kernel: [11128.0] NVRM: Xid (PCI:0000:b7:00): 48, pid='<unknown>', "
        "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU"),
    (1, "Nov 25 12:52:09 gpu-node-02 kernel: [11129.0] NVRM: Xid (PCI:0000:b7:00): 63, pid='<unknown>', "
        "name=<unknown>, Row Remapper: New row (0x0000000000bf12a0) was marked for remapping"),
    (2, "Nov 25 12:52:10 gpu-node-02 kernel: [11130.0] EXT4-fs (nvme0n1p2): mounted filesystem"),
)


def test_the_dbe_shows_its_xid_63_and_leaves_the_noise_and_the_other_gpus_out() -> None:
    sel = select(DBE, pci="0000:b7:00.0", uuid="GPU-a40e77c1")
    assert (sel.kept, sel.total, sel.timed) == (3, 9, True)
    assert [ln.split("  ", 1)[0] for ln in sel.lines] == [
        "2026-11-25T12:52:03Z", "2026-11-25T12:52:08Z", "2026-11-25T12:52:09Z"]
    text = "\n".join(sel.lines)
    assert "): 94, " in text and "): 48, " in text and "Row Remapper" in text
    for noise in ("xfs", "cgroup", "0000:18:00.0", "EXT4", "AER: enabled"):
        assert noise not in text
    assert "kernel: [" not in text  # the line's own prefix gives way to its time in UTC


def test_the_gsp_fault_keeps_its_crash_dump_and_xid_154_which_name_no_gpu() -> None:
    sel = select(capture(
        (-3600, "NVRM: GPU at PCI:0000:4e:00: GPU-77aa01bc"),
        (-100, "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms"),
        (0, "NVRM: Xid (PCI:0000:4e:00): 119, pid=3317, name=nvidia-smi, Timeout after 6s of waiting for RPC"),
        (1, "NVRM: A GPU crash dump has been created. If possible, please run"),
        (1, "NVRM: nvidia-bug-report.sh as root to collect this data before"),
        (1, "NVRM: the NVIDIA kernel module is unloaded."),
        (2, "NVRM: Xid (PCI:0000:4e:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"),
        (5, "nvidia 0000:18:00.0: enabling device (0000 -> 0002)"),
        (600, "NVRM: A GPU crash dump has been created. If possible, please run"),  # long after: another event
    ), pci="0000:4e:00.0")
    text = "\n".join(sel.lines)
    assert sel.kept == 6 and "crash dump" in text and "nvidia-bug-report.sh" in text and "): 154, " in text
    assert "Kernel Mode Setting" not in text and "18:00.0" not in text
    assert sel.lines[-1].startswith("2026-11-25T12:52:10Z")


def test_the_root_port_that_reported_the_gpu_is_kept_and_another_port_is_not() -> None:
    sel = select(capture(
        (0, "[Wed Nov 25 15:26:51 2026] pcieport 0000:60:01.1: AER: Uncorrected (Fatal) error received: 0000:63:00.0"),
        (0, "[Wed Nov 25 15:26:51 2026] pcieport 0000:60:01.1: AER: Multiple Uncorrected (Fatal) error received"),
        (0, "[Wed Nov 25 15:26:51 2026] nvidia 0000:63:00.0: AER:    [ 5] SDES                   (First)"),
        (1, "[Wed Nov 25 15:26:52 2026] pcieport 0000:00:01.0: AER: Corrected error received: 0000:05:00.0"),
        (1, "[Wed Nov 25 15:26:52 2026] NVRM: GPU 0000:63:00.0: GPU has fallen off the bus."),
    ), pci="0000:63:00.0")
    text = "\n".join(sel.lines)
    assert sel.kept == 4 and "Multiple Uncorrected" in text and "0000:05:00.0" not in text
    assert "[ 5] SDES" in text  # the bracket inside the message stays: only the line's own prefix goes


def test_an_sxid_keeps_its_severity_and_data_lines() -> None:
    raw = "[30041.000000] nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, "
    sel = select(capture((0, raw + "Non-fatal, Link 32 egress non-posted PRIV error (First)"),
                         (0, raw + "Severity 0 Engine instance 32 Sub-engine instance 00"),
                         (0, raw + "Data {0x00000000, 0x00000000}"),
                         (0, "[30041.000000] NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', NVLink: fatal error")),
                 pci="0000:86:00.0")
    assert sel.kept == 3 and all("12028" in ln for ln in sel.lines)


def test_a_storm_of_one_xid_is_shown_once_with_how_many_more() -> None:
    storm = [(i * 0.05, f"NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', NVLink: fatal error on link {12 + i % 4}")
             for i in range(100)]
    sel = select(capture(*storm), pci="0000:9a:00.0")
    assert sel.kept == 100 and len(sel.lines) == 1
    assert sel.lines[0].endswith("[and 99 more like it, the last at 2026-11-25T12:52:12.95Z]")
    few = select(capture(*storm[:3]), pci="0000:9a:00.0")
    assert len(few.lines) == 3  # a short run stays whole: each line may differ in what matters


def test_a_capture_without_times_is_selected_by_nearby_lines() -> None:
    lines = ["xfs noise"] * 10 + ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                                 "NVRM: GPU crash dump lines", "nvidia 0000:5e:00.0: other GPU"] + ["xfs noise"] * 10
    sel = select("\n".join(lines) + "\n", pci="0000:3b:00.0")
    assert not sel.timed and sel.lines == tuple(lines[10:12])


def test_capture_lines_are_written_in_utc_and_read_back() -> None:
    at = datetime(2026, 11, 26, 1, 0, 0, 250000, tzinfo=timezone(timedelta(hours=1)))
    text = capture_line(at, "NVRM: Xid (PCI:0000:3b:00): 79") + "\n" + capture_line(None, "no time") + "\n"
    assert text.splitlines()[0].startswith("2026-11-26T00:00:00.25Z  NVRM")
    [first, second] = parse_capture(text)
    assert first.at == at and first.text == "NVRM: Xid (PCI:0000:3b:00): 79"
    assert second.at is None and second.text == "no time"


def test_nothing_of_the_device_selects_nothing() -> None:
    assert select(DBE, pci="0000:ca:00.0").kept == 0
    assert select(DBE, pci=None).kept == 0
