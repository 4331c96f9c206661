"""A site that reboots and resets through its own tooling (a BMC, a cloud API): the loop hands the step
off (the node annotation the tooling watches, and a POST to its webhook) instead of creating a Job, and
learns the outcome from the node: a new boot ID for a reboot, the tooling's answer annotation for a reset."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from models.remediation_jobs import ANN_HANDOFF_REQUEST, ANN_HANDOFF_RESULT
from tests.cluster import reboot_node, wait_for
from tests.respond.remediation.conftest import jobs_on, policy, seed_incident


class SiteTooling:
    """The site's webhook: each request recorded; a reboot request reboots the node it names."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                site.requests.append((self.headers["Idempotency-Key"], body))
                self.send_response(202)
                self.end_headers()
                if body["action"] == "reboot_node":
                    threading.Thread(target=reboot_node, args=(core, body["node"]), daemon=True).start()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/remediate"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def site(cluster_core: client.CoreV1Api) -> Iterator[SiteTooling]:
    tooling = SiteTooling(cluster_core)
    yield tooling
    tooling.server.shutdown()


def test_a_reboot_handed_to_the_sites_webhook_is_confirmed_by_the_new_boot_id(
        make_loops: Any, kwok_node: Any, site: SiteTooling, cluster_core: client.CoreV1Api,
        cluster_admin_client: client.ApiClient) -> None:
    loops = make_loops(policy(execution={"reboot_node": "hand_off", "webhook_url": site.url}))
    node = kwok_node().metadata.name
    boot = cluster_core.read_node(node).status.node_info.boot_id
    loop = loops.offer(seed_incident(loops.engine, node))
    assert "hand_off" in loop.reason and "site's tooling" in loop.reason
    done = loops.drive(loop.loop_id, lambda lp: lp.final, "the loop to end")

    assert done.stage == "returned", done.reason
    [(key, body)] = site.requests  # one request, whatever the passes in between
    assert body["action"] == "reboot_node" and body["node"] == node and body["key"] == key
    assert json.loads(cluster_core.read_node(node).metadata.annotations[ANN_HANDOFF_REQUEST])["key"] == key
    assert cluster_core.read_node(node).status.node_info.boot_id != boot
    assert sorted(jobs_on(client.BatchV1Api(cluster_admin_client), loop.loop_id).values()) == ["validate"]
    [attempt] = [a for a in loops.store.attempts(loop.loop_id) if a.kind == "reboot_node"]
    assert (attempt.via, attempt.job_name, attempt.outcome) == ("hand_off", key, "succeeded")


@pytest.mark.parametrize(("answer", "stage"), [("succeeded", "returned"), ("failed:BMC lost the GPU", "manual")])
def test_a_reset_handed_off_waits_for_the_sites_answer(answer: str, stage: str, make_loops: Any, kwok_node: Any,
                                                       cluster_core: client.CoreV1Api) -> None:
    pol = policy(execution={"reset_gpu": "hand_off", "reboot_node": "hand_off"},
                 ladder={"after_failed_reset": "none"})
    loops = make_loops(pol)
    node = kwok_node().metadata.name
    loop = loops.offer(seed_incident(loops.engine, node, xid=95, family="memory"))
    waiting = loops.drive(loop.loop_id, lambda lp: lp.stage == "executing" and "waiting" in lp.reason,
                          "the hand-off to wait for its answer")
    request = json.loads(wait_for(lambda: (cluster_core.read_node(node).metadata.annotations or {}).get(
        ANN_HANDOFF_REQUEST), "the hand-off request on the node"))
    assert request["action"] == "reset_gpu" and waiting.stage == "executing"
    cluster_core.patch_node(node, {"metadata": {"annotations": {ANN_HANDOFF_RESULT: f"{request['key']}={answer}"}}})
    done = loops.drive(loop.loop_id, lambda lp: lp.final, "the loop to end")
    assert done.stage == stage, done.reason
    if stage == "manual":  # the ladder allows nothing after a failed reset here: people decide
        assert "BMC lost the GPU" in done.reason and "no further step" in done.reason
