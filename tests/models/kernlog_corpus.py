"""The fixture corpus: realistic kernel-log lines, each saying which public format or document it follows.

PREFIX_CASES: one Xid message behind every supported prefix form.
RECORD_CASES: every record kind the parser recognises, and lines that are not faults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


@dataclass(frozen=True)
class PrefixCase:
    name: str
    source: str
    line: str
    expect: dict[str, Any]


PREFIX_CASES = [
    PrefixCase("dmesg raw", "util-linux dmesg(1), default output: [seconds.micros] since boot",
               f"[ 1843.308145] {XID79}",
               {"timestamp": None, "uptime_s": 1843.308145, "host": None, "format": "dmesg"}),
    PrefixCase("dmesg -T", "util-linux dmesg(1) --ctime: [%a %b %e %H:%M:%S %Y]",
               f"[Tue Nov 18 14:02:11 2025] {XID79}",
               {"timestamp": "2025-11-18T14:02:11", "uptime_s": None, "host": None, "format": "dmesg-T"}),
    PrefixCase("dmesg --delta", "util-linux dmesg(1) --show-delta: [seconds <delta>]",
               f"[ 1843.308145 <    0.000512>] {XID79}",
               {"uptime_s": 1843.308145, "format": "dmesg"}),
    PrefixCase("dmesg -T --delta", "util-linux dmesg(1) --ctime --show-delta",
               f"[Tue Nov 18 14:02:11 2025 <    0.000512>] {XID79}",
               {"timestamp": "2025-11-18T14:02:11", "format": "dmesg-T"}),
    PrefixCase("dmesg --time-format=iso", "util-linux dmesg(1) --time-format=iso: YYYY-MM-DDTHH:MM:SS,micros+zone",
               f"2025-11-18T14:02:11,308145+01:00 {XID79}",
               {"timestamp": "2025-11-18T14:02:11.308145+01:00", "host": None, "format": "dmesg-iso"}),
    PrefixCase("journalctl short", "journalctl(1) --output=short: syslog-style 'Mon DD HH:MM:SS host ident:'",
               f"Nov 18 14:02:11 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-11-18T14:02:11", "host": "gpu-node-07", "format": "syslog"}),
    PrefixCase("journalctl short-iso", "journalctl(1) --output=short-iso: ISO 8601 with numeric zone",
               f"2025-11-18T14:02:11+0000 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-11-18T14:02:11+00:00", "host": "gpu-node-07", "format": "iso-syslog"}),
    PrefixCase("journalctl short-precise", "journalctl(1) --output=short-precise: microsecond precision",
               f"Nov 18 14:02:11.308145 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-11-18T14:02:11.308145", "host": "gpu-node-07", "format": "syslog"}),
    PrefixCase("journalctl short-iso-precise", "journalctl(1) --output=short-iso-precise",
               f"2025-11-18T14:02:11.308145+00:00 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-11-18T14:02:11.308145+00:00", "host": "gpu-node-07"}),
    PrefixCase("RFC 3164 with PRI and host", "RFC 3164 section 4.1: <PRI>TIMESTAMP HOSTNAME TAG: MSG",
               f"<4>Nov 18 14:02:11 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-11-18T14:02:11", "host": "gpu-node-07", "format": "syslog"}),
    PrefixCase("RFC 3164 without host", "RFC 3164 section 4.3.2 relay form without HOSTNAME",
               f"<4>Nov  8 04:02:11 kernel: {XID79}",
               {"timestamp": "2025-11-08T04:02:11", "host": None, "format": "syslog"}),
    PrefixCase("RFC 3164 German month", "rsyslog traditional format written under a de_DE locale",
               f"Dez  3 14:02:11 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-12-03T14:02:11", "host": "gpu-node-07"}),
    PrefixCase("RFC 3164 French month", "rsyslog traditional format written under a fr_FR locale",
               f"déc. 03 14:02:11 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-12-03T14:02:11", "host": "gpu-node-07"}),
    PrefixCase("RFC 3164 Chinese month", "journalctl short output under a zh_CN.UTF-8 locale",
               f"11月 18 14:02:11 gpu-node-07 kernel: {XID79}",
               {"timestamp": "2025-11-18T14:02:11", "host": "gpu-node-07"}),
    PrefixCase("RFC 5424", "RFC 5424 section 6: <PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD MSG",
               f"<4>1 2025-11-18T14:02:11.308145+00:00 gpu-node-07 kernel - - - {XID79}",
               {"timestamp": "2025-11-18T14:02:11.308145+00:00", "host": "gpu-node-07", "format": "rfc5424"}),
    PrefixCase("RFC 5424 with structured data", "RFC 5424 section 6.3 STRUCTURED-DATA element",
               f'<4>1 2025-11-18T14:02:11Z gpu-node-07 kernel - - [meta sequenceId="42"] {XID79}',
               {"timestamp": "2025-11-18T14:02:11+00:00", "host": "gpu-node-07", "format": "rfc5424"}),
    PrefixCase("rsyslog kern.log traditional", "rsyslog RSYSLOG_TraditionalFileFormat with the kernel's own time",
               f"Nov 18 14:02:11 gpu-node-07 kernel: [ 1843.308145] {XID79}",
               {"timestamp": "2025-11-18T14:02:11", "uptime_s": 1843.308145, "host": "gpu-node-07"}),
    PrefixCase("rsyslog kern.log file format", "rsyslog RSYSLOG_FileFormat (RFC 3339 high-precision time)",
               f"2025-11-18T14:02:11.308145+00:00 gpu-node-07 kernel: [ 1843.308145] {XID79}",
               {"timestamp": "2025-11-18T14:02:11.308145+00:00", "uptime_s": 1843.308145, "host": "gpu-node-07"}),
    PrefixCase("/dev/kmsg record", "Linux Documentation/ABI/testing/dev-kmsg: prio,seq,usec,flags;message",
               f"4,2291,1843308145,-;{XID79}",
               {"uptime_s": 1843.308145, "format": "kmsg"}),
    PrefixCase("kubectl logs of a log forwarder", "kubectl logs --prefix: [pod/NAME/CONTAINER] then the line",
               f"[pod/npd-x7k2q/node-problem-detector] [ 1843.308145] {XID79}",
               {"uptime_s": 1843.308145}),
    PrefixCase("dmesg -x decoded facility", "util-linux dmesg(1) --decode: 'facility:level : ' before the time",
               f"kern  :err   : [ 1843.308145] {XID79}",
               {"uptime_s": 1843.308145}),
    PrefixCase("docker-compose style prefix", "a collector that prefixes lines with 'host | '",
               f"gpu-node-07 | [ 1843.308145] {XID79}",
               {"uptime_s": 1843.308145}),
]


@dataclass(frozen=True)
class RecordCase:
    name: str
    source: str
    lines: list[str]
    expect: list[dict[str, Any]] = field(default_factory=list)  # field subsets, one per record, in order


RECORD_CASES = [
    RecordCase(
        "Xid with pid and name", "NVIDIA Xid documentation, 'NVRM: Xid (PCI:...): code, pid=, name=' form",
        ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."],
        [{"kind": "xid", "line": 1, "line_end": 1, "pci": "0000:3b:00.0", "xid": 79, "pid": 1234,
          "process": "python3", "message": "GPU has fallen off the bus.",
          "mnemonic": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "immediate_action": "RESTART_BM",
          "category": "hardware", "catalog_version": "2026.11-2"}],
    ),
    RecordCase(
        "Xid with unknown pid", "NVIDIA driver r525+ form for faults outside a process context",
        ["NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
         "(DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."],
        [{"kind": "xid", "xid": 48, "pid": None, "process": None, "category": "hardware",
          "immediate_action": "WORKFLOW_XID_48",
          "message": "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
                     "partition 6, subpartition 0."}],
    ),
    RecordCase(
        "old Xid form", "NVIDIA Xid documentation (older drivers): 'NVRM: Xid (0000:03:00): 13, ...'",
        ["NVRM: Xid (0000:03:00): 13, 0003 00000000 00008297 00001b48 00000000 00000000"],
        [{"kind": "xid", "xid": 13, "pci": "0000:03:00.0", "pid": None, "category": "application",
          "message": "0003 00000000 00008297 00001b48 00000000 00000000"}],
    ),
    RecordCase(
        "Xid without pid", "NVIDIA driver r470 form: message straight after the code",
        ["NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"],
        [{"kind": "xid", "xid": 13, "pid": None, "process": None,
          "details": {"gpc": 0, "tpc": 1, "sm": 0, "exception": "Out Of Range Address"}}],
    ),
    RecordCase(
        "process name with spaces", "Linux task comm may contain spaces (prctl PR_SET_NAME)",
        ["NVRM: Xid (PCI:0000:3b:00): 31, pid=2222, name=ray worker 7, Ch 00000008, intr 10000000. MMU Fault: "
         "ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_12345000. Fault is of type FAULT_PDE ACCESS_TYPE_READ"],
        [{"xid": 31, "pid": 2222, "process": "ray worker 7", "category": "application",
          "details": {"channel": "00000008", "mmu_engine": "GRAPHICS", "mmu_client": "GPCCLIENT_T1_0",
                      "fault_address": "0x7f2a_12345000", "fault_type": "FAULT_PDE",
                      "access_type": "ACCESS_TYPE_READ"}}],
    ),
    RecordCase(
        "process name cut at 15 characters", "Linux TASK_COMM_LEN is 16 including the NUL",
        ["NVRM: Xid (PCI:0000:3b:00): 43, pid=99, name=very_long_train, Ch 00000010"],
        [{"xid": 43, "pid": 99, "process": "very_long_train", "message": "Ch 00000010"}],
    ),
    RecordCase(
        "Xid 154 recovery action", "NVIDIA Xid catalog, Xid 154 'GPU recovery action changed'",
        ["NVRM: Xid (PCI:0000:4e:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"],
        [{"xid": 154, "details": {"recovery_action_old": "None", "recovery_action_new": "GPU Reset Required",
                                  "recovery_action_old_code": 0, "recovery_action_new_code": 1}}],
    ),
    RecordCase(
        "Xid 74 NVLink", "NVIDIA Xid catalog, Xid 74 NVLink error text",
        ["NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link "
         "14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"],
        [{"xid": 74, "category": "interconnect", "details": {"nvlink_links": [14]}}],
    ),
    RecordCase(
        "redacted PCI address", "support bundles that mask bus numbers before sharing",
        ["NVRM: Xid (PCI:xxxx:xx:xx): 79, pid=1234, name=python3, GPU has fallen off the bus."],
        [{"xid": 79, "pci": None}],
    ),
    RecordCase(
        "SXid with detail lines", "NVIDIA Fabric Manager User Guide, NVSwitch SXid log format",
        ["nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
         "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Severity 0 Engine instance 32 Sub-engine instance 00",
         "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Data {0x00000000, 0x00000000, 0x00000000}"],
        [{"kind": "sxid", "line": 1, "line_end": 3, "sxid": 12028, "pci": "0000:c8:00.0", "category": "interconnect",
          "mnemonic": "egress nonposted PRIV error",
          "details": {"severity": "non-fatal", "nvlink_links": [32], "fatal": False}}],
    ),
    RecordCase(
        "fatal SXid", "NVIDIA Fabric Manager User Guide, fatal SXid",
        ["nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up"],
        [{"kind": "sxid", "sxid": 20034, "details": {"severity": "fatal", "fatal": True}}],
    ),
    RecordCase(
        "fallen off the bus, single line", "NVIDIA driver 'GPU has fallen off the bus' notice",
        ["NVRM: GPU 0000:63:00.0: GPU has fallen off the bus."],
        [{"kind": "gpu_fallen_off_bus", "pci": "0000:63:00.0", "category": "hardware",
          "immediate_action": "RESTART_BM"}],
    ),
    RecordCase(
        "fallen off the bus, three lines", "NVIDIA driver three-line notice (nv.c)",
        ["NVRM: The NVIDIA GPU 0000:63:00.0",
         "NVRM: (PCI ID: 10de:2330) installed in this system has",
         "NVRM: fallen off the bus and is not responding to commands."],
        [{"kind": "gpu_fallen_off_bus", "line": 1, "line_end": 3, "pci": "0000:63:00.0",
          "message": "The NVIDIA GPU 0000:63:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the "
                     "bus and is not responding to commands."}],
    ),
    RecordCase(
        "fallen off the bus with Xid 79", "both notices, as drivers r450+ print them",
        ["NVRM: Xid (PCI:0000:63:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
         "NVRM: GPU 0000:63:00.0: GPU has fallen off the bus."],
        [{"kind": "xid", "xid": 79}, {"kind": "gpu_fallen_off_bus", "pci": "0000:63:00.0"}],
    ),
    RecordCase(
        "truncated three-line notice", "a log cut after the first line of the notice",
        ["NVRM: The NVIDIA GPU 0000:63:00.0"],
        [],
    ),
    RecordCase(
        "AER from the root port, detail from the GPU", "Linux drivers/pci/pcie/aer.c message formats (kernel 6.x)",
        ["pcieport 0000:60:01.1: AER: Uncorrected (Fatal) error received: 0000:63:00.0",
         "nvidia 0000:63:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
         "(Receiver ID)",
         "nvidia 0000:63:00.0: AER:   device [10de:2330] error status/mask=00000020/00000000",
         "nvidia 0000:63:00.0: AER:    [ 5] SDES                   (First)"],
        [{"kind": "pcie_aer", "line": 1, "line_end": 4, "pci": "0000:60:01.1", "source_pci": "0000:63:00.0",
          "category": "hardware",
          "details": {"severity": "fatal", "errors": ["SDES"], "error_type": "Transaction Layer",
                      "vendor_id": "10de", "device_id": "2330"}}],
    ),
    RecordCase(
        "AER, older kernel form", "Linux drivers/pci/pcie/aer.c (kernel 5.4): 'error received: id=' form",
        ["pcieport 0000:00:03.1: AER: Multiple Corrected error received: 0000:3b:00.0",
         "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
         "nvidia 0000:3b:00.0:   device [10de:20b2] error status/mask=00000001/0000e000",
         "nvidia 0000:3b:00.0:    [ 0] RxErr"],
        [{"kind": "pcie_aer", "source_pci": "0000:3b:00.0", "details": {"severity": "corrected", "errors": ["RxErr"]}}],
    ),
    RecordCase(
        "AER for a NIC is not a GPU fault", "Linux AER lines for a Mellanox device",
        ["pcieport 0000:00:02.0: AER: Corrected error received: 0000:0c:00.0",
         "mlx5_core 0000:0c:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
         "mlx5_core 0000:0c:00.0:   device [15b3:101b] error status/mask=00000001/00000000",
         "mlx5_core 0000:0c:00.0:    [ 0] RxErr"],
        [],
    ),
    RecordCase(
        "GPU identity with serial", "NVIDIA driver identity lines printed before an Xid",
        ["NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666",
         "NVRM: GPU Board Serial Number: 1650922001234"],
        [{"kind": "gpu_identity", "line": 1, "line_end": 2, "pci": "0000:3b:00.0",
          "gpu_uuid": "GPU-2b7e9c4a-1111-2222-3333-444455556666", "serial": "1650922001234"}],
    ),
    RecordCase(
        "ECC and row remapping", "NVIDIA driver memory-error notices",
        ["NVRM: GPU 0000:b7:00.0: Row remapping failure on bank 3; reset the GPU to retire the row"],
        [{"kind": "ecc", "pci": "0000:b7:00.0", "category": "hardware"}],
    ),
    RecordCase(
        "RmInitAdapter failed", "NVIDIA driver initialisation failure",
        ["NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0xffff:667)",
         "NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 0"],
        [{"kind": "driver_error", "pci": "0000:3b:00.0", "details": {"error": "rm_init_adapter_failed"},
          "category": "driver"},
         {"kind": "driver_error", "details": {"error": "rm_init_adapter_failed"}}],
    ),
    RecordCase(
        "GSP RPC timeout and heartbeat", "NVIDIA open GPU kernel modules, kernel_gsp.c messages",
        ["NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, curTime=0x1, lastHeartbeat=0x0",
         "NVRM: GPU0 GSP RPC timeout: Timeout after 6s of waiting for RPC response from GPU0 GSP!"],
        [{"kind": "driver_error", "details": {"error": "gsp_heartbeat_timeout"}},
         {"kind": "driver_error", "details": {"error": "gsp_rpc_timeout"}}],
    ),
    RecordCase(
        "crash dump notice", "NVIDIA driver crash-dump notice (three lines)",
        ["NVRM: A GPU crash dump has been created. If possible, please run",
         "NVRM: nvidia-bug-report.sh as root to collect this data before",
         "NVRM: the NVIDIA kernel module is unloaded."],
        [{"kind": "driver_error", "line": 1, "line_end": 3, "details": {"error": "crash_dump"}}],
    ),
    RecordCase(
        "assertion citing GPU lost", "NVIDIA open GPU kernel modules nvCheckOkFailedNoLog",
        ["NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F) "
         "returned from pRmApi->Control(...) @ kern_bus.c:1123",
         "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
         "returned from gpuReset @ gpu.c:4410",
         "NVRM: nvAssertFailedNoLog: Assertion failed: pKernelBus != NULL @ kern_bus.c:77"],
        [{"kind": "driver_error", "details": {"error": "gpu_lost"}, "category": "hardware"},
         {"kind": "driver_error", "details": {"error": "reset_required"}, "category": "hardware"},
         {"kind": "driver_error", "details": {"error": "assertion_failed"}, "category": "driver"}],
    ),
    RecordCase(
        "no GPU found after a kernel upgrade", "NVIDIA driver probe messages when no device binds",
        ["NVRM: No NVIDIA GPU found.", "NVRM: No NVIDIA graphics adapter found!"],
        [{"kind": "driver_error", "pci": None, "details": {"error": "no_gpu_found"}},
         {"kind": "driver_error", "details": {"error": "no_gpu_found"}}],
    ),
    RecordCase(
        "kmsg continuation lines", "Linux Documentation/ABI/testing/dev-kmsg, dictionary continuation lines",
        ["3,2291,1843308145,-;NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, DBE",
         " SUBSYSTEM=pci",
         " DEVICE=+pci:0000:3b:00.0"],
        [{"kind": "xid", "line": 1, "line_end": 3, "uptime_s": 1843.308145,
          "details": {"kmsg_seq": 2291, "kmsg_dict": {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}}}],
    ),
    RecordCase(
        "journal JSON", "systemd Journal JSON Format (journalctl -o json)",
        ['{"__REALTIME_TIMESTAMP":"1763474531308145","_HOSTNAME":"gpu-node-07","_SOURCE_MONOTONIC_TIMESTAMP":'
         '"1843308145","_TRANSPORT":"kernel","MESSAGE":"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, '
         'GPU has fallen off the bus."}'],
        [{"kind": "xid", "xid": 79, "host": "gpu-node-07", "timestamp": "2025-11-18T14:02:11.308145+00:00",
          "uptime_s": 1843.308145, "format": "journal-json"}],
    ),
    RecordCase(
        "journal JSON, non-UTF-8 message as bytes", "systemd Journal JSON Format: binary MESSAGE as a byte array",
        ['{"_HOSTNAME":"n1","MESSAGE":[78,86,82,77,58,32,88,105,100,32,40,80,67,73,58,48,48,48,48,58,51,98,58,48,'
         '48,41,58,32,55,57,44,32,255]}'],
        [{"kind": "xid", "xid": 79, "host": "n1"}],
    ),
    RecordCase(
        "not faults", "module banners, display-driver chatter and user-space mentions of Xid",
        ["NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
         "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.127.05",
         "nvidia-nvlink: Nvlink Core is being initialized, major device number 234",
         "nvidia 0000:3b:00.0: enabling device (0000 -> 0002)",
         "NVRM: GPU 0000:3b:00.0: persistence mode enabled",
         "nvidia-modeset: WARNING: GPU:0: Lost display notification (0:0x00000000); continuing.",
         "Nov 27 02:10:00 gpu-node-02 nvidia-device-plugin[2211]: XidCriticalError: Xid=48 on Device=GPU-a40e, "
         "the device will go unhealthy.",
         "I1127 02:10:00.000000  2211 health.go:129] Xid 79 detected on GPU-a40e, marking device unhealthy",
         "pcieport 0000:00:01.0: AER: enabled with IRQ 27",
         "dcgm-exporter: DCGM_FI_DEV_XID_ERRORS gpu=0 value=13"],
        [],
    ),
]
