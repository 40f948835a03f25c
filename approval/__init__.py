"""The approval gate: pure policy. Installed as ``executor.approval``."""
