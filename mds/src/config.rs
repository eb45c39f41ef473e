//! Server configuration: command-line flags, an optional TOML file with the same keys, and
//! the validated result. Flags win over the file; the file wins over defaults.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::partition::Limits;

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
    /// TOML file with any of the keys above (kebab-case); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Test hook: the commit after this many fails as a disk error would.
    #[arg(long, hide = true)]
    pub inject_journal_failure_after: Option<u64>,
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
    pub limits: Limits,
    pub inject_journal_failure_after: Option<u64>,
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
        let partitions = self
            .partitions
            .or(file.partitions)
            .unwrap_or_else(default_partitions);
        if partitions == 0 || partitions > 1024 {
            bail!("--partitions must be between 1 and 1024, got {partitions}");
        }
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
            limits: Limits::default(),
            inject_journal_failure_after: self.inject_journal_failure_after,
        })
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

/// Parses a duration in human units: `250us`, `5ms`, `2s`, `1m`; a bare number is seconds
/// (`300`, `0.5`), as the 2008 report's tools took it.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|e| format!("invalid duration {s:?}: {e}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e} (try 5ms, 2s)"))
}

/// Parses a count with an optional `k` (×1000) or `m` (×1,000,000) suffix.
pub fn parse_count(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, scale) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1_000),
        Some((i, 'm' | 'M')) => (&s[..i], 1_000_000),
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("invalid count {s:?} (try 4096 or 16k)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units_parse_and_nonsense_does_not() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("300").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("-1").is_err());
        assert_eq!(parse_duration("5ms").unwrap(), Duration::from_millis(5));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_count("16k").unwrap(), 16_000);
        assert_eq!(parse_count("2M").unwrap(), 2_000_000);
        assert_eq!(parse_count("4096").unwrap(), 4096);
        assert!(parse_count("k").is_err());
        assert!(parse_count("-1").is_err());
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
    }
}
