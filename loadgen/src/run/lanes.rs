//! The lanes: each is one request in flight, a task looping until the run stops — wait for
//! the request's slot (open loop) or go at once (closed loop), choose a kind from the mix,
//! build its request from the lane's working set, send it, and count what came back into the
//! lane's own histogram and tallies, which the run merges at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mds_client::resilient::ResilientConn;
use mds_proto::{Body, Errno, Kind as FileKind, MAX_READDIR, Op};
use tokio::task::JoinHandle;

use super::Shared;
use crate::report::{self, OpCounts};
use crate::workload::{Kind, Mix, Rng};

/// One lane's results.
pub(super) struct LaneResult {
    pub(super) latency: Histogram<u64>,
    pub(super) per_op: BTreeMap<Kind, OpCounts>,
    pub(super) errors: BTreeMap<&'static str, u64>,
    pub(super) resent: u64,
    pub(super) resent_eexist: u64,
}

/// One lane's working set.
pub(super) struct Lane {
    conn: Arc<ResilientConn>,
    /// Directory inode and path the lane works in.
    dir: u64,
    dir_path: String,
    /// Names (and inodes) this lane may stat, look up or unlink.
    names: Vec<(String, u64)>,
    /// Next index into `names` for stat/lookup cycling.
    cursor: usize,
    /// Prefix that makes this lane's new names unique across runs, threads and lanes.
    prefix: String,
    created: u64,
    readdir_cursor: Option<String>,
    rng: Rng,
}

impl Lane {
    pub(super) fn new(
        conn: Arc<ResilientConn>,
        dir: u64,
        dir_path: String,
        names: Vec<(String, u64)>,
        prefix: String,
        rng: Rng,
    ) -> Lane {
        Lane {
            conn,
            dir,
            dir_path,
            names,
            cursor: 0,
            prefix,
            created: 0,
            readdir_cursor: None,
            rng,
        }
    }

    /// Whether the lane starts with existing files to stat, look up or unlink.
    pub(super) fn has_names(&self) -> bool {
        !self.names.is_empty()
    }
}

/// Starts every lane as its own task. With `--rate`, the total rate is split evenly: each
/// lane sends on its own fixed schedule.
pub(super) fn start(
    lanes: Vec<Lane>,
    mix: &Mix,
    shared: &Arc<Shared>,
    started: Instant,
    rate: Option<f64>,
) -> Vec<JoinHandle<LaneResult>> {
    let lane_count = lanes.len();
    let per_lane_interval = rate.map(|r| Duration::from_secs_f64(lane_count as f64 / r));
    lanes
        .into_iter()
        .map(|lane| {
            let shared = shared.clone();
            let mix = mix.clone();
            tokio::spawn(run_lane(lane, mix, shared, started, per_lane_interval))
        })
        .collect()
}

async fn run_lane(
    mut lane: Lane,
    mix: Mix,
    shared: Arc<Shared>,
    started: Instant,
    interval: Option<Duration>,
) -> LaneResult {
    let mut result = LaneResult {
        latency: report::new_histogram(),
        per_op: BTreeMap::new(),
        errors: BTreeMap::new(),
        resent: 0,
        resent_eexist: 0,
    };
    let mut sent = 0u32;
    while shared.start_one() {
        // Open loop: the request's intended time is on a fixed schedule; latency counts from
        // it, so a stalled server shows up as latency, not as fewer samples.
        let intended = match interval {
            Some(step) => {
                let at = started + step * sent;
                tokio::time::sleep_until(at.into()).await;
                at
            }
            None => Instant::now(),
        };
        sent += 1;
        let kind = choose(&mut lane, &mix);
        let Some((op, name)) = build(&mut lane, kind) else {
            break; // an unlink lane that removed all it had
        };
        let answer = match lane.conn.call(op).await {
            Ok(a) => a,
            Err(gone) => {
                let mut failure = shared.failure.lock().unwrap();
                if failure.is_none() {
                    *failure = Some(gone.to_string());
                }
                shared.stop.store(true, Ordering::Relaxed);
                break;
            }
        };
        let micros = intended.elapsed().as_micros().max(1) as u64;
        let _ = result.latency.record(micros.min(3_600_000_000));
        if answer.resent {
            result.resent += 1;
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
        let counts = result.per_op.entry(kind).or_default();
        match answer.reply.result {
            Ok(body) => {
                counts.ok += 1;
                after_success(&mut lane, kind, name, body, &shared);
            }
            Err(Errno::EEXIST) if answer.resent && matches!(kind, Kind::Create | Kind::Mkdir) => {
                result.resent_eexist += 1;
            }
            Err(Errno::ENOENT) if answer.resent && kind == Kind::Unlink => {}
            Err(e) => {
                counts.errors += 1;
                *result.errors.entry(e.name()).or_default() += 1;
            }
        }
    }
    result
}

/// Picks the next kind; a stat, lookup or unlink with nothing to work on creates instead
/// (in a mix) so the lane keeps a working set.
fn choose(lane: &mut Lane, mix: &Mix) -> Kind {
    let kind = mix.pick(lane.rng.next());
    let needs_name = matches!(kind, Kind::Stat | Kind::Lookup | Kind::Unlink);
    if needs_name && lane.names.is_empty() && mix.kinds().any(|k| k == Kind::Create) {
        Kind::Create
    } else {
        kind
    }
}

/// The request for `kind`, and the name it creates or removes.
fn build(lane: &mut Lane, kind: Kind) -> Option<(Op, Option<String>)> {
    Some(match kind {
        Kind::Create | Kind::Mkdir => {
            let name = format!("{}.{}", lane.prefix, lane.created);
            lane.created += 1;
            let op = if kind == Kind::Create {
                Op::Create {
                    parent: lane.dir,
                    name: name.clone(),
                    mode: 0o644,
                }
            } else {
                Op::Mkdir {
                    parent: lane.dir,
                    name: name.clone(),
                    mode: 0o755,
                }
            };
            (op, Some(name))
        }
        Kind::Stat | Kind::Lookup => {
            if lane.names.is_empty() {
                return None;
            }
            let i = lane.cursor % lane.names.len();
            lane.cursor += 1;
            let (name, ino) = &lane.names[i];
            let op = if kind == Kind::Stat {
                Op::Getattr { ino: *ino }
            } else {
                Op::Lookup {
                    parent: lane.dir,
                    name: name.clone(),
                }
            };
            (op, None)
        }
        Kind::Unlink => {
            if lane.names.is_empty() {
                return None;
            }
            let i = (lane.rng.next() % lane.names.len() as u64) as usize;
            let (name, _) = lane.names.swap_remove(i);
            (
                Op::Unlink {
                    parent: lane.dir,
                    name: name.clone(),
                },
                Some(name),
            )
        }
        Kind::Readdir => (
            Op::Readdir {
                ino: lane.dir,
                cursor: lane.readdir_cursor.take(),
                limit: MAX_READDIR,
            },
            None,
        ),
    })
}

fn after_success(lane: &mut Lane, kind: Kind, name: Option<String>, body: Body, shared: &Shared) {
    match (kind, body) {
        (Kind::Create | Kind::Mkdir, Body::Attr(attr)) => {
            let name = name.expect("creates carry their name");
            if kind == Kind::Create
                && let Some(log) = &shared.ack_log
            {
                let _ = log.send(format!("{}/{}", lane.dir_path, name));
            }
            if attr.kind == FileKind::File {
                lane.names.push((name, attr.ino));
            }
        }
        (Kind::Readdir, Body::Entries { next, .. }) => lane.readdir_cursor = next,
        _ => {}
    }
}
