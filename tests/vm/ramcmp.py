#!/usr/bin/env python3
"""ramcmp.py SRC_PID DST_PID [LOWMEM]: compare two QEMUs' guest RAM, page by page.

The exact oracle of a live migration: once `query-migrate` says "completed", the
source is stopped and a destination started with -S has not run yet, so their RAM must
be equal byte for byte. Any page that differs was lost by the migration (a write that
no dirty log marked, or one made after the last sync).

Each QEMU's RAM is its `memory-backend-memfd` (the scenario's only memfd), read through
/proc/PID/fd: the RAM block itself, every byte of it, with no guest-physical holes to
map. Offsets past LOWMEM (q35 puts RAM above 2 GiB at 4 GiB once it holds 2.75 GiB or
more) are printed as the guest-physical addresses they have.

Prints one line: `RAMCMP pages=N differ=D bytes=B [first: gpa ...]`; exit 0 when equal,
1 when not, 2 when the memory could not be read.
"""
import os
import sys

PAGE = 4096
CHUNK = 1 << 20


def memfd_of(pid):
    """The largest memfd QEMU `pid` holds (its guest RAM): a path to open."""
    best = None
    for fd in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if not os.readlink(path).startswith("/memfd:"):
                continue
            size = os.stat(path).st_size
        except OSError:
            continue
        if best is None or size > best[1]:
            best = (path, size)
    if best is None:
        sys.exit(f"RAMCMP error: QEMU {pid} holds no memfd")
    return best


def main():
    src_pid, dst_pid = int(sys.argv[1]), int(sys.argv[2])
    lowmem = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 62
    (src_path, src_size), (dst_path, dst_size) = memfd_of(src_pid), memfd_of(dst_pid)
    if src_size != dst_size:
        print(f"RAMCMP error: RAM sizes differ ({src_size} and {dst_size} bytes)")
        return 2
    differ = []
    with open(src_path, "rb") as a, open(dst_path, "rb") as b:
        off = 0
        while off < src_size:
            x, y = a.read(CHUNK), b.read(CHUNK)
            if len(x) != len(y) or not x:
                print(f"RAMCMP error: short read at {off}")
                return 2
            if x != y:
                for p in range(0, len(x), PAGE):
                    if x[p:p + PAGE] != y[p:p + PAGE]:
                        differ.append(off + p)
            off += len(x)

    def gpa(o):
        return o if o < lowmem else (1 << 32) + o - lowmem

    line = f"RAMCMP pages={src_size // PAGE} differ={len(differ)} bytes={src_size}"
    if differ:
        line += " first: " + " ".join(hex(gpa(o)) for o in differ[:8])
    print(line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
