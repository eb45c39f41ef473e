//! Showing progress while a run goes: on a terminal, a live bar refreshed four times a second;
//! otherwise (a batch job's log, a pipe) a plain line every `--progress-interval` on stderr,
//! so stdout keeps only the report; nothing with `--quiet`.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::plan::{Plan, Stop};
use super::shared::Shared;

/// The running progress display; [`Progress::finish`] takes it away before the report.
pub(super) enum Progress {
    None,
    Bar(indicatif::ProgressBar),
    Lines(tokio::task::JoinHandle<()>),
}

impl Progress {
    pub(super) fn finish(self) {
        match self {
            Progress::None => {}
            Progress::Bar(pb) => pb.finish_and_clear(),
            // Aborted, not left to see the stop flag: no line may come after the report.
            Progress::Lines(task) => task.abort(),
        }
    }
}

/// Counted operations so far and the rate over the last stretch; the warm-up shows as such.
struct Rates {
    last: (Instant, u64),
}

impl Rates {
    fn message(&mut self, shared: &Shared, ops_name: &str) -> (u64, String) {
        let now = Instant::now();
        let reconnects = shared.outages.reconnects();
        if now < shared.measure_from {
            let warm = shared.warmup_done.load(Ordering::Relaxed);
            return (
                0,
                format!("warming up: {warm} {ops_name} not counted, {reconnects} reconnects"),
            );
        }
        let done = shared.done.load(Ordering::Relaxed);
        let since = now.duration_since(self.last.0).as_secs_f64();
        let rate = done.saturating_sub(self.last.1) as f64 / since.max(1e-9);
        self.last = (now, done);
        let overall = done as f64
            / now
                .duration_since(shared.measure_from)
                .as_secs_f64()
                .max(1e-9);
        let down = shared.outages.downtime(now).summed.as_secs_f64();
        (
            done,
            format!(
                "{done} {ops_name}, {rate:.0}/s now, {overall:.0}/s overall, {reconnects} reconnects, {down:.1} s disconnected"
            ),
        )
    }
}

/// Starts the bar (on a terminal) or the progress lines (elsewhere), unless `--quiet`.
pub(super) fn start(plan: &Plan, shared: Arc<Shared>, started: Instant) -> Progress {
    if plan.quiet {
        return Progress::None;
    }
    let ops_name = super::assemble::ops_name(plan);
    let mut rates = Rates {
        last: (shared.measure_from, 0),
    };
    if !std::io::stdout().is_terminal() {
        let every = plan.progress_interval.max(Duration::from_millis(10));
        return Progress::Lines(tokio::spawn(async move {
            let mut next = started + every;
            // Ends when the run stops (or is aborted by `finish`).
            while !shared.stop.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next.into()).await;
                next += every;
                let (_, msg) = rates.message(&shared, &ops_name);
                eprintln!("progress: {:.1} s, {msg}", started.elapsed().as_secs_f64());
            }
        }));
    }
    let pb = match plan.stop {
        Stop::Count(n) => indicatif::ProgressBar::new(n),
        Stop::Duration(_) => indicatif::ProgressBar::new_spinner(),
    };
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos} ops  {msg}",
        )
        .expect("valid template"),
    );
    let bar = pb.clone();
    tokio::spawn(async move {
        while !shared.stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let (done, msg) = rates.message(&shared, &ops_name);
            bar.set_position(done);
            bar.set_message(msg);
        }
    });
    Progress::Bar(pb)
}
