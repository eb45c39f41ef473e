//! A run's description as the command line gives it ([`Plan`]) and when it stops ([`Stop`]):
//! what every phase of the run reads, and nothing of the run's own state.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mds_client::ConnectOptions;

use super::files::FileWork;
use super::lanes::Payloads;
use crate::workload::Mix;

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    Duration(Duration),
    /// Total successful-or-failed operations across all threads.
    Count(u64),
}

/// A run's full description.
// Its bools are the command line's switches, one each.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Debug)]
pub struct Plan {
    pub server: String,
    /// TLS and the shared key, for every connection of the run (reconnects too).
    pub connect: ConnectOptions,
    pub workload: String,
    pub mix: Mix,
    pub threads: usize,
    pub depth: usize,
    pub conns_per_thread: usize,
    pub stop: Stop,
    pub dir: String,
    pub shared_dir: bool,
    /// Each thread on a shard of the cluster, round robin (`--spread-shards`).
    pub spread_shards: bool,
    pub rate: Option<f64>,
    pub ack_log: Option<PathBuf>,
    pub quiet: bool,
    pub reconnect_timeout: Duration,
    /// Run this long first without counting anything.
    pub warmup: Duration,
    /// How often to print a progress line when there is no terminal for the bar.
    pub progress_interval: Duration,
    /// Write every request's send time here (nanoseconds from the start, one a line): how the
    /// tests see the open loop's pacing.
    pub send_log: Option<PathBuf>,
    /// Bytes of the value each `setxattr` sets.
    pub xattr_size: usize,
    /// Bytes each `write` puts in its new file.
    pub write_size: u64,
    /// Each `write` reads its file back and checks it.
    pub read_back: bool,
}

impl Plan {
    /// What the lanes' requests carry.
    pub(super) fn payloads(&self) -> Payloads {
        Payloads {
            xattr_size: self.xattr_size,
            file: FileWork {
                size: self.write_size,
                read_back: self.read_back,
            },
        }
    }

    /// A new client (a fresh identity) on the server, as the run's options say.
    pub async fn connect(&self) -> mds_client::Result<mds_client::Client> {
        let session = Arc::new(mds_client::Session::new());
        mds_client::Client::connect_with(&self.server, session, &self.connect).await
    }
}
