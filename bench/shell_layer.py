"""Micro-benchmark of the shell layer alone: N commands through one PersistentShell on the local
backend, in-process (no daemon, no gRPC), p50/mean per command.

    .venv/bin/python bench/shell_layer.py [-n 500] [--command true] [--src DIR]

``--src DIR`` benchmarks another checkout's ``executor`` package (e.g. an older commit extracted with
``git archive COMMIT | tar -x -C DIR``), so two versions can be compared on the same machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


async def bench(n: int, command: str, warmup: int) -> list[float]:
    from executor.backends.local import LocalBackend, LocalOptions
    from executor.shell import CommandResult, CommandSpec, PersistentShell

    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend("local", LocalOptions(), state_dir=Path(tmp) / "backends" / "local")
        await backend.start()
        sandbox = await backend.sandbox("bench")
        sh = PersistentShell(sandbox, {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp}, cwd=sandbox.root)
        samples: list[float] = []
        try:
            for i in range(warmup + n):
                t0 = time.perf_counter()
                result = None
                async for ev in sh.run(CommandSpec(command), deadline=time.monotonic() + 30):
                    if isinstance(ev, CommandResult):
                        result = ev
                elapsed = time.perf_counter() - t0
                assert result is not None and result.status == "completed", result
                if i >= warmup:
                    samples.append(elapsed * 1000)
        finally:
            await sh.terminate()
        return samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--command", default="true")
    ap.add_argument("--src", help="a checkout whose executor package to benchmark instead")
    args = ap.parse_args()
    if args.src:
        sys.path.insert(0, os.path.abspath(args.src))
    import executor.shell

    samples = asyncio.run(bench(args.n, args.command, args.warmup))
    samples.sort()
    print(f"{os.path.dirname(os.path.dirname(executor.shell.__file__))}: {args.command!r} x{len(samples)}: "
          f"p50 {statistics.median(samples):.3f} ms  mean {statistics.fmean(samples):.3f} ms  "
          f"p90 {samples[int(len(samples) * 0.9)]:.3f} ms  load1 {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
