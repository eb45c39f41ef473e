//! Drain cost of the per-partition reply queues: push N pending replies, publish one commit
//! covering them all, drain. Reported per reply (throughput in replies).
//!
//! `percpu_drain` times the publish and the drain only. `push_publish_drain` times the pushes
//! too, once in transno order and once with 1 push in 16 older than the newest queued (the
//! insertion that commit-on-share waiters, resends and replay cause), so the cost of that
//! slow path shows against the in-order case.
//!
//! Run: `cargo bench -p reply --bench drain` (benches build with the release profile;
//! `cargo bench` rejects `--release`)

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use reply::{ReplyEngine, Waker};

const SIZES: [u64; 3] = [256, 4096, 16384];

fn engine() -> ReplyEngine<[u64; 4]> {
    ReplyEngine::new(vec![Box::new(|| {}) as Waker], 0)
}

fn drain(c: &mut Criterion) {
    let mut group = c.benchmark_group("percpu_drain");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for n in SIZES {
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let engine = engine();
            let mut next = 1u64;
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    for t in next..next + n {
                        engine.push(0, t, [t; 4]);
                    }
                    next += n;
                    let started = Instant::now();
                    engine.publish(next - 1);
                    let mut sum = 0u64;
                    engine.drain(0, |p, _| sum = sum.wrapping_add(p[0]));
                    spent += started.elapsed();
                    std::hint::black_box(sum);
                }
                spent
            });
        });
    }
    group.finish();
}

/// The `i`th transno pushed out of `n` starting at `first`: in order, or with the first of
/// every 16 pushed last of its 16, so it goes 15 places behind the newest queued.
fn transno(first: u64, i: u64, one_in_16_older: bool) -> u64 {
    if !one_in_16_older {
        return first + i;
    }
    let block = i & !15;
    match i % 16 {
        15 => first + block,
        k => first + block + k + 1,
    }
}

fn push_publish_drain(c: &mut Criterion) {
    let mut group = c.benchmark_group("push_publish_drain");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for (name, one_in_16_older) in [("in_order", false), ("one_in_16_older", true)] {
        for n in SIZES {
            group.throughput(Throughput::Elements(n));
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                let engine = engine();
                let mut next = 1u64;
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let started = Instant::now();
                        for i in 0..n {
                            let t = transno(next, i, one_in_16_older);
                            engine.push(0, t, [t; 4]);
                        }
                        next += n;
                        engine.publish(next - 1);
                        let mut sum = 0u64;
                        engine.drain(0, |p, _| sum = sum.wrapping_add(p[0]));
                        spent += started.elapsed();
                        std::hint::black_box(sum);
                    }
                    spent
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, drain, push_publish_drain);
criterion_main!(benches);
