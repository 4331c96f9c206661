"""The sample cluster's incident history, as an on-call engineer meets it after `make demo`, built
without Kafka: `xidpipe replay` writes the incidents and the GPU ledger through the stream's engine,
the stream's store takes the evidence the agents captured (`xidpipe.demo.sample_evidence`), and the
action record holds the responder's cordons: gpu-node-03's done (its GPU fell off the bus), the
others' as dry runs, as the demo's responder records them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from history.engine import make_engine
from models.stream_policy import PipelinePolicy
from respond.cordon.action_log import ActionRecord, SqlActionStore
from streams.items import ItemMapper
from streams.store import Store
from xidpipe.cli import main
from xidpipe.demo import sample_dir, sample_evidence

MEMORY = "v2:9af48e81bb6cb563@20261125T120203.000000Z"  # gpu-node-02's failing GPU: three jobs' shells merged in
BUS = "v2:55b4bb1e3d1d53c3@20261125T152651.000000Z"  # gpu-node-03's GPU fell off the bus
NVSWITCH = "v2:66b994690449f227@20261125T180721.000000Z"  # gpu-node-04's NVSwitch, SXid 12028
NLP_SHELL = "v2:b0e4b76983705fbb@20261125T120203.000000Z"  # team-nlp's job, merged into MEMORY
CORDONED = {"gpu-node-03": BUS}  # done
DRY_RUN = {"gpu-node-02": MEMORY, "gpu-node-04": "v2:f159df7d9ca7362d@20261125T180640.000000Z",
           "gpu-node-05": "v2:229c0c3b5264e1e7@20261126T000000.000000Z"}


@dataclass(frozen=True)
class History:
    url: str
    actions_at: datetime


def build(directory: Path) -> History:
    url = f"sqlite:///{directory / 'sample.db'}"
    assert main(["replay", str(sample_dir()), "--database-url", url, "--json"]) == 1  # 1: incidents found
    store = Store(url, PipelinePolicy())
    mapper = ItemMapper()
    store.process([it for ev in sample_evidence() for it in mapper.items(ev, "xidpipe.node.evidence")]
                  + mapper.flush_all())
    store.dispose()
    at = datetime(2026, 11, 26, 1, 0, tzinfo=UTC)
    engine = make_engine(url)
    actions = SqlActionStore(engine)
    for node, incident in CORDONED.items():
        actions.record(ActionRecord(at=at, action="cordon", outcome="done", node=node, incident_id=incident,
                                    decision="cordon", reason="rule gpu-lost"))
    for node, incident in DRY_RUN.items():
        actions.record(ActionRecord(at=at, action="cordon", outcome="dry_run", node=node, incident_id=incident,
                                    decision="cordon", reason="a rule matched", dry_run=True))
    engine.dispose()
    return History(url, at)
