"""Recorded /dev/kmsg streams: what `read()` on the device returns, one record after another."""

from __future__ import annotations

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
XID48 = "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."  # noqa: E501


def record(seq: int, message: str, *, prio: int = 4, ts: int | None = None, cont: dict[str, str] | None = None,
           extra_fields: str = "") -> bytes:
    head = f"{prio},{seq},{ts if ts is not None else 1_000_000 + seq * 1000},-{extra_fields};{message}\n"
    body = "".join(f" {k}={v}\n" for k, v in (cont or {}).items())
    return (head + body).encode()


def boot_stream(seqs: range | list[int], *, gpu_every: int = 10) -> bytes:
    """Records for the given sequence numbers; every `gpu_every`-th is an Xid with continuation lines."""
    out = []
    for seq in seqs:
        if gpu_every and seq % gpu_every == 5:
            out.append(record(seq, XID79 if seq % 20 == 5 else XID48,
                              cont={"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}))
        else:
            out.append(record(seq, f"eth0: periodic housekeeping {seq}", prio=6))
    return b"".join(out)
