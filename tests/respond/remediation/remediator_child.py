"""The remediator of one responder in a process of its own, for the crash test:
`python -m tests.respond.remediation.remediator_child CONFIG`.

Composed as `xidpipe respond` composes it (`build_executor` with the policy's remediation on, then
`build_remediator`), from the JSON file CONFIG (database, API server, token, policy). It advances the
loops every `interval_s` until it is killed: SIGKILL is the crash under test.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from models.cordon_policy import CordonPolicy
from respond.cordon.runtime import build_executor
from respond.cordon.settings import ActionSettings
from respond.remediation.runtime import build_remediator


def main(cfg: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s child %(levelname)s %(message)s")
    kube = client.Configuration(host=cfg["server"], api_key={"BearerToken": cfg["token"]},
                                api_key_prefix={"BearerToken": "Bearer"})
    kube.ssl_ca_cert = cfg["ca_file"]
    settings = ActionSettings(kube_config="none", remediation_namespace=cfg["namespace"],
                              reporting_instance="crash-child")
    executor = build_executor(settings, CordonPolicy.model_validate(cfg["policy"]), client.ApiClient(kube),
                              database_url=cfg["database_url"])
    remediator = build_remediator(executor)
    assert remediator is not None
    # One transition per pass, so that the test, watching the record, can kill it between any two
    # (several in one pass are the same writes, in the same order, made sooner).
    remediator.steps_per_pass = 1
    print("ready", flush=True)
    while True:
        remediator.tick()
        time.sleep(cfg["interval_s"])


if __name__ == "__main__":
    main(json.loads(Path(sys.argv[1]).read_text()))
