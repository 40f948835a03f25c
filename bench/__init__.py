"""The benchmark suite (issue 9): `make bench` or `.venv/bin/python -m bench`; see bench/README.md."""
