#!/usr/bin/env python3
"""Owns the Grafana dashboard for mds: builds dashboards/mds.json with Grafana's own
dashboards-as-code library, grafana-foundation-sdk (the exact version pinned in
dashboards/requirements.txt: its types for Grafana 11.6). The JSON is never edited by hand:
change this script and run it again.

    python3 -m pip install -r dashboards/requirements.txt   # once, in a venv of your own
    python3 dashboards/generate.py          # writes dashboards/mds.json
    python3 dashboards/generate.py --check  # fails if mds.json is not what this script writes

scripts/test.sh installs the pinned SDK in a venv outside the clone (/var/tmp/mds-venv, or
$MDS_VENV) and runs the check with that venv's python.

Every query uses `$instance` (a variable over the scraped mds instances) and
`$__rate_interval`; the dashboards test runs each one against a real Prometheus scraping a
real mds under load and fails if any returns no series. Layout: an overview row (up, version,
uptime, read-only, inodes, create rate and commit lag per server), then one row per group,
every row expanded and collapsible; one unit per panel; per-instance breakdowns wherever a
sum over servers would hide which one is bad.
"""
import json
import os
import sys
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
SDK = "grafana-foundation-sdk"

try:
    from grafana_foundation_sdk.builders import common as common_builders
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.builders import heatmap as heatmap_panel
    from grafana_foundation_sdk.builders import prometheus
    from grafana_foundation_sdk.builders import stat as stat_panel
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as model
    from grafana_foundation_sdk.models.heatmap import HeatmapColorMode
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat
except ImportError:
    sys.exit(f"generate.py needs {SDK}: python3 -m pip install -r {REQUIREMENTS} "
             "(scripts/test.sh installs it in /var/tmp/mds-venv; run that venv's bin/python3)")


def pinned_sdk_version():
    """The version dashboards/requirements.txt pins the SDK to."""
    with open(REQUIREMENTS) as f:
        for line in f:
            name, sep, version = line.split("#", 1)[0].strip().partition("==")
            if sep and name.strip().lower().replace("_", "-") == SDK:
                return version.strip()
    sys.exit(f"{REQUIREMENTS} pins no version of {SDK}")


SEL = 'instance=~"$instance"'
RI = "$__rate_interval"
CREATE_OK = 'op="create",result="ok"'
NOT_OK = 'result!="ok"'
# Every panel and query reads the Prometheus the dashboard's `datasource` variable selects.
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")


def rate(metric, extra=""):
    sel = f"{SEL},{extra}" if extra else SEL
    return f"rate({metric}{{{sel}}}[{RI}])"


def quantiles(metric, by, qs=(0.5, 0.99, 0.999)):
    """histogram_quantile over `metric`'s buckets, grouped by the comma-separated labels `by`."""
    labels = [b.strip() for b in by.split(",") if b.strip()]
    grp = ", ".join(labels + ["le"])
    legend = "".join(f" {{{{{b}}}}}" for b in labels)
    return [
        (f"histogram_quantile({q}, sum by ({grp}) ({rate(metric + '_bucket')}))", f"p{q * 100:g}{legend}")
        for q in qs
    ]


BY_INSTANCE = "instance"  # the label a per-server breakdown groups by

PANEL_HEIGHT = 8
STAT_HEIGHT = 4


def queries(targets, query_format=None):
    """Prometheus queries from (expr, legend) pairs, lettered A, B, ... in order."""
    out = []
    for j, (expr, legend) in enumerate(targets):
        q = (prometheus.Dataquery().ref_id(chr(ord("A") + j)).expr(expr).legend_format(legend)
             .datasource(DATASOURCE))
        if query_format is not None:
            q = q.format(query_format)
        out.append(q)
    return out


def ts(title, unit, targets, description, width=12):
    """A time-series panel: one unit for all its queries."""
    return (timeseries.Panel().title(title).description(description).datasource(DATASOURCE)
            .unit(unit).targets(queries(targets)).span(width).height(PANEL_HEIGHT)
            .legend(common_builders.VizLegendOptions().show_legend(True)
                    .display_mode(common.LegendDisplayMode.LIST)
                    .placement(common.LegendPlacement.BOTTOM))
            .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                     .sort(common.SortOrder.NONE)))


def stat(title, unit, targets, description, width=4, mappings=None,
         text_mode=common.BigValueTextMode.VALUE_AND_NAME):
    """A stat panel: the latest value of each series (one per instance). Without mappings
    the value is drawn in the text color; with them, in the color its mapping names."""
    color = model.FieldColorModeId.THRESHOLDS if mappings else model.FieldColorModeId.FIXED
    return (stat_panel.Panel().title(title).description(description).datasource(DATASOURCE)
            .unit(unit).targets(queries(targets)).span(width).height(STAT_HEIGHT)
            .mappings(mappings or [])
            .color_scheme(dash.FieldColor().mode(color).fixed_color("text"))
            .thresholds(dash.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE)
                        .steps([model.Threshold(value=None, color="text")]))
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])
                            .fields("").values(False))
            .text_mode(text_mode).color_mode(common.BigValueColorMode.VALUE)
            .graph_mode(common.BigValueGraphMode.NONE)
            .justify_mode(common.BigValueJustifyMode.AUTO)
            .orientation(common.VizOrientation.AUTO))


def heatmap(title, unit, expr, description, width=24):
    """A heatmap of a Prometheus histogram: one bucket per row, counts per interval."""
    return (heatmap_panel.Panel().title(title).description(description).datasource(DATASOURCE)
            .unit(unit).targets(queries([(expr, "{{le}}")], PromQueryFormat.HEATMAP))
            .span(width).height(PANEL_HEIGHT)
            # The buckets are Prometheus's own: drawn as they are, never re-bucketed.
            .calculate(False).cell_gap(1)
            .y_axis(heatmap_panel.YAxisConfig().axis_placement(common.AxisPlacement.LEFT).unit(unit))
            .rows_frame(heatmap_panel.RowsHeatmapOptions().layout(common.HeatmapCellLayout.LE))
            # fill and exponent are Grafana's defaults, which the SDK's zero values would
            # replace (both only matter in the opacity color mode).
            .color(heatmap_panel.HeatmapColorOptions().mode(HeatmapColorMode.SCHEME)
                   .scheme("Oranges").steps(64).fill("dark-orange").exponent(0.5))
            .mode(common.TooltipDisplayMode.SINGLE).show_y_histogram()
            .show_legend())


def value_map(*pairs):
    """Value mappings: (value, text, color)."""
    return [model.ValueMap(options={
        str(v): model.ValueMappingResult(text=text, color=color, index=i)
        for i, (v, text, color) in enumerate(pairs)})]


# (row title, [panels]). Rows are expanded when the dashboard opens, and each can be
# collapsed; the overview comes first. Per-instance breakdowns (`by (instance)`) wherever a
# sum over servers would hide which one is bad.
ROWS = [
    ("Overview", [
        stat("Up", "none", [(f'up{{job="mds",{SEL}}}', "{{instance}}")],
             "Whether Prometheus could scrape each server at its last attempt.",
             mappings=value_map((1, "UP", "green"), (0, "DOWN", "red"))),
        stat("Version", "none", [(f"mds_build_info{{{SEL}}}", "{{instance}} {{version}}")],
             "The version each server runs (mds_build_info's version label).",
             text_mode=common.BigValueTextMode.NAME),
        stat("Uptime", "s", [(f"time() - process_start_time_seconds{{{SEL}}}", "{{instance}}")],
             "Time since each server process started."),
        stat("Read-only", "none", [(f"max by (instance) (mds_read_only{{{SEL}}})", "{{instance}}")],
             "READ-ONLY once the journal failed: mutations are refused with EIO until a restart.",
             mappings=value_map((0, "read-write", "green"), (1, "READ-ONLY", "red"))),
        stat("Inodes", "short", [(f"mds_inodes{{{SEL}}}", "{{instance}} {{kind}}")],
             "Directories and files in each server's namespace.", width=8),
        ts("Create rate by instance", "ops",
           [(f"sum by (instance) ({rate('mds_requests_total', CREATE_OK)})", "{{instance}}")],
           "Successful CREATEs per second per server: the figure loadgen's Rate line reports."),
        ts("Commit lag by instance (transnos)", "short",
           [(f"max by (instance) (mds_last_assigned_transno{{{SEL}}})"
             f" - max by (instance) (mds_last_committed_transno{{{SEL}}})", "{{instance}}")],
           "Transnos handed out but not yet durable, per server, at its last commit."),
    ]),
    ("Requests", [
        ts("Requests by operation", "reqps", [(f"sum by (op) ({rate('mds_requests_total')})", "{{op}}")],
           "All answered requests per second, by operation, over the selected servers."),
        ts("Errors by code", "reqps",
           [(f"sum by (result) ({rate('mds_requests_total', NOT_OK)})", "{{result}}")],
           "Requests answered with a POSIX error, by code."),
        heatmap("Request latency heatmap (all operations)", "s",
                f"sum by (le) ({rate('mds_request_duration_seconds_bucket')})",
                "Requests per latency bucket over time, every operation: a second band of slow "
                "requests shows here before it moves a quantile."),
        ts("Request latency p99 by operation", "s", quantiles("mds_request_duration_seconds", "op", (0.99,)),
           "From a request's arrival to its reply being queued for the socket; mutations include their commit."),
        ts("Request latency p99 by instance", "s",
           quantiles("mds_request_duration_seconds", BY_INSTANCE, (0.99,)),
           "p99 over every operation, per server: the slow one stands out."),
        ts("Request latency quantiles (all operations)", "s", quantiles("mds_request_duration_seconds", ""),
           "p50, p99 and p99.9 over every operation and selected server."),
        ts("Errors by instance", "reqps",
           [(f"sum by (instance) ({rate('mds_requests_total', NOT_OK)})", "{{instance}}")],
           "Requests answered with a POSIX error, per server."),
        ts("Permission denials by operation", "reqps",
           [(f"sum by (op) ({rate('mds_permission_denied_total')})", "{{op}}")],
           "Requests refused for permission (EACCES: a missing read, write or search bit; EPERM: "
           "only the owner or root may, or the sticky bit), by operation. A steady rate is a "
           "client running as the wrong user, or a directory with the wrong mode.", 12),
        ts("Authentication failures by reason", "reqps",
           [(f"sum by (reason) ({rate('mds_auth_failures_total')})", "{{reason}}")],
           "Connections refused at CONNECT: missing (no proof: a client without the key), wrong "
           "(another key), replayed (a proof already accepted on another connection: a captured "
           "handshake sent again), session (an identity the server keeps a session for, without "
           "that session's secret: someone naming another client), credentials (--cred-check "
           "owner: no owner the server can learn).", 12),
        ts("Refused by a cap and --cred-check", "reqps",
           [(f"sum by (instance) ({rate('mds_resend_full_total')})", "{{instance}} resend records full"),
            (f"sum by (instance) ({rate('mds_credentials_refused_total')})", "{{instance}} credentials"),
            (f"sum by (instance, reason) ({rate('mds_open_refused_total')})", "{{instance}} open: {{reason}}"),
            (f"sum by (instance) ({rate('mds_sessions_refused_total')})", "{{instance}} sessions")],
           "Mutations refused EBUSY because their session keeps as many resend records as it may "
           "(its client does not acknowledge replies); requests refused EPERM by --cred-check "
           "owner (credentials other than their connection owner's); OPENs refused at a cap on "
           "open handles (session: EMFILE, --max-open-per-session; server: ENFILE, "
           "--max-open-files); CONNECTs of a new identity refused EBUSY past --max-sessions.", 12),
    ]),
    ("Open files and data", [
        ts("Open handles and orphans", "short",
           [(f"sum by (instance) (mds_open_handles{{{SEL}}})", "handles {{instance}}"),
            (f"sum by (instance) (mds_orphans{{{SEL}}})", "orphans {{instance}}")],
           "Handles open (OPEN without its RELEASE), and files whose last name is gone while a "
           "handle keeps them (journaled; reclaimed with their last handle, their session's "
           "expiry, or after a restart once the recovery window ends without their client)."),
        ts("File locks", "short",
           [(f"sum by (instance) (mds_file_locks_held{{{SEL}}})", "held {{instance}}"),
            (f"sum by (instance) (mds_file_lock_waiting_requests{{{SEL}}})", "waiting {{instance}}"),
            (f"sum by (instance, result) ({rate('mds_file_lock_requests_total')})", "{{instance}} SETLK/s {{result}}")],
           "fcntl, OFD and flock locks clients hold (each range of each owner one), SETLKs "
           "queued behind a conflicting lock now, and SETLKs per second by result: granted "
           "at once, conflict (EAGAIN), queued, deadlock (EDEADLK), refused. Locks go with "
           "their client's session and with a server restart."),
        ts("File data", "bytes",
           [(f"sum by (instance) (mds_file_bytes{{{SEL}}})", "files' sizes {{instance}}"),
            (f"sum by (instance) (mds_pending_data_bytes{{{SEL}}})", "in memory until its commit {{instance}}")],
           "The sizes of every regular file added up (what the data kept on the server amounts "
           "to at most), and the data written by changes not durable yet, which memory holds "
           "until their commit (past 64 MiB no request executes until a commit makes room)."),
    ]),
    ("Group commit", [
        ts("Commits per second by instance", "ops",
           [(f"sum by (instance) ({rate('mds_commits_total')})", "{{instance}}")],
           "Group commits written and synced per second, per server."),
        ts("Mutations per commit", "short",
           [(f"sum by (instance) ({rate('mds_committed_transactions_total')})"
             f" / sum by (instance) ({rate('mds_commits_total')})", "mean {{instance}}")]
           + quantiles("mds_commit_transactions", "", (0.5, 0.99)),
           "How many mutations share one synced write: the whole point of group commit."),
        ts("Commit write+sync time", "s",
           quantiles("mds_commit_write_sync_duration_seconds", "", (0.5, 0.99))
           + [(q[0], "build " + q[1]) for q in quantiles("mds_commit_build_duration_seconds", "", (0.99,))],
           "RocksDB's synced write of one group commit (WAL append, fsync, memtable), and the time to encode its batch."),
        ts("Commit write+sync p99 by instance", "s",
           quantiles("mds_commit_write_sync_duration_seconds", BY_INSTANCE, (0.99,)),
           "p99 synced write per server: the alert MdsCommitLatencyHigh fires above 50 ms."),
        ts("Commit gap wait", "s",
           quantiles("mds_commit_gap_wait_seconds", "", (0.5, 0.99, 0.999)),
           "Time the committer waited with records in hand for an earlier transno whose partition had taken it "
           "and not yet sent its record: one partition holding every commit.", 24),
        ts("Forced commits", "ops", [(f"sum by (instance) ({rate('mds_forced_commits_total')})", "{{instance}}")],
           "Commits asked to start at once, by a SYNC or a commit-on-share conflict, rather than at the commit interval or a full batch."),
        ts("Commit-on-share conflicts by operation", "ops",
           [(f"sum by (op) ({rate('mds_cos_conflicts_total')})", "{{op}}")],
           "Requests that would have observed or built on another client's uncommitted change: each asked for an immediate commit and its reply waited for it."),
        ts("Small commits waiting for a sibling", "ops",
           [(f"sum by (outcome) ({rate('mds_commit_sibling_waits_total')})", "{{outcome}}")],
           "--commit-siblings: commits of a few mutations that waited up to half a sync for one more; joined means one came "
           "and shared the sync, timed_out that the wait was spent. Zero with one client or under load."),
        ts("Journal errors by instance", "short",
           [(f"sum by (instance) (mds_journal_errors_total{{{SEL}}})", "{{instance}}")],
           "Journal write or sync failures since start; the first turns that server read-only."),
    ]),
    ("Replies", [
        ts("Pending replies by instance", "short",
           [(f"sum by (instance) (mds_pending_replies{{{SEL}}})", "{{instance}}")],
           "Replies waiting for their commit."),
        ts("Early replies not durable yet", "short",
           [(f"sum by (instance) (mds_unsafe_replies{{{SEL}}})", "{{instance}}")],
           "Replies sent before their commit (--ack early) whose commit is not durable yet: what a crash would make clients replay."),
        ts("Commit notices", "ops",
           [(f"sum by (instance) ({rate('mds_commit_notices_total')})", "{{instance}}")],
           "Notices telling clients with early replies what is durable now: one per connection per commit at most."),
        ts("Replies waiting on another client's commit", "short",
           [(f"sum by (instance) (mds_cos_waiting_replies{{{SEL}}})", "{{instance}}")],
           "Reads and errors held back by commit-on-share until the change they saw is durable."),
        ts("Recovery", "short",
           [(f"max by (instance) (mds_recovery_open{{{SEL}}})", "open {{instance}}"),
            (f"max by (instance) (mds_recovery_waiting_clients{{{SEL}}})", "clients waited for {{instance}}")],
           "After a crash with --ack early: whether the recovery window is open, and how many known clients it still waits for.", 8),
        ts("Recovery duration", "s",
           [(f"max by (instance) (mds_recovery_duration_seconds{{{SEL}}})", "{{instance}}")],
           "How long the last recovery window stayed open, from start-up to its close (every known client "
           "replayed, or --recovery-window passed); 0 while none has closed. Near the window: a known client "
           "did not come back.", 8),
        ts("Replayed requests, skipped transnos, evicted clients", "short",
           [(f"sum by (instance) (increase(mds_replayed_requests_total{{{SEL}}}[1h]))", "replayed {{instance}}"),
            (f"sum by (instance) (increase(mds_skipped_transnos_total{{{SEL}}}[1h]))", "skipped {{instance}}"),
            (f"sum by (instance, reason) (increase(mds_recovery_evicted_clients_total{{{SEL}}}[1h]))",
             "evicted {{reason}} {{instance}}")],
           "During recovery: requests replayed by returning clients, transnos skipped because their clients did not "
           "come back, and known clients evicted by reason — gone, quiet (connected, no progress for 5 s after the "
           "close), hard_end (not done three windows after the opening) (last hour).", 8),
        ts("Replies drained per commit", "short",
           [(f"sum by (instance) ({rate('mds_drain_replies_sum')})"
             f" / sum by (instance) ({rate('mds_drain_replies_count')})", "mean per drain {{instance}}")]
           + quantiles("mds_drain_replies", "instance, partition", (0.99,)),
           "Replies one partition releases per wake: one wake per partition per commit."),
        ts("Drain duration", "s", quantiles("mds_drain_duration_seconds", "", (0.5, 0.99, 0.999)),
           "From a commit being durable to its partition having queued the released replies."),
        ts("Queue depth by partition", "short",
           [(f"max by (instance, partition) (mds_partition_queue_depth{{{SEL}}})",
             "{{instance}} partition {{partition}}")],
           "Replies waiting in each partition's queue, at its last drain.", 8),
        ts("Partner drains", "ops",
           [(f"sum by (instance, partition) ({rate('mds_partner_drains_total')})",
             "{{instance}} for partition {{partition}}")],
           "Per-CPU path: drains of a partition's queue run by its partner because its own drain had not "
           "begun within --partner-drain-after of the commit waking it (its core busy elsewhere).", 8),
        ts("Service lock wait (global reply path)", "s",
           quantiles("mds_service_lock_wait_seconds", "", (0.5, 0.99, 0.999))
           + [(f"sum by (instance) ({rate('mds_service_lock_wait_seconds_sum')})", "seconds waited per second {{instance}}")],
           "--reply-path global only: time to take the one service-wide reply lock, per acquisition, and the "
           "total waited per second across service threads and partitions. Empty on the per-CPU path, "
           "which has no such lock.", 8),
    ]),
    ("Clients", [
        ts("Connections", "short",
           [(f"sum by (instance, partition) (mds_connections{{{SEL}}})", "{{instance}} partition {{partition}}")],
           "Open client connections per partition.", 8),
        ts("Sessions", "short", [(f"sum by (instance) (mds_sessions{{{SEL}}})", "{{instance}}")],
           "Client sessions the server knows: connected, or away with replies pending or resend records kept for their return (up to --session-expiry).", 4),
        ts("Session reconnects", "ops", [(f"sum by (instance) ({rate('mds_session_reconnects_total')})", "{{instance}}")],
           "CONNECTs with a client identity that already had a connection, which they replaced: "
           "clients coming back after a broken connection.", 4),
        ts("Connections in their handshake", "short",
           [(f"sum by (instance) (mds_unauthenticated_connections{{{SEL}}})", "{{instance}} in handshake"),
            (f"sum by (instance, reason) ({rate('mds_unauthenticated_refused_total')})",
             "{{instance}} refused/s: {{reason}}")],
           "Connections accepted that have not completed their handshake (TLS, CONNECT, its proof), "
           "and those refused because too many were: address or prefix (one address's, or its "
           "/24's or /64's, cap), or partition (its handshake slots were all taken: the oldest "
           "still in its handshake, silent ones first, closed for the newcomer). A flood of "
           "connections that never authenticate shows here, and takes none of the clients' "
           "connection slots.", 8),
        ts("Protocol errors and slow clients", "ops",
           [(f"sum by (instance, kind) ({rate('mds_protocol_errors_total')})", "{{instance}} {{kind}}"),
            (f"sum by (instance) ({rate('mds_slow_client_disconnects_total')})", "{{instance}} slow clients")],
           "Connections closed for bad input or for not reading their replies.", 8),
        ts("Resends answered from records, sessions expired", "ops",
           [(f"sum by (instance) ({rate('mds_resent_answered_total')})", "{{instance}} resends answered"),
            (f"sum by (instance) ({rate('mds_sessions_expired_total')})", "{{instance}} sessions expired")],
           "Resent mutations answered from their resend record (the original ran, its reply was lost), "
           "never executed twice; and sessions forgotten with their records after --session-expiry.", 24),
    ]),
    ("RocksDB", [
        ts("RocksDB stall time", "percentunit",
           [(f"sum by (instance) ({rate('mds_rocksdb_stall_seconds_total')})", "{{instance}}")],
           "Fraction of time RocksDB stalled writes, per server.", 8),
        ts("RocksDB sizes", "bytes",
           [(f"sum by (instance, cf) (mds_rocksdb_live_sst_bytes{{{SEL}}})", "SST {{instance}} {{cf}}"),
            (f"sum by (instance, cf) (mds_rocksdb_memtable_bytes{{{SEL}}})", "memtable {{instance}} {{cf}}")],
           "Live SST files and memtables, per column family.", 8),
        ts("RocksDB keys", "short",
           [(f"sum by (instance, cf) (mds_rocksdb_estimated_keys{{{SEL}}})", "{{instance}} {{cf}}")],
           "RocksDB's estimate of keys per column family.", 8),
        ts("Edit log checkpoints", "percentunit",
           [(f"sum by (instance) ({rate('mds_journal_checkpoint_seconds_total')})", "{{instance}} checkpointing")],
           "Fraction of time the checkpointer spent writing the edit log's images into the store "
           "(--edit-log on). Its edit bytes not yet written out are mds_journal_edit_bytes.", 12),
        ts("Edit log bytes not yet checkpointed", "bytes",
           [(f"sum by (instance) (mds_journal_edit_bytes{{{SEL}}})", "{{instance}}")],
           "Committed edits the next checkpoint writes out (~32 MiB at most while it keeps up); "
           "a start writes out what a crash left.", 12),
    ]),
    ("Process", [
        ts("Process CPU", "percentunit",
           [(f"sum by (instance) ({rate('process_cpu_seconds_total')})", "{{instance}}")],
           "CPU seconds per second used by each mds (100% = one core).", 6),
        ts("Resident memory", "bytes",
           [(f"sum by (instance) (process_resident_memory_bytes{{{SEL}}})", "{{instance}}")],
           "Resident memory of each mds process.", 6),
        ts("Open file descriptors", "short",
           [(f"sum by (instance) (process_open_fds{{{SEL}}})", "open {{instance}}"),
            (f"sum by (instance) (process_max_fds{{{SEL}}})", "limit {{instance}}")],
           "Open descriptors against the process limit (LimitNOFILE in dist/mds.service); the "
           "alert MdsFileDescriptorsNearLimit fires above 90%.", 6),
        ts("Threads", "short", [(f"sum by (instance) (process_threads{{{SEL}}})", "{{instance}}")],
           "OS threads of each mds process.", 6),
    ]),
    ("Data", [
        ts("File bytes", "bytes",
           [(f"sum by (instance) (mds_file_bytes{{{SEL}}})", "sizes {{instance}}"),
            (f"sum by (instance) (mds_file_data_bytes{{{SEL}}})", "data {{instance}}")],
           "The sizes of every regular file added up (holes included), and the data they hold "
           "(holes not counted: what df shows used): on the server up to --inline-data-max a "
           "file, in the object store past it.", 8),
        ts("Slices deleted from the object store", "ops",
           [(f"sum by (source) (rate(mds_object_slices_deleted_total{{{SEL}}}[{RI}]))",
             "{{source}}")],
           "What the object collector deletes, by source: deleted_file (a deleted file's "
           "slices), cut_out (cut out of a live file by a truncate or an overwrite), unnamed "
           "(found by listing the store: uploaded, never placed). Each after --object-grace.", 8),
        ts("Waiting for the collector", "short",
           [(f"max by (instance) (mds_object_garbage_waiting{{{SEL}}})", "{{instance}}")],
           "Deleted files' layouts and cut-out slices whose --object-grace has not passed, at "
           "the collector's last round; a steady climb with no deletions says the collector "
           "cannot reach the store (its log says why).", 8),
    ]),
    ("Cluster", [
        ts("Shards with an owner", "short",
           [(f"max by (shard) (mds_cluster_shard_has_owner{{{SEL}}})", "shard {{shard}}")],
           "1 while a shard has an owner key in etcd, as the servers' watches see it; the "
           "alert MdsShardWithoutOwner fires when one shows 0 for 30 s.", 6),
        ts("Owner and epoch", "short",
           [(f"max by (instance, shard) (mds_shard_epoch{{{SEL}}} "
             f"* on (instance, shard) mds_shard_owned{{{SEL}}})", "{{instance}} shard {{shard}}")],
           "The epoch of each owner's claim (the etcd revision that created its owner key, "
           "written into the store at takeover): a new value is a takeover.", 6),
        ts("Lease renewal latency", "s",
           quantiles("mds_lease_renewal_duration_seconds", "instance", qs=(0.5, 0.99)),
           "How long etcd takes to answer a renewal of each server's lease; renewals come "
           "every third of the TTL.", 6),
        ts("Since the last renewal", "s",
           [(f"time() - max by (instance) (mds_lease_last_renewal_timestamp_seconds{{{SEL}}})",
             "{{instance}}"),
            (f"max by (instance) (mds_lease_ttl_seconds{{{SEL}}})", "TTL {{instance}}")],
           "Seconds since each server's lease was last renewed, against its TTL; the alert "
           "MdsLeaseRenewalLate fires past two thirds of it.", 6),
        ts("Standby behind its shard's owner", "short",
           [(f"max by (shard) (mds_last_committed_transno "
             f"* on (instance) group_left (shard) (mds_shard_owned == 1)) "
             f"- on (shard) max by (shard) (mds_standby_followed_transno{{{SEL}}})",
             "shard {{shard}}")],
           "Commits of each followed shard a warm standby (--follow) has not read yet: the "
           "owner's last committed transno less the standby's. It reads the owner's log every "
           "100 ms, so this stays near what the owner commits in that time; the owner is "
           "found by mds_shard_owned whichever instances are selected.", 8),
        ts("Standby following", "short",
           [(f"max by (instance, shard) (mds_standby_following{{{SEL}}})",
             "{{instance}} shard {{shard}}"),
            (f"sum by (instance, shard) (increase(mds_standby_follow_loads_total{{{SEL}}}[{RI}]))",
             "loads {{instance}} shard {{shard}}")],
           "1 while a standby holds its shard's namespace and reads the owner's log, so that "
           "a takeover serves it without loading; 0 while it loads or cannot, and once it has "
           "taken a shard over. Loads: it could not follow and loaded the shard again. The "
           "alert MdsStandbyNotFollowing fires after 5 minutes at 0.", 8),
        ts("Since the standby's last read", "s",
           [(f"time() - max by (instance, shard) "
             f"(mds_standby_last_follow_timestamp_seconds{{{SEL}}}) "
             f"and on (instance, shard) (mds_standby_following{{{SEL}}} == 1)",
             "{{instance}} shard {{shard}}")],
           "Seconds since a following standby last read its owner's log to the end (every "
           "100 ms while it follows); the alert MdsStandbyFollowStalled fires past 30 s.", 8),
    ]),
]

GRID_COLUMNS = 24


def layout(board):
    """Rows in order, each a row panel followed by its panels, filling 24 columns left to
    right; a panel that does not fit beside the last starts a new line. Positions are set
    here rather than left to the SDK's flow, which wraps only once a line is full and would
    put a full-width panel after a partial line (Clients) past the grid's edge. Rows are left
    expanded (`collapsed: false`; click a row's title to fold it): Grafana keeps the panels
    of a collapsed row inside the row, out of the top-level list the dashboard test reads."""
    y, pid = 0, 1
    for title, members in ROWS:
        board.with_row(dash.Row(title).id(pid).collapsed(False)
                       .grid_pos(model.GridPos(h=1, w=GRID_COLUMNS, x=0, y=y)))
        pid, y, x, row_h = pid + 1, y + 1, 0, 0
        for p in members:
            grid = p.build().grid_pos
            if x + grid.w > GRID_COLUMNS:
                x, y, row_h = 0, y + row_h, 0
            grid.x, grid.y = x, y
            board.with_panel(p.id(pid))
            pid, x, row_h = pid + 1, x + grid.w, max(row_h, grid.h)
        y += row_h
    return board


def dashboard():
    board = (
        dash.Dashboard("mds")
        .uid("mds-overview")
        .description("mds metadata server: overview, requests, group commit, reply drain, clients, RocksDB, process.")
        .tags(["mds", "metadata"])
        .timezone("browser")
        .editable()
        .version(1)
        .refresh("10s")
        .time("now-15m", "now")
        .with_variable(dash.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
                       .hide(model.VariableHide.DONT_HIDE))
        .with_variable(dash.QueryVariable("instance").label("instance").datasource(DATASOURCE)
                       .query({"query": "label_values(mds_commits_total, instance)", "refId": "instance"})
                       .include_all(True).multi(True).all_value(".+")
                       .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
                       .hide(model.VariableHide.DONT_HIDE))
    )
    return layout(board).build()


def dashboard_json():
    out = json.loads(JSONEncoder(indent=2).encode(dashboard()))
    # The SDK's row panel has no `targets`; the dashboards test (mds/tests/observability.rs)
    # reads `targets` of every top-level panel, rows included, as an array.
    for panel in out["panels"]:
        if panel["type"] == "row":
            panel["targets"] = []
    return json.dumps(out, indent=2) + "\n"


if __name__ == "__main__":
    pinned, installed = pinned_sdk_version(), metadata.version(SDK)
    if installed != pinned:
        # The JSON's shape is the SDK's: another version writes another file.
        sys.exit(f"{SDK} {installed} is installed; {REQUIREMENTS} pins {pinned}: "
                 f"python3 -m pip install -r {REQUIREMENTS}")
    path = os.path.join(HERE, "mds.json")
    text = dashboard_json()
    if "--check" in sys.argv[1:]:
        current = open(path).read() if os.path.exists(path) else ""
        if current != text:
            sys.exit(f"{path} differs from what generate.py writes: run python3 dashboards/generate.py")
    else:
        with open(path, "w") as f:
            f.write(text)
