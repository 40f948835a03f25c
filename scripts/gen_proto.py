"""Generate executor/v1/executor_pb2*.py from proto/executor/v1/executor.proto.

Usage: python scripts/gen_proto.py [--check]
With --check, generate into a temporary directory and exit 1 if the committed stubs differ.
"""

from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["executor_pb2.py", "executor_pb2.pyi", "executor_pb2_grpc.py"]


def generate(out: Path) -> None:
    args = [
        "protoc",
        f"-I{ROOT / 'proto'}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        str(ROOT / "proto/executor/v1/executor.proto"),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> int:
    check = "--check" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / "executor/v1"
        target = ROOT / "executor/v1"
        stale = [n for n in NAMES if not (target / n).exists() or not filecmp.cmp(fresh / n, target / n, shallow=False)]
        if check:
            if stale:
                print(f"stale generated stubs: {', '.join(stale)}; run `make proto`", file=sys.stderr)
                return 1
            return 0
        for n in NAMES:
            (target / n).write_bytes((fresh / n).read_bytes())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
