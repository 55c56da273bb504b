"""The files the per-request cost tools push (transport-cost.sh, receiver-cost.sh), made once in
the current directory: `tree/`, 2,000 files of 4 KiB of random bytes in 20 directories, and
`BIG`, one file of MIB MiB.

    python3 Benchmarks/tools/cost-files.py BIG MIB
"""

import os
import sys

big, mib = sys.argv[1], int(sys.argv[2])
for d in range(20):
    os.makedirs(f"tree/d{d:02}", exist_ok=True)
    for f in range(100):
        with open(f"tree/d{d:02}/f{f:03}", "wb") as out:
            out.write(os.urandom(4096))
os.makedirs(os.path.dirname(big) or ".", exist_ok=True)
with open(big, "wb") as out:
    for _ in range(mib):
        out.write(os.urandom(1 << 20))
