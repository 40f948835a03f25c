#!/usr/bin/python3 -I
"""A recording stand-in for the ``apptainer`` executable, for the argv tier of the singularity tests.

Every call appends ``{"argv": [...], "env": {APPTAINERENV_* only}}`` to the JSON-lines file named
by ``EXECUTOR_APPTAINER_FAKE_LOG``; instances live in ``EXECUTOR_APPTAINER_FAKE_STATE`` (JSON).
It behaves enough like Apptainer 1.4 for the backend to run for real on the host:

* ``instance start FLAGS IMAGE NAME`` starts a ``sleep`` as the instance's process (its pid is
  what ``instance list --json`` reports, as Apptainer's does) and remembers the ``--bind``s.
* ``exec ... instance://NAME CMD...`` runs CMD as a child on the host with Apptainer's injected variables
  plus the APPTAINERENV_ ones (unescaped as Apptainer's sourced ``export NAME="..."`` does), and
  with paths under a bind's destination mapped to its source, so the launcher really runs.
* ``instance stop``, ``build`` (a reference containing ``unbuildable`` fails), ``overlay create``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

LOG = os.environ.get("EXECUTOR_APPTAINER_FAKE_LOG", "")
STATE = Path(os.environ.get("EXECUTOR_APPTAINER_FAKE_STATE", "/nonexistent"))


def record(argv: list[str]) -> None:
    if LOG:
        env = {k: v for k, v in os.environ.items() if k.startswith(("APPTAINERENV_", "SINGULARITYENV_"))}
        with open(LOG, "a") as f:
            f.write(json.dumps({"argv": argv, "env": env}) + "\n")


def load() -> dict:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save(state: dict) -> None:
    STATE.write_text(json.dumps(state))


def unescape(value: str) -> str:
    return re.sub(r"\\([\\$`])", r"\1", value)


def instance_start(args: list[str]) -> int:
    *flags, image, name = args
    state = load()
    if name in state:
        print(f"FATAL:   instance {name} already exists", file=sys.stderr)
        return 255
    if not os.path.exists(image):
        print(f"FATAL:   could not open image {image}: no such file", file=sys.stderr)
        return 255
    binds = [flags[i + 1] for i, f in enumerate(flags) if f == "--bind"]
    proc = subprocess.Popen(["sleep", "3600"], start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state[name] = {"instance": name, "pid": proc.pid, "img": image, "ip": "",
                   "logErrPath": f"/fake/{name}.err", "logOutPath": f"/fake/{name}.out", "binds": binds}
    save(state)
    return 0


def instance_stop(args: list[str]) -> int:
    name = args[-1]
    state = load()
    info = state.pop(name, None)
    if info is None:
        print(f"FATAL:   no instance found with name {name}", file=sys.stderr)
        return 255
    try:
        os.kill(info["pid"], 9)
    except ProcessLookupError:
        pass
    save(state)
    return 0


def instance_list() -> int:
    print(json.dumps({"instances": [{k: v for k, v in i.items() if k != "binds"} for i in load().values()]}))
    return 0


def map_path(path: str, binds: list[str]) -> str:
    for bind in binds:
        src, dst = bind.split(":")[:2]
        if path == dst or path.startswith(dst.rstrip("/") + "/"):
            return src + path[len(dst):]
    return path


def exec_(args: list[str]) -> int:
    i = 0
    while not args[i].startswith("instance://"):
        i += 2 if args[i] == "--pwd" else 1
    name = args[i][len("instance://"):]
    info = load().get(name)
    if info is None:
        print(f"FATAL:   While setting image/instance: no instance found with name {name}", file=sys.stderr)
        return 255
    cmd = [map_path(a, info["binds"]) for a in args[i + 1:]]
    env = {"LD_LIBRARY_PATH": "/.singularity.d/libs", "PS1": "Apptainer> ", "APPTAINER_NAME": "fake.sif",
           "APPTAINER_CONTAINER": info["img"], "LANG": "C", "TERM": "xterm", "HOME": "/root",
           "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "PROMPT_COMMAND": 'PS1="Apptainer> "; unset PROMPT_COMMAND'}
    prefix = "SINGULARITYENV_" if "singularity-ce" in os.environ.get("EXECUTOR_APPTAINER_FAKE_VERSION", "") \
        else "APPTAINERENV_"
    for key, value in os.environ.items():
        if key.startswith(prefix):
            env[key[len(prefix):]] = unescape(value)
    # Like Apptainer's starter: the command is a child (so not a process-group leader, and
    # setsid inside does not fork), and a death by signal N comes back as exit 128+N.
    code = subprocess.run(cmd, env=env).returncode
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    record(argv)
    args = [a for a in argv[1:] if a not in ("--quiet", "-q")]
    if args == ["--version"]:
        print(os.environ.get("EXECUTOR_APPTAINER_FAKE_VERSION", "apptainer version 1.4.5-fake"))
        return 0
    if args[:1] == ["instance"]:
        # calls run concurrently (the backend stops instances in parallel): one at a time here
        with open(f"{STATE}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if args[1] == "start":
                return instance_start(args[2:])
            if args[1] == "stop":
                return instance_stop(args[2:])
            if args[1] == "list":
                return instance_list()
    if args[:1] == ["exec"]:
        return exec_(args[1:])
    if args[:1] == ["build"]:
        out, ref = args[-2], args[-1]
        if "unbuildable" in ref:
            print(f"FATAL:   While making image from oci registry: failed to get checksum for {ref}", file=sys.stderr)
            return 255
        Path(out).write_text("fake sif\n")
        return 0
    if args[:2] == ["overlay", "create"]:
        Path(args[-1]).write_bytes(b"\0" * 1024)
        return 0
    print(f"fake apptainer: unsupported command {args}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
