#!/usr/bin/env python3
"""Host CPU use of a QEMU run, per QEMU thread (tests/vm benchmarks).

  hostcpu.py PID [SKIP_S]

Samples /proc/stat and /proc/PID/task/*/stat every 0.5 s until PID exits, ignoring the
first SKIP_S seconds (boot), and prints, for the sampled period, the host's busy share
(all CPUs, as a percentage of one CPU: 200 = two CPUs fully busy) and each QEMU thread's
share of one CPU, e.g. `HOSTCPU host 196% of 200% (2 CPUs); CPU 0/TCG 88%; ...`.
"""
import os
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def host():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, sum(v[:8])


def threads(pid):
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1 : s.rindex(")")]
        rest = s[s.rindex(")") + 2 :].split()
        out[tid] = (comm, int(rest[11]) + int(rest[12]))
    return out


def main():
    pid = int(sys.argv[1])
    skip = float(sys.argv[2]) if len(sys.argv) > 2 else 0
    t_start = time.monotonic()
    first = last = None
    while os.path.exists(f"/proc/{pid}/task"):
        try:
            snap = (time.monotonic(), host(), threads(pid))
        except OSError:
            break
        if time.monotonic() - t_start >= skip:
            if first is None:
                first = snap
            last = snap
        time.sleep(0.5)
    if first is None or last is None or last[0] - first[0] < 1:
        print("HOSTCPU no samples")
        return
    (t0, h0, th0), (t1, h1, th1) = first, last
    ncpu = os.cpu_count() or 1
    busy = 100.0 * ncpu * (h1[0] - h0[0]) / max(1, h1[1] - h0[1])
    per = {}
    for tid, (comm, ticks) in th1.items():
        d = ticks - th0.get(tid, (comm, 0))[1]
        per[comm] = per.get(comm, 0) + d
    wall = t1 - t0
    parts = [
        f"{c} {100.0 * d / HZ / wall:.0f}%"
        for c, d in sorted(per.items(), key=lambda x: -x[1])
        if d > 0
    ]
    print(
        f"HOSTCPU over {wall:.0f} s: host {busy:.0f}% of {100 * ncpu}% ({ncpu} CPUs); QEMU threads (one CPU = 100%): "
        + "; ".join(parts[:8])
    )


if __name__ == "__main__":
    main()
