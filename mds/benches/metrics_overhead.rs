//! What recording metrics costs a request, with the real Prometheus recorder installed: the
//! request path's way (one clock read, a stored counter handle and the partition's own latency
//! table, as `PartitionMetrics::request` does) against looking the metrics up by name on every
//! request (the `counter!`/`histogram!` macros, the exporter's histogram), and a request with
//! no metrics at all.
//!
//! Run: `cargo bench --release -p mds --bench metrics_overhead`

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mds::metrics::{PartitionMetrics, REQUEST_DURATION, REQUESTS};
use mds_proto::Errno;

fn overhead(c: &mut Criterion) {
    let _handle = mds::metrics::install().expect("installing the recorder");
    let metrics = PartitionMetrics::register(0);
    let received = quanta::Instant::now();
    let mut group = c.benchmark_group("metrics_per_request");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    group.bench_function("clock_read_only", |b| {
        b.iter(|| black_box(quanta::Instant::now()));
    });
    group.bench_function("stored_handles_with_clock_read", |b| {
        b.iter(|| {
            let now = quanta::Instant::now();
            metrics.request(3, black_box(Ok(())), now - received);
        });
    });
    group.bench_function("stored_handles_error_result", |b| {
        b.iter(|| {
            let now = quanta::Instant::now();
            metrics.request(3, black_box(Err(Errno::EEXIST)), now - received);
        });
    });
    group.bench_function("macro_lookup_with_clock_read", |b| {
        b.iter(|| {
            let now = quanta::Instant::now();
            metrics::counter!(REQUESTS, "op" => "create", "result" => "ok").increment(1);
            metrics::histogram!(REQUEST_DURATION, "op" => "create")
                .record((now - received).as_secs_f64());
        });
    });
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
