"""The repository's path and a shell helper: what the report and the goals registry need, without the
binaries common.py looks up when it is imported (so `python3 -m xferbench.goals` runs without them)."""

import os
import subprocess

# The repository: this file is Benchmarks/xferbench/system.py.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "Docs", "benchmarks.md")


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return "?"
