#!/usr/bin/env python3
"""Generates the Grafana dashboard for mds. The JSON is never edited by hand: change this
script and run it again.

    python3 dashboards/generate.py          # writes dashboards/mds.json
    python3 dashboards/generate.py --check  # fails if mds.json is not what this script writes

Every query uses `$instance` (a variable over the scraped mds instances) and
`$__rate_interval`; the dashboards test runs each one against a real Prometheus scraping a
real mds under load and fails if any returns no series.
"""
import json
import os
import sys

SEL = 'instance=~"$instance"'
RI = "$__rate_interval"
CREATE_OK = 'op="create",result="ok"'
NOT_OK = 'result!="ok"'


def rate(metric, extra=""):
    sel = f"{SEL},{extra}" if extra else SEL
    return f"rate({metric}{{{sel}}}[{RI}])"


def quantiles(metric, by, qs=(0.5, 0.99, 0.999)):
    grp = f"{by}, le" if by else "le"
    return [
        (f"histogram_quantile({q}, sum by ({grp}) ({rate(metric + '_bucket')}))",
         f"p{q * 100:g}" + (f" {{{{{by}}}}}" if by else ""))
        for q in qs
    ]


PANELS = [
    # (title, unit, [(expr, legend)], description[, width]): width in Grafana's 24 columns,
    # half the row unless given; panels fill rows left to right.
    ("Create rate", "ops", [(f"sum({rate('mds_requests_total', CREATE_OK)})", "creates/s")],
     "Successful CREATEs per second: the figure loadgen's Rate line reports."),
    ("Requests by operation", "reqps", [(f"sum by (op) ({rate('mds_requests_total')})", "{{op}}")],
     "All answered requests per second, by operation."),
    ("Errors by code", "reqps",
     [(f"sum by (result) ({rate('mds_requests_total', NOT_OK)})", "{{result}}")],
     "Requests answered with a POSIX error, by code."),
    ("Request latency p99 by operation", "s", quantiles("mds_request_duration_seconds", "op", (0.99,)),
     "From a request's arrival to its reply being queued for the socket; mutations include their commit."),
    ("Request latency quantiles (all operations)", "s", quantiles("mds_request_duration_seconds", ""),
     "p50, p99 and p99.9 over every operation."),
    ("Commits per second", "ops", [(f"sum({rate('mds_commits_total')})", "commits/s")],
     "Group commits written and synced per second."),
    ("Mutations per commit", "short",
     [(f"sum({rate('mds_committed_transactions_total')}) / sum({rate('mds_commits_total')})", "mean")]
     + quantiles("mds_commit_transactions", "", (0.5, 0.99)),
     "How many mutations share one synced write: the whole point of group commit."),
    ("Commit write+sync time", "s",
     quantiles("mds_commit_write_sync_duration_seconds", "", (0.5, 0.99))
     + [(q[0], "build " + q[1]) for q in quantiles("mds_commit_build_duration_seconds", "", (0.99,))],
     "RocksDB's synced write of one group commit (WAL append, fsync, memtable), and the time to encode its batch."),
    ("Pending replies", "short", [(f"sum(mds_pending_replies{{{SEL}}})", "pending")],
     "Replies waiting for their commit."),
    ("Replies drained per commit", "short",
     [(f"sum({rate('mds_drain_replies_sum')}) / sum({rate('mds_drain_replies_count')})", "mean per drain")]
     + quantiles("mds_drain_replies", "partition", (0.99,)),
     "Replies one partition releases per wake: one wake per partition per commit."),
    ("Drain duration", "s", quantiles("mds_drain_duration_seconds", "", (0.5, 0.99, 0.999)),
     "From a commit being durable to its partition having queued the released replies."),
    ("Queue depth by partition", "short", [(f"max by (partition) (mds_partition_queue_depth{{{SEL}}})", "partition {{partition}}")],
     "Replies waiting in each partition's queue, at its last drain."),
    ("Forced commits", "ops", [(f"sum({rate('mds_forced_commits_total')})", "forced commits/s")],
     "Commits asked to start at once, by a SYNC or a commit-on-share conflict, rather than at the commit interval or a full batch."),
    ("Commit-on-share conflicts by operation", "ops",
     [(f"sum by (op) ({rate('mds_cos_conflicts_total')})", "{{op}}")],
     "Requests that would have observed or built on another client's uncommitted change: each asked for an immediate commit and its reply waited for it."),
    ("Replies waiting on another client's commit", "short",
     [(f"sum(mds_cos_waiting_replies{{{SEL}}})", "waiting")],
     "Reads and errors held back by commit-on-share until the change they saw is durable."),
    ("Commit lag (transnos)", "short",
     [(f"max(mds_last_assigned_transno{{{SEL}}}) - max(mds_last_committed_transno{{{SEL}}})", "assigned - committed")],
     "Transnos handed out but not yet durable, at the last commit."),
    ("Connections", "short", [(f"sum by (partition) (mds_connections{{{SEL}}})", "partition {{partition}}")],
     "Open client connections per partition.", 8),
    ("Sessions", "short", [(f"sum(mds_sessions{{{SEL}}})", "sessions")],
     "Client sessions the server knows: connected, or away with replies still pending.", 4),
    ("Session reconnects", "ops", [(f"sum({rate('mds_session_reconnects_total')})", "reconnects/s")],
     "CONNECTs with a client identity that already had a connection, which they replaced: "
     "clients coming back after a broken connection.", 4),
    ("Protocol errors and slow clients", "ops",
     [(f"sum by (kind) ({rate('mds_protocol_errors_total')})", "{{kind}}"),
      (f"sum({rate('mds_slow_client_disconnects_total')})", "slow clients")],
     "Connections closed for bad input or for not reading their replies.", 8),
    ("Journal errors", "short", [(f"sum(mds_journal_errors_total{{{SEL}}})", "errors")],
     "Journal write or sync failures; the first turns the server read-only."),
    ("RocksDB stall time", "percentunit", [(f"sum({rate('mds_rocksdb_stall_seconds_total')})", "stalled")],
     "Fraction of time RocksDB stalled writes."),
    ("RocksDB sizes", "bytes",
     [(f"sum by (cf) (mds_rocksdb_live_sst_bytes{{{SEL}}})", "SST {{cf}}"),
      (f"sum by (cf) (mds_rocksdb_memtable_bytes{{{SEL}}})", "memtable {{cf}}")],
     "Live SST files and memtables, per column family."),
    ("RocksDB keys", "short", [(f"sum by (cf) (mds_rocksdb_estimated_keys{{{SEL}}})", "{{cf}}")],
     "RocksDB's estimate of keys per column family."),
    ("Process CPU", "percentunit", [(f"sum({rate('process_cpu_seconds_total')})", "cores used")],
     "CPU seconds per second used by mds (1.0 = one core)."),
    ("Process memory and descriptors", "short",
     [(f"sum(process_resident_memory_bytes{{{SEL}}}) / 1048576", "resident MiB"),
      (f"sum(process_open_fds{{{SEL}}})", "open fds"),
      (f"sum(process_threads{{{SEL}}})", "threads")],
     "Resident memory, open file descriptors and threads."),
]


def layout(widths, height=8):
    """Grid positions for panels of these widths, filling 24-column rows left to right."""
    x, y, positions = 0, 0, []
    for w in widths:
        if x + w > 24:
            x, y = 0, y + height
        positions.append({"h": height, "w": w, "x": x, "y": y})
        x += w
    return positions


def panel(i, grid, title, unit, targets, description):
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": grid,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                    "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
             "datasource": {"type": "prometheus", "uid": "${datasource}"}}
            for j, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard():
    grids = layout(p[4] if len(p) > 4 else 12 for p in PANELS)
    return {
        "title": "mds",
        "uid": "mds-overview",
        "description": "mds metadata server: requests, group commit, reply drain, RocksDB, process.",
        "tags": ["mds", "metadata"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-15m", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            {"name": "instance", "label": "instance", "type": "query",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": "label_values(mds_commits_total, instance)", "refId": "instance"},
             "definition": "label_values(mds_commits_total, instance)",
             "includeAll": True, "multi": True, "allValue": ".+", "current": {}, "refresh": 2, "hide": 0},
        ]},
        "panels": [panel(i, grid, *p[:4]) for i, (p, grid) in enumerate(zip(PANELS, grids))],
    }


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "mds.json")
    text = json.dumps(dashboard(), indent=2) + "\n"
    if "--check" in sys.argv[1:]:
        current = open(path).read() if os.path.exists(path) else ""
        if current != text:
            sys.exit(f"{path} differs from what generate.py writes: run python3 dashboards/generate.py")
    else:
        with open(path, "w") as f:
            f.write(text)
