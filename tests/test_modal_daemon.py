"""The modal backend under a real daemon process: restart and crash against the fake Modal API.

A restarted daemon must find the task's sandbox again by name (files and shell state kept),
and a daemon killed with SIGKILL must have its leftover sessions ended by the next start's
adoption of the sandbox (through the session registry inside it).
"""

from __future__ import annotations

import os
import threading

import pytest

from tests.daemon import DaemonProcess
from tests.infra import modal as infra

pytestmark = [pytest.mark.backend("modal"), pytest.mark.slow]


from tests.daemon import count_processes, wait_for  # noqa: E402


@pytest.fixture
def modal_daemon(tmp_path):
    options = infra.provision()
    daemon = DaemonProcess({"backend": "modal", "backends": {"modal": options},
                            "limits": {"kill_grace_seconds": 2}},
                           state_dir=tmp_path / "state").start()
    yield daemon
    daemon.kill()


def test_restart_finds_the_sandbox_with_files_and_shell_state(modal_daemon):
    with modal_daemon.client() as c:
        r = c.run("keep", "mkdir -p work && cd work && echo data > f.txt && export KEPT=yes && hello() { echo hi; }")
        assert r.exit.exit_code == 0, r.stderr
    modal_daemon.restart()
    with modal_daemon.client() as c:
        r = c.run("keep", 'cat f.txt; echo "$KEPT"; hello; basename "$PWD"')
        assert r.stdout == b"data\nyes\nhi\nwork\n", r.stderr
        c.close_task("keep", remove_files=True)


def test_sigkilled_daemon_leftovers_end_when_the_sandbox_is_adopted(modal_daemon):
    marker = f"executor-modal-crash-{os.getpid()}"
    c = modal_daemon.client()
    c.run("crash", "true")

    def go():
        try:
            list(c.exec("crash", f"(exec -a {marker} sleep 300) & exec -a {marker} sleep 300"))
        except Exception:  # the stream ends with the daemon
            pass

    th = threading.Thread(target=go, daemon=True)
    th.start()
    assert wait_for(lambda: count_processes(marker) == 2)
    modal_daemon.kill()
    assert count_processes(marker) == 2, "in the cloud, a dead daemon's commands keep running"
    modal_daemon.start()
    with modal_daemon.client() as c2:
        r = c2.run("crash", "echo back")
        assert r.stdout == b"back\n", r.stderr
        assert wait_for(lambda: count_processes(marker) == 0, 10), "leftover sessions were not ended"
        c2.close_task("crash", remove_files=True)
