"""Ordering a command against the test without the clock.

A test that must show something happened *while* a command ran (its output streamed, another
task ran at the same time) makes the command wait for a file that the test creates only after
it has seen that thing: the command cannot end before, whatever the machine's load.
"""

from __future__ import annotations

#: The file :data:`WAIT_FOR_RELEASE` waits for, in the command's working directory.
RELEASE = "release"

#: Shell code that waits until ``release`` exists in the working directory. After about a minute
#: (a hang bound only, never reached when the test works) it gives up with exit code 9, so a
#: command that was never released cannot pass for one that was.
WAIT_FOR_RELEASE = f"i=0; until [ -e {RELEASE} ]; do [ $i -lt 1200 ] || exit 9; sleep 0.05; i=$((i+1)); done"
