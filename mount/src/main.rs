//! `mdsmount SERVER MOUNTPOINT [-o opt,...] [-f]`: an mds server's namespace as a POSIX file
//! system, over FUSE (`fuser`, no libfuse: as root it mounts with mount(2), otherwise through
//! `fusermount3`), on the client library only. It connects first (a server it cannot reach is
//! an error, not an empty mount), mounts, then goes to the background unless `-f`
//! (`daemon`). Requests run on a tokio runtime (`fs`), each on behalf of its caller's
//! credentials, over one reconnecting connection (`conn`) — in a cluster one per shard, each
//! request on its inode's shard's (`shards`); fsync maps onto the servers' commits
//! (`durability`). `sync(1)` never reaches a FUSE server, so the mount asks for a commit
//! before it exits: after an unmount, and at SIGTERM or SIGINT (which also unmount it).
//! docs/mount.md says what each operation does and guarantees.

#![forbid(unsafe_code)]

mod attr;
mod bdi;
mod compact;
mod conn;
mod creds;
mod daemon;
mod data;
mod dirs;
mod durability;
mod files;
mod fs;
mod locks;
mod mount;
mod namespace;
mod objects;
mod open;
mod options;
mod readahead;
mod shards;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use mds_client::ConnectOptions;
use mds_client::auth::AuthKey;
use mds_client::tls::TlsClient;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use crate::daemon::Ready;
use crate::mount::{Mount, Timeouts};
use crate::options::{Cli, Settings};

/// Exit status for bad usage (clap's own, or an option or file that cannot be used).
const EXIT_USAGE: u8 = 2;

/// How long the last SYNC before exiting may take.
const LAST_SYNC: Duration = Duration::from_secs(30);

/// After SIGTERM has unmounted the file system, how long files still open on it may keep it
/// (and the process) alive before the process exits anyway.
const LINGER: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ready = if cli.daemon_child {
        Ready::Child
    } else {
        Ready::Foreground
    };
    let settings = match Settings::from_cli(cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mdsmount: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Read the key and CA files now, so a bad one is a usage error in the foreground.
    let options = match connect_options(&settings) {
        Ok(o) => o,
        Err(e) => {
            ready.failed(&e);
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if !settings.foreground {
        return daemon::start(&settings);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MDSMOUNT_LOG")
                .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
                // fuser warns that its own unmount failed after every unmount made from
                // outside (fusermount3 -u, umount): the mount is gone either way.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("info,fuser::session=error")
                }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(&settings, options, &ready) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            ready.failed(&e);
            ExitCode::FAILURE
        }
    }
}

/// TLS and the shared key, from the options.
fn connect_options(settings: &Settings) -> anyhow::Result<ConnectOptions> {
    let auth_key = match &settings.auth_key {
        Some(path) => Some(Arc::new(AuthKey::from_file(path).context("auth_key")?)),
        None => None,
    };
    let tls = match &settings.tls_ca {
        Some(ca) => Some(Arc::new(
            TlsClient::from_ca_file(ca, settings.tls_server_name.as_deref()).context("tls_ca")?,
        )),
        None => None,
    };
    Ok(ConnectOptions { auth_key, tls })
}

/// Connects, mounts, says so, serves until unmounted, and asks for a last commit.
fn run(settings: &Settings, options: ConnectOptions, ready: &Ready) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("mdsmount")
        .build()
        .context("starting the runtime")?;
    let shards = runtime.block_on(shards::Shards::connect(
        &settings.server,
        options,
        settings.reconnect_timeout,
        conn::SessionAsks {
            atime: settings.atime,
            ack: settings.ack,
        },
    ))?;
    let early = shards.any().session().is_early();
    let timeouts = Timeouts {
        attr: settings.attr_timeout,
        entry: settings.entry_timeout,
    };
    let own = shards.any().session().cred().clone();
    let objects = runtime.block_on(objects::Objects::of_server(&shards.any(), &own));
    let mount = Arc::new(Mount::new(
        shards,
        timeouts,
        settings.default_permissions,
        objects,
    ));
    let fs = fs::MdsFs::new(runtime.handle().clone(), mount.clone());
    let mountpoint = settings
        .mountpoint
        .canonicalize()
        .with_context(|| format!("mount point {}", settings.mountpoint.display()))?;
    let session = fuser::Session::new(fs, &mountpoint, &settings.fuse_config())
        .with_context(|| format!("mounting on {}", mountpoint.display()))?;
    mount.set_notifier(session.notifier());
    if let Some(kb) = settings.read_ahead_kb {
        bdi::set_read_ahead(&mountpoint, kb);
    }
    info!(
        server = %settings.server,
        mountpoint = %mountpoint.display(),
        ack_early = early,
        read_only = settings.read_only,
        default_permissions = settings.default_permissions,
        attr_timeout = ?settings.attr_timeout,
        entry_timeout = ?settings.entry_timeout,
        ack = ?settings.ack,
        read_ahead_kb = ?settings.read_ahead_kb,
        "mounted"
    );
    if let Some(warning) = settings.set_id_warning() {
        warn!(mountpoint = %mountpoint.display(), "{warning}");
    }
    runtime.spawn(stop_on_signals(mount.clone(), mountpoint.clone()));
    runtime.spawn(mount.clone().keep_connected());
    ready.up();
    // Nothing may keep the directory we were started in busy.
    if let Err(e) = std::env::set_current_dir("/") {
        warn!(cause = %e, "cannot leave the starting directory");
    }
    let served = session.run();
    info!(mountpoint = %mountpoint.display(), "unmounted");
    runtime.block_on(last_sync(&mount));
    served.context("serving the mount")
}

/// The commit `sync(1)` cannot ask for: bounded, and logged if it fails.
async fn last_sync(mount: &Mount) {
    match tokio::time::timeout(LAST_SYNC, mount.sync()).await {
        Ok(Ok(())) => info!("everything answered is durable"),
        Ok(Err(e)) => error!(errno = e.code(), "the last SYNC failed"),
        Err(_) => error!("the last SYNC got no answer within {LAST_SYNC:?}"),
    }
}

/// SIGTERM and SIGINT: commit, unmount (lazily: open files keep it a moment), exit.
/// SIGHUP is logged and ignored (there is no log file to reopen).
async fn stop_on_signals(mount: Arc<Mount>, mountpoint: PathBuf) {
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        error!("cannot catch signals: SIGTERM will not commit before exiting");
        return;
    };
    let name = loop {
        tokio::select! {
            _ = term.recv() => break "SIGTERM",
            _ = int.recv() => break "SIGINT",
            _ = hup.recv() => info!("SIGHUP ignored"),
        }
    };
    info!(signal = name, "stopping: commit, then unmount");
    last_sync(&mount).await;
    let at = mountpoint.clone();
    let unmounted = matches!(
        tokio::task::spawn_blocking(move || unmount_lazily(&at)).await,
        Ok(true)
    );
    if !unmounted {
        error!(mountpoint = %mountpoint.display(), "could not unmount");
    }
    // The session ends once the kernel lets go (then `run` syncs again and returns); if open
    // files hold it, exit anyway — after one more commit of what they wrote meanwhile.
    tokio::time::sleep(LINGER).await;
    warn!("files still open on the mount: exiting with it detached");
    last_sync(&mount).await;
    std::process::exit(i32::from(!unmounted));
}

/// `fusermount3 -u -z`, which works for the user who mounted; root falls back to `umount -l`.
fn unmount_lazily(mountpoint: &Path) -> bool {
    let quiet = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .arg(mountpoint)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    quiet("fusermount3", &["-u", "-z", "--"]) || quiet("umount", &["-l"])
}
