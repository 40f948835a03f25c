"""Runs inside hermes-agent 0.19's own virtualenv: times its terminal environments.

    <hermes-venv>/bin/python bench/hermes_runner.py '<json spec>'

The spec: ``{"env": "local"|"docker"|"ssh", "n": 200, ...the environment's arguments}``. Prints one
JSON object on stdout: ``{"init_ms": .., "samples": {"true": [...], "echo": [...]}}`` or
``{"error": "..."}``. Standard library and hermes only: this file must not import anything of
executor (that venv has none of it).

How each environment is called was read from its source (tools/environments/*.py):
``execute(command)`` returns ``{"output", "returncode"}``; every call spawns a fresh ``bash -c``
(locally, via ``docker exec``, or via ``ssh`` over its ControlMaster) that sources a session
snapshot. The only change made to hermes: for ssh, ``-o UserKnownHostsFile=<the test sshd's
known_hosts>`` is added to its ssh command line so that its ``StrictHostKeyChecking=accept-new``
does not write into root's ~/.ssh/known_hosts (it costs nothing per call).
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def _environment(spec: dict):
    kind = spec["env"]
    if kind == "local":
        from tools.environments.local import LocalEnvironment

        return LocalEnvironment(cwd=spec["cwd"], timeout=60)
    if kind == "docker":
        from tools.environments.docker import DockerEnvironment

        return DockerEnvironment(image=spec["image"], task_id=spec["task_id"], timeout=60, network=False,
                                 persistent_filesystem=False, persist_across_processes=False)
    if kind == "ssh":
        from tools.environments import ssh

        original = ssh.SSHEnvironment._build_ssh_command
        known_hosts = spec["known_hosts"]

        def with_known_hosts(self, extra_args=None):
            cmd = original(self, extra_args)
            return cmd[:1] + ["-o", f"UserKnownHostsFile={known_hosts}"] + cmd[1:]

        ssh.SSHEnvironment._build_ssh_command = with_known_hosts
        return ssh.SSHEnvironment(host=spec["host"], user=spec["user"], port=int(spec["port"]),
                                  key_path=spec["key_file"], timeout=60)
    raise ValueError(f"unknown environment {kind!r}")


def main() -> None:
    spec = json.loads(sys.argv[1])
    n, warmup = int(spec["n"]), int(spec.get("warmup", 5))
    env = None
    try:
        t0 = time.perf_counter()
        env = _environment(spec)
        init_ms = (time.perf_counter() - t0) * 1000
        samples = {}
        for name, command in (("true", "true"), ("echo", "echo hi")):
            expect = "hi" if name == "echo" else ""
            times = []
            for i in range(warmup + n):
                t = time.perf_counter()
                result = env.execute(command)
                elapsed = (time.perf_counter() - t) * 1000
                if result.get("returncode") != 0 or result.get("output", "").strip() != expect:
                    raise RuntimeError(f"{command!r} gave {result!r}")
                if i >= warmup:
                    times.append(elapsed)
            samples[name] = times
        print(json.dumps({"init_ms": init_ms, "samples": samples}))
    except BaseException as exc:  # report, never crash silently: the bench records why
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}))
    finally:
        if env is not None:
            try:
                if spec["env"] == "docker":
                    env.cleanup(force_remove=True)
                else:
                    env.cleanup()
            except Exception:
                pass


if __name__ == "__main__":
    main()
