"""A quarantine is visible where people look: the incident (`xidpipe incidents show`, its ticket's
document), its page's data, `xidpipe gpus list`, and the node's condition; and no longer once it is
released. The history is written by the real stream store (an inventory and an Xid 48 of the node),
the quarantine by the responder's executor on the test cluster, recording in that database."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kubernetes import client
from sqlalchemy.orm import Session

from history.cordon_inputs import cordon_request
from history.engine import make_engine
from history.tables import Incident
from models.dossier import render_markdown
from models.quarantine import rule_name
from respond.cordon.action_log import SqlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.retry import Backoff
from respond.dossier_builder import action_items, build_dossier
from respond.quarantine.kube_cluster import KubeCluster
from respond.quarantine.release import release_node
from tests.cluster import publish_gpu_slice
from tests.respond.quarantine.conftest import history_db, quarantine_policy
from tests.streams.records import uuid
from xidpipe.cli import main
from xidpipe.web.data import incident_detail

pytestmark = pytest.mark.k8s


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_the_quarantine_shows_in_the_incident_its_ticket_its_page_and_gpus_list(
        kwok_node: Callable[..., Any], cluster_admin_client: client.ApiClient, cluster_worker_client: client.ApiClient,
        resource: client.ResourceV1Api, cluster_core: client.CoreV1Api, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    node = kwok_node(labels={"xidpipe.io/pool": "visible"}).metadata.name
    publish_gpu_slice(cluster_admin_client, node, uuids=[uuid(node, i) for i in range(8)])
    url = history_db(tmp_path / "x.db", node, [3])
    capsys.readouterr()
    engine = make_engine(url)
    policy = quarantine_policy()
    kube = KubeCluster(cluster_worker_client, reporting_instance="xidpipe-test", backoff=Backoff(deadline_s=10.0))
    executor = CordonExecutor(policy, SqlActionStore(engine), kube)
    try:
        with Session(engine) as sess:
            row = sess.scalars(sa.select(Incident).where(Incident.node == node)).one()
            req, incident_id = cordon_request(sess, row, policy.longest_window_s()), row.incident_id
        assert req.gpu == uuid(node, 3) and req.xids == (48,)
        result = executor.handle(req)
        assert (result.action, result.outcome) == ("quarantine", "done"), result.reason
        rule = rule_name(uuid(node, 3))

        # gpus list: the card's status and its QUARANTINE column (wide), and the JSON.
        listed = json.loads(cli(capsys, "gpus", "list", "--database-url", url, "--node", node, "--json"))["gpus"]
        held = {g["uuid"]: g["quarantine"] for g in listed}
        assert held[uuid(node, 3)]["rule"] == rule and held[uuid(node, 3)]["effect"] == "NoSchedule"
        assert [u for u, q in held.items() if q] == [uuid(node, 3)]
        table = cli(capsys, "gpus", "list", "--database-url", url, "--node", node)  # the card's status says it
        slot = next(g["pci_slot"] for g in listed if g["uuid"] == uuid(node, 3))
        assert [ln.split()[1] for ln in table.splitlines() if "quarantined" in ln] == [slot], table
        wide = cli(capsys, "gpus", "list", "--database-url", url, "--node", node, "-o", "wide")  # and its rule
        assert "QUARANTINE" in wide and f"{rule} (NoSchedule)" in wide
        # The incident, as `incidents show` prints it and its ticket carries it (the dossier's document).
        shown = json.loads(cli(capsys, "incidents", "show", incident_id, "--database-url", url, "--json"))
        gpu = shown["dossier"]["gpu"]
        assert gpu["quarantine_rule"] == rule
        assert gpu["quarantine"].startswith(f"quarantined (NoSchedule): DeviceTaintRule {rule} on "
                                            f"gpu.nvidia.com/{node}/gpu-3, since ")
        assert "Quarantine" in cli(capsys, "incidents", "show", incident_id, "--database-url", url)
        with Session(engine) as sess:
            row = sess.get(Incident, incident_id)
            assert row is not None
            ticket = render_markdown(build_dossier(sess, row, action_items(executor.store.recent(), incident_id)))
            page = incident_detail(sess, incident_id)
        assert f"| **Quarantine** | quarantined (NoSchedule): DeviceTaintRule {rule}" in ticket.replace("\\", "")
        assert "| quarantine | done |" in ticket  # the action, in "Actions taken"
        assert page is not None and page["dossier"]["gpu"]["quarantine_rule"] == rule
        # The node's condition says how many of its GPUs are quarantined.
        condition = next(c for c in cluster_core.read_node(node).status.conditions if c.type == "GPUHealthy")
        assert condition.message.startswith("1 of 8 GPUs quarantined by xidpipe")

        released = release_node(executor, node, by="alice", reason="card replaced")
        assert released.outcome == "done", released.reason
        listed = json.loads(cli(capsys, "gpus", "list", "--database-url", url, "--node", node, "--json"))["gpus"]
        assert not any(g["quarantine"] for g in listed)
        shown = json.loads(cli(capsys, "incidents", "show", incident_id, "--database-url", url, "--json"))
        assert shown["dossier"]["gpu"]["quarantine"] is None
        assert [a["action"] for a in shown["dossier"]["actions"]][-1] == "unquarantine"
    finally:
        kube.close()
        engine.dispose()
