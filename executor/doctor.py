"""`executor doctor`: checks the config and every configured backend, and says how to fix what is wrong.

It starts each backend as the daemon would (without serving anything) and asks its health; a
backend's reason names the problem and the fix (docker engine unreachable, image missing, ssh host
key mismatch, apptainer missing, credentials missing, ...)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from executor.config import Config, ConfigError, default_state_dir, load_config


# name, kind, available, reason, policy, startup notice
_Row = tuple[str, str, bool, str, dict[str, str], str]


async def _check_backends(config: Config, state_dir: Path) -> list[_Row]:
    from executor.backends import backend_class

    rows: list[_Row] = []
    for name, (kind, options) in config.backend_options().items():
        bdir = state_dir / "backends" / name
        bdir.mkdir(parents=True, exist_ok=True)
        backend = backend_class(kind)(name, options, state_dir=bdir)
        try:
            await asyncio.wait_for(backend.start(), 60)
            health = await asyncio.wait_for(backend.health(), 30)
            rows.append((name, kind, health.available, health.reason, dict(backend.policy()),
                         backend.startup_notice() or ""))
        except asyncio.TimeoutError:
            rows.append((name, kind, False, "did not answer within 60 s", {}, ""))
        except Exception as exc:
            rows.append((name, kind, False, f"{type(exc).__name__}: {exc}", {}, ""))
        finally:
            try:
                await asyncio.wait_for(backend.close(), 10)
            except Exception:
                pass
    return rows


def run(config_path: str | None, state_dir: str | None, as_json: bool = False) -> int:
    problems = 0
    lines: list[str] = []
    backends: list[dict[str, object]] = []
    results: dict[str, object] = {"config": None, "state_dir": None, "backends": backends}
    try:
        config = load_config(config_path)
        results["config"] = "ok"
        lines.append(f"ok    config {config_path or '(defaults)'}")
    except ConfigError as exc:
        results["config"] = str(exc)
        print(f"FAIL  config: {exc}")
        return 1
    sdir = Path(state_dir or config.state_dir or default_state_dir()).expanduser()
    try:
        sdir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=sdir, delete=True)
        probe.close()
        results["state_dir"] = "ok"
        lines.append(f"ok    state dir {sdir} is writable")
    except OSError as exc:
        problems += 1
        results["state_dir"] = str(exc)
        lines.append(f"FAIL  state dir {sdir}: {exc.strerror}; pass --state-dir or fix its permissions")
    if shutil.which("bash") is None:
        lines.append("warn  no bash on this host (needed only by the local backend)")
    # Check backends in a scratch state dir so a running daemon's state is not touched.
    with tempfile.TemporaryDirectory(prefix="executor-doctor-") as scratch:
        rows = asyncio.run(_check_backends(config, Path(scratch)))
    for name, kind, ok, reason, policy, notice in rows:
        backends.append({"name": name, "kind": kind, "available": ok, "reason": reason,
                                    "policy": policy, "notice": notice})
        if ok:
            lines.append(f"ok    backend {name} ({kind}){' — ' + reason if reason else ''}")
        else:
            problems += 1
            lines.append(f"FAIL  backend {name} ({kind}): {reason}")
        for key in ("isolation", "network", "kill"):  # what contains a command, and what ends it
            if key in policy:
                lines.append(f"      {key}: {policy[key]}")
        if notice:
            lines.append(f"WARN  backend {name}: {notice}")
    if as_json:
        import json

        print(json.dumps(results, indent=2))
    else:
        print("\n".join(lines))
        print(f"{problems} problem{'s' if problems != 1 else ''} found" if problems else "all checks passed")
    return 1 if problems else 0


def health(target: str, timeout: float = 5.0, as_json: bool = False) -> int:
    """0 when the daemon at target answers SERVING on grpc.health.v1 (a container health check)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(target) as channel:
            resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                            timeout=timeout)
    except grpc.RpcError as exc:
        if as_json:
            import json

            print(json.dumps({"target": target, "status": "unreachable", "code": exc.code().name,
                              "message": exc.details()}))
        else:
            print(f"unhealthy: {exc.code().name}: {exc.details()}")
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    if as_json:
        import json

        print(json.dumps({"target": target, "status": status.lower()}))
    else:
        print(status.lower())
    return 0 if resp.status == health_pb2.HealthCheckResponse.SERVING else 1


