"""Start and stop a throwaway Alertmanager on loopback, with the configuration the caller gives.

One instance, no high-availability cluster (``--cluster.listen-address=``), its data in a work
directory (``mktemp -d /tmp/xidpipe-am-XXXX``: ``alertmanager.yml``, ``data/``, ``alertmanager.log``).
Ready when ``GET /-/ready`` answers 200; its API is ``<url>/api/v2`` (``POST /api/v2/alerts``,
``GET /api/v2/alerts``, ``/api/v2/silences``, ``/api/v2/status``).

As a script (the binary from ``build.sh --print-bin alertmanager``):

    python deploy/testcluster/alertmanager.py run CONFIG.yml   # foreground until Ctrl-C; prints the URL

Imported (see tests/alerting.py): ``am = start(config_text); ...; am.stop()``.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent


def load_controlplane() -> ModuleType:
    """``controlplane.py`` beside this file (deploy/testcluster is no package), loaded once under
    the name that cluster.py and tests/kube.py use."""
    name = "xidpipe_testcluster_controlplane"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "controlplane.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


cp = load_controlplane()


@dataclass
class Alertmanager:
    """A running Alertmanager: its base URL (``http://127.0.0.1:PORT``) and what to stop."""

    url: str
    workdir: Path
    config_file: Path
    plane: Any  # controlplane.ControlPlane holding the one process (its PID, log and stop)

    @property
    def api(self) -> str:
        return f"{self.url}/api/v2"

    @property
    def log(self) -> Path:
        return Path(self.plane.logs["alertmanager"])

    def alive(self) -> bool:
        """Whether the process runs (False once stopped)."""
        states = self.plane.alive()
        return bool(states) and all(states.values())

    def stop(self) -> None:
        self.plane.stop()


def start(
    config: str,
    *,
    binary: Path | None = None,
    workdir: Path | None = None,
    timeout_s: float | None = None,
    die_with_parent: bool = True,
    keep_workdir: bool = False,
) -> Alertmanager:
    """Start Alertmanager with ``config`` (alertmanager.yml's text) and wait until it is ready."""
    binary = binary or cp.built_binaries("alertmanager")[0]
    workdir = Path(tempfile.mkdtemp(prefix="xidpipe-am-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "alertmanager.yml"
    config_file.write_text(config)
    port = cp.free_port()
    url = f"http://{cp.LOOPBACK}:{port}"
    plane = cp.ControlPlane(workdir=workdir, server=url, ca_file=Path(), identities={}, pids={}, logs={},
                            keep_workdir=keep_workdir)
    deadline = time.monotonic() + (cp.DEFAULT_START_TIMEOUT_S if timeout_s is None else timeout_s)
    try:
        cp.spawn(plane, "alertmanager", [
            str(binary),
            f"--config.file={config_file}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address={cp.LOOPBACK}:{port}",
            "--cluster.listen-address=",  # one instance: no gossip
            "--log.level=info",
        ], die_with_parent)
        cp.wait_ready(plane, "alertmanager", f"{url}/-/ready", deadline, context=None, token=None,
                      accept=lambda _body: True)
    except BaseException:
        plane.stop()
        raise
    return Alertmanager(url=url, workdir=workdir, config_file=config_file, plane=plane)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run"])
    parser.add_argument("config", type=Path, help="alertmanager.yml")
    args = parser.parse_args(argv)
    try:
        am = start(args.config.read_text(), workdir=None)
    except cp.ControlPlaneError as exc:
        print(f"alertmanager: {exc}", file=sys.stderr)
        return 1
    print(f"Alertmanager at {am.url} (API {am.api}); log {am.log}")
    stop_requested = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    try:
        while not stop_requested and am.alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    am.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
