#!/usr/bin/env python3
"""JSON-RPC client for the daemon's --rpc-socket, for the guest scenarios (tests/vm).

Copied to /hostwork/bin/rpc.py and run with the host's python3 (through the /usr share).

  rpc.py SOCK call METHOD [PARAMS_JSON]      print the result as JSON (exit 1 on an error)
  rpc.py SOCK field get_paths|get_stats NAME KEY[.KEY...]...
                                             print fields of path NAME (one: its value;
                                             several: KEY=VALUE each)
  rpc.py SOCK wait-state NAME STATE SECONDS  poll get_paths every 0.2 s until path NAME is
                                             in STATE; prints the seconds waited (exit 1 on
                                             timeout, with the last state seen)
  rpc.py SOCK wait-io NAME SECONDS           poll get_stats until path NAME's reads+writes
                                             grow; prints the seconds waited and the growth
"""
import json
import socket
import sys
import time


class Rpc:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(path)
        self.f = self.s.makefile("rw")
        self.id = 0

    def call(self, method, params=None):
        self.id += 1
        req = {"jsonrpc": "2.0", "method": method, "id": self.id}
        if params is not None:
            req["params"] = params
        self.f.write(json.dumps(req) + "\n")
        self.f.flush()
        line = self.f.readline()
        if not line:
            raise RuntimeError(f"{method}: connection closed")
        resp = json.loads(line)
        if "error" in resp:
            raise RuntimeError(f"{method}: {json.dumps(resp['error'])}")
        return resp["result"]


def path_of(result, name):
    for p in result.get("paths", []):
        if p.get("name") == name:
            return p
    raise RuntimeError(f"no path {name!r} in {json.dumps(result)}")


def io_of(p):
    return int(p.get("reads", 0)) + int(p.get("writes", 0))


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    rpc = Rpc(argv[1])
    cmd = argv[2]
    if cmd == "call":
        params = json.loads(argv[4]) if len(argv) > 4 else None
        print(json.dumps(rpc.call(argv[3], params)))
        return 0
    if cmd == "field":
        p = path_of(rpc.call(argv[3]), argv[4])
        out = []
        for key in argv[5:]:
            v = p
            for k in key.split("."):
                v = v[k]
            v = v if not isinstance(v, (dict, list)) else json.dumps(v, separators=(",", ":"))
            out.append(str(v) if len(argv) == 6 else f"{key}={v}")
        print(" ".join(out))
        return 0
    if cmd == "wait-state":
        name, want, limit = argv[3], argv[4], float(argv[5])
        t0 = time.monotonic()
        state = None
        while True:
            state = path_of(rpc.call("get_paths"), name).get("state")
            if state == want:
                print(f"{time.monotonic() - t0:.1f}")
                return 0
            if time.monotonic() - t0 >= limit:
                print(f"timeout: path {name} still {state!r} after {limit:.0f} s")
                return 1
            time.sleep(0.2)
    if cmd == "wait-io":
        name, limit = argv[3], float(argv[4])
        t0 = time.monotonic()
        first = io_of(path_of(rpc.call("get_stats"), name))
        while True:
            time.sleep(0.2)
            n = io_of(path_of(rpc.call("get_stats"), name))
            if n > first:
                print(f"{time.monotonic() - t0:.1f} {n - first}")
                return 0
            if time.monotonic() - t0 >= limit:
                print(f"timeout: path {name} carried no I/O in {limit:.0f} s")
                return 1
    print(f"unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"rpc.py: {e}")
        sys.exit(1)
