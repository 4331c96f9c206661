"""Property tests: prefixes never change what a message means, no input crashes the parser, and a
number is read only in ASCII digits and within its range."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.kernlog import ParseOptions, parse_lines
from models.kernlog.limits import PID_MAX, SXID_RANGE, UPTIME_MAX_S, XID_RANGE
from models.kernlog.parser import ANCHORS

OPTS = ParseOptions(year=2025, now=datetime(2025, 12, 20, tzinfo=UTC))
MESSAGE_FIELDS = ("kind", "pci", "source_pci", "xid", "sxid", "pid", "process", "message", "gpu_uuid", "serial",
                  "mnemonic", "immediate_action", "category", "details")

MESSAGES = [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:18:00): 13, pid=41122, name=pt_main_thread, Graphics SM Warp Exception on "
    "(GPC 4, TPC 1, SM 0): Out Of Range Address",
    "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE)",
    "NVRM: Xid (0000:03:00): 13, 0003 00000000 00008297 00001b48 00000000 00000000",
    "NVRM: Xid (PCI:0000:4e:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
    "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
    "NVRM: GPU 0000:63:00.0: GPU has fallen off the bus.",
    "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0xffff:667)",
    "NVRM: No NVIDIA GPU found.",
    "NVRM: GPU 0000:b7:00.0: Row remapping failure on bank 3",
    "NVRM: GPU Board Serial Number: 1650922001234",
]

hosts = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)
uptimes = st.floats(min_value=0, max_value=10**7, allow_nan=False).map(lambda f: f"{f:12.6f}")
dates = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2037, 12, 31))
months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


@st.composite
def prefixes(draw: st.DrawFn) -> str:
    d = draw(dates)
    host = draw(hosts)
    up = draw(uptimes)
    form = draw(st.integers(0, 11))
    mon = months[d.month - 1]
    return [
        f"[{up}] ",
        f"[{d:%a} {mon} {d.day:2d} {d:%H:%M:%S} {d.year}] ",
        f"[{up} <    0.000512>] ",
        f"{d:%Y-%m-%dT%H:%M:%S},{d.microsecond:06d}+00:00 ",
        f"{mon} {d.day:2d} {d:%H:%M:%S} {host} kernel: ",
        f"{d:%Y-%m-%dT%H:%M:%S}+0000 {host} kernel: ",
        f"{mon} {d.day:2d} {d:%H:%M:%S}.{d.microsecond:06d} {host} kernel: [{up}] ",
        f"<4>{mon} {d.day:2d} {d:%H:%M:%S} kernel: ",
        f"<4>1 {d:%Y-%m-%dT%H:%M:%S}.{d.microsecond:06d}+00:00 {host} kernel - - - ",
        f"4,{d.microsecond},{int(float(up) * 1e6)},-;",
        f"[pod/npd-{host}/npd] [{up}] ",
        f"kern  :err   : [{up}] ",
    ][form]


def message_fields(line: str) -> dict[str, object]:
    records = list(parse_lines([line], OPTS))
    assert len(records) == 1, line
    d = records[0].to_dict()
    d["details"] = {k: v for k, v in d["details"].items() if k != "kmsg_seq"}
    return {k: d[k] for k in MESSAGE_FIELDS}


BARE = {m: message_fields(m) for m in MESSAGES}


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=prefixes(), message=st.sampled_from(MESSAGES))
def test_any_supported_prefix_yields_the_same_record(prefix: str, message: str) -> None:
    assert message_fields(prefix + message) == BARE[message]


@settings(max_examples=300)
@given(st.lists(st.text(max_size=300), max_size=30))
def test_arbitrary_text_never_crashes(lines: list[str]) -> None:
    for record in parse_lines(lines, OPTS):
        assert record.line >= 1 and record.line_end >= record.line


@settings(max_examples=300)
@given(st.lists(st.text(max_size=200).filter(lambda s: not any(a in s for a in ANCHORS)), max_size=30))
def test_text_without_gpu_anchors_is_never_a_fault(lines: list[str]) -> None:
    assert list(parse_lines(lines, OPTS)) == []


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=400), max_size=20), st.sampled_from(MESSAGES))
def test_binary_garbage_around_real_lines(garbage: list[bytes], message: str) -> None:
    lines = [g.decode("utf-8", "replace") for g in garbage]
    lines.insert(len(lines) // 2, message)
    records = [r for r in parse_lines(lines, OPTS) if r.line == len(garbage) // 2 + 1]
    assert records, "the real line was lost among garbage"
    assert records[0].kind == BARE[message]["kind"]


@settings(max_examples=200)
@given(st.sampled_from(MESSAGES), st.integers(min_value=1, max_value=60))
def test_truncated_messages_never_crash(message: str, cut: int) -> None:
    list(parse_lines([message[:cut]], OPTS))


CORPUS = [
    "noise line",
    "NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666",
    "NVRM: GPU Board Serial Number: 1650922001234",
    *MESSAGES,
    "NVRM: The NVIDIA GPU 0000:63:00.0",
    "NVRM: (PCI ID: 10de:2330) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
    "pcieport 0000:60:01.1: AER: Uncorrected (Fatal) error received: 0000:63:00.0",
    "nvidia 0000:63:00.0: AER:   device [10de:2330] error status/mask=00000020/00000000",
    "pcieport 0000:60:01.1:    [ 5] SDES",
    "4,1,1000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=a, DBE",
    " SUBSYSTEM=pci",
    "",
]
JOURNAL = [
    '{"_HOSTNAME":"n1","MESSAGE":"EXT4-fs (nvme0n1p2): re-mounted."}',
    '{"_HOSTNAME":"n1","MESSAGE":[78,86,82,77,58,32,78,111,32,78,86,73,68,73,65,32,71,80,85,32,102,111,117,110,100,46]}',
    '{"_HOSTNAME":"n1","MESSAGE":"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has fallen off the bus."}',
]


def _fed(lines: list[str]) -> list[dict[str, object]]:
    from models.kernlog import KernelLogParser

    p = KernelLogParser(OPTS)
    out = [r.to_dict() for line in lines for r in p.feed(line)]
    return out + [r.to_dict() for r in p.finish()]


@settings(max_examples=300)
@given(st.one_of(st.lists(st.sampled_from(CORPUS), max_size=60), st.lists(st.sampled_from(JOURNAL), max_size=30)))
def test_parse_fast_path_equals_feeding_every_line(lines: list[str]) -> None:
    from models.kernlog import KernelLogParser

    assert [r.to_dict() for r in KernelLogParser(OPTS).parse(lines)] == _fed(lines)


# -- ranges and digits (issue #18): a number out of range makes the line no record -------------------

OTHER_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


@settings(max_examples=300)
@given(code=st.one_of(st.integers(-10, 2000), st.integers(0, 10**40)), pid=st.integers(-5, 10**12))
def test_an_xid_line_is_a_record_exactly_when_its_code_is_in_range_and_its_pid_when_that_is(code: int,
                                                                                           pid: int) -> None:
    records = list(parse_lines([f"NVRM: Xid (PCI:0000:3b:00): {code}, pid={pid}, name=a, msg"], OPTS))
    pid_ok = 0 <= pid <= PID_MAX
    code_ok = XID_RANGE[0] <= code <= XID_RANGE[1]
    expect = [(code, pid if pid_ok else None, None if pid_ok else str(pid))] if code_ok else []
    assert [(r.xid, r.pid, r.details.get("invalid", {}).get("pid")) for r in records] == expect


@settings(max_examples=200)
@given(code=st.integers(0, 10**7))
def test_an_sxid_line_is_a_record_exactly_when_its_code_is_in_range(code: int) -> None:
    records = list(parse_lines([f"nvidia-nvswitch0: SXid (PCI:0000:c8:00.0): {code}, Non-fatal, Link 3"], OPTS))
    assert [r.sxid for r in records] == ([code] if SXID_RANGE[0] <= code <= SXID_RANGE[1] else [])


@settings(max_examples=200)
@given(seconds=st.one_of(st.floats(0, UPTIME_MAX_S * 2, allow_nan=False), st.floats(0, 1e30, allow_nan=False)))
def test_an_uptime_past_ten_years_makes_the_line_no_record(seconds: float) -> None:
    stamp = f"{seconds:.6f}"
    records = list(parse_lines([f"[{stamp}] {MESSAGES[0]}"], OPTS))
    assert [r.uptime_s for r in records] == ([float(stamp)] if float(stamp) <= UPTIME_MAX_S else [])


@settings(max_examples=300)
@given(message=st.sampled_from(MESSAGES[:6]), data=st.data())
def test_a_digit_of_another_script_never_reads_as_a_number(message: str, data: st.DataObject) -> None:
    positions = [i for i, c in enumerate(message) if c.isdigit()]
    i = data.draw(st.sampled_from(positions))
    line = message[:i] + data.draw(OTHER_DIGITS) + message[i + 1:]
    for r in parse_lines([line], OPTS):
        for value in (r.xid, r.sxid, r.pid):
            assert value is None or str(value) in line
        assert r.kind not in ("xid", "sxid") or BARE[message]["kind"] == r.kind
