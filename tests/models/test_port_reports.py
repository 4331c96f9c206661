"""Root-port AER reports tied to the GPU below the port (`models.port_reports`), from the inventory's
upstream bridges: one GPU, its incident; several, a node-level PCIe incident naming them; no inventory
that knows the port, a node-level PCIe incident."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models.kernlog import ParseOptions, parse_lines
from models.node_records import GpuInfo, GpuInventory, NodeRecord
from models.port_reports import gpus_below
from models.scan import scan
from tests.streams.records import T0

OPTS = ParseOptions(year=2026, now=datetime(2026, 12, 1, tzinfo=UTC))
BOOT = T0 - timedelta(seconds=100)
PORT = "0000:00:03.0"
AER = [
    f"[100.000000] pcieport {PORT}: AER: Uncorrected (Fatal) error received: {PORT}",
    f"[100.000010] pcieport {PORT}: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
    "(Requester ID)",
    f"[100.000020] pcieport {PORT}:   device [8086:6f08] error status/mask=00004020/00000000",
    f"[100.000030] pcieport {PORT}:    [14] CmpltTO                (First)",
]
LOST = "[100.500000] NVRM: Xid (PCI:0000:03:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def gpu(index: int, bus: str, bridges: tuple[str, ...]) -> GpuInfo:
    return GpuInfo(index=index, uuid=f"GPU-0000000{index}-0000-4000-8000-000000000000", pci_bus_id=bus,
                   upstream_bridges=bridges)


def inventory(*gpus: GpuInfo) -> list[NodeRecord]:
    return [GpuInventory(node="n1", record_id="inv", emitted_at=BOOT, boot_time=BOOT, gpus=gpus)]


def run(lines: list[str], state: list[NodeRecord]):  # type: ignore[no-untyped-def]
    return scan((("n1", r) for r in parse_lines(lines, OPTS)), state=state)


def test_one_gpu_below_the_port_the_report_is_its_and_joins_the_lost_gpu() -> None:
    state = inventory(gpu(0, "00000000:03:00.0", (PORT,)), gpu(1, "00000000:41:00.0", ("0000:40:01.0",)))
    (inc,) = run([*AER, LOST], state)
    assert (inc.component, inc.family, inc.count) == ("gpu", "gpu_lost", 1)
    assert inc.gpu_uuid == "GPU-00000000-0000-4000-8000-000000000000" and inc.codes() == ["AER", "Xid 79"]
    assert "the GPU below port 0000:00:03.0" in inc.events[0].observation.details["tied_to"]


def test_several_gpus_below_the_port_is_a_node_level_pcie_incident_naming_them() -> None:
    switch = (PORT, "0000:01:00.0")  # root port, then a PCIe switch with two GPUs behind it
    state = inventory(gpu(0, "00000000:03:00.0", (*switch, "0000:02:08.0")),
                      gpu(1, "00000000:04:00.0", (*switch, "0000:02:10.0")))
    (inc,) = run(AER, state)
    assert (inc.component, inc.state.component_id, inc.family) == ("node", "driver", "pcie")
    assert ("the GPUs below port 0000:00:03.0 (GPU-00000000-0000-4000-8000-000000000000, "
            "GPU-00000001-0000-4000-8000-000000000000)") in inc.reason


def test_without_an_inventory_that_knows_the_port_it_stays_node_level() -> None:
    old_agent = inventory(gpu(0, "00000000:03:00.0", ()))
    for state in (old_agent, []):
        (inc,) = run(AER, state)
        assert (inc.component, inc.family) == ("node", "pcie")


def test_gpus_below_reads_the_bridges_in_any_spelling() -> None:
    g = gpu(0, "00000000:03:00.0", ("00000000:00:03.0",))  # NVML's spelling
    assert gpus_below("0000:00:03.0", (g,)) == [g]
    assert gpus_below("0000:00:04.0", (g,)) == []
