"""What the Python benchmarks of processes share (descendants.py, faults.py): whether a
pid is alive, and the line that says what machine and load a table was measured under.
Imported from bench/ itself (the scripts run as `python3 bench/NAME.py`)."""
import os
import time


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def machine_line():
    """The load, CPUs, time and kernel that follow a table (docs/benchmarks.md)."""
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return (f"load: {load}, {os.cpu_count()} CPUs, "
            f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, kernel {os.uname().release}")
