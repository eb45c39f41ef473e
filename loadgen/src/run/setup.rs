//! Setting a run up before its clock starts: the setup connection, the directories under
//! `--dir` (one per thread, or the shared one; with `--spread-shards` each on its thread's
//! shard), the files already there that stat, lookup, unlink, link and setxattr work on (and
//! symlinks point at), `--conns-per-thread` connections per thread (in a cluster, all
//! following one watch of its shard map), the lanes dealt over them, and the ack log writer.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use mds_client::resilient::{Outages, ResilientConn};
use mds_client::{Client, ClientError, MapWatch, ROOT, Router, Session};
use mds_proto::{Errno, Kind as FileKind, ShardLocation, shard_of};

use super::lanes::Lane;
use super::plan::Plan;
use crate::workload::{Kind, Rng, WorkingSet};

/// `--spread-shards`: the cluster's shards that had an owner when the run started, and the
/// router that made the threads' directories on them.
pub(super) struct Spread {
    router: Router,
    pub(super) shards: Vec<ShardLocation>,
    /// Each thread's shard, by thread.
    pub(super) of_thread: Vec<u16>,
}

impl Spread {
    async fn discover(plan: &Plan) -> anyhow::Result<Spread> {
        let router = Router::connect(&plan.server, &plan.connect)
            .await
            .with_context(|| format!("connecting to {}", plan.server))?;
        let map = router.map();
        if map.shard.is_none() {
            bail!(
                "--spread-shards: {} is not a server of a cluster",
                plan.server
            );
        }
        if map.shards.is_empty() {
            bail!("--spread-shards: no shard of the cluster has an owner");
        }
        let of_thread = (0..plan.threads)
            .map(|t| map.shards[t % map.shards.len()].shard)
            .collect();
        Ok(Spread {
            router,
            shards: map.shards,
            of_thread,
        })
    }

    /// The servers of the shards the threads work on, each once.
    pub(super) fn servers(&self) -> Vec<String> {
        self.shards.iter().map(|s| s.address.clone()).collect()
    }

    fn address(&self, shard: u16) -> &str {
        let at = self.shards.iter().find(|s| s.shard == shard);
        &at.expect("a shard of the map").address
    }

    /// `--dir` and its missing parents, through the router (the path may cross shards).
    async fn mkdir_p(&self, path: &str) -> anyhow::Result<u64> {
        let mut ino = ROOT;
        let names =
            mds_client::components(path).map_err(|e| anyhow::anyhow!("--dir {path:?}: {e}"))?;
        for name in names {
            ino = match self.router.lookup(ino, name).await {
                Ok(attr) if attr.kind == FileKind::Directory => attr.ino,
                Ok(_) => bail!("{path}: {name} is not a directory"),
                Err(e) if e.errno() == Some(Errno::ENOENT) => {
                    match self.router.mkdir(ino, name, 0o755).await {
                        Ok(attr) => attr.ino,
                        Err(e) if e.errno() == Some(Errno::EEXIST) => {
                            self.router.lookup(ino, name).await?.ino
                        }
                        Err(e) => return Err(e).with_context(|| format!("mkdir {path}")),
                    }
                }
                Err(e) => return Err(e).with_context(|| format!("lookup {path}")),
            };
        }
        Ok(ino)
    }

    /// The directory `name` in `parent` (at `path`), on `shard`: made there if it is not
    /// there yet, refused if it is there on another shard (an earlier run's, spread another
    /// way: its files would be another shard's creates).
    async fn dir_on(&self, parent: u64, name: &str, shard: u16, path: &str) -> anyhow::Result<u64> {
        let found = match self.router.lookup(parent, name).await {
            Ok(attr) => attr,
            Err(e) if e.errno() == Some(Errno::ENOENT) => {
                match self.router.mkdir_on(parent, name, 0o755, shard).await {
                    Ok(attr) => attr,
                    Err(e) if e.errno() == Some(Errno::EEXIST) => {
                        self.router.lookup(parent, name).await?
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("mkdir {path} on shard {shard}"));
                    }
                }
            }
            Err(e) => return Err(e).with_context(|| format!("lookup {path}")),
        };
        if found.kind != FileKind::Directory {
            bail!("{path} is not a directory");
        }
        if shard_of(found.ino) != shard {
            bail!(
                "{path} is on shard {}, not {shard}: give another --dir for a run spread over {} shards",
                shard_of(found.ino),
                self.shards.len()
            );
        }
        Ok(found.ino)
    }
}

/// Connects, makes the directories and builds every lane. Returns the setup connection too
/// (the run asks it for the server's figures before and after), and with `--spread-shards`
/// which thread works on which shard.
pub(super) async fn prepare(
    plan: &Plan,
    outages: &Arc<Outages>,
) -> anyhow::Result<(Client, Vec<Lane>, Option<Spread>)> {
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
    let spread = if plan.spread_shards {
        Some(Spread::discover(plan).await?)
    } else {
        None
    };
    // In a cluster, every connection follows the shard map through this one watch: one
    // watcher's connection on a server for the whole run, not one per connection.
    let watch = match setup.shard_map().await {
        Ok(map) if map.shard.is_some() => Some(MapWatch::start(&plan.server, &plan.connect)),
        _ => None,
    };
    let top = match &spread {
        Some(spread) => spread.mkdir_p(&plan.dir).await?,
        None => mkdir_p(&setup, &plan.dir).await?,
    };

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
            let dir = match &spread {
                Some(s) => {
                    s.dir_on(top, &format!("t{t}"), s.of_thread[t], &path)
                        .await?
                }
                None => mkdir_p(&setup, &path).await?,
            };
            (dir, path)
        };
        // The thread's server: its shard's with --spread-shards.
        let server = match &spread {
            Some(s) => s.address(s.of_thread[t]).to_owned(),
            None => plan.server.clone(),
        };
        let mut existing = if !works_on_names {
            Vec::new()
        } else if let Some(s) = &spread {
            list(&s.router.for_ino(dir).await?, dir).await?
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
            let (options, session) = (plan.connect.clone(), Arc::new(Session::new()));
            let timeout = plan.reconnect_timeout;
            let conn = match &watch {
                Some(watch) => {
                    ResilientConn::connect_following(
                        &server,
                        options,
                        session,
                        timeout,
                        outages.clone(),
                        watch,
                    )
                    .await
                }
                None => {
                    ResilientConn::connect_with(&server, options, session, timeout, outages.clone())
                        .await
                }
            };
            conns.push(Arc::new(
                conn.with_context(|| format!("connecting to {server}"))?,
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
            lanes.push(
                Lane::new(
                    conns[l % conns.len()].clone(),
                    dir,
                    dir_path.clone(),
                    WorkingSet::new(names, &plan.mix),
                    format!("f.{run_tag}.{t}.{l}"),
                    Rng::new(seed ^ global as u64),
                    plan.payloads(),
                )
                .on_shard(spread.as_ref().map(|s| s.of_thread[t])),
            );
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
    Ok((setup, lanes, spread))
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
