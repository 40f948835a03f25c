"""mypy over the code as it is imported: `executor`, `executor.backends` and `executor.approval`.

The source tree keeps `backends/` and `approval/` at the top level (pyproject maps them into the
`executor` package), and the editable install resolves that with an import hook mypy cannot follow.
So this builds the installed layout as a tree of symlinks under a cache directory and runs mypy there
with the project's settings (pyproject.toml [tool.mypy]): strict on `executor/` (less the generated
`executor/v1`), `backends/base.py` and `approval/`; the rest of `backends/` is read for its types
but not reported on.

    python scripts/typecheck.py            # exit status 0 when mypy finds nothing
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "typecheck"


def targets(root: Path = ROOT) -> list[str]:
    """What is checked strictly, as paths inside the installed layout: the core's modules and
    subpackages (not the generated v1), the whole gate, the Backend contract and what backends share."""
    core = sorted(f"executor/{p.name}" for p in (root / "executor").iterdir()
                  if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())) and p.name != "v1")
    return [*core, "executor/approval", "executor/backends/base.py", "executor/backends/_shared"]


def build_tree(root: Path = ROOT, where: Path = CACHE) -> Path:
    """Symlink the package tree as it installs: executor/ with backends/ and approval/ inside."""
    pkg = where / "tree" / "executor"
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    for entry in (root / "executor").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    (pkg / "backends").symlink_to(root / "backends")
    (pkg / "approval").symlink_to(root / "approval")
    return pkg.parent


def run(argv: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    tree = build_tree()
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--cache-dir", str(CACHE / "mypy"), *(argv or targets())]
    return subprocess.run(cmd, cwd=tree, capture_output=True, text=True)


def main() -> int:
    result = run(sys.argv[1:] or None)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
