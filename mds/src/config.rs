//! Server configuration: command-line flags, an optional TOML file with the same keys, and
//! the validated result. Flags win over the file; the file wins over defaults.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use anyhow::{Context, bail};
use serde::Deserialize;

use mds_client::auth::AuthKey;
use mds_client::units::{parse_count, parse_duration};

use crate::partition::{Limits, ReplyPath};

/// `mds serve` flags.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// Data directory (RocksDB store); created if missing. Default: ./mds-data
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Client address, HOST:PORT. Default: 127.0.0.1:7400 (port 0 picks a free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Prometheus endpoint address, HOST:PORT. Default: 127.0.0.1:9400.
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Partitions (threads bound to cores, each with its own listener and reply queue).
    /// Default: the number of cores this process may use.
    #[arg(long)]
    pub partitions: Option<usize>,
    /// How long a commit gathers mutations before it starts (e.g. 0, 500us, 5ms, 5s).
    /// Default 0: as soon as the previous commit has finished.
    #[arg(long, value_parser = parse_duration)]
    pub commit_interval: Option<Duration>,
    /// Most mutations in one commit (e.g. 4096, 16k). Default: 8192.
    #[arg(long, value_parser = parse_count)]
    pub max_batch: Option<usize>,
    /// At SIGTERM/SIGINT, how long connections may take to send their last replies before
    /// those whose clients do not read are cut (e.g. 500ms, 10s). Default: 10s. A second
    /// signal cuts them at once.
    #[arg(long, value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,
    /// Commit-on-share: `on` (default) makes a request that would observe or build on
    /// another client's uncommitted change ask for an immediate commit and wait for it;
    /// `off` lets other clients see uncommitted state at once (faster, weaker).
    #[arg(long, value_parser = parse_on_off)]
    pub cos: Option<bool>,
    /// When a mutation's reply leaves: `commit` (default) once it is durable; `early` at
    /// once, with its transno, as Lustre and CephFS do — the client learns what is durable from
    /// `last_committed` on every reply and from commit notices, keeps what is not, and replays
    /// it after a restart.
    #[arg(long, value_parser = parse_ack)]
    pub ack: Option<bool>,
    /// After a restart, how long clients known before it may take to come back and replay what
    /// they were told early (e.g. 30s). Default: 30s.
    #[arg(long, value_parser = parse_duration)]
    pub recovery_window: Option<Duration>,
    /// How long the server keeps the session of a client that went away with replies it may
    /// not have received (e.g. 5m): a resend within that time is answered from its record,
    /// never executed twice. Default: 5m.
    #[arg(long, value_parser = parse_duration)]
    pub session_expiry: Option<Duration>,
    /// Where SIGUSR1 writes a checkpoint of the store while it serves (a consistent copy, a
    /// new `checkpoint-<unix seconds>` directory each time). Default: none (SIGUSR1 is
    /// logged and ignored).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Where replies wait for their commit: `per-cpu` (default), a queue per partition drained
    /// by its own thread, or by a partner when it is late; `global`, one service-wide locked
    /// list drained by `--service-threads` threads that every commit wakes together — the
    /// design per-CPU queues replace, kept to measure them against.
    #[arg(long, value_enum)]
    pub reply_path: Option<ReplyPath>,
    /// Service threads of `--reply-path global`. Default: 16.
    #[arg(long)]
    pub service_threads: Option<usize>,
    /// Per-CPU path: how long a partition woken by a commit may take to begin draining
    /// before the next partition drains its queue for it (e.g. 2ms; 0 turns partner draining
    /// off). Default: 2ms.
    #[arg(long, value_parser = parse_duration)]
    pub partner_drain_after: Option<Duration>,
    /// Root squash, as NFS's `root_squash`: requests that say uid 0 run as uid 65534
    /// (nobody), and group 0, primary or supplementary, as group 65534, so root on a client
    /// has no power over the namespace. `--root-squash` alone means on; `--root-squash off`
    /// overrides a config file that says on. Default: off.
    #[arg(long, value_parser = parse_on_off, num_args = 0..=1, default_missing_value = "on")]
    pub root_squash: Option<bool>,
    /// Require clients to prove this shared key at CONNECT (HMAC-SHA256 over a fresh nonce
    /// per connection). Every byte of the file is the key, at least 16 of them; only its
    /// owner may have access to it (mode 600 or 400), or the server refuses to start. Make
    /// one with `head -c 32 /dev/urandom > FILE && chmod 600 FILE`. Default: none (anyone
    /// who can reach --listen may connect).
    #[arg(long)]
    pub auth_key: Option<PathBuf>,
    /// Whose credentials a request may carry: `off` (default), anyone's — credentials are
    /// the client's word, as NFS's AUTH_SYS; `owner`, only its connection owner's (the user
    /// the kernel says holds a loopback client's socket) unless the connection comes from a
    /// privileged port (below 1024) or proved --auth-key. Connections from other hosts on
    /// unprivileged ports without the key are then refused.
    #[arg(long, value_enum)]
    pub cred_check: Option<crate::partition::CredCheck>,
    /// TLS on the client port: the server's certificate chain, PEM, leaf first. Needs
    /// --tls-key. Default: none (plain TCP).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TOML file with any of the keys above (kebab-case); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Test hook: the commit after this many fails as a disk error would.
    #[arg(long, hide = true)]
    pub inject_journal_failure_after: Option<u64>,
    /// Test hook: unwritten reply bytes per connection past which its requests wait
    /// (default 1 MiB); tests raise it to make a writer block on a client that does not read.
    #[arg(long, hide = true, value_parser = parse_count)]
    pub output_high_water: Option<usize>,
    /// Test hook: which disk error (`write`, `sync`, `nospace`). Default: write.
    #[arg(long, hide = true)]
    pub inject_journal_failure: Option<journal::Fault>,
    /// Test hook: partition 0's drain waits this long after each commit wakes it before it
    /// begins, as if its core were busy elsewhere (its partner drains for it).
    #[arg(long, hide = true, value_parser = parse_duration)]
    pub inject_drain_stall: Option<Duration>,
}

/// The keys a config file may hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    data: Option<PathBuf>,
    listen: Option<String>,
    metrics_listen: Option<String>,
    partitions: Option<usize>,
    commit_interval: Option<String>,
    max_batch: Option<usize>,
    shutdown_grace: Option<String>,
    cos: Option<String>,
    ack: Option<String>,
    recovery_window: Option<String>,
    session_expiry: Option<String>,
    checkpoint_dir: Option<PathBuf>,
    reply_path: Option<String>,
    service_threads: Option<usize>,
    partner_drain_after: Option<String>,
    root_squash: Option<String>,
    auth_key: Option<PathBuf>,
    cred_check: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// A validated server configuration.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub data: PathBuf,
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub partitions: usize,
    pub commit_interval: Duration,
    pub max_batch: usize,
    /// How long shutdown lets connections write their last replies before it cuts them.
    pub shutdown_grace: Duration,
    /// Commit-on-share on or off.
    pub cos: bool,
    /// Early replies (`--ack early`) rather than commit-deferred ones.
    pub ack_early: bool,
    /// How long a restart waits for known clients to replay.
    pub recovery_window: Duration,
    /// How long an away session keeps its resend records.
    pub session_expiry: Duration,
    /// Where SIGUSR1 writes checkpoints.
    pub checkpoint_dir: Option<PathBuf>,
    /// Where replies wait for their commit.
    pub reply_path: ReplyPath,
    /// Service threads of the global reply path.
    pub service_threads: usize,
    /// How late a partition's drain may begin before its partner drains for it; zero: never.
    pub partner_drain_after: Duration,
    pub inject_drain_stall: Option<Duration>,
    /// Requests from uid 0 (and group 0) run as nobody.
    pub root_squash: bool,
    /// The shared key clients must prove at CONNECT; none: anyone may connect.
    pub auth_key: Option<Arc<AuthKey>>,
    /// Whose credentials a request may carry.
    pub cred_check: crate::partition::CredCheck,
    /// TLS on the client port; none: plain TCP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub limits: Limits,
    pub inject_journal_failure_after: Option<u64>,
    pub inject_journal_failure: journal::Fault,
}

impl ServeArgs {
    /// Merges flags over the config file over defaults, and validates.
    pub fn resolve(self) -> anyhow::Result<ServerConfig> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let interval = match (self.commit_interval, file.commit_interval) {
            (Some(d), _) => d,
            (None, Some(s)) => parse_duration(&s).map_err(anyhow::Error::msg)?,
            (None, None) => Duration::ZERO,
        };
        let shutdown_grace = match (self.shutdown_grace, file.shutdown_grace) {
            (Some(d), _) => d,
            (None, Some(s)) => parse_duration(&s).map_err(anyhow::Error::msg)?,
            (None, None) => Duration::from_secs(10),
        };
        let cos = match (self.cos, file.cos) {
            (Some(on), _) => on,
            (None, Some(s)) => parse_on_off(&s).map_err(|e| anyhow::anyhow!("cos: {e}"))?,
            (None, None) => true,
        };
        let ack_early = match (self.ack, file.ack) {
            (Some(early), _) => early,
            (None, Some(s)) => parse_ack(&s).map_err(|e| anyhow::anyhow!("ack: {e}"))?,
            (None, None) => false,
        };
        let recovery_window = match (self.recovery_window, file.recovery_window) {
            (Some(d), _) => d,
            (None, Some(s)) => parse_duration(&s).map_err(anyhow::Error::msg)?,
            (None, None) => Duration::from_secs(30),
        };
        let session_expiry = match (self.session_expiry, file.session_expiry) {
            (Some(d), _) => d,
            (None, Some(s)) => parse_duration(&s).map_err(anyhow::Error::msg)?,
            (None, None) => Duration::from_secs(300),
        };
        let root_squash = match (self.root_squash, file.root_squash) {
            (Some(on), _) => on,
            (None, Some(s)) => parse_on_off(&s).map_err(|e| anyhow::anyhow!("root-squash: {e}"))?,
            (None, None) => false,
        };
        if session_expiry.is_zero() {
            bail!("--session-expiry must be above zero: a client needs time to reconnect");
        }
        let partitions = self
            .partitions
            .or(file.partitions)
            .unwrap_or_else(default_partitions);
        if partitions == 0 || partitions > 1024 {
            bail!("--partitions must be between 1 and 1024, got {partitions}");
        }
        let reply_path = match (self.reply_path, file.reply_path) {
            (Some(p), _) => p,
            (None, Some(s)) => <ReplyPath as clap::ValueEnum>::from_str(&s, false)
                .map_err(|e| anyhow::anyhow!("reply-path: {e}"))?,
            (None, None) => ReplyPath::PerCpu,
        };
        let service_threads = self.service_threads.or(file.service_threads).unwrap_or(16);
        if service_threads == 0 || service_threads > 1024 {
            bail!("--service-threads must be between 1 and 1024, got {service_threads}");
        }
        let partner_drain_after = match (self.partner_drain_after, file.partner_drain_after) {
            (Some(d), _) => d,
            (None, Some(s)) => parse_duration(&s).map_err(anyhow::Error::msg)?,
            (None, None) => Duration::from_millis(2),
        };
        let cred_check = match (self.cred_check, file.cred_check) {
            (Some(c), _) => c,
            (None, Some(s)) => {
                <crate::partition::CredCheck as clap::ValueEnum>::from_str(&s, false)
                    .map_err(|e| anyhow::anyhow!("cred-check: {e}"))?
            }
            (None, None) => crate::partition::CredCheck::Off,
        };
        let auth_key = match self.auth_key.or(file.auth_key) {
            Some(path) => Some(Arc::new(AuthKey::from_file(&path).context("--auth-key")?)),
            None => None,
        };
        let tls = match (
            self.tls_cert.or(file.tls_cert),
            self.tls_key.or(file.tls_key),
        ) {
            (Some(cert), Some(key)) => Some(crate::tls::server_config(&cert, &key)?),
            (None, None) => None,
            (Some(_), None) => bail!("--tls-cert needs --tls-key (its private key)"),
            (None, Some(_)) => bail!("--tls-key needs --tls-cert (its certificate)"),
        };
        let max_batch = self.max_batch.or(file.max_batch).unwrap_or(8192);
        if max_batch == 0 {
            bail!("--max-batch must be at least 1");
        }
        Ok(ServerConfig {
            data: self.data.or(file.data).unwrap_or_else(|| "mds-data".into()),
            listen: resolve_addr(
                "--listen",
                &self
                    .listen
                    .or(file.listen)
                    .unwrap_or_else(|| "127.0.0.1:7400".into()),
            )?,
            metrics_listen: resolve_addr(
                "--metrics-listen",
                &self
                    .metrics_listen
                    .or(file.metrics_listen)
                    .unwrap_or_else(|| "127.0.0.1:9400".into()),
            )?,
            partitions,
            commit_interval: interval,
            max_batch,
            shutdown_grace,
            cos,
            ack_early,
            recovery_window,
            session_expiry,
            checkpoint_dir: self.checkpoint_dir.or(file.checkpoint_dir),
            reply_path,
            service_threads,
            partner_drain_after,
            inject_drain_stall: self.inject_drain_stall,
            root_squash,
            auth_key,
            cred_check,
            tls,
            limits: Limits {
                output_high_water: self
                    .output_high_water
                    .unwrap_or(Limits::default().output_high_water),
                ..Limits::default()
            },
            inject_journal_failure_after: self.inject_journal_failure_after,
            inject_journal_failure: self.inject_journal_failure.unwrap_or_default(),
        })
    }
}

/// `commit` or `early`: whether replies are early.
fn parse_ack(s: &str) -> Result<bool, String> {
    match s {
        "commit" => Ok(false),
        "early" => Ok(true),
        other => Err(format!("expected commit or early, got {other:?}")),
    }
}

/// `on` or `off`, as the flags that switch a behaviour take it.
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("expected on or off, got {other:?}")),
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
}

fn default_partitions() -> usize {
    core_affinity::get_core_ids()
        .map(|c| c.len())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn resolve_addr(flag: &str, value: &str) -> anyhow::Result<SocketAddr> {
    value
        .to_socket_addrs()
        .with_context(|| format!("{flag}: cannot resolve {value:?} (expected HOST:PORT)"))?
        .next()
        .with_context(|| format!("{flag}: {value:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.toml");
        std::fs::write(
            &path,
            "commit-interval = \"5ms\"\nmax-batch = 100\npartitions = 3\nlisten = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        let cfg = ServeArgs {
            config: Some(path.clone()),
            max_batch: Some(7),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(cfg.commit_interval, Duration::from_millis(5));
        assert_eq!(cfg.max_batch, 7);
        assert_eq!(cfg.partitions, 3);
        assert_eq!(cfg.listen.port(), 0);
        assert_eq!(cfg.metrics_listen.port(), 9400);

        std::fs::write(&path, "no-such-key = 1\n").unwrap();
        let err = ServeArgs {
            config: Some(path),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(format!("{err:#}").contains("no-such-key"), "{err:#}");
    }

    #[test]
    fn root_squash_is_a_bare_flag_that_a_value_can_turn_off_over_the_file() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("mds").chain(args.iter().copied()))
                .map(|cli| cli.serve)
        };
        assert_eq!(parse(&[]).unwrap().root_squash, None);
        assert_eq!(parse(&["--root-squash"]).unwrap().root_squash, Some(true));
        assert_eq!(
            parse(&["--root-squash", "off"]).unwrap().root_squash,
            Some(false)
        );
        assert!(parse(&["--root-squash", "maybe"]).is_err());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.toml");
        std::fs::write(&path, "root-squash = \"on\"\n").unwrap();
        let from_file = |args: &[&str]| {
            let mut serve = parse(args).unwrap();
            serve.config = Some(path.clone());
            serve.resolve().unwrap().root_squash
        };
        assert!(from_file(&[]));
        assert!(!from_file(&["--root-squash", "off"]));
        assert!(!ServeArgs::default().resolve().unwrap().root_squash);
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
        let from_file = || {
            ServeArgs {
                config: Some(config.clone()),
                ..Default::default()
            }
            .resolve()
        };
        assert!(from_file().unwrap().auth_key.is_some());
        assert!(ServeArgs::default().resolve().unwrap().auth_key.is_none());
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = format!("{:#}", from_file().unwrap_err());
        assert!(err.contains("--auth-key") && err.contains("0644"), "{err}");

        let cert = dir.path().join("cert.pem");
        std::fs::write(
            &config,
            format!("tls-cert = {:?}\n", cert.display().to_string()),
        )
        .unwrap();
        let err = format!("{:#}", from_file().unwrap_err());
        assert!(err.contains("--tls-cert needs --tls-key"), "{err}");
    }

    #[test]
    fn invalid_values_are_refused_with_the_flag_named() {
        let err = ServeArgs {
            partitions: Some(0),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("--partitions"));
        let err = ServeArgs {
            listen: Some("nonsense".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("--listen"));
        let err = ServeArgs {
            service_threads: Some(0),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("--service-threads"));
    }

    #[test]
    fn the_reply_path_and_its_knobs_come_from_the_file_or_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.toml");
        std::fs::write(
            &path,
            "reply-path = \"global\"\nservice-threads = 4\npartner-drain-after = \"0\"\n\
             cred-check = \"owner\"\n",
        )
        .unwrap();
        let cfg = ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(cfg.reply_path, ReplyPath::Global);
        assert_eq!(cfg.service_threads, 4);
        assert_eq!(cfg.partner_drain_after, Duration::ZERO);
        assert_eq!(cfg.cred_check, crate::partition::CredCheck::Owner);
        let defaults = ServeArgs::default().resolve().unwrap();
        assert_eq!(defaults.reply_path, ReplyPath::PerCpu);
        assert_eq!(defaults.service_threads, 16);
        assert_eq!(defaults.partner_drain_after, Duration::from_millis(2));
        assert_eq!(defaults.cred_check, crate::partition::CredCheck::Off);
        std::fs::write(&path, "reply-path = \"sideways\"\n").unwrap();
        let err = ServeArgs {
            config: Some(path),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(format!("{err:#}").contains("reply-path"), "{err:#}");
    }
}
