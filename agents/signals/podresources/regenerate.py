"""Regenerate api_pb2.py and api_pb2_grpc.py from api.proto (needs grpcio-tools).

    python -m agents.signals.podresources.regenerate

The proto is compiled with the repository root as include path, so the stubs import each other as
`agents.signals.podresources.api_pb2`. Generated files are marked so that mypy skips them (ruff already
excludes `*_pb2*.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    from grpc_tools import protoc  # dev dependency

    root = Path(__file__).resolve().parents[3]
    proto = Path(__file__).with_name("api.proto").relative_to(root)
    args = ["protoc", f"-I{root}", f"--python_out={root}", f"--grpc_python_out={root}", str(proto)]
    rc = int(protoc.main(args))
    if rc == 0:
        for name in ("api_pb2.py", "api_pb2_grpc.py"):
            path = Path(__file__).with_name(name)
            text = path.read_text()
            if not text.startswith(HEADER):
                path.write_text(HEADER + text)
    return rc


HEADER = "# mypy: ignore-errors\n"


if __name__ == "__main__":
    sys.exit(main())
