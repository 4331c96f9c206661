"""Container id and pod UID of a process, from `/proc/<pid>/cgroup` (cgroup v1 and v2, cgroupfs and
systemd drivers, containerd, CRI-O and Docker naming)."""

from __future__ import annotations

import re
from pathlib import Path

from agents.procfs import PROC_READ_MAX, read_text

_CONTAINER = re.compile(r"(?:^|[/-])(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def parse_cgroup(text: str) -> tuple[str | None, str | None]:
    """(container id, pod UID) from the contents of /proc/<pid>/cgroup."""
    container = pod = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            m = _CONTAINER.search(part)
            if m and container is None:
                container = m.group(1)
        p = _POD.search(path)
        if p and pod is None:
            pod = p.group(1).replace("_", "-")
    return container, pod


def container_of(pid: int, proc_root: Path = Path("/proc")) -> tuple[str | None, str | None]:
    try:
        return parse_cgroup(read_text(proc_root / str(pid) / "cgroup", PROC_READ_MAX))
    except OSError:
        return None, None
