#!/usr/bin/env python3
"""Compare `auto` across mpath-sim binaries (issue 11's rounds).

usage: sweep-compare.py BIN [BIN2 ...]          seeds 1-10 (tuning), 12-16 (validation), 11 (CI)
       sweep-compare.py BIN [BIN2] --fresh=SEED  one fresh seed of 1000 scenarios

Per set and binary: the share of scenarios where auto is within 0.95 of
the best policy, the count below 0.85 and the minimum; with two binaries,
the scenarios that moved most either way. A variant is tried by copying
target/release/mpath-sim aside before and after the change.

The ratios are read from the sweep's 3-decimal output, so a scenario at
0.9496 counts as within 0.95 here: the share can be a tenth of a point
above the one `mpath-sim sweep` prints itself (quote that one for a
fresh seed).
"""
import re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
args = [a for a in sys.argv[1:] if not a.startswith('--')]
fresh = [a.split('=')[1] for a in sys.argv[1:] if a.startswith('--fresh=')]
if not args:
    sys.exit(__doc__)
def run(b, seed, count):
    out = subprocess.run([b, 'sweep', '--seed', str(seed), '--count', str(count), '--worst', str(count)],
                         capture_output=True, text=True).stdout
    r = {}
    for line in out.splitlines():
        m = re.match(r'^(\d\.\d+)\s+(sweep-\S+):', line)
        if m: r[m.group(2)] = float(m.group(1))
    return r
sets = ([('fresh', [(int(fresh[0]), 1000)])] if fresh else
        [('1-10', [(s, 300) for s in range(1, 11)]), ('12-16', [(s, 300) for s in range(12, 17)]), ('11', [(11, 200)])])
res = {}
with ThreadPoolExecutor(2) as ex:
    for b in args:
        for name, seeds in sets:
            futs = [ex.submit(run, b, s, c) for s, c in seeds]
            d = {}
            for f in futs: d.update(f.result())
            res[(b, name)] = d
for name, _ in sets:
    for b in args:
        d = res[(b, name)]; v = list(d.values())
        print(f"{name:6} {b:40} n={len(v)} >=0.95 {100*sum(x>=0.95 for x in v)/len(v):.2f}%  <0.85 {sum(x<0.85 for x in v)}  min {min(v):.3f}")
    if len(args) >= 2:
        a, b = res[(args[0], name)], res[(args[1], name)]
        diffs = sorted(((b[k]-a[k], k) for k in a if k in b), key=lambda t: t[0])
        print("   worse:", ', '.join(f"{k} {a[k]:.3f}->{b[k]:.3f}" for dd, k in diffs[:6] if dd < -0.005))
        print("   better:", ', '.join(f"{k} {a[k]:.3f}->{b[k]:.3f}" for dd, k in diffs[::-1][:6] if dd > 0.005))
