"""The watch of bench/failover-shards.sh, in one light process (an mdsctl probe every 20 ms
took a third of a core from the shards being measured): the other shards' create counters
over the 2 s before the kill, the SIGKILL of the victim, then the standby's /metrics every
20 ms until it has answered a create, and the other shards' counters again.

    python3 bench/failover_watch.py KILL_AT VICTIM_PID METRICS_0 METRICS_2 METRICS_STANDBY
"""

import os
import re
import signal
import sys
import time
import urllib.request

CREATES = re.compile(r'(?m)^mds_requests_total\{[^}]*op="create"[^}]*result="ok"[^}]*\} (\S+)$')


def creates(addr):
    """Creates answered ok by the server whose metrics are at addr (0 if it does not answer)."""
    try:
        text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=1).read().decode()
    except OSError:
        return 0.0
    return sum(float(v) for v in CREATES.findall(text))


def main():
    kill_at, victim = float(sys.argv[1]), int(sys.argv[2])
    m0, m2, standby = sys.argv[3:6]
    time.sleep(kill_at - 2)
    t0, a0, a2 = time.monotonic(), creates(m0), creates(m2)
    time.sleep(2)
    t1, b0, b2 = time.monotonic(), creates(m0), creates(m2)
    os.kill(victim, signal.SIGKILL)
    while creates(standby) == 0:
        if time.monotonic() - t1 > 60:
            print("no create on shard 1 within 60 s of the kill")
            return
        time.sleep(0.02)
    t2, c0, c2 = time.monotonic(), creates(m0), creates(m2)
    before, during = t1 - t0, t2 - t1
    r0 = ((b0 - a0) / before, (c0 - b0) / during)
    r2 = ((b2 - a2) / before, (c2 - b2) / during)
    print(
        f"first create on shard 1 {during * 1000:.0f} ms after the kill; "
        f"shard 0 {r0[1]:.0f}/s during vs {r0[0]:.0f}/s before ({r0[1] / r0[0]:.2f}), "
        f"shard 2 {r2[1]:.0f}/s vs {r2[0]:.0f}/s ({r2[1] / r2[0]:.2f})"
    )


if __name__ == "__main__":
    main()
