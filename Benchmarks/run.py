#!/usr/bin/env python3
"""xfer benchmarks (issue 7): `make bench`, or `QUICK=1 make bench` for a short run.

Everything runs on 127.0.0.1 against `xfer serve`. Every figure is the median of
several runs; every comparison is a ratio of two things measured alternately in
the same run. Prints the tables, rewrites the generated blocks of Docs/benchmarks.md, records
each goal's latest value in Benchmarks/goals.json and rewrites the goals table at the top of
Docs/benchmarks.md from it.

Environment: BUILD_DIR (directory holding `xfer` and `apple-resumable-server`; default
`swift build --package-path CLI -c release --show-bin-path`), STORE_BENCH_DIR (the one holding
`xfer-store-bench`; default the root package's release directory), QUICK=1, ROUNDS=N, ONLY=throughput,memory,
small,resume,list,resend,s3,tus,trees,datapath,stream,ceph,ietf,objectstore,pull,pullceph,far,hostile,sync,binary (comma list),
KEEP=1 (keep the work directory).
Python 3 standard library only; the s3 section also runs moto, the AWS CLI
(from .tools/venv-s3) and rclone (Debian's), which `make bench` installs.

This file is the entry point; the code is the package next to it, Benchmarks/xferbench:
common.py (environment, timing, helpers), servers.py (the servers and proxies started),
sections/ (one module per section), report.py (the doc's generated blocks and the goals table),
goals.py (the goals registry) and main.py (the run). `python3 Benchmarks/run.py --goals` only
rewrites the goals table from Benchmarks/goals.json (`--goals --from-doc`: from the doc's tables).
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ left in the repository by `make bench`
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__" and sys.argv[1:2] == ["--goals"]:
    # Only the goals table, from goals.json (--from-doc: derived again from the doc's generated blocks);
    # no binaries needed, nothing measured.
    from xferbench.goals import main as goals_main
    sys.exit(goals_main(sys.argv[2:]))

from xferbench.main import main  # noqa: E402 (after the path is set)

if __name__ == "__main__":
    sys.exit(main())
