#!/usr/bin/env python3
"""Run a command on a new pseudo-terminal and answer ssh-setup's prompts like a person.

usage: tty_drive.py PASSWORD CMD...

Answers "[y/N]" with "y" and "SSH password" with PASSWORD, each only after the prompt
appeared (input typed earlier would be echoed, or flushed when echo is turned off).
Prints everything the terminal showed, then exits with the command's status (124 when
it did not finish within 60 s)."""
import os
import pty
import select
import sys
import time


def main():
    password, cmd = sys.argv[1], sys.argv[2:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(cmd[0], cmd)
    seen, answered = b"", 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if not r:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        seen += data
        rest = seen[answered:]
        if b"[y/N] " in rest:
            answered = len(seen)
            os.write(fd, b"y\n")
        elif b"SSH password" in rest and rest.rstrip().endswith(b":"):
            answered = len(seen)
            os.write(fd, password.encode() + b"\n")
    else:
        os.kill(pid, 9)
        sys.stdout.write(seen.decode(errors="replace"))
        sys.exit(124)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(seen.decode(errors="replace"))
    sys.exit(os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode")
             else status >> 8)


main()
