//! Setting a run up before its clock starts: the setup connection, the directories under
//! `--dir` (one per thread, or the shared one), the files already there that stat, lookup,
//! unlink, link and setxattr work on (and symlinks point at), `--conns-per-thread`
//! connections per thread, the lanes dealt over them, and the ack log writer.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use mds_client::resilient::{Outages, ResilientConn};
use mds_client::{Client, ClientError, ROOT, Session};
use mds_proto::{Errno, Kind as FileKind};

use super::Plan;
use super::lanes::Lane;
use crate::workload::{Kind, Rng, WorkingSet};

/// Connects, makes the directories and builds every lane. Returns the setup connection too:
/// the run asks it for the server's figures before and after.
pub(super) async fn prepare(
    plan: &Plan,
    outages: &Arc<Outages>,
) -> anyhow::Result<(Client, Vec<Lane>)> {
    let run_tag = format!(
        "{:x}",
        u64::from(std::process::id()) << 20
            ^ std::time::UNIX_EPOCH
                .elapsed()
                .unwrap_or_default()
                .as_micros() as u64
    );
    let seed = std::time::UNIX_EPOCH
        .elapsed()
        .unwrap_or_default()
        .as_nanos() as u64;
    let setup = plan
        .connect()
        .await
        .with_context(|| format!("connecting to {}", plan.server))?;
    let top = mkdir_p(&setup, &plan.dir).await?;

    // Directories, connections and lanes.
    let mut lanes = Vec::new();
    let needs_existing = !plan.mix.kinds().any(Kind::makes_names);
    // Only a mix that stats, looks up, unlinks, links or sets attributes works on the files
    // already there, and one that makes symlinks points them at those files: any other run
    // neither lists its directories nor keeps what they hold.
    let works_on_names = plan
        .mix
        .kinds()
        .any(|k| k.works_on_names() || k == Kind::Symlink);
    let mut shared_listing: Option<Vec<(String, u64)>> = None;
    for t in 0..plan.threads {
        let (dir, dir_path) = if plan.shared_dir {
            (top, plan.dir.trim_end_matches('/').to_owned())
        } else {
            let path = format!("{}/t{t}", plan.dir.trim_end_matches('/'));
            (mkdir_p(&setup, &path).await?, path)
        };
        let mut existing = if !works_on_names {
            Vec::new()
        } else if plan.shared_dir {
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
                ResilientConn::connect_with(
                    &plan.server,
                    plan.connect.clone(),
                    Arc::new(Session::new()),
                    plan.reconnect_timeout,
                    outages.clone(),
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
            lanes.push(Lane::new(
                conns[l % conns.len()].clone(),
                dir,
                dir_path.clone(),
                WorkingSet::new(names, &plan.mix),
                format!("f.{run_tag}.{t}.{l}"),
                Rng::new(seed ^ global as u64),
                plan.payloads(),
            ));
        }
        existing.clear();
    }
    if needs_existing
        && lanes.iter().all(|l| !l.has_names())
        && !plan.mix.kinds().all(|k| k == Kind::Readdir)
    {
        bail!(
            "nothing to {} under {}: run `loadgen create` first with the same --dir, --threads and --shared-dir",
            plan.workload,
            plan.dir
        );
    }
    Ok((setup, lanes))
}

/// The `--ack-log` writer: one thread, buffered, flushed at the end.
pub(super) struct AckLog {
    writer: std::thread::JoinHandle<std::io::Result<()>>,
}

impl AckLog {
    /// Creates the file and starts the writer; lanes send it one path per acknowledged create.
    pub(super) fn start(path: &Path) -> anyhow::Result<(std::sync::mpsc::Sender<String>, AckLog)> {
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
        Ok((tx, AckLog { writer }))
    }

    /// Waits for the writer to drain and flush; it ends once every sender is dropped.
    pub(super) fn finish(self) -> anyhow::Result<()> {
        self.writer
            .join()
            .map_err(|_| anyhow::anyhow!("ack log writer panicked"))?
            .context("writing the ack log")
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

/// Regular files in a directory (what stat, lookup, unlink, link and setxattr work on; an
/// earlier run's links among them, its symlinks not).
async fn list(client: &Client, dir: u64) -> Result<Vec<(String, u64)>, ClientError> {
    Ok(client
        .readdir_all(dir)
        .await?
        .into_iter()
        .filter(|e| e.kind == FileKind::File)
        .map(|e| (e.name, e.ino))
        .collect())
}
