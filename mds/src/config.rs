//! Server configuration, each key written once: [`Config`] is both the flags of `mds serve`
//! and the keys of its TOML file (`--config`, kebab-case), and its `Default` holds every
//! default. A flag wins over the file and the file over the default: the file's values become
//! the flags' defaults before the command line is parsed ([`parse_command_line`]), so `--help`
//! shows what the server would run with. [`Config::resolve`] checks it and loads what it
//! names (addresses, the key file, the certificate) into the [`ServerConfig`] the server runs
//! with. Test hooks ([`Testing`]) are hidden flags, never file keys.

use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use mds_client::auth::AuthKey;
use mds_client::units::{parse_bytes, parse_count, parse_duration};

/// The largest `--inline-data-max`.
const MAX_INLINE_DATA: u64 = 1 << 30;

use crate::error::{Error, IoContext, Result};
use crate::queue::ReplyPath;

/// Commit-on-share (`--cos`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cos {
    /// A request that would observe or build on another client's uncommitted change asks for
    /// an immediate commit and waits for it.
    #[default]
    On,
    /// Other clients see uncommitted state at once (faster, weaker).
    Off,
}

/// When a mutation's reply leaves (`--ack`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ack {
    /// Once it is durable.
    #[default]
    Commit,
    /// At once, with its transno; the client keeps what is not durable and replays it after a
    /// restart.
    Early,
}

impl Ack {
    /// Whether a session is answered early: it asks for early replies, or asks nothing of a
    /// server with `--ack early` (`self`).
    pub fn early_for(self, asked: mds_proto::AckAsked) -> bool {
        match asked {
            mds_proto::AckAsked::Server => self == Ack::Early,
            mds_proto::AckAsked::Commit => false,
            mds_proto::AckAsked::Early => true,
        }
    }
}

/// A behaviour switched on or off (`--root-squash`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Switch {
    On,
    #[default]
    Off,
}

impl Switch {
    pub fn is_on(self) -> bool {
        self == Switch::On
    }
}

/// Whose credentials requests may carry (`--cred-check`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CredCheck {
    /// Any: credentials are the client's word (NFS's AUTH_SYS without `secure`).
    Off,
    /// The connection owner's only, unless the connection came from a privileged port or
    /// proved the shared key. The default, as NFS's `secure` is: otherwise any local user
    /// could claim uid 0 and make a root-owned set-user-ID program or a device node.
    #[default]
    Owner,
}

/// Bounds that keep one client from hurting the others.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Mutations of one connection waiting for their commit; past it the connection is not
    /// read until replies leave.
    pub max_inflight_per_conn: usize,
    /// Unwritten reply bytes of one connection past which its requests are no longer
    /// executed, even within one read, until its writer has brought it below half of this.
    pub output_high_water: usize,
    /// How long a connection may stay above its high-water mark without its writer making
    /// room: past it the client is not reading its replies and is cut (its requests stay
    /// journaled; it may reconnect and resend).
    pub output_stall: Duration,
    /// Open connections per partition; accepting waits for a free slot.
    pub max_connections: usize,
    /// Mutations executed but not durable yet, server-wide, past which no partition executes
    /// another request until commits catch up: memory stays bounded when the disk (or a
    /// RocksDB write stall) is slower than the clients.
    pub max_uncommitted: u64,
    /// How long a new connection may take to send CONNECT.
    pub connect_deadline: Duration,
    /// How long a connection with nothing in flight may stay silent before it is closed.
    pub idle_timeout: Duration,
    /// Connections per partition that have not completed their handshake (TLS, CONNECT and
    /// its proof): bounded apart from `max_connections`, so a flood of them never takes a
    /// slot an authenticated client needs. Past it the oldest of them makes room for the
    /// newest (`partition/admission.rs`).
    pub max_unauthenticated: usize,
    /// Connections from one address that have not completed their handshake, server-wide.
    pub max_unauthenticated_per_address: usize,
    /// Connections from one /24 (IPv4) or /64 (IPv6) that have not completed their
    /// handshake, server-wide: an IPv6 /64 is as many addresses as its owner wants.
    pub max_unauthenticated_per_prefix: usize,
    /// Resend records one session keeps (its client's executed mutations whose replies it
    /// has not acknowledged); past it the session's mutations are refused with EBUSY.
    pub max_resend_records: usize,
    /// Inode numbers the journal makes room for above the server's inode counter, each
    /// commit (`journal::Leases::inos`): what a crash may skip, and how far failed creates may
    /// burn numbers before the ceiling must be raised on its own.
    pub ino_lease: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inflight_per_conn: 4096,
            output_high_water: 1 << 20,
            output_stall: Duration::from_secs(30),
            max_connections: 8192,
            max_uncommitted: 1 << 16,
            connect_deadline: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            max_unauthenticated: 1024,
            max_unauthenticated_per_address: 64,
            max_unauthenticated_per_prefix: 256,
            max_resend_records: crate::session::DEFAULT_MAX_RECORDS,
            ino_lease: journal::Leases::default().inos,
        }
    }
}

/// `mds serve`'s flags and its config file's keys.
#[derive(Clone, Debug, clap::Args, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Data directory (RocksDB store); created if missing.
    #[arg(long)]
    pub data: PathBuf,
    /// Client address, HOST:PORT (port 0 picks a free port).
    #[arg(long)]
    pub listen: String,
    /// Prometheus endpoint address, HOST:PORT.
    #[arg(long)]
    pub metrics_listen: String,
    /// Partitions (threads bound to cores, each with its own listener and reply queue). The
    /// default is the number of cores this process may use.
    #[arg(long)]
    pub partitions: usize,
    /// How long a commit gathers mutations before it starts (e.g. 0, 500us, 5ms, 5s); 0: as
    /// soon as the previous commit has finished.
    #[arg(long, value_parser = parse_duration)]
    #[serde(with = "duration_text")]
    pub commit_interval: Duration,
    /// Most mutations in one commit (e.g. 4096, 16k).
    #[arg(long, value_parser = parse_count)]
    pub max_batch: usize,
    /// With no --commit-interval: `on` lets a commit of a few mutations wait up to half a
    /// sync (at most 1 ms) for one more, while the last commits show that one usually
    /// follows — two clients whose creates would otherwise alternate, one per sync, then share
    /// each sync (PostgreSQL's commit_delay and commit_siblings, learnt rather than set). It
    /// never waits with one client or under load. `off`: every commit starts at once.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub commit_siblings: Switch,
    /// At SIGTERM/SIGINT, how long connections may take to send their last replies before
    /// those whose clients do not read are cut (e.g. 500ms, 10s). A second signal cuts them
    /// at once.
    #[arg(long, value_parser = parse_duration)]
    #[serde(with = "duration_text")]
    pub shutdown_grace: Duration,
    /// Commit-on-share: `on` makes a request that would observe or build on another client's
    /// uncommitted change ask for an immediate commit and wait for it; `off` lets other
    /// clients see uncommitted state at once (faster, weaker).
    #[arg(long, value_enum)]
    pub cos: Cos,
    /// When a mutation's reply leaves, for a session whose CONNECT does not ask (a mount asks
    /// for early replies): `commit` once it is durable; `early` at once, with its transno, as
    /// Lustre and CephFS do — the client learns what is durable from `last_committed` on
    /// every reply and from commit notices, keeps what is not, and replays it after a restart.
    #[arg(long, value_enum)]
    pub ack: Ack,
    /// After a restart, how long clients known before it may take to come back and replay
    /// what they were told early (e.g. 30s).
    #[arg(long, value_parser = parse_duration)]
    #[serde(with = "duration_text")]
    pub recovery_window: Duration,
    /// How long the server keeps the session of a client that went away with replies it may
    /// not have received (e.g. 5m): a resend within that time is answered from its record,
    /// never executed twice.
    #[arg(long, value_parser = parse_duration)]
    #[serde(with = "duration_text")]
    pub session_expiry: Duration,
    /// Most bytes of data one regular file may hold on the server (e.g. 64k, 1MiB; EFBIG
    /// beyond), kept in the store with the file's metadata and journaled in the same commits
    /// (Lustre's Data-on-MDT, for small files); 0 turns file data off (READ and WRITE are
    /// refused), as a pure metadata benchmark wants. At most 1GiB. A file that grows past it
    /// moves to the object store (`--object-store`).
    #[arg(long, value_parser = parse_bytes)]
    pub inline_data_max: u64,
    /// Where file data past `--inline-data-max` goes, which every mount reads and writes
    /// directly: `file:///DIR` or an absolute path (a directory on this host, which mounts on
    /// other hosts cannot reach), or `s3://BUCKET[/PREFIX]?endpoint=URL&region=R` (credentials
    /// from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, for the server's collector and each
    /// mount alike). Default: the directory `objects` inside `--data` (in a cluster, inside
    /// the cluster's data root: one store for every shard, which a cluster on several hosts
    /// must give as an S3 address). `none`: no object store (a write past the cap is EFBIG).
    #[arg(long)]
    pub object_store: Option<String>,
    /// How long an object nothing names is left in the object store before the collector
    /// deletes it (e.g. 1h): a deleted file's and a truncated one's after that long, and an
    /// upload whose layout change never came (a mount that died between the two).
    #[arg(long, value_parser = parse_duration)]
    #[serde(with = "duration_text")]
    pub object_grace: Duration,
    /// Most handles one client session may hold open (e.g. 512k; EMFILE past it, as a
    /// process past its RLIMIT_NOFILE). A mount is one session for every process on its
    /// host, so the default is systemd's hard RLIMIT_NOFILE, which no single process passes.
    #[arg(long, value_parser = parse_count)]
    pub max_open_per_session: usize,
    /// Most handles all clients may hold open together (ENFILE past it, as Linux past
    /// fs.file-max). The default is one per 8 KiB of the machine's memory (at least 65,536): a
    /// handle costs the server ~50-100 bytes, so about 1% of memory at the cap.
    #[arg(long, value_parser = parse_count)]
    pub max_open_files: usize,
    /// Most client sessions the server keeps (connected, or away with resend records or
    /// handles until --session-expiry): the CONNECT of a new client identity past it is
    /// refused with EBUSY. Each keeps at most 8192 resend records, so this bounds them all.
    #[arg(long, value_parser = parse_count)]
    pub max_sessions: usize,
    /// Where SIGUSR1 writes a checkpoint of the store while it serves (a consistent copy, a
    /// new `checkpoint-<unix seconds>` directory each time). None: SIGUSR1 is logged and
    /// ignored.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// How the journal writes inodes and entries: `on`, each commit's changes as one edit,
    /// their images written into the store by a background thread at checkpoints (HDFS's
    /// edits and fsimage; ~2,200 fewer instructions a create); `off`, a key each in every
    /// commit. Default: on outside a cluster; a cluster's store is always `off`, since a
    /// standby follows it from RocksDB's log. Either way, a start writes out the edits the
    /// store holds before it loads the namespace.
    #[arg(long, value_enum)]
    pub edit_log: Option<Switch>,
    /// Where replies wait for their commit: `per-cpu`, a queue per partition drained by its
    /// own thread, or by a partner when it is late; `global`, one service-wide locked list
    /// drained by `--service-threads` threads that every commit wakes together — the design
    /// per-CPU queues replace, kept to measure them against.
    #[arg(long, value_enum)]
    pub reply_path: ReplyPath,
    /// Service threads of `--reply-path global`.
    #[arg(long)]
    pub service_threads: usize,
    /// Per-CPU path: how long a partition woken by a commit may take to begin draining
    /// before the next partition drains its queue for it (e.g. 2ms; 0 turns partner draining
    /// off).
    #[arg(long, value_parser = parse_duration)]
    #[serde(with = "duration_text")]
    pub partner_drain_after: Duration,
    /// Root squash, as NFS's `root_squash`: requests that say uid 0 run as uid 65534
    /// (nobody), and group 0, primary or supplementary, as group 65534, so root on a client
    /// has no power over the namespace. `--root-squash` alone means on; `--root-squash off`
    /// overrides a config file that says on.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub root_squash: Switch,
    /// Require clients to prove this shared key at CONNECT (HMAC-SHA256 over a fresh nonce
    /// per connection). Every byte of the file is the key, at least 16 of them; only its
    /// owner may have access to it (mode 600 or 400), or the server refuses to start. Make
    /// one with `head -c 32 /dev/urandom > FILE && chmod 600 FILE`. None: anyone who can
    /// reach --listen may connect.
    #[arg(long)]
    pub auth_key: Option<PathBuf>,
    /// Whose credentials a request may carry: `off`, anyone's — credentials are the client's
    /// word, as NFS's AUTH_SYS; `owner`, only its connection owner's (the user the kernel
    /// says holds a loopback client's socket) unless the connection comes from a privileged
    /// port (below 1024) or proved --auth-key. Connections from other hosts on unprivileged
    /// ports without the key are then refused. `owner` by default: with `off`, any local user
    /// can claim uid 0.
    #[arg(long, value_enum)]
    pub cred_check: CredCheck,
    /// TLS on the client port: the server's certificate chain, PEM, leaf first. Needs
    /// --tls-key. None: plain TCP.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// etcd endpoints (HOST:PORT, comma-separated): serve one shard of a cluster whose
    /// configuration `mds cluster init` wrote there — the shard given by --shard, or with
    /// --standby the first that loses its owner. The store is then the cluster's
    /// `<data-root>/shard-N`, and --data is not used. etcd is never on a request's path.
    #[arg(long)]
    pub etcd: Option<String>,
    /// The cluster's name: its keys in etcd are under /mds/NAME/.
    #[arg(long)]
    pub cluster: String,
    /// With --etcd: the shard to claim. A shard someone owns is refused, naming its owner.
    #[arg(long, conflicts_with = "standby")]
    pub shard: Option<u16>,
    /// With --etcd: wait, and take over the first shard whose owner goes away (its lease
    /// expired or was released), opening that shard's store and running its recovery.
    /// `--standby` alone means true.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub standby: bool,
    /// With --standby: keep shard N loaded while waiting, by following the store its owner
    /// writes (a RocksDB secondary instance reading the owner's log), so that taking shard N
    /// over opens its store without loading the namespace. Shard N is claimed first when
    /// several have no owner. The store must be readable here: the cluster's data root on
    /// shared storage, or on this host.
    #[arg(long, value_name = "SHARD")]
    pub follow: Option<u16>,
    /// TOML file with any of the keys above (kebab-case); flags override it.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    #[serde(skip)]
    pub testing: Testing,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data: "mds-data".into(),
            listen: "127.0.0.1:7400".into(),
            metrics_listen: "127.0.0.1:9400".into(),
            partitions: default_partitions(),
            commit_interval: Duration::ZERO,
            max_batch: 8192,
            commit_siblings: Switch::On,
            shutdown_grace: Duration::from_secs(10),
            cos: Cos::On,
            ack: Ack::Commit,
            recovery_window: Duration::from_secs(30),
            session_expiry: Duration::from_secs(300),
            inline_data_max: 1 << 20,
            object_store: None,
            object_grace: Duration::from_secs(3600),
            max_open_per_session: DEFAULT_MAX_OPEN_PER_SESSION,
            max_open_files: default_max_open_files(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            checkpoint_dir: None,
            edit_log: None,
            reply_path: ReplyPath::PerCpu,
            service_threads: 16,
            partner_drain_after: Duration::from_millis(2),
            root_squash: Switch::Off,
            auth_key: None,
            cred_check: CredCheck::Owner,
            tls_cert: None,
            tls_key: None,
            etcd: None,
            cluster: "mds".into(),
            shard: None,
            standby: false,
            follow: None,
            config: None,
            testing: Testing::default(),
        }
    }
}

/// Hooks for tests, as hidden flags: faults injected into the journal and the drain, and a
/// bound tests move. Never read from a config file.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Testing {
    /// Test hook: the commit after this many fails as a disk error would.
    #[arg(long = "inject-journal-failure-after", hide = true)]
    pub journal_failure_after: Option<u64>,
    /// Test hook: which disk error (`write`, `sync`, `nospace`). Default: write.
    #[arg(long = "inject-journal-failure", hide = true)]
    pub journal_failure: Option<journal::Fault>,
    /// Test hook: unwritten reply bytes per connection past which its requests wait
    /// (default 1 MiB); tests raise it to make a writer block on a client that does not read.
    #[arg(long, hide = true, value_parser = parse_count)]
    pub output_high_water: Option<usize>,
    /// Test hook: after claiming its shard, the server stops for this long before it renews
    /// its lease or opens the store, as a process stopped right after its claim would.
    #[arg(long = "inject-pause-after-claim", hide = true, value_parser = parse_duration)]
    pub pause_after_claim: Option<Duration>,
    /// Test hook: partition 0's drain waits this long after each commit wakes it before it
    /// begins, as if its core were busy elsewhere (its partner drains for it).
    #[arg(long = "inject-drain-stall", hide = true, value_parser = parse_duration)]
    pub drain_stall: Option<Duration>,
    /// Test hook: the server kills itself (SIGKILL) at this step of a MKDIR_REMOTE or a
    /// remote RMDIR.
    #[arg(long = "inject-crash-at", hide = true, value_enum)]
    pub crash_at: Option<crate::crash::CrashPoint>,
    /// Benchmark hook: each commit's synced write takes at least this long, as on a device
    /// whose sync is that slow (`bench/shards.sh` gives each shard of one machine a device
    /// of its own so).
    #[arg(long = "inject-sync-latency", hide = true, value_parser = parse_duration)]
    pub sync_latency: Option<Duration>,
    /// Test hook: with the edit log, checkpoint every this many edit bytes (default 32 MiB),
    /// so that a short test sees checkpoints.
    #[arg(long = "inject-checkpoint-bytes", hide = true, value_parser = parse_count)]
    pub checkpoint_bytes: Option<usize>,
}

impl Testing {
    /// The journal failure to inject, if any.
    pub fn journal_failure(&self) -> Option<journal::InjectedFailure> {
        self.journal_failure_after
            .map(|after_commits| journal::InjectedFailure {
                after_commits,
                fault: self.journal_failure.unwrap_or_default(),
            })
    }
}

/// A validated configuration, with what it names loaded.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The keys as given.
    pub keys: Config,
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    /// The shared key clients must prove at CONNECT; none: anyone may connect.
    pub auth_key: Option<Arc<AuthKey>>,
    /// TLS on the client port; none: plain TCP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub limits: Limits,
}

impl ServerConfig {
    /// How commits are formed (`--commit-interval`, `--max-batch`, `--commit-siblings`).
    pub fn commit_policy(&self) -> crate::committer::CommitPolicy {
        crate::committer::CommitPolicy {
            interval: self.keys.commit_interval,
            max_batch: self.keys.max_batch,
            siblings: self.keys.commit_siblings.is_on(),
        }
    }

    /// The caps on open handles (`--max-open-per-session`, `--max-open-files`).
    pub fn open_caps(&self) -> crate::namespace::OpenCaps {
        crate::namespace::OpenCaps {
            per_session: self.keys.max_open_per_session as u64,
            total: self.keys.max_open_files as u64,
        }
    }
}

impl Config {
    /// Reads a config file: its keys over the defaults; an unknown key is an error.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_owned(),
            source,
        })?;
        let mut config: Config = toml::from_str(&text).map_err(|source| Error::ConfigParse {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        config.config = Some(path.to_owned());
        Ok(config)
    }

    /// `serve` (the command whose flags flatten this) with this configuration's values as
    /// its flags' defaults.
    pub fn as_defaults(&self, mut serve: clap::Command) -> clap::Command {
        let keys = toml::Table::try_from(self).expect("a configuration is a TOML table");
        for (key, value) in keys {
            let text = match value {
                toml::Value::String(s) => s,
                other => other.to_string(),
            };
            serve = serve.mut_arg(key.replace('-', "_"), |arg| {
                arg.default_value(text).required(false)
            });
        }
        serve
    }

    /// Checks the values and loads what they name.
    pub fn resolve(self) -> Result<ServerConfig> {
        if self.session_expiry.is_zero() {
            return Err(Error::Invalid(
                "--session-expiry must be above zero: a client needs time to reconnect".into(),
            ));
        }
        if self.partitions == 0 || self.partitions > 1024 {
            return Err(Error::Invalid(format!(
                "--partitions must be between 1 and 1024, got {}",
                self.partitions
            )));
        }
        if self.service_threads == 0 || self.service_threads > 1024 {
            return Err(Error::Invalid(format!(
                "--service-threads must be between 1 and 1024, got {}",
                self.service_threads
            )));
        }
        if self.max_open_per_session == 0 || self.max_open_files == 0 || self.max_sessions == 0 {
            return Err(Error::Invalid(
                "--max-open-per-session, --max-open-files and --max-sessions must be at least 1"
                    .into(),
            ));
        }
        if self.max_batch == 0 {
            return Err(Error::Invalid("--max-batch must be at least 1".into()));
        }
        if self.inline_data_max > MAX_INLINE_DATA {
            return Err(Error::Invalid(format!(
                "--inline-data-max must be at most 1GiB, got {} bytes: the server keeps small \
                 files' data with their metadata",
                self.inline_data_max
            )));
        }
        let auth_key = match &self.auth_key {
            Some(path) => Some(Arc::new(AuthKey::from_file(path).map_err(Error::AuthKey)?)),
            None => None,
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::server_config(cert, key)?),
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::Invalid(
                    "--tls-cert needs --tls-key (its private key)".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(Error::Invalid(
                    "--tls-key needs --tls-cert (its certificate)".into(),
                ));
            }
        };
        match (&self.etcd, self.shard, self.standby) {
            (None, Some(_), _) | (None, _, true) => {
                return Err(Error::Invalid(
                    "--shard and --standby are for a cluster's servers: they need --etcd".into(),
                ));
            }
            (Some(_), None, false) => {
                return Err(Error::Invalid(
                    "--etcd needs --shard N (the shard to claim) or --standby".into(),
                ));
            }
            _ => {}
        }
        if self.follow.is_some() && !self.standby {
            return Err(Error::Invalid(
                "--follow is for a standby: it needs --etcd and --standby".into(),
            ));
        }
        if self.etcd.is_some() && self.edit_log == Some(Switch::On) {
            return Err(Error::Invalid(
                "--edit-log on is not for a cluster's shard (--etcd): a standby follows a shard's store from RocksDB's log, which a checkpoint bypasses".into(),
            ));
        }
        let defaults = Limits::default();
        let limits = Limits {
            output_high_water: self
                .testing
                .output_high_water
                .unwrap_or(defaults.output_high_water),
            ..defaults
        };
        Ok(ServerConfig {
            listen: resolve_addr("--listen", &self.listen)?,
            metrics_listen: resolve_addr("--metrics-listen", &self.metrics_listen)?,
            auth_key,
            tls,
            limits,
            keys: self,
        })
    }
}

/// Parses the command line `args` of `C`, whose `serve` subcommand flattens [`Config`]: when
/// it names a config file, the file's keys become the defaults the flags override. Errors
/// of the command line are clap's (help and version among them); of the file, its own.
pub fn parse_command_line<C: clap::Parser>(
    args: Vec<OsString>,
) -> std::result::Result<C, CommandLine> {
    let with_defaults =
        |config: &Config| C::command().mut_subcommand("serve", |serve| config.as_defaults(serve));
    let first = with_defaults(&Config::default()).try_get_matches_from(&args)?;
    let file = first
        .subcommand_matches("serve")
        .and_then(|serve| serve.get_one::<PathBuf>("config"));
    let matches = match file {
        Some(path) => {
            let config = Config::from_file(path).map_err(CommandLine::File)?;
            with_defaults(&config).try_get_matches_from(&args)?
        }
        None => first,
    };
    Ok(C::from_arg_matches(&matches)?)
}

/// Why a command line was not taken.
#[derive(Debug)]
pub enum CommandLine {
    /// The flags (or `--help`, `--version`): clap prints and exits.
    Flags(clap::Error),
    /// The config file could not be read, or has an unknown or invalid key.
    File(Error),
}

impl From<clap::Error> for CommandLine {
    fn from(e: clap::Error) -> Self {
        CommandLine::Flags(e)
    }
}

/// Durations in a config file as people write them (`5ms`, `2s`, `0`), and as
/// `humantime` writes them back for the flags' defaults.
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        mds_client::units::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// A mode's name as its flag takes it (`on`, `early`, `per-cpu`), for logs.
pub fn name<T: clap::ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

/// `--max-open-per-session`'s default: systemd's hard `RLIMIT_NOFILE` (`DefaultLimitNOFILE`).
pub const DEFAULT_MAX_OPEN_PER_SESSION: usize = 512 << 10;

/// `--max-sessions`'s default: eight connection slots' worth (`Limits::max_connections`) of
/// a partition, so connected clients of a few partitions never meet it, while a flood of
/// identities, each keeping its resend records until it expires, stops there.
pub const DEFAULT_MAX_SESSIONS: usize = 64 << 10;

/// `--max-open-files`' default: one handle per 8 KiB of physical memory, at least 65,536.
fn default_max_open_files() -> usize {
    // SAFETY: sysconf with constant names reads system figures and has no other effect.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let memory = usize::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(usize::try_from(page).unwrap_or(0));
    (memory / 8192).max(64 << 10)
}

fn default_partitions() -> usize {
    core_affinity::get_core_ids()
        .map(|c| c.len())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

fn resolve_addr(flag: &str, value: &str) -> Result<SocketAddr> {
    value
        .to_socket_addrs()
        .doing(|| format!("{flag}: cannot resolve {value:?} (expected HOST:PORT)"))?
        .next()
        .ok_or_else(|| Error::Invalid(format!("{flag}: {value:?} resolves to no address")))
}

impl std::fmt::Display for CommandLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandLine::Flags(e) => write!(f, "{e}"),
            CommandLine::File(e) => f.write_str(&crate::error::chain(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand)]
    enum Command {
        Serve(Box<Config>),
    }

    /// `mds serve ARGS`, parsed as the binary parses it.
    fn parse(args: &[&str]) -> std::result::Result<Config, String> {
        let argv = ["mds", "serve"].iter().chain(args).map(OsString::from);
        parse_command_line::<Cli>(argv.collect())
            .map(|cli| match cli.command {
                Command::Serve(config) => *config,
            })
            .map_err(|e| e.to_string())
    }

    fn resolve(args: &[&str]) -> std::result::Result<ServerConfig, String> {
        parse(args)?.resolve().map_err(|e| crate::error::chain(&e))
    }

    fn path_arg(path: &Path) -> String {
        path.display().to_string()
    }

    #[test]
    fn the_edit_log_is_on_by_default_and_refused_for_a_clusters_shard() {
        assert_eq!(
            resolve(&[]).unwrap().keys.edit_log,
            None,
            "on outside a cluster"
        );
        assert_eq!(
            resolve(&["--edit-log", "off"]).unwrap().keys.edit_log,
            Some(Switch::Off)
        );
        let refused = resolve(&[
            "--etcd",
            "127.0.0.1:2379",
            "--shard",
            "0",
            "--edit-log",
            "on",
        ])
        .unwrap_err();
        assert!(
            refused.contains("--edit-log on is not for a cluster"),
            "{refused}"
        );
        let cluster = resolve(&["--etcd", "127.0.0.1:2379", "--shard", "0"]).unwrap();
        assert_eq!(cluster.keys.edit_log, None, "off in a cluster, by default");
        let err = parse(&["--edit-log", "sometimes"]).unwrap_err();
        assert!(err.contains("sometimes"), "{err}");
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.toml");
        std::fs::write(
            &path,
            "commit-interval = \"5ms\"\nmax-batch = 100\npartitions = 3\nlisten = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        let cfg = resolve(&["--config", &path_arg(&path), "--max-batch", "7"]).unwrap();
        assert_eq!(cfg.keys.commit_interval, Duration::from_millis(5));
        assert_eq!(cfg.keys.max_batch, 7);
        assert_eq!(cfg.keys.partitions, 3);
        assert_eq!(cfg.listen.port(), 0);
        assert_eq!(cfg.metrics_listen.port(), 9400);

        std::fs::write(&path, "no-such-key = 1\n").unwrap();
        let err = parse(&["--config", &path_arg(&path)]).unwrap_err();
        assert!(err.contains("no-such-key"), "{err}");
    }

    #[test]
    fn a_session_is_answered_early_if_it_asks_or_asks_nothing_of_an_early_server() {
        use mds_proto::AckAsked;
        for (server, asked, early) in [
            (Ack::Commit, AckAsked::Server, false),
            (Ack::Commit, AckAsked::Early, true),
            (Ack::Commit, AckAsked::Commit, false),
            (Ack::Early, AckAsked::Server, true),
            (Ack::Early, AckAsked::Early, true),
            (Ack::Early, AckAsked::Commit, false),
        ] {
            assert_eq!(server.early_for(asked), early, "{server:?} asked {asked:?}");
        }
    }

    #[test]
    fn every_key_is_a_flag_and_the_defaults_parse_back_unchanged() {
        let keys = |c: &Config| toml::Table::try_from(c).unwrap();
        let defaults = Config::default();
        assert_eq!(keys(&parse(&[]).unwrap()), keys(&defaults));
        // Each key a file may hold, set to its default as the flag: taken the same.
        for (key, value) in keys(&defaults) {
            let text = match value {
                toml::Value::String(s) => s,
                other => other.to_string(),
            };
            let parsed = parse(&[&format!("--{key}"), &text])
                .unwrap_or_else(|e| panic!("--{key} {text}: {e}"));
            assert_eq!(keys(&parsed), keys(&defaults), "--{key} {text}");
        }
    }

    #[test]
    fn root_squash_is_a_bare_flag_that_a_value_can_turn_off_over_the_file() {
        assert_eq!(parse(&[]).unwrap().root_squash, Switch::Off);
        assert_eq!(parse(&["--root-squash"]).unwrap().root_squash, Switch::On);
        assert_eq!(
            parse(&["--root-squash", "off"]).unwrap().root_squash,
            Switch::Off
        );
        assert!(parse(&["--root-squash", "maybe"]).is_err());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.toml");
        std::fs::write(&path, "root-squash = \"on\"\n").unwrap();
        let from_file = |args: &[&str]| {
            let mut all = vec!["--config", path.to_str().unwrap()];
            all.extend_from_slice(args);
            parse(&all).unwrap().root_squash
        };
        assert!(from_file(&[]).is_on());
        assert!(!from_file(&["--root-squash", "off"]).is_on());
        assert!(
            !Config::default()
                .resolve()
                .unwrap()
                .keys
                .root_squash
                .is_on()
        );
    }

    #[test]
    fn the_key_and_tls_files_come_from_the_file_and_are_checked_at_start() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (key, config) = (dir.path().join("key"), dir.path().join("mds.toml"));
        std::fs::write(&key, [3u8; 32]).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(
            &config,
            format!("auth-key = {:?}\n", key.display().to_string()),
        )
        .unwrap();
        let from_file = || resolve(&["--config", &path_arg(&config)]);
        assert!(from_file().unwrap().auth_key.is_some());
        assert!(Config::default().resolve().unwrap().auth_key.is_none());
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = from_file().unwrap_err();
        assert!(err.contains("--auth-key") && err.contains("0644"), "{err}");

        let cert = dir.path().join("cert.pem");
        std::fs::write(
            &config,
            format!("tls-cert = {:?}\n", cert.display().to_string()),
        )
        .unwrap();
        let err = from_file().unwrap_err();
        assert!(err.contains("--tls-cert needs --tls-key"), "{err}");
    }

    #[test]
    fn invalid_values_are_refused_with_the_flag_named() {
        let err = resolve(&["--partitions", "0"]).unwrap_err();
        assert!(err.contains("--partitions"), "{err}");
        let err = resolve(&["--listen", "nonsense"]).unwrap_err();
        assert!(err.contains("--listen"), "{err}");
        let err = resolve(&["--service-threads", "0"]).unwrap_err();
        assert!(err.contains("--service-threads"), "{err}");
    }

    #[test]
    fn the_reply_path_and_its_knobs_come_from_the_file_or_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.toml");
        std::fs::write(
            &path,
            "reply-path = \"global\"\nservice-threads = 4\npartner-drain-after = \"0\"\n\
             cred-check = \"off\"\n",
        )
        .unwrap();
        let cfg = parse(&["--config", &path_arg(&path)]).unwrap();
        assert_eq!(cfg.reply_path, ReplyPath::Global);
        assert_eq!(cfg.service_threads, 4);
        assert_eq!(cfg.partner_drain_after, Duration::ZERO);
        assert_eq!(cfg.cred_check, CredCheck::Off);
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.reply_path, ReplyPath::PerCpu);
        assert_eq!(defaults.service_threads, 16);
        assert_eq!(defaults.partner_drain_after, Duration::from_millis(2));
        assert_eq!(defaults.cred_check, CredCheck::Owner, "secure by default");
        std::fs::write(&path, "reply-path = \"sideways\"\n").unwrap();
        let err = parse(&["--config", &path_arg(&path)]).unwrap_err();
        assert!(err.contains("reply-path"), "{err}");
    }
}
