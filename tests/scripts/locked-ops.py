#!/usr/bin/env python3
"""Locked instructions (lock-prefixed, xchg with memory, mfence) executed per
request, from a callgrind profile made with --dump-instr=yes, matched against
the binary's disassembly. Usage: locked-ops.py PROFILE BINARY REQUESTS [--by-function]"""
import collections
import re
import subprocess
import sys

profile, binary, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
locked = {}
dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary],
                     capture_output=True, text=True, check=True).stdout
for line in dis.splitlines():
    m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
    if m and re.match(r"(lock |mfence|xchg\s+%\w+,.*\()", m.group(2)):
        locked[int(m.group(1), 16)] = m.group(2)

names = {"ob": {}, "fn": {}}
counts = collections.Counter()
obj = fn = None
addr = 0
skip_call_line = False
for line in open(profile):
    m = re.match(r"(c?)(ob|fn)=\((\d+)\)(?: (.*))?", line.strip())
    if m:
        kind, ident, name = m.group(2), m.group(3), m.group(4)
        if name:
            names[kind][ident] = name
        if not m.group(1):
            if kind == "ob":
                obj = names["ob"].get(ident, "")
            else:
                fn = names["fn"].get(ident, "")
        continue
    if line.startswith("calls="):
        skip_call_line = True
        continue
    if not line or not (line[0] in "0123456789+-*"):
        continue
    parts = line.split()
    a = parts[0]
    if a.startswith("0x"):
        addr = int(a, 16)
    elif a[0] == "+":
        addr += int(a[1:])
    elif a[0] == "-":
        addr -= int(a[1:])
    if skip_call_line:
        skip_call_line = False
        continue
    if obj and obj.endswith(binary.split("/")[-1]) and addr in locked and len(parts) > 2:
        counts[fn] += int(parts[2])

if "--by-function" in sys.argv:
    for f, c in counts.most_common():
        print(f"{c / requests:6.2f}  {f}")
print(f"{sum(counts.values()) / requests:.2f}")
