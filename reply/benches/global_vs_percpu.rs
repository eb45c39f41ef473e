//! Per-partition queues against the global baseline: N replies pending, one commit covering
//! them all, time until every one has been released into its connection (a per-connection
//! lock and a 64-byte append, the same release work on both sides; the bench's own count of
//! releases is taken once per batch on both sides, so it adds no shared write per reply).
//!
//! - `percpu`: one queue per partition (2, the cores here), each drained by its partition's
//!   thread when the commit wakes it — one wake per partition per commit.
//! - `global`: one service-wide locked list and 16 service threads, all woken by the commit,
//!   each taking one reply at a time under the lock (the 2008 design).
//!
//! Reported per reply (criterion's throughput), and, on stderr, the context switches per
//! reply (getrusage of the whole process, voluntary + involuntary, over all timed commits)
//! and for the global side the time spent waiting for its lock per reply.
//!
//! Run: `cargo bench -p reply --bench global_vs_percpu`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use parking_lot::Mutex;
use reply::{GlobalReplies, ReplyEngine, Waker};

const SIZES: [usize; 3] = [1_000, 14_000, 100_000];
const PARTITIONS: usize = 2;
const SERVICE_THREADS: usize = 16;
const CONNECTIONS: usize = 64;

/// Where released replies go: per-connection buffers, each under its own lock.
struct Sinks {
    conns: Vec<Mutex<Vec<u8>>>,
    released: AtomicUsize,
    target: AtomicUsize,
    done: Mutex<Option<mpsc::Sender<()>>>,
}

impl Sinks {
    fn new() -> Arc<Sinks> {
        Arc::new(Sinks {
            conns: (0..CONNECTIONS).map(|_| Mutex::new(Vec::new())).collect(),
            released: AtomicUsize::new(0),
            target: AtomicUsize::new(usize::MAX),
            done: Mutex::new(None),
        })
    }

    /// The release work itself: the reply's connection's lock and a 64-byte append.
    fn release(&self, payload: u64) {
        let mut conn = self.conns[payload as usize % CONNECTIONS].lock();
        conn.extend_from_slice(&[payload as u8; 64]);
        if conn.len() > 1 << 20 {
            conn.clear();
        }
    }

    /// Counts `n` releases (instrumentation, not release work: each side counts once per
    /// batch — a drain, or a service thread's run until it finds nothing ready — so neither
    /// pays a shared counter per reply) and signals when the expected number is reached.
    fn count(&self, n: usize) {
        if n == 0 {
            return;
        }
        if self.released.fetch_add(n, Ordering::AcqRel) + n == self.target.load(Ordering::Acquire)
            && let Some(done) = self.done.lock().as_ref()
        {
            let _ = done.send(());
        }
    }

    /// Arms the sinks for `n` releases; the returned receiver fires when they are done.
    fn expect(&self, n: usize) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        *self.done.lock() = Some(tx);
        self.released.store(0, Ordering::Release);
        self.target.store(n, Ordering::Release);
        rx
    }
}

/// Voluntary + involuntary context switches of this process so far.
fn context_switches() -> u64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut usage) };
    (usage.ru_nvcsw + usage.ru_nivcsw) as u64
}

/// The per-partition engine with one drainer thread per partition.
struct PerCpu {
    engine: Arc<ReplyEngine<u64>>,
    wakes: Vec<mpsc::Sender<bool>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl PerCpu {
    fn start(sinks: Arc<Sinks>) -> PerCpu {
        let (wake_txs, wake_rxs): (Vec<_>, Vec<_>) =
            (0..PARTITIONS).map(|_| mpsc::channel::<bool>()).unzip();
        let wakers = wake_txs
            .iter()
            .map(|tx| {
                let tx = Mutex::new(tx.clone());
                Box::new(move || {
                    let _ = tx.lock().send(true);
                }) as Waker
            })
            .collect();
        let engine = Arc::new(ReplyEngine::new(wakers, 0));
        let threads = wake_rxs
            .into_iter()
            .enumerate()
            .map(|(p, rx)| {
                let (engine, sinks) = (engine.clone(), sinks.clone());
                std::thread::spawn(move || {
                    while let Ok(true) = rx.recv() {
                        let n = engine.drain(p, |payload, _| sinks.release(payload));
                        sinks.count(n);
                    }
                })
            })
            .collect();
        PerCpu {
            engine,
            wakes: wake_txs,
            threads,
        }
    }

    fn stop(self) {
        for tx in &self.wakes {
            let _ = tx.send(false);
        }
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

fn percpu(c: &mut Criterion) {
    let mut group = c.benchmark_group("percpu");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for n in SIZES {
        let sinks = Sinks::new();
        let server = PerCpu::start(sinks.clone());
        let (mut switches, mut replies) = (0u64, 0u64);
        group.throughput(Throughput::Elements(n as u64));
        // Transnos go on across criterion's calls of the routine: the engine remembers the
        // last commit, and a transno at or below it would be released at its push.
        let next = std::cell::Cell::new(1u64);
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let first = next.get();
                    next.set(first + n as u64);
                    let done = sinks.expect(n);
                    for t in first..first + n as u64 {
                        server.engine.push(t as usize % PARTITIONS, t, t);
                    }
                    let cs = context_switches();
                    let started = Instant::now();
                    server.engine.publish(next.get() - 1);
                    done.recv().unwrap();
                    spent += started.elapsed();
                    switches += context_switches() - cs;
                    replies += n as u64;
                }
                spent
            });
        });
        eprintln!(
            "percpu/{n}: {:.4} context switches per reply",
            switches as f64 / replies.max(1) as f64
        );
        server.stop();
    }
    group.finish();
}

fn global(c: &mut Criterion) {
    let mut group = c.benchmark_group("global");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for n in SIZES {
        let sinks = Sinks::new();
        let replies_list = Arc::new(GlobalReplies::<u64>::new(0));
        let threads: Vec<_> = (0..SERVICE_THREADS)
            .map(|_| {
                let (list, sinks) = (replies_list.clone(), sinks.clone());
                std::thread::spawn(move || {
                    let batch = std::cell::Cell::new(0);
                    list.serve_until_idle(
                        |payload, _| {
                            sinks.release(payload);
                            batch.set(batch.get() + 1);
                        },
                        || sinks.count(batch.replace(0)),
                    )
                })
            })
            .collect();
        let (mut switches, mut replies, mut waited) = (0u64, 0u64, 0u64);
        group.throughput(Throughput::Elements(n as u64));
        let next = std::cell::Cell::new(1u64);
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let first = next.get();
                    next.set(first + n as u64);
                    let done = sinks.expect(n);
                    for t in first..first + n as u64 {
                        replies_list.push(t, t);
                    }
                    let cs = context_switches();
                    let wait = replies_list.lock_wait().waited_ns;
                    let started = Instant::now();
                    replies_list.publish(next.get() - 1);
                    done.recv().unwrap();
                    spent += started.elapsed();
                    switches += context_switches() - cs;
                    waited += replies_list.lock_wait().waited_ns - wait;
                    replies += n as u64;
                }
                spent
            });
        });
        eprintln!(
            "global/{n}: {:.4} context switches per reply, {:.0} ns waiting for the lock per reply",
            switches as f64 / replies.max(1) as f64,
            waited as f64 / replies.max(1) as f64
        );
        replies_list.stop();
        for t in threads {
            t.join().unwrap();
        }
    }
    group.finish();
}

criterion_group!(benches, percpu, global);
criterion_main!(benches);
