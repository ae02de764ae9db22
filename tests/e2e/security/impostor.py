#!/usr/bin/env python3
"""A fake launcher: accept one connection on ADDR:PORT, read what the agent sends
first (its hello), answer with 64 random bytes as the reply, then record every byte
the agent sends afterwards until it closes.

usage: impostor.py ADDR PORTFILE LOGFILE
The chosen port is written to PORTFILE; LOGFILE gets "hello N" (bytes before the
reply) and "after N" (bytes after it).
"""
import os
import socket
import sys


def main():
    addr, portfile, logfile = sys.argv[1:4]
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind((addr, 0))
    ls.listen(1)
    ls.settimeout(30)
    with open(portfile + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(portfile + ".tmp", portfile)
    c, _ = ls.accept()
    c.settimeout(30)
    hello = b""
    while len(hello) < 72:
        d = c.recv(72 - len(hello))
        if not d:
            break
        hello += d
    c.sendall(os.urandom(64))
    after = 0
    while True:
        try:
            d = c.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not d:
            break
        after += len(d)
    with open(logfile, "w") as f:
        f.write("hello %d\nmagic %s\nafter %d\n" % (len(hello), hello[:6].decode("ascii", "replace"), after))


if __name__ == "__main__":
    main()
