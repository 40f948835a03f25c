"""Instructions that bash executes per run of a snippet (valgrind callgrind Ir; deterministic, unlike
wall or CPU time on this shared 2-core machine), after a setup script, minus an empty loop.

    .venv/bin/python -c "from executor.shell import prelude; print(prelude(\"ab\"))" > /tmp/prelude.sh
    echo '\\eval ":" </dev/null; \\__ex_end $?; \\__ex_mark 0123456789abcdef01234567' > /tmp/snippets.txt  # separated by "\\n---\\n"
    .venv/bin/python bench/bash_cost.py /tmp/prelude.sh /tmp/snippets.txt

Reference (bash 5.2.15, N=300, `\\eval ':' </dev/null` plus the framing): 7fc3d9a (`__ex_done`) 213 kIr
per command; the framing with per-command trap/option resets 798 kIr; the lean framing 312 kIr.
bash copies a function's body on every call: keep the helpers short, rare paths in other functions.
"""
import os
import re
import subprocess
import sys
import tempfile
N = int(os.environ.get("N", 300))
def ir(setup, snippet):
    script = setup + f"\nfor ((__i=0;__i<{N};__i++)); do {snippet}\ndone >/dev/null 2>&1\ntrap - EXIT\n"
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write(script)
    out = tempfile.mktemp()
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "bash", "--noprofile", "--norc", f.name],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/tmp", text=True)
    m = re.search(r"Collected : (\d+)", r.stderr)
    os.unlink(out)
    os.unlink(f.name)
    return int(m[1])
if __name__ == "__main__":
    setup = open(sys.argv[1]).read()
    base = ir(setup, ":")
    for s in [part for part in open(sys.argv[2]).read().split("\n---\n") if part.strip()]:
        print(f"{(ir(setup, s) - base) / N / 1000:8.1f} kIr  {s.strip()[:110]}", flush=True)
