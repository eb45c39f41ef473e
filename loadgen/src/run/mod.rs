//! Running a workload: set up the directories, open `--conns-per-thread` connections per
//! thread, start `--depth` lanes per thread, let them issue requests (closed loop, or open
//! loop at `--rate`), show progress, and gather one HDR histogram per lane into the report.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use mds_client::{Client, ClientError, ROOT, Session};
use mds_proto::{Body, Errno, Kind as FileKind, MAX_READDIR, Op, StatFs};

use crate::report::{self, Latency, OpCounts, Parameters, Report, ServerFigures};
use crate::workload::{Kind, Mix, Rng};
use mds_client::resilient::ResilientConn;

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    Duration(Duration),
    /// Total successful-or-failed operations across all threads.
    Count(u64),
}

/// A run's full description.
#[derive(Clone, Debug)]
pub struct Plan {
    pub server: String,
    pub workload: String,
    pub mix: Mix,
    pub threads: usize,
    pub depth: usize,
    pub conns_per_thread: usize,
    pub stop: Stop,
    pub dir: String,
    pub shared_dir: bool,
    pub rate: Option<f64>,
    pub ack_log: Option<PathBuf>,
    pub quiet: bool,
    pub reconnect_timeout: Duration,
}

/// What the whole run shares.
struct Shared {
    stop: AtomicBool,
    /// Operations left to start in a `--count` run.
    budget: AtomicU64,
    counted: bool,
    done: AtomicU64,
    reconnects: Arc<AtomicU64>,
    ack_log: Option<std::sync::mpsc::Sender<String>>,
    failure: std::sync::Mutex<Option<String>>,
}

impl Shared {
    /// Takes the right to start one more operation.
    fn start_one(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        if self.counted {
            return self
                .budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_ok();
        }
        true
    }
}

/// One lane's results.
struct LaneResult {
    latency: Histogram<u64>,
    per_op: BTreeMap<Kind, OpCounts>,
    errors: BTreeMap<&'static str, u64>,
    resent: u64,
    resent_eexist: u64,
}

/// One lane's working set.
struct Lane {
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

pub async fn run(plan: Plan) -> anyhow::Result<Report> {
    let reconnects = Arc::new(AtomicU64::new(0));
    let run_tag = format!(
        "{:x}",
        (std::process::id() as u64) << 20
            ^ std::time::UNIX_EPOCH
                .elapsed()
                .unwrap_or_default()
                .as_micros() as u64
    );
    let seed = std::time::UNIX_EPOCH
        .elapsed()
        .unwrap_or_default()
        .as_nanos() as u64;
    let setup = Client::connect(plan.server.as_str())
        .await
        .with_context(|| format!("connecting to {}", plan.server))?;
    let top = mkdir_p(&setup, &plan.dir).await?;

    // Directories, connections and lanes.
    let mut lanes = Vec::new();
    let needs_existing = !plan
        .mix
        .kinds()
        .any(|k| matches!(k, Kind::Create | Kind::Mkdir));
    let mut shared_listing: Option<Vec<(String, u64)>> = None;
    for t in 0..plan.threads {
        let (dir, dir_path) = if plan.shared_dir {
            (top, plan.dir.trim_end_matches('/').to_owned())
        } else {
            let path = format!("{}/t{t}", plan.dir.trim_end_matches('/'));
            (mkdir_p(&setup, &path).await?, path)
        };
        let mut existing = if plan.shared_dir {
            if shared_listing.is_none() {
                shared_listing = Some(list(&setup, dir).await?);
            }
            // Every thread sees the shared directory; lanes split it below by global index.
            shared_listing.clone().unwrap_or_default()
        } else {
            list(&setup, dir).await?
        };
        let mut conns = Vec::new();
        for _ in 0..plan.conns_per_thread {
            // One client identity per connection: the server keeps a session per identity, and
            // a reconnect with it takes the place of the connection it lost.
            conns.push(Arc::new(
                ResilientConn::connect(
                    &plan.server,
                    Arc::new(Session::new()),
                    plan.reconnect_timeout,
                    reconnects.clone(),
                )
                .await
                .with_context(|| format!("connecting to {}", plan.server))?,
            ));
        }
        for l in 0..plan.depth {
            let global = t * plan.depth + l;
            let (stride, offset) = if plan.shared_dir {
                (plan.threads * plan.depth, global)
            } else {
                (plan.depth, l)
            };
            let names: Vec<(String, u64)> = existing
                .iter()
                .skip(offset)
                .step_by(stride)
                .cloned()
                .collect();
            lanes.push(Lane {
                conn: conns[l % conns.len()].clone(),
                dir,
                dir_path: dir_path.clone(),
                names,
                cursor: 0,
                prefix: format!("f.{run_tag}.{t}.{l}"),
                created: 0,
                readdir_cursor: None,
                rng: Rng::new(seed ^ global as u64),
            });
        }
        existing.clear();
    }
    if needs_existing
        && lanes.iter().all(|l| l.names.is_empty())
        && !plan.mix.kinds().all(|k| k == Kind::Readdir)
    {
        bail!(
            "nothing to {} under {}: run `loadgen create` first with the same --dir, --threads and --shared-dir",
            plan.workload,
            plan.dir
        );
    }

    // Ack log writer: one thread, buffered, flushed at the end.
    let (ack_tx, ack_writer) = match &plan.ack_log {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("creating ack log {}", path.display()))?;
            let (tx, rx) = std::sync::mpsc::channel::<String>();
            let writer = std::thread::spawn(move || -> std::io::Result<()> {
                let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
                for line in rx {
                    out.write_all(line.as_bytes())?;
                    out.write_all(b"\n")?;
                }
                out.flush()
            });
            (Some(tx), Some(writer))
        }
        None => (None, None),
    };

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        budget: AtomicU64::new(match plan.stop {
            Stop::Count(n) => n,
            Stop::Duration(_) => 0,
        }),
        counted: matches!(plan.stop, Stop::Count(_)),
        done: AtomicU64::new(0),
        reconnects: reconnects.clone(),
        ack_log: ack_tx,
        failure: std::sync::Mutex::new(None),
    });
    let before = setup.statfs().await?;
    let lane_count = lanes.len();
    let per_lane_interval = plan
        .rate
        .map(|r| Duration::from_secs_f64(lane_count as f64 / r));
    let started = Instant::now();
    let tasks: Vec<_> = lanes
        .into_iter()
        .map(|lane| {
            let shared = shared.clone();
            let mix = plan.mix.clone();
            tokio::spawn(run_lane(lane, mix, shared, started, per_lane_interval))
        })
        .collect();

    let progress = progress_bar(&plan, shared.clone(), started);
    if let Stop::Duration(d) = plan.stop {
        let shared = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            shared.stop.store(true, Ordering::Relaxed);
        });
    }
    let mut latency = report::new_histogram();
    let mut per_op: BTreeMap<String, OpCounts> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let (mut resent, mut resent_eexist) = (0, 0);
    for task in tasks {
        let r = task.await.context("a lane panicked")?;
        latency
            .add(&r.latency)
            .context("merging latency histograms")?;
        for (k, c) in r.per_op {
            let e = per_op.entry(k.name().to_owned()).or_default();
            e.ok += c.ok;
            e.errors += c.errors;
        }
        for (k, n) in r.errors {
            *errors.entry(k.to_owned()).or_default() += n;
        }
        resent += r.resent;
        resent_eexist += r.resent_eexist;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shared.stop.store(true, Ordering::Relaxed);
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    let failure = shared.failure.lock().unwrap().take();
    let ack_tx = Arc::into_inner(shared).and_then(|s| s.ack_log);
    drop(ack_tx);
    if let Some(writer) = ack_writer {
        writer
            .join()
            .map_err(|_| anyhow::anyhow!("ack log writer panicked"))?
            .context("writing the ack log")?;
    }

    // The server's view of the run; none when it is gone (the run then reports a failure).
    let after = match setup.statfs().await {
        Ok(s) => Some(s),
        Err(_) => match Client::connect(plan.server.as_str()).await {
            // The setup connection may have died in a server restart: ask anew.
            Ok(c) => c.statfs().await.ok(),
            Err(_) => None,
        },
    };
    let ops: u64 = per_op.values().map(|c| c.ok).sum();
    let single = plan.mix.kinds().count() == 1;
    let ops_name = if single {
        plan.mix
            .kinds()
            .next()
            .map(|k| k.plural())
            .unwrap_or("ops")
            .to_owned()
    } else {
        "ops".to_owned()
    };
    let rate = if elapsed > 0.0 {
        ops as f64 / elapsed
    } else {
        0.0
    };
    Ok(Report {
        tool: "loadgen",
        version: env!("CARGO_PKG_VERSION"),
        workload: plan.workload.clone(),
        parameters: Parameters {
            server: plan.server.clone(),
            threads: plan.threads,
            depth: plan.depth,
            conns_per_thread: plan.conns_per_thread,
            duration_secs: match plan.stop {
                Stop::Duration(d) => Some(d.as_secs_f64()),
                Stop::Count(_) => None,
            },
            count: match plan.stop {
                Stop::Count(n) => Some(n),
                Stop::Duration(_) => None,
            },
            dir: plan.dir.clone(),
            shared_dir: plan.shared_dir,
            rate: plan.rate,
            mix: plan.mix.spec(),
            reconnect_timeout_secs: plan.reconnect_timeout.as_secs_f64(),
        },
        ops,
        rate_line: report::rate_line(rate, plan.threads, ops, &ops_name, elapsed),
        ops_name,
        elapsed_secs: elapsed,
        rate_per_sec: rate,
        latency_us: Latency::from_histogram(&latency),
        errors,
        per_op,
        resent,
        resent_eexist,
        reconnects: reconnects.load(Ordering::Relaxed),
        server: after.map(|after| server_figures(&before, &after)),
        failure,
    })
}

fn server_figures(before: &StatFs, after: &StatFs) -> ServerFigures {
    let commits = after.commits.saturating_sub(before.commits);
    let txns = after
        .committed_transactions
        .saturating_sub(before.committed_transactions);
    ServerFigures {
        commits,
        committed_transactions: txns,
        ops_per_commit: if commits > 0 {
            txns as f64 / commits as f64
        } else {
            0.0
        },
    }
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

/// Creates `path` and its missing parents; returns its inode.
async fn mkdir_p(client: &Client, path: &str) -> anyhow::Result<u64> {
    let mut ino = ROOT;
    for name in mds_client::components(path).map_err(|e| anyhow::anyhow!("--dir {path:?}: {e}"))? {
        ino = match client.lookup(ino, name).await {
            Ok(attr) if attr.kind == FileKind::Directory => attr.ino,
            Ok(_) => bail!("{path}: {name} is not a directory"),
            Err(e) if e.errno() == Some(Errno::ENOENT) => {
                match client.mkdir(ino, name, 0o755).await {
                    Ok(attr) => attr.ino,
                    Err(e) if e.errno() == Some(Errno::EEXIST) => {
                        client.lookup(ino, name).await?.ino
                    }
                    Err(e) => return Err(e).with_context(|| format!("mkdir {path}")),
                }
            }
            Err(e) => return Err(e).with_context(|| format!("lookup {path}")),
        };
    }
    Ok(ino)
}

/// Regular files in a directory (what stat, lookup and unlink work on).
async fn list(client: &Client, dir: u64) -> Result<Vec<(String, u64)>, ClientError> {
    Ok(client
        .readdir_all(dir)
        .await?
        .into_iter()
        .filter(|e| e.kind == FileKind::File)
        .map(|e| (e.name, e.ino))
        .collect())
}

/// A live progress bar with the current rate, on a terminal only.
fn progress_bar(
    plan: &Plan,
    shared: Arc<Shared>,
    started: Instant,
) -> Option<indicatif::ProgressBar> {
    if plan.quiet || !std::io::stdout().is_terminal() {
        return None;
    }
    let pb = match plan.stop {
        Stop::Count(n) => indicatif::ProgressBar::new(n),
        Stop::Duration(_) => indicatif::ProgressBar::new_spinner(),
    };
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos} ops  {msg}",
        )
        .expect("valid template"),
    );
    let bar = pb.clone();
    tokio::spawn(async move {
        let mut last = (Instant::now(), 0u64);
        while !shared.stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let done = shared.done.load(Ordering::Relaxed);
            let now = Instant::now();
            let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            last = (now, done);
            bar.set_position(done);
            bar.set_message(format!(
                "{rate:.0}/s now, {:.0}/s overall, {} reconnects",
                done as f64 / started.elapsed().as_secs_f64(),
                shared.reconnects.load(Ordering::Relaxed)
            ));
        }
    });
    Some(pb)
}
