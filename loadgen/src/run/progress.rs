//! The live progress bar: shown on a terminal only (never with `--quiet` or when stdout is
//! piped, so reports written to files stay clean), and a task that refreshes it four times a
//! second from the run's shared counters until the run stops.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Plan, Shared, Stop};

/// A live progress bar with the current rate, on a terminal only.
pub(super) fn progress_bar(
    plan: &Plan,
    shared: Arc<Shared>,
    started: Instant,
) -> Option<indicatif::ProgressBar> {
    if plan.quiet || !std::io::stdout().is_terminal() {
        return None;
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
        let mut last = (Instant::now(), 0u64);
        while !shared.stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let done = shared.done.load(Ordering::Relaxed);
            let now = Instant::now();
            let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            last = (now, done);
            bar.set_position(done);
            bar.set_message(format!(
                "{rate:.0}/s now, {:.0}/s overall, {} reconnects",
                done as f64 / started.elapsed().as_secs_f64(),
                shared.reconnects.load(Ordering::Relaxed)
            ));
        }
    });
    Some(pb)
}
