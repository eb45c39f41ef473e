//! Wiring: open the journal, load the namespace, bind one listener per partition, start the
//! committer and the partitions, serve metrics, and shut down in order on SIGTERM/SIGINT —
//! stop accepting and reading, commit what is pending, send those replies, exit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use journal::{Journal, JournalOptions};
use reply::{ReplyEngine, Waker};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::committer::{CommitMsg, CommitPolicy, Committer};
use crate::config::ServerConfig;
use crate::namespace::Namespace;
use crate::partition::{self, Shared};

/// Runs the server until SIGTERM or SIGINT, then shuts down cleanly. Returns an error if it
/// could not start, or if the journal failed while it ran.
pub fn run(config: ServerConfig) -> anyhow::Result<()> {
    let prometheus = crate::metrics::install()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the main runtime")?;

    std::fs::create_dir_all(&config.data)
        .with_context(|| format!("creating data directory {}", config.data.display()))?;
    let options = JournalOptions {
        fail_after_commits: config.inject_journal_failure_after,
    };
    let (journal, recovered) = Journal::open(&config.data, options)
        .with_context(|| format!("opening the journal in {}", config.data.display()))?;
    info!(
        data = %config.data.display(),
        last_committed = recovered.last_committed,
        next_ino = recovered.next_ino,
        created = recovered.created,
        "journal open"
    );
    let journal = Arc::new(journal);
    let namespace = Arc::new(Namespace::load(&journal, recovered)?);
    let (dirs, files) = namespace.counts();
    info!(directories = dirs, files, "namespace loaded");

    let listeners = bind_listeners(config.listen, config.partitions)?;
    let addr = listeners[0].local_addr()?;
    let wakes: Vec<Arc<Notify>> = (0..config.partitions)
        .map(|_| Arc::new(Notify::new()))
        .collect();
    let wakers = wakes
        .iter()
        .map(|n| {
            let n = n.clone();
            Box::new(move || n.notify_one()) as Waker
        })
        .collect();
    let engine = Arc::new(ReplyEngine::new(wakers, recovered.last_committed));
    let committer = Committer::start(
        journal.clone(),
        namespace.clone(),
        engine.clone(),
        CommitPolicy {
            interval: config.commit_interval,
            max_batch: config.max_batch,
        },
    );
    let commit_tx = committer.sender();
    let shutdown = CancellationToken::new();
    let shared = Arc::new(Shared {
        namespace: namespace.clone(),
        engine: engine.clone(),
        commit_tx: commit_tx.clone(),
        commit_stats: committer.stats(),
        boot: boot_id(),
        partitions: config.partitions,
        limits: config.limits,
        shutdown: shutdown.clone(),
    });
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let mut threads = Vec::with_capacity(config.partitions);
    for (id, listener) in listeners.into_iter().enumerate() {
        let core = (!cores.is_empty()).then(|| cores[id % cores.len()]);
        threads.push(partition::spawn(
            id,
            core,
            listener,
            shared.clone(),
            wakes[id].clone(),
        )?);
    }

    let serve = rt.block_on(async {
        let metrics_listener = crate::metrics::bind(config.metrics_listen).await?;
        let extras: crate::metrics::ScrapeExtras = {
            let (journal, engine) = (journal.clone(), engine.clone());
            Arc::new(move |out: &mut String| {
                crate::metrics::write_family(
                    out,
                    "mds_pending_replies",
                    "gauge",
                    "Replies waiting for their commit, all partitions.",
                    &[("", engine.total_depth() as f64)],
                );
                crate::metrics::write_store(out, &journal.stats());
                crate::metrics::write_process(out);
            })
        };
        tokio::spawn(crate::metrics::serve(metrics_listener, prometheus, extras));
        info!(partitions = config.partitions, "partitions started");
        info!("listening on {addr}");
        wait_for_signal().await
    });
    if let Err(e) = &serve {
        tracing::error!(cause = %e, "stopping");
    }

    info!(
        "shutting down: no new connections or requests; committing and answering what is pending"
    );
    shutdown.cancel();
    // Partitions wait for their pending replies; keep asking for commits so none waits for
    // the commit interval.
    while !threads.iter().all(|t| t.is_finished()) {
        let _ = commit_tx.send(CommitMsg::Flush);
        std::thread::sleep(Duration::from_millis(2));
    }
    for t in threads {
        let _ = t.join();
    }
    committer.shutdown();
    info!(last_committed = journal.last_committed(), "stopped");
    serve?;
    if journal.is_failed() {
        bail!("the journal failed while serving; the last mutations were refused with EIO");
    }
    Ok(())
}

/// One listener per partition on the same address (SO_REUSEPORT): the kernel spreads
/// connections over them, and no acceptor thread hands connections around.
///
/// SO_REUSEPORT would also let a second mds of the same user bind the same port and silently
/// take half the connections, so the address is first probed with a plain bind, which fails
/// if anyone holds it (with or without SO_REUSEPORT).
fn bind_listeners(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<std::net::TcpListener>> {
    let probe = std::net::TcpListener::bind(addr)
        .with_context(|| format!("--listen {addr}: address in use or not available"))?;
    let mut bound = probe.local_addr()?;
    drop(probe);
    let mut listeners = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = Socket::new(
            Domain::for_address(bound),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket
            .bind(&bound.into())
            .with_context(|| format!("binding {bound}"))?;
        socket.listen(1024)?;
        socket.set_nonblocking(true)?;
        let listener: std::net::TcpListener = socket.into();
        // With port 0, the probe picked the port and every listener shares it.
        bound = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => info!("SIGTERM"),
        _ = int.recv() => info!("SIGINT"),
    }
    Ok(())
}

fn boot_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_server_cannot_share_a_port_through_reuseport() {
        let first = bind_listeners("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = first[0].local_addr().unwrap();
        assert_eq!(first[1].local_addr().unwrap(), addr);
        let err = bind_listeners(addr, 2).unwrap_err();
        assert!(format!("{err:#}").contains("address in use"), "{err:#}");
        drop(first);
        assert!(
            bind_listeners(addr, 1).is_ok(),
            "free again once the first is gone"
        );
    }
}
