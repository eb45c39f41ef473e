//! The lanes: each is one request in flight, a task looping until the run stops — wait for
//! the request's slot (open loop) or go at once (closed loop), choose a kind from the mix,
//! build its request from the lane's working set, send it, and count what came back into the
//! lane's own histograms and tallies, which the run merges at the end. Requests whose
//! intended time falls in the `--warmup` are sent but counted apart. A `write` is several
//! requests (`files.rs`) counted as one operation, with one latency.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use mds_client::resilient::{Answer, ResilientConn};
use mds_proto::{
    Attr, Body, Errno, Kind as FileKind, MAX_READDIR, Op, Target, XattrSet, XattrValue,
};
use tokio::task::JoinHandle;

use super::files::{self, FileWork, WriteOutcome};
use super::shared::Shared;
use crate::workload::{FALLBACK_TARGET, Kind, Mix, Rng, WorkingSet, XATTR_NAME};

/// One kind's results in one lane.
#[derive(Default)]
pub(super) struct OpTally {
    pub(super) ok: u64,
    pub(super) errors: u64,
}

/// One lane's results. Latency is not among them: it goes to its thread's histograms
/// (`latency.rs`), which cost a lane nothing to keep.
pub(super) struct LaneResult {
    pub(super) per_op: BTreeMap<Kind, OpTally>,
    pub(super) errors: BTreeMap<&'static str, u64>,
    pub(super) resent: u64,
    /// Requests sent during the warm-up: done, not counted anywhere else.
    pub(super) warmup_ops: u64,
    /// File data the counted `write`s wrote, and read back.
    pub(super) bytes_written: u64,
    pub(super) bytes_read: u64,
    /// When each request was due to go out — the open loop's schedule, a closed loop's send
    /// time — in nanoseconds from the run's start (`--send-log` only).
    pub(super) sends: Vec<u64>,
    /// The lane's shard (`--spread-shards`).
    pub(super) shard: Option<u16>,
}

/// One lane's working set.
pub(super) struct Lane {
    conn: Arc<ResilientConn>,
    /// Directory inode and path the lane works in.
    dir: u64,
    dir_path: String,
    /// Files (names and inodes) this lane may stat, look up, unlink, link to or set
    /// attributes on.
    work: WorkingSet,
    /// Prefix that makes this lane's new names unique across runs, threads and lanes.
    prefix: String,
    /// New names made so far (creates, mkdirs, links, symlinks): the next one's number.
    created: u64,
    readdir_cursor: Option<String>,
    rng: Rng,
    /// What `setxattr` sets `user.loadgen` to: `--xattr-size` bytes.
    xattr_value: Vec<u8>,
    /// What each `write` puts in its file.
    file_work: FileWork,
    /// The shard it works on (`--spread-shards`).
    shard: Option<u16>,
    /// The last request's name, whose buffer the next new name reuses (an allocation and a
    /// free a create less: ~150 instructions, counted).
    spare_name: String,
}

/// What the requests carry besides names: the run's `--xattr-size`, `--size` and
/// `--read-back`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Payloads {
    pub(super) xattr_size: usize,
    pub(super) file: FileWork,
}

impl Lane {
    pub(super) fn new(
        conn: Arc<ResilientConn>,
        dir: u64,
        dir_path: String,
        work: WorkingSet,
        prefix: String,
        rng: Rng,
        payloads: Payloads,
    ) -> Lane {
        Lane {
            conn,
            dir,
            dir_path,
            work,
            prefix,
            created: 0,
            readdir_cursor: None,
            rng,
            xattr_value: vec![b'v'; payloads.xattr_size],
            file_work: payloads.file,
            shard: None,
            spare_name: String::new(),
        }
    }

    /// The lane works on `shard` (`--spread-shards`): its results are counted there.
    pub(super) fn on_shard(self, shard: Option<u16>) -> Lane {
        Lane { shard, ..self }
    }

    /// A name no other lane, run or earlier request of this lane makes: `<prefix>.<n>` and
    /// a suffix that tells what made it (none for creates and mkdirs, `.l` for links, `.s`
    /// for symlinks).
    fn new_name(&mut self, suffix: &str) -> String {
        // Not `format!`: its machinery was ~400 instructions of a create's (counted).
        let mut number = itoa::Buffer::new();
        let number = number.format(self.created);
        let mut name = std::mem::take(&mut self.spare_name);
        name.clear();
        name.reserve(self.prefix.len() + 1 + number.len() + suffix.len());
        name.push_str(&self.prefix);
        name.push('.');
        name.push_str(number);
        name.push_str(suffix);
        self.created += 1;
        name
    }

    /// Keeps the name of a request that is done with, for the next new name.
    fn recycle(&mut self, op: Op) {
        if let Op::Create { name, .. }
        | Op::Mkdir { name, .. }
        | Op::Lookup { name, .. }
        | Op::Unlink { name, .. }
        | Op::Link { name, .. } = op
        {
            self.spare_name = name;
        }
    }

    /// Whether the lane starts with existing files to stat, look up or unlink.
    pub(super) fn has_names(&self) -> bool {
        !self.work.is_empty()
    }
}

/// An open-loop lane's send times: the run's requests are evenly spaced at 1/rate, dealt to
/// the lanes in turn, so lane `i` of `n` sends its `k`-th at `(k·n + i) / rate`. Staggered
/// this way, lanes never fire together (all at once, they queued behind each other and the
/// queueing showed up as latency the server never caused).
#[derive(Clone, Copy)]
struct Schedule {
    lane: u64,
    lanes: u64,
    rate: f64,
}

impl Schedule {
    fn at(&self, started: Instant, k: u64) -> Instant {
        // From the start each time, not by adding intervals: no drift from rounding.
        started + Duration::from_secs_f64((k * self.lanes + self.lane) as f64 / self.rate)
    }
}

/// tokio's timer fires on millisecond ticks, up to a tick late; a request sent that late
/// counts the lateness as latency. So sleep to within a tick of `at`, then yield until it
/// (the CPU spent spinning is at most about a millisecond per request).
async fn pace_until(at: Instant) {
    const TICK: Duration = Duration::from_millis(1);
    if let Some(early) = at.checked_sub(TICK)
        && Instant::now() < early
    {
        tokio::time::sleep_until(early.into()).await;
    }
    // Bounded: ends at `at`, at most about a tick from now.
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
}

/// Starts the lanes: one task for each loadgen thread's `depth` lanes (they come in
/// thread order from `setup.rs`), which polls them together. A burst of replies on a thread's
/// connection then wakes one task, whose poll runs every lane that got its reply; a task per
/// lane cost a trip through tokio's scheduler per request (counted: docs/BENCHMARKS.md).
/// With `--rate`, the total rate is split evenly over the lanes, each on its own staggered
/// schedule.
pub(super) fn start(
    lanes: Vec<Lane>,
    depth: usize,
    mix: &Mix,
    shared: &Arc<Shared>,
    started: Instant,
    rate: Option<f64>,
) -> Vec<JoinHandle<Vec<LaneResult>>> {
    let lane_count = lanes.len() as u64;
    let mut lanes = lanes.into_iter().enumerate().peekable();
    let mut tasks = Vec::new();
    while lanes.peek().is_some() {
        let thread: FuturesUnordered<_> = lanes
            .by_ref()
            .take(depth.max(1))
            .map(|(i, lane)| {
                let schedule = rate.map(|rate| Schedule {
                    lane: i as u64,
                    lanes: lane_count,
                    rate,
                });
                run_lane(lane, mix.clone(), shared.clone(), started, schedule)
            })
            .collect();
        tasks.push(tokio::spawn(thread.collect::<Vec<LaneResult>>()));
    }
    tasks
}

async fn run_lane(
    mut lane: Lane,
    mix: Mix,
    shared: Arc<Shared>,
    started: Instant,
    schedule: Option<Schedule>,
) -> LaneResult {
    let mut result = LaneResult {
        per_op: BTreeMap::new(),
        errors: BTreeMap::new(),
        resent: 0,
        warmup_ops: 0,
        bytes_written: 0,
        bytes_read: 0,
        sends: Vec::new(),
        shard: lane.shard,
    };
    let mut sent = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        // Open loop: the request's intended time is on a fixed schedule; latency counts from
        // it, so a stalled server shows up as latency, not as fewer samples.
        let intended = match schedule {
            Some(s) => s.at(started, sent),
            None => Instant::now(),
        };
        sent += 1;
        // Whether it counts goes by its intended time, so the warm-up's end is the same
        // instant for every lane, and a `--count` budget is spent on counted requests only.
        let counted = intended >= shared.measure_from;
        if counted && !shared.take_one() {
            break;
        }
        if schedule.is_some() {
            pace_until(intended).await;
        }
        let kind = choose(&mut lane, &mix);
        let Some((work, name)) = build(&mut lane, kind, shared.ack_log.is_some()) else {
            break; // an unlink lane that removed all it had, or one with nothing to work on
        };
        if shared.send_log {
            // Its intended time: what the schedule decided, which a test can judge whatever
            // the machine's load does to when the send then happens.
            let due = intended.saturating_duration_since(started).as_nanos();
            result.sends.push(due.min(u128::from(u64::MAX)) as u64);
        }
        let answered = match work {
            Work::Request(op) => {
                let answered = lane.conn.call_ref(&op).await.map(Done::from);
                lane.recycle(op);
                answered
            }
            Work::File(create) => {
                let seed = lane.rng.next();
                files::write_file(&lane.conn, create, lane.file_work, seed)
                    .await
                    .map(Done::from)
            }
        };
        let mut done = match answered {
            Ok(done) => done,
            Err(gone) => {
                fail(&shared, gone.to_string());
                break;
            }
        };
        let micros = (intended.elapsed().as_micros().max(1) as u64).min(3_600_000_000);
        if let Some(attr) = done.made_file.take() {
            made_file(&mut lane, kind, name, attr, &shared);
        }
        if let Some(mismatch) = &done.mismatch {
            // Bytes that do not read back as written: the server is wrong, and nothing it
            // measures after that is worth a rate.
            fail(&shared, format!("read back: {mismatch}"));
        }
        if !counted {
            result.warmup_ops += 1;
            shared.warmup_done.fetch_add(1, Ordering::Relaxed);
            if let Ok(body) = done.result {
                after_success(&mut lane, kind, body);
            }
            continue;
        }
        if done.resent {
            result.resent += 1;
        }
        result.bytes_written += done.bytes.0;
        result.bytes_read += done.bytes.1;
        shared.done.fetch_add(1, Ordering::Relaxed);
        shared.latencies.record(kind, micros);
        let tally = result.per_op.entry(kind).or_default();
        match done.result {
            Ok(body) => {
                tally.ok += 1;
                after_success(&mut lane, kind, body);
            }
            Err(e) => {
                tally.errors += 1;
                *result.errors.entry(e.name()).or_default() += 1;
            }
        }
    }
    result
}

/// Stops the run, keeping the first reason.
fn fail(shared: &Shared, why: String) {
    let mut failure = shared.failure.lock().unwrap();
    if failure.is_none() {
        *failure = Some(why);
    }
    shared.stop.store(true, Ordering::Relaxed);
}

/// What a lane sends for one operation.
enum Work {
    /// One request.
    Request(Op),
    /// A `write`: its CREATE, then the rest of `files::write_file`.
    File(Op),
}

/// One operation's outcome, whether one request or several.
struct Done {
    result: Result<Body, Errno>,
    resent: bool,
    /// A regular file it made (a create's, or a write's once its CREATE succeeded, even if a
    /// later request of it failed): it exists, for the ack log and the working set.
    made_file: Option<Attr>,
    /// File data written and read back.
    bytes: (u64, u64),
    mismatch: Option<String>,
}

impl From<Answer> for Done {
    fn from(answer: Answer) -> Done {
        let made_file = match &answer.reply.result {
            Ok(Body::Attr(attr)) if attr.kind == FileKind::File => Some(attr.clone()),
            _ => None,
        };
        Done {
            result: answer.reply.result,
            resent: answer.resent,
            made_file,
            bytes: (0, 0),
            mismatch: None,
        }
    }
}

impl From<WriteOutcome> for Done {
    fn from(w: WriteOutcome) -> Done {
        // Bytes that read back wrong fail the operation as a disk's would: EIO.
        let error = w.error.or(w.mismatch.as_ref().map(|_| Errno::EIO));
        Done {
            result: match (error, &w.created) {
                (Some(errno), _) => Err(errno),
                (None, Some(attr)) => Ok(Body::Attr(attr.clone())),
                (None, None) => Err(Errno::EPROTO),
            },
            resent: w.resent,
            made_file: w.created,
            bytes: (w.bytes_written, w.bytes_read),
            mismatch: w.mismatch,
        }
    }
}

/// Picks the next kind; a stat, lookup, unlink, link or setxattr with nothing to work on
/// makes a file instead (a create, or a write in a mix that has writes and no creates) so
/// the lane keeps a working set.
fn choose(lane: &mut Lane, mix: &Mix) -> Kind {
    let kind = mix.pick(lane.rng.next());
    if !kind.works_on_names() || !lane.work.is_empty() {
        return kind;
    }
    let mut makers = mix.kinds().filter(|k| k.makes_files());
    let first = makers.next();
    match makers.next() {
        // Both: a create, as before writes existed.
        Some(_) => Kind::Create,
        None => first.unwrap_or(kind),
    }
}

/// The work for `kind`, and the name it creates (if the lane keeps or logs what it
/// creates: `logged` with `--ack-log`) or removes.
fn build(lane: &mut Lane, kind: Kind, logged: bool) -> Option<(Work, Option<String>)> {
    let (op, name) = match kind {
        Kind::Create | Kind::Mkdir | Kind::Write => {
            let name = lane.new_name("");
            let kept = (logged || lane.work.keeps_created()).then(|| name.clone());
            let op = if kind == Kind::Mkdir {
                Op::Mkdir {
                    parent: lane.dir,
                    name,
                    mode: 0o755,
                }
            } else {
                Op::Create {
                    parent: lane.dir,
                    name,
                    mode: 0o644,
                }
            };
            if kind == Kind::Write {
                return Some((Work::File(op), kept));
            }
            (op, kept)
        }
        Kind::Stat | Kind::Lookup => {
            let (name, ino) = lane.work.next_in_turn()?;
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
            let (name, _) = lane.work.take(lane.rng.next())?;
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
        Kind::Link => {
            // Each file in turn gets one more name. The new name stays out of the working set,
            // so an unlink in the mix goes on removing originals: unlinking one that has links
            // removes that name only and leaves the inode alive under its links, which is
            // fine (nothing in the run touches it again, as with a create-only run's files).
            let ino = lane.work.next_in_turn()?.1;
            let name = lane.new_name(".l");
            (
                Op::Link {
                    ino,
                    parent: lane.dir,
                    name,
                },
                None,
            )
        }
        Kind::Symlink => {
            // Relative, in the same directory: it resolves while its target lives.
            let target = match lane.work.any(lane.rng.next()) {
                Some((name, _)) => name.clone().into_bytes(),
                None => FALLBACK_TARGET.as_bytes().to_vec(),
            };
            let name = lane.new_name(".s");
            (
                Op::Symlink {
                    parent: lane.dir,
                    name,
                    target: Target(target),
                },
                None,
            )
        }
        Kind::Setxattr => {
            let ino = lane.work.next_in_turn()?.1;
            (
                Op::Setxattr {
                    ino,
                    name: XATTR_NAME.to_owned(),
                    value: XattrValue(lane.xattr_value.clone()),
                    how: XattrSet::Either,
                },
                None,
            )
        }
    };
    Some((Work::Request(op), name))
}

/// A create or a write made a regular file: the ack log lists it, and the working set keeps
/// it if the mix works on names. (`name` is `None` when neither wants it.)
fn made_file(lane: &mut Lane, kind: Kind, name: Option<String>, attr: Attr, shared: &Shared) {
    let Some(name) = name else { return };
    if !kind.makes_files() {
        return;
    }
    if let Some(log) = &shared.ack_log {
        let _ = log.send(format!("{}/{}", lane.dir_path, name));
    }
    lane.work.created(name, attr.ino);
}

fn after_success(lane: &mut Lane, kind: Kind, body: Body) {
    if let (Kind::Readdir, Body::Entries { next, .. }) = (kind, body) {
        lane.readdir_cursor = next;
    }
}
