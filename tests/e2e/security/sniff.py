#!/usr/bin/env python3
"""Capture every frame on one interface (AF_PACKET, as root) into a file until SIGTERM.

usage: sniff.py IFNAME OUTFILE READYFILE

No tcpdump needed: run it inside a node's network namespace (cluster.sh exec). The
output is the raw frames back to back (no pcap headers): the security tests only
search it for bytes that must never appear and for the handshake's magic that must.
READYFILE gets this process's pid once the socket is bound, so the caller knows the
capture runs and whom to send SIGTERM (cluster.sh exec may run it below a wrapper).
"""
import os
import signal
import socket
import sys

ETH_P_ALL = 3


def main():
    ifname, outfile, ready = sys.argv[1:4]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.settimeout(0.2)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    frames = 0
    with open(outfile, "wb") as out:
        with open(ready, "w") as f:
            f.write("%d\n" % os.getpid())
        while not stop:
            try:
                data = s.recv(1 << 18)
            except socket.timeout:
                continue
            except InterruptedError:
                continue
            out.write(data)
            frames += 1
        out.flush()
    sys.stderr.write("sniff.py: %d frames on %s\n" % (frames, ifname))


if __name__ == "__main__":
    main()
