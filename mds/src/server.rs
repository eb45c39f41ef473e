//! Wiring: bind the listeners, open the journal, load the namespace, start the committer and
//! the partitions, serve metrics, and shut down in order when asked (SIGTERM/SIGINT, or a
//! test's [`Stop`]) — stop accepting and reading, commit what is pending, send those replies
//! (cutting clients that do not read after a grace period), exit. No polling: shutdown waits
//! on the partitions' completion channel, the grace timer and a second request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use journal::{Journal, JournalOptions};
use reply::GlobalReplies;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::auth::{AuthFailure, Authenticator};
use crate::committer::{CommitMsg, Committer};
use crate::config::{ServerConfig, Switch};
use crate::dispatch::Core;
use crate::error::{Error, IoContext, Result};
use crate::namespace::{Namespace, WarmNamespace};
use crate::objects::Collector;
use crate::partition::{self, DrainWakes, Net, Shared};
use crate::queue::{Replies, ReplyPath};
use crate::recovery::Recovery;
use crate::session::Sessions;
use crate::shard::Shard;

/// The sockets a server serves on, bound before anything else happens — so a second server
/// pointed at the same address fails before it touches the store.
pub struct Listeners {
    /// One per partition, all on the same address (SO_REUSEPORT).
    pub client: Vec<std::net::TcpListener>,
    pub metrics: std::net::TcpListener,
}

impl Listeners {
    /// Binds `--listen` once per partition and `--metrics-listen`.
    pub fn bind(config: &ServerConfig) -> Result<Listeners> {
        let client = bind_listeners(config.listen, config.keys.partitions)?;
        let doing = || format!("binding the metrics listener on {}", config.metrics_listen);
        let metrics = std::net::TcpListener::bind(config.metrics_listen).doing(doing)?;
        metrics.set_nonblocking(true).doing(doing)?;
        Ok(Listeners { client, metrics })
    }

    /// The client address (with the port the OS picked, for port 0).
    pub fn client_addr(&self) -> SocketAddr {
        self.client[0]
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics
            .local_addr()
            .expect("a bound listener has an address")
    }
}

/// An operator's stop of a running server: the first request stops accepting and reading
/// and lets what is pending be committed and answered (within the grace period); a second
/// one cuts connections whose clients do not read at once. Signals, or a test, call
/// [`Stop::request`].
#[derive(Clone, Debug, Default)]
pub struct Stop {
    first: CancellationToken,
    second: CancellationToken,
}

/// An operator's asks for a checkpoint of the store into `--checkpoint-dir` (SIGUSR1):
/// process-wide, as the signal is; the server that runs takes them.
static CHECKPOINT_ASKED: Notify = Notify::const_new();

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        self.first.is_cancelled()
    }

    /// Resolves once a stop is asked for.
    pub async fn requested(&self) {
        self.first.cancelled().await;
    }

    /// Asks the server to stop; asking again makes it stop sooner.
    pub fn request(&self) {
        if self.first.is_cancelled() {
            self.second.cancel();
        } else {
            self.first.cancel();
        }
    }
}

/// Runs a server of its own (no `--etcd`; `cluster::run` serves a cluster's shard) until
/// SIGTERM or SIGINT, then shuts down cleanly. Returns an error if it could not start, or if
/// the journal failed while it ran.
pub fn run(config: ServerConfig) -> Result<()> {
    let (listeners, stop) = listen(&config)?;
    serve(config, listeners, stop)
}

/// Binds `config`'s addresses, and turns SIGTERM and SIGINT into the stop it returns: the
/// start of every `mds serve`, in a cluster or not.
pub fn listen(config: &ServerConfig) -> Result<(Listeners, Stop)> {
    let listeners = Listeners::bind(config)?;
    let stop = Stop::new();
    std::thread::Builder::new()
        .name("mds-signals".into())
        .spawn({
            let stop = stop.clone();
            move || forward_signals(stop)
        })
        .doing(|| "starting the signal thread".into())?;
    Ok((listeners, stop))
}

/// Serves on `listeners` until `stop` is requested, then shuts down: no new connections or
/// requests, every pending mutation committed and answered, connections whose clients do not
/// read cut after `config.keys.shutdown_grace` (or at a second request). Returns an error if it
/// could not start, or if the journal failed while it ran. Tests call this in-process.
pub fn serve(config: ServerConfig, listeners: Listeners, stop: Stop) -> Result<()> {
    serve_warm(config, listeners, stop, None, None)
}

/// [`serve`], taking over `warm` — the namespace a standby kept loaded by following the
/// store (`crate::standby`) — instead of loading it, if it holds what the store's open
/// reads; otherwise (or with None) loading it as every start does. `shard`: the cluster's
/// shard this server serves, as its supervisor claimed it (`cluster::run`); None for a
/// server of its own.
pub fn serve_warm(
    config: ServerConfig,
    listeners: Listeners,
    stop: Stop,
    warm: Option<WarmNamespace>,
    shard: Option<Shard>,
) -> Result<()> {
    crate::crash::arm(config.keys.testing.crash_at);
    let prometheus = crate::metrics::install()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .doing(|| "building the main runtime".into())?;
    let store = store_of(&config, shard.as_ref());
    let (journal, mut recovered) =
        open_journal(&config, &store, shard.as_ref().map(|s| &s.identity))?;
    let objects = open_object_store(&config, &store, shard.is_some())?;
    let namespace = load_namespace(&config, &journal, &recovered, warm, objects.is_some())?;
    let addr = listeners.client_addr();
    let progress = Arc::new(Notify::new());
    let wakes = DrainWakes::new(
        config.keys.partitions,
        config.keys.partner_drain_after,
        config.keys.testing.drain_stall,
    );
    let replies = reply_queue(&config, &wakes, &progress, recovered.last_committed);
    let policy = config.commit_policy();
    let committer = Committer::start(journal.clone(), namespace.clone(), replies.clone(), policy);
    let collector = collector_of(&config, objects, &journal, &committer, &namespace);
    let sessions = restore_sessions(&config, &mut recovered)?;
    register_zero_series();
    // The window opens with the recovery state, before the partitions accept anyone: a
    // client may come back, replay and close it before the task that times it has started.
    let recovery_opened = std::time::Instant::now();
    let replay_key = crate::ticket::ReplayKey::new(&recovered.replay_key);
    if let Some(shard) = &shard {
        crate::shard::scrub::start(&shard.view, namespace.clone(), committer.sender());
    }
    let shutdown = CancellationToken::new();
    let shared = Arc::new(Shared {
        core: Core {
            namespace: namespace.clone(),
            replies: replies.clone(),
            commit_tx: committer.sender(),
            commit_stats: committer.stats(),
            sessions,
            cos: config.keys.cos,
            ack: config.keys.ack,
            recovery: open_recovery(&recovered, &namespace, &committer, replay_key),
            replay_key,
            cos_conflicts: AtomicU64::default(),
            locks: crate::locks::Locks::default(),
            partitions: config.keys.partitions,
            max_uncommitted: config.limits.max_uncommitted,
            store_dir: store.clone(),
            object_store: collector
                .as_ref()
                .map_or_else(String::new, Collector::address),
            shard_view: shard.map(|s| s.view),
            shutdown: shutdown.clone(),
        },
        net: Net {
            limits: config.limits,
            auth: config.auth_key.as_deref().cloned().map(Authenticator::new),
            tls: config.tls.clone().map(tokio_rustls::TlsAcceptor::from),
            unauthenticated: partition::Unauthenticated::default(),
            cred_check: config.keys.cred_check,
            boot: boot_id(),
        },
        wakes,
        progress,
        shutdown,
        cut: CancellationToken::new(),
    });
    if !shared.core.recovery.is_open() {
        // Nobody to wait for: orphans of the last start go before anyone is served.
        shared.core.reclaim_orphans();
    }
    let (threads, done_rx) = start_partitions(listeners.client, &shared)?;
    let service_threads = start_service_threads(&config, &shared)?;
    rt.block_on(async {
        let metrics_task = serve_metrics(listeners.metrics, prometheus, &journal, &shared)?;
        log_serving(&config, &store, addr);
        spawn_background(
            &config,
            &shared,
            recovered.known_clients.len(),
            recovery_opened,
            collector,
        );
        // systemd's Type=notify: serving from here on (a no-op without NOTIFY_SOCKET).
        notify_service_manager(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status("serving"),
        ]);
        stop.first.cancelled().await;
        shut_down(&shared, &stop, config.keys.shutdown_grace, done_rx).await;
        metrics_task.abort();
        Ok::<(), Error>(())
    })?;
    for t in threads {
        let _ = t.join();
    }
    // Partitions end once their replies have left: the service threads have nothing more.
    if let Some(list) = replies.global_list() {
        list.stop();
    }
    for t in service_threads {
        let _ = t.join();
    }
    committer.shutdown();
    settle_store(&journal, &namespace, &shared);
    info!(last_committed = journal.last_committed(), "stopped");
    if journal.is_failed() {
        return Err(Error::JournalFailed);
    }
    Ok(())
}

/// The namespace this start serves (`namespace_to_serve`), with the configuration's root
/// squash, open-handle caps and file data.
fn load_namespace(
    config: &ServerConfig,
    journal: &Arc<Journal>,
    recovered: &journal::Recovered,
    warm: Option<WarmNamespace>,
    objects: bool,
) -> Result<Arc<Namespace>> {
    let mut namespace = namespace_to_serve(journal, recovered, warm)?
        .squashing_root(config.keys.root_squash.is_on())
        .capping_open(config.open_caps())
        .with_data(journal.clone(), config.keys.inline_data_max);
    if objects {
        namespace = namespace.with_objects();
    }
    let namespace = Arc::new(namespace);
    let counts = namespace.counts();
    info!(
        directories = counts.directories,
        files = counts.files,
        others = counts.others,
        "namespace loaded"
    );
    Ok(namespace)
}

/// The tasks beside the partitions, on the main runtime: the recovery window's end (when it
/// is open, for `known_clients`), session expiry, checkpoints, and the object collector.
fn spawn_background(
    config: &ServerConfig,
    shared: &Arc<Shared>,
    known_clients: usize,
    recovery_opened: std::time::Instant,
    collector: Option<Collector>,
) {
    if let Some(collector) = collector {
        tokio::spawn(collector.run(shared.shutdown.clone()));
    }
    if shared.core.recovery.is_open() {
        info!(
            clients = known_clients,
            window = ?config.keys.recovery_window,
            "recovery: waiting for known clients to replay; new requests wait"
        );
        tokio::spawn(close_recovery_window(
            shared.clone(),
            recovery_opened,
            config.keys.recovery_window,
        ));
    }
    crate::locks::register_metrics();
    tokio::spawn(expire_sessions(shared.clone(), config.keys.session_expiry));
    tokio::spawn(write_checkpoints(
        shared.clone(),
        config.keys.checkpoint_dir.clone(),
    ));
}

/// The namespace a start serves: `warm` (a standby's, followed) if it holds what the
/// store's open read, else the store's, loaded.
fn namespace_to_serve(
    journal: &Journal,
    recovered: &journal::Recovered,
    warm: Option<WarmNamespace>,
) -> Result<Namespace> {
    match warm.map(|warm| warm.take_over(journal, recovered)) {
        Some(Ok(namespace)) => {
            info!("namespace taken over warm: followed, not loaded");
            Ok(namespace)
        }
        Some(Err(why)) => {
            warn!(%why, "the followed namespace cannot be taken over; loading the store");
            Namespace::load(journal, recovered)
        }
        None => Namespace::load(journal, recovered),
    }
}

/// The object store file data past the inline cap goes to (`--object-store`), opened; None for
/// `none`. By default a directory of this host: `objects` inside the store's, or in a cluster
/// inside the cluster's data root, beside the shards' stores — one store for every shard,
/// since a mount names one object store for the whole namespace.
fn open_object_store(
    config: &ServerConfig,
    store: &std::path::Path,
    in_cluster: bool,
) -> Result<Option<mds_objects::Store>> {
    let address = match config.keys.object_store.as_deref() {
        Some("none") => return Ok(None),
        Some(text) => mds_objects::Address::parse(text)
            .map_err(|e| Error::Invalid(format!("--object-store: {e}")))?,
        None if in_cluster => {
            let root = store.parent().unwrap_or(store);
            mds_objects::Address::Local(root.join("objects"))
        }
        None => mds_objects::Address::Local(store.join("objects")),
    };
    let opened = mds_objects::Store::open(&address)
        .map_err(|e| Error::Invalid(format!("--object-store: {e}")))?;
    info!(object_store = %address, "file data past the inline cap goes to the object store");
    Ok(Some(opened))
}

/// The object collector of `objects`, for this shard's slice ids (None: no object store).
fn collector_of(
    config: &ServerConfig,
    objects: Option<mds_objects::Store>,
    journal: &Arc<Journal>,
    committer: &Committer,
    namespace: &Namespace,
) -> Option<Collector> {
    objects.map(|store| Collector {
        store,
        journal: journal.clone(),
        commit_tx: committer.sender(),
        grace: config.keys.object_grace,
        slices: namespace.slice_range(),
    })
}

/// The store a server serves: its cluster's shard's own, or `--data`.
fn store_of(config: &ServerConfig, shard: Option<&Shard>) -> std::path::PathBuf {
    shard.map_or_else(|| config.keys.data.clone(), |s| s.store.clone())
}

/// Opens the store in `store` (refusing one a running server holds), with the leases the
/// limits call for.
fn open_journal(
    config: &ServerConfig,
    store: &std::path::Path,
    shard: Option<&journal::ShardIdentity>,
) -> Result<(Arc<Journal>, journal::Recovered)> {
    if let Some(pid) = crate::fsck::lock_holder(&store.join("LOCK")) {
        return Err(Error::InUse {
            path: store.to_path_buf(),
            pid,
        });
    }
    std::fs::create_dir_all(store)
        .doing(|| format!("creating data directory {}", store.display()))?;
    let options = JournalOptions {
        shard: shard.cloned(),
        leases: journal::Leases {
            // Past the cap on uncommitted work, with room for what each partition executes
            // between its look at the cap and its transno: the ceiling is never what stops
            // a mutation.
            transnos: config.limits.max_uncommitted.saturating_mul(2),
            inos: config.limits.ino_lease,
        },
        edit_log: config
            .keys
            .edit_log
            // On outside a cluster; a shard's store is followed from RocksDB's log.
            .map_or(shard.is_none() && config.keys.etcd.is_none(), Switch::is_on)
            .then(|| journal::EditLog {
                checkpoint_bytes: config
                    .keys
                    .testing
                    .checkpoint_bytes
                    .unwrap_or(journal::EditLog::default().checkpoint_bytes),
            }),
    };
    let (mut journal, recovered) =
        Journal::open(store, options).map_err(|source| Error::Journal {
            what: format!("opening the journal in {}", store.display()),
            source,
        })?;
    if let Some(failure) = config.keys.testing.journal_failure() {
        journal.inject_failure(failure);
    }
    if let Some(latency) = config.keys.testing.sync_latency {
        warn!(
            ?latency,
            "benchmark hook: every commit's sync takes at least this long"
        );
        journal.emulate_sync_latency(latency);
    }
    info!(
        data = %store.display(),
        last_committed = recovered.last_committed,
        next_ino = recovered.next_ino,
        created = recovered.created,
        "journal open"
    );
    if let Some(from) = recovered.upgraded_from {
        info!(
            from,
            to = journal::SCHEMA_VERSION,
            "upgraded the store from schema version {from}"
        );
    }
    if recovered.resend_dropped > 0 {
        warn!(
            dropped = recovered.resend_dropped,
            "the upgrade dropped the resend records of the older protocol: no client of it \
             can connect to resend, and their replies are in a shape this build does not read"
        );
    }
    Ok((Arc::new(journal), recovered))
}

/// The reply queue of `--reply-path`, starting at the store's `last_committed`.
fn reply_queue(
    config: &ServerConfig,
    wakes: &Arc<DrainWakes>,
    progress: &Arc<Notify>,
    last_committed: u64,
) -> Arc<Replies> {
    // Each path's own series exist on both, at zero where they cannot move, so one dashboard
    // serves either.
    for p in 0..config.keys.partitions {
        metrics::counter!(crate::metrics::PARTNER_DRAINS, "partition" => p.to_string())
            .increment(0);
    }
    let lock_wait = metrics::histogram!(crate::metrics::SERVICE_LOCK_WAIT);
    Arc::new(match config.keys.reply_path {
        ReplyPath::PerCpu => Replies::per_cpu(
            (0..config.keys.partitions)
                .map(|p| wakes.waker(p))
                .collect(),
            last_committed,
        ),
        ReplyPath::Global => {
            let list = GlobalReplies::new(last_committed)
                .observe_lock_wait(move |waited| lock_wait.record(waited.as_secs_f64()));
            Replies::global(list, progress.clone(), config.keys.partitions)
        }
    })
}

/// The sessions the store kept across the restart: resend records, known clients, bindings.
fn restore_sessions(
    config: &ServerConfig,
    recovered: &mut journal::Recovered,
) -> Result<Arc<Sessions>> {
    let sessions =
        Arc::new(Sessions::new(config.limits.max_resend_records).capped(config.keys.max_sessions));
    let resend_clients = recovered.resend.len();
    let records = sessions.restore(
        std::mem::take(&mut recovered.resend),
        std::mem::take(&mut recovered.sessions),
        &recovered.known_clients,
    )?;
    if records > 0 {
        info!(
            clients = resend_clients,
            records,
            expiry = ?config.keys.session_expiry,
            "resend records restored: resends of these requests are answered from them"
        );
    }
    Ok(sessions)
}

/// Series that exist from the start, so their dashboard panels show zero rather than no data.
fn register_zero_series() {
    metrics::counter!(crate::metrics::SKIPPED).increment(0);
    metrics::counter!(crate::metrics::SESSIONS_REFUSED).increment(0);
    for failure in AuthFailure::ALL {
        metrics::counter!(crate::metrics::AUTH_FAILURES, "reason" => failure.reason()).increment(0);
    }
    metrics::gauge!(crate::metrics::RECOVERY_DURATION).set(0.0);
    for why in crate::recovery::Eviction::ALL {
        metrics::counter!(crate::metrics::RECOVERY_EVICTED, "reason" => why.reason()).increment(0);
    }
}

/// The recovery window over what the store says the crashed start handed out. Transnos
/// nobody will replay are skipped by empty records (the committer keeps `last_committed`
/// contiguous through them), in one message however many: recovery bounds every range by the
/// ceiling. Made before any partition accepts anyone.
fn open_recovery(
    recovered: &journal::Recovered,
    namespace: &Arc<Namespace>,
    committer: &Committer,
    replay_key: crate::ticket::ReplayKey,
) -> Recovery {
    let bounds = crate::recovery::Bounds {
        last_committed: recovered.last_committed,
        transno_ceiling: recovered.ceilings.transno,
        ino_ceiling: recovered.ceilings.ino,
        ino_floor: journal::first_ino(recovered.shard.as_ref().map_or(0, |s| s.shard)),
    };
    let skipper: crate::recovery::Skipper = {
        let (namespace, commit_tx) = (namespace.clone(), committer.sender());
        Box::new(move |from, to| {
            warn!(from, to, "recovery: skipping transnos nobody replayed");
            namespace.skip_to(to);
            metrics::counter!(crate::metrics::SKIPPED).increment(to - from + 1);
            commit_tx.send(CommitMsg::Skip { from, to });
        })
    };
    // Besides the clients that may replay, those that held orphans open: the window waits
    // for them to take their handles back.
    let mut expected = recovered.known_clients.clone();
    expected.extend(namespace.orphan_owners());
    expected.sort_unstable();
    expected.dedup();
    Recovery::new(expected, bounds, replay_key, skipper)
}

/// Finished partitions drop their sender of the returned channel: `None` from it once all
/// have.
type PartitionsDone = tokio::sync::mpsc::Receiver<()>;

/// One partition per listener, each pinned to a core of its own where there are enough.
fn start_partitions(
    listeners: Vec<std::net::TcpListener>,
    shared: &Arc<Shared>,
) -> Result<(Vec<std::thread::JoinHandle<()>>, PartitionsDone)> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let mut threads = Vec::with_capacity(listeners.len());
    let (done_tx, done_rx) = tokio::sync::mpsc::channel::<()>(1);
    for (id, listener) in listeners.into_iter().enumerate() {
        let core = (!cores.is_empty()).then(|| cores[id % cores.len()]);
        let thread = partition::spawn(id, core, listener, shared.clone(), done_tx.clone())
            .doing(|| format!("starting partition {id}"))?;
        threads.push(thread);
    }
    Ok((threads, done_rx))
}

/// The global baseline's service threads, woken together by every commit (none per-CPU).
fn start_service_threads(
    config: &ServerConfig,
    shared: &Arc<Shared>,
) -> Result<Vec<std::thread::JoinHandle<u64>>> {
    Ok(match config.keys.reply_path {
        ReplyPath::PerCpu => Vec::new(),
        ReplyPath::Global => (0..config.keys.service_threads)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("mds-service-{i}"))
                    .spawn(move || partition::serve_global(&shared.core))
            })
            .collect::<std::io::Result<_>>()
            .doing(|| "starting the service threads".into())?,
    })
}

/// The Prometheus endpoint, with the gauges read at scrape time and the health check.
fn serve_metrics(
    listener: std::net::TcpListener,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
    journal: &Arc<Journal>,
    shared: &Arc<Shared>,
) -> Result<tokio::task::JoinHandle<()>> {
    let doing = || "serving the metrics endpoint".to_owned();
    let metrics_listener = tokio::net::TcpListener::from_std(listener).doing(doing)?;
    let metrics_addr = metrics_listener.local_addr().doing(doing)?;
    info!("metrics endpoint on {metrics_addr}");
    if !metrics_addr.ip().is_loopback() {
        warn!(
            metrics_listen = %metrics_addr,
            "the metrics endpoint listens beyond loopback: anyone who can reach it reads \
             the server's figures (client counts, rates, store sizes); it takes no key"
        );
    }
    let extras: crate::metrics::ScrapeExtras = {
        let (journal, shared) = (journal.clone(), shared.clone());
        Arc::new(move |out: &mut String| scrape_state(out, &journal, &shared))
    };
    let health: crate::metrics::Health = {
        let namespace = shared.core.namespace.clone();
        Arc::new(move || {
            if namespace.is_read_only() {
                Err("read-only: the journal failed; mutations are refused until a restart".into())
            } else {
                Ok(())
            }
        })
    };
    Ok(tokio::spawn(crate::metrics::serve(
        metrics_listener,
        prometheus,
        extras,
        health,
    )))
}

/// The gauges read at each scrape rather than kept up to date.
fn scrape_state(out: &mut String, journal: &Journal, shared: &Shared) {
    let core = &shared.core;
    crate::metrics::write_state(out, &core.namespace, &core.commit_stats);
    crate::metrics::write_family(
        out,
        "mds_recovery_waiting_clients",
        "gauge",
        "Known clients the recovery window still waits for (0 when no recovery is open).",
        &[("", core.recovery.waiting_for() as f64)],
    );
    crate::metrics::write_family(
        out,
        "mds_recovery_open",
        "gauge",
        "1 while the recovery window after a restart is open: new requests wait.",
        &[("", if core.recovery.is_open() { 1.0 } else { 0.0 })],
    );
    crate::metrics::write_family(
        out,
        "mds_pending_replies",
        "gauge",
        "Replies waiting for their commit, all partitions.",
        &[("", core.replies.total_depth() as f64)],
    );
    crate::metrics::write_family(
        out,
        crate::metrics::UNAUTHENTICATED,
        "gauge",
        "Connections accepted that have not completed their handshake (TLS, CONNECT and its proofs), all partitions.",
        &[("", shared.net.unauthenticated.total() as f64)],
    );
    crate::metrics::write_family(
        out,
        "mds_sessions",
        "gauge",
        "Client sessions the server knows: connected, or away with replies pending or resend records kept for their return (up to --session-expiry).",
        &[("", core.sessions.len() as f64)],
    );
    crate::metrics::write_store(out, &journal.stats());
    crate::metrics::write_process(out);
}

/// The lines an operator looks for at start: what runs, how, and where it listens.
fn log_serving(config: &ServerConfig, store: &std::path::Path, addr: SocketAddr) {
    info!(partitions = config.keys.partitions, "partitions started");
    // As the journal was opened: on by default outside a cluster.
    let edit_log = config
        .keys
        .edit_log
        .map_or(config.keys.etcd.is_none(), Switch::is_on);
    info!(
        version = env!("CARGO_PKG_VERSION"),
        data = %store.display(),
        listen = %addr,
        partitions = config.keys.partitions,
        commit_interval = ?config.keys.commit_interval,
        max_batch = config.keys.max_batch,
        cos = crate::config::name(&config.keys.cos),
        ack = crate::config::name(&config.keys.ack),
        root_squash = crate::config::name(&config.keys.root_squash),
        cred_check = crate::config::name(&config.keys.cred_check),
        auth = if config.auth_key.is_some() { "shared key" } else { "none" },
        tls = if config.tls.is_some() { "on" } else { "off" },
        recovery_window = ?config.keys.recovery_window,
        session_expiry = ?config.keys.session_expiry,
        shutdown_grace = ?config.keys.shutdown_grace,
        reply_path = crate::config::name(&config.keys.reply_path),
        commit_siblings = crate::config::name(&config.keys.commit_siblings),
        edit_log = if edit_log { "on" } else { "off" },
        inline_data_max = config.keys.inline_data_max,
        object_grace = ?config.keys.object_grace,
        max_uncommitted = config.limits.max_uncommitted,
        "mds serving"
    );
    // Before "listening on": whoever waits for that line has the warning too.
    if let Some(warning) = exposure_warning(addr, config.auth_key.is_some()) {
        warn!(listen = %addr, "{warning}");
    }
    info!("listening on {addr}");
}

/// Writes a checkpoint into a new directory under `dir` each time one is asked for (SIGUSR1).
async fn write_checkpoints(shared: Arc<Shared>, dir: Option<std::path::PathBuf>) {
    loop {
        CHECKPOINT_ASKED.notified().await;
        let Some(dir) = &dir else {
            warn!("checkpoint asked for, but no --checkpoint-dir is set");
            continue;
        };
        let name = format!(
            "checkpoint-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        );
        if let Err(e) = std::fs::create_dir_all(dir) {
            warn!(dir = %dir.display(), cause = %e, "cannot create --checkpoint-dir");
            continue;
        }
        shared
            .core
            .to_committer(CommitMsg::Checkpoint(dir.join(name)));
    }
}

/// The first stop request came: no new connections or requests, everything pending
/// committed at once and answered, connections whose clients do not read cut after `grace`
/// (or at a second request). Returns once every partition has finished.
async fn shut_down(
    shared: &Shared,
    stop: &Stop,
    grace: std::time::Duration,
    mut done: PartitionsDone,
) {
    notify_service_manager(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status("committing and answering what is pending"),
    ]);
    info!(
        "shutting down: no new connections or requests; committing and answering what is \
         pending"
    );
    shared.shutdown.cancel();
    // Partitions wait for their pending replies: commit at once from now on, never waiting
    // for the commit interval.
    shared.core.to_committer(CommitMsg::Drain);
    tokio::select! {
        _ = done.recv() => {}
        () = tokio::time::sleep(grace) => {
            warn!(?grace, "grace period over: cutting connections whose clients do not read");
            shared.cut.cancel();
        }
        () = stop.second.cancelled() => {
            info!("asked again: cutting connections whose clients do not read");
            shared.cut.cancel();
        }
    }
    // Every partition holds a sender until it has finished: `None` once all have.
    while done.recv().await.is_some() {}
}

/// After a clean stop: when everything handed out is durable, the next start need wait for
/// no client and lease no room above it; and the memtables are flushed so it replays no WAL.
fn settle_store(journal: &Journal, namespace: &Namespace, shared: &Shared) {
    if !journal.is_failed()
        && !shared.core.recovery.is_open()
        && journal.last_committed() >= namespace.last_transno()
    {
        // No client holds an early reply that is not durable, so none has anything to
        // replay. (Not while a recovery window is open: clients that have not replayed yet
        // hold replies from before the crash.)
        let forgotten = journal.forget_known_clients();
        match &forgotten {
            Ok(0) => {}
            Ok(forgotten) => info!(forgotten, "every reply is durable: known clients forgotten"),
            Err(e) => warn!("forgetting known clients failed: {e}; the next start waits for them"),
        }
        // And no client was told of anything above what is durable: the next start needs no
        // lease of room above it (while clients stay known, it keeps the one they may hold
        // numbers from).
        if forgotten.is_ok()
            && let Err(e) =
                journal.settle_ceilings(namespace.last_transno(), namespace.inode_counter())
        {
            warn!(
                "settling the ceilings failed: {e}; the next start skips a lease of inode numbers"
            );
        }
    }
    if !journal.is_failed() {
        let flushing = std::time::Instant::now();
        match journal.flush() {
            Ok(()) => info!(elapsed = ?flushing.elapsed(), "memtables flushed"),
            Err(e) => warn!("flushing memtables failed: {e}; the next start replays the WAL"),
        }
    }
}

/// Forgets sessions whose client stayed away past `expiry`, and the journal's records of them.
/// Checks a few times per expiry period, so a session lives at most a quarter period longer.
async fn expire_sessions(shared: Arc<Shared>, expiry: std::time::Duration) {
    let expired = metrics::counter!(crate::metrics::SESSIONS_EXPIRED);
    expired.increment(0);
    let mut every = tokio::time::interval((expiry / 4).max(std::time::Duration::from_millis(10)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        // Dropped under the sessions' locks: see `Sessions::forget_if_idle`.
        let forgotten = shared.core.sessions.expire(expiry, |client, journaled| {
            shared.core.release_handles(client);
            if journaled {
                shared.core.to_committer(CommitMsg::DropResend(client));
            }
        });
        if forgotten > 0 {
            debug!(forgotten, "sessions expired");
            expired.increment(forgotten as u64);
        }
    }
}

/// Ends the recovery window opened at `opened`: when every known client has replayed, or
/// when `window` has passed — then the transnos nobody replayed below a waiting replay are
/// skipped by empty journal records (so `last_committed` stays contiguous), and the clients
/// that never came back are evicted: they lose only their own unsafe changes, which
/// commit-on-share kept everyone else from building on. Either way, how long the window
/// stayed open goes to `mds_recovery_duration_seconds`.
async fn close_recovery_window(
    shared: Arc<Shared>,
    opened: std::time::Instant,
    window: std::time::Duration,
) {
    let recovery = &shared.core.recovery;
    let every_client_replayed = tokio::select! {
        () = recovery.closed() => true,
        // Measured from the window's opening, not from this task's start, like the duration.
        () = tokio::time::sleep_until((opened + window).into()) => false,
    };
    let evicted = if every_client_replayed {
        Vec::new()
    } else {
        let hard_end = opened + window * crate::recovery::HARD_END_FACTOR;
        recovery
            .expire(crate::recovery::QUIET_AFTER_EXPIRY, hard_end)
            .await
    };
    let open_for = opened.elapsed();
    metrics::gauge!(crate::metrics::RECOVERY_DURATION).set(open_for.as_secs_f64());
    if every_client_replayed {
        info!(?open_for, "recovery done: every known client replayed");
        shared.core.reclaim_orphans();
        return;
    }
    // Not before what they may have replayed before they went is durable; a session of
    // theirs is told under its lock, so its next early mutation makes it known again.
    let after = shared.core.namespace.last_transno();
    for &(client, why) in &evicted {
        warn!(
            client,
            reason = why.reason(),
            "recovery: evicted a known client; its unsafe changes are lost"
        );
        metrics::counter!(crate::metrics::RECOVERY_EVICTED, "reason" => why.reason()).increment(1);
        let forget = || {
            shared
                .core
                .to_committer(CommitMsg::ForgetClient { client, after });
        };
        match shared.core.sessions.get(client) {
            Some(session) => session.evicted(forget),
            None => forget(),
        }
    }
    info!(
        evicted = evicted.len(),
        ?open_for,
        "recovery window closed; clients that did not come back lose their unsafe changes"
    );
    shared.core.reclaim_orphans();
}

/// Tells the service manager (systemd, through `NOTIFY_SOCKET`) what the server is doing; a
/// failure to tell it is logged and otherwise ignored, as the manager's own timeouts decide.
fn notify_service_manager(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!(cause = %e, "cannot notify the service manager");
    }
}

/// Turns each SIGTERM or SIGINT into a stop request, for as long as the process lives, and
/// takes SIGHUP without dying: its default action would kill the server, and an operator's
/// `kill -HUP` (or a closing terminal) must not. The log goes to stderr, so there is no log
/// file to reopen; nothing else is reloaded while serving.
fn forward_signals(stop: Stop) {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(cause = %e, "cannot listen for signals");
            return;
        }
    };
    rt.block_on(async {
        let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
            signal(SignalKind::user_defined1()),
        ) else {
            tracing::error!("cannot listen for SIGTERM/SIGINT/SIGHUP/SIGUSR1");
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => info!("SIGTERM"),
                _ = int.recv() => info!("SIGINT"),
                _ = hup.recv() => {
                    info!("SIGHUP: nothing to reload (the log goes to stderr); serving on");
                    continue;
                }
                _ = usr1.recv() => {
                    info!("SIGUSR1: writing a checkpoint");
                    CHECKPOINT_ASKED.notify_one();
                    continue;
                }
            }
            stop.request();
        }
    });
}

/// Makes a panic on any thread stop the whole process (fail-stop). A partition that panicked
/// while holding a transno would leave every later commit waiting for it forever; an abort
/// loses nothing acknowledged, and a restart recovers. A hook rather than `panic = "abort"` in
/// the profile: tests are always built to unwind, so that profile setting would make cargo
/// compile every dependency — RocksDB's C++ included — once for the binaries and once for the
/// tests.
pub fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// One listener per partition on the same address (SO_REUSEPORT): the kernel spreads
/// connections over them, and no acceptor thread hands connections around.
///
/// SO_REUSEPORT would also let a second mds of the same user bind the same port and silently
/// take half the connections, so the address is first probed with a plain bind, which fails
/// if anyone holds it (with or without SO_REUSEPORT).
fn bind_listeners(addr: SocketAddr, n: usize) -> Result<Vec<std::net::TcpListener>> {
    // With port 0 the probe picks a free port, and between its close and our binds any
    // outgoing connection may be given that port: then pick another (a few times).
    let attempts = if addr.port() == 0 { 8 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let doing = || format!("--listen {addr}: address in use or not available");
        let probe = std::net::TcpListener::bind(addr).doing(doing)?;
        let bound = probe.local_addr().doing(doing)?;
        drop(probe);
        match bind_shared(bound, n) {
            Ok(listeners) => return Ok(listeners),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

/// `n` listeners sharing `bound` through SO_REUSEPORT.
fn bind_shared(bound: SocketAddr, n: usize) -> Result<Vec<std::net::TcpListener>> {
    let mut listeners = Vec::with_capacity(n);
    for _ in 0..n {
        let listener = (|| {
            let socket = Socket::new(
                Domain::for_address(bound),
                Type::STREAM,
                Some(Protocol::TCP),
            )?;
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
            socket.bind(&bound.into())?;
            socket.listen(1024)?;
            socket.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(socket.into())
        })()
        .doing(|| format!("binding {bound}"))?;
        listeners.push(listener);
    }
    Ok(listeners)
}

fn boot_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id())
}

/// What a server listening on `addr` must warn about at start: clients it does not
/// authenticate that are not on this machine.
fn exposure_warning(addr: SocketAddr, keyed: bool) -> Option<&'static str> {
    (!keyed && !addr.ip().is_loopback()).then_some(
        "NO AUTHENTICATION on a non-loopback address: anyone who can reach this port can read \
         and change the whole namespace; start with --auth-key FILE",
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_an_unauthenticated_non_loopback_address_is_warned_about() {
        let warns =
            |addr: &str, keyed| super::exposure_warning(addr.parse().unwrap(), keyed).is_some();
        assert!(warns("0.0.0.0:7400", false));
        assert!(warns("10.0.0.5:7400", false));
        assert!(warns("[::]:7400", false));
        assert!(!warns("0.0.0.0:7400", true));
        assert!(!warns("127.0.0.1:7400", false));
        assert!(!warns("[::1]:7400", false));
    }

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
