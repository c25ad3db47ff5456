"""Requests per CPU-second of a load generator in steady state, measured from outside the tool:
the server's request counter (nginx stub_status) and the tool's CPU time (/proc/PID/stat) are
both read at two moments after the ramp-up, so start-up costs (Python imports, shared-library
loading) are left out for every tool alike.

usage: cpu_efficiency.py STATUS_URL DURATION_S SKIP_S -- COMMAND...
prints: requests cpu_seconds requests_per_cpu_second
"""
import os
import re
import subprocess
import sys
import time
import urllib.request

status_url, duration, skip = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
cmd = sys.argv[sys.argv.index("--") + 1:]
tick = os.sysconf("SC_CLK_TCK")


def served():
    text = urllib.request.urlopen(status_url, timeout=5).read().decode()
    # "server accepts handled requests\n A B C" -- C counts requests, the status request included
    return int(re.search(r"\n\s*(\d+)\s+(\d+)\s+(\d+)", text).group(3))


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime, all threads


proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    time.sleep(skip)
    r0, c0, t0 = served(), cpu(proc.pid), time.time()
    time.sleep(duration - skip - 1.0)
    r1, c1 = served(), cpu(proc.pid)
    proc.wait(timeout=duration + 30)
finally:
    if proc.poll() is None:
        proc.kill()
requests, seconds = r1 - r0 - 1, c1 - c0
print(f"{requests} {seconds:.3f} {requests / seconds:.1f}")
