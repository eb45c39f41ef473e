//! Drain cost of the per-partition reply queues: push N pending replies, publish one commit
//! covering them all, drain. Reported per reply (throughput in replies).
//!
//! Run: `cargo bench --release -p reply --bench drain`

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use reply::{ReplyEngine, Waker};

fn drain(c: &mut Criterion) {
    let mut group = c.benchmark_group("percpu_drain");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for n in [256u64, 4096, 16384] {
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let engine: ReplyEngine<[u64; 4]> = ReplyEngine::new(vec![Box::new(|| {}) as Waker], 0);
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
            })
        });
    }
    group.finish();
}

criterion_group!(benches, drain);
criterion_main!(benches);
