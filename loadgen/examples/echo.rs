//! The floor a GETATTR round trip is compared to: a bare loopback echo in Rust, one client
//! thread, one request in flight, frames the size of mds's GETATTR request and reply. It owns
//! nothing of the server's: an echo server thread in this process reads a length-prefixed
//! frame and writes back a prebuilt reply frame; the client sends a prebuilt request frame and
//! waits for the whole reply, N times, with TCP_NODELAY on both sides as the mds client sets
//! it. The sizes come from encoding a real GETATTR request (this process's credentials, as
//! the client sends them) and its `Attr` reply with `mds_proto`.
//!
//! `--mode std` (the default) is blocking sockets, the bare floor; `--mode tokio` runs the
//! client in a multi-thread tokio runtime like loadgen's, so the difference between the two is
//! the runtime's share. It prints the sizes and a line in loadgen's format:
//! `latency (us): p50 … p90 … p99 … p99.9 … max … (mean …, N samples)`, with one decimal.
//!
//! Run: `cargo run --release -p loadgen --example echo -- --round-trips 100000` (or
//! `--duration 5s`, `--mode tokio`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use mds_proto::{Attr, Body, Kind, Op, Reply, Request};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Blocking std sockets on the calling thread.
    Std,
    /// A tokio multi-thread runtime (as loadgen runs) for the client side.
    Tokio,
}

#[derive(Parser)]
#[command(about = "Loopback echo round trip with GETATTR-sized frames")]
struct Cli {
    /// Round trips to time.
    #[arg(long, default_value_t = 100_000)]
    round_trips: u64,
    /// Time round trips for this long instead (e.g. 5s, 300ms; a bare number is seconds).
    #[arg(long, value_parser = mds_client::units::parse_duration)]
    duration: Option<Duration>,
    /// Round trips before timing starts.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Client implementation.
    #[arg(long, value_enum, default_value_t = Mode::Std)]
    mode: Mode,
}

/// A length-prefixed frame holding `value`, as mds puts it on the wire.
fn frame<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let payload = mds_proto::encode(value);
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

/// A GETATTR request and its reply as a loadgen `stat` run sends and receives them: xids and
/// transnos of a few hundred thousand, an inode of a freshly created file.
fn getattr_frames() -> (Vec<u8>, Vec<u8>) {
    let xid = 300_000;
    let ino = 200_000;
    let request = Request {
        xid,
        op: Op::Getattr { ino },
        acked_xid: xid - 1,
        cred: mds_client::process_cred(),
        replay: None,
    };
    let now_ns = 1_780_000_000_000_000_000;
    let reply = Reply {
        xid,
        transno: 0,
        last_committed: 200_000,
        result: Ok(Body::Attr(Attr {
            ino,
            kind: Kind::File,
            mode: 0o644,
            uid: request.cred.uid,
            gid: request.cred.gid,
            nlink: 1,
            size: 0,
            atime_ns: now_ns,
            mtime_ns: now_ns,
            ctime_ns: now_ns,
            rdev: 0,
            generation: 150_000,
            blocks: 0,
        })),
        ticket: 0,
    };
    (frame(&request), frame(&reply))
}

/// Reads one length-prefixed frame into `buf` (cleared first), with as few reads as the
/// kernel allows: usually one.
fn read_frame(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
            if buf.len() >= 4 + len {
                return Ok(());
            }
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The echo server: one connection, a reply frame for every request frame, until EOF.
fn serve(listener: TcpListener, reply: Vec<u8>) -> std::io::Result<()> {
    let (mut stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    loop {
        match read_frame(&mut stream, &mut buf) {
            Ok(()) => stream.write_all(&reply)?,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// When the timed round trips end: after a count, or after a time.
#[derive(Clone, Copy)]
struct Stop {
    warmup: u64,
    round_trips: u64,
    duration: Option<Duration>,
}

impl Stop {
    /// Whether round trip `i` (0-based, warm-up included) is timed; `None` once done.
    /// `timing` is set when the first timed round trip starts.
    fn next(&self, i: u64, timing: &mut Option<Instant>) -> Option<bool> {
        if i < self.warmup {
            return Some(false);
        }
        let since = *timing.get_or_insert_with(Instant::now);
        let done = match self.duration {
            Some(d) => since.elapsed() >= d,
            None => i - self.warmup >= self.round_trips,
        };
        (!done).then_some(true)
    }
}

fn new_histogram() -> Histogram<u64> {
    // 1 ns to 60 s, 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn run_std(
    addr: std::net::SocketAddr,
    request: &[u8],
    stop: Stop,
) -> anyhow::Result<Histogram<u64>> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut hist = new_histogram();
    let mut buf = Vec::with_capacity(4096);
    let mut timing = None;
    let mut i = 0;
    while let Some(timed) = stop.next(i, &mut timing) {
        i += 1;
        let started = Instant::now();
        stream.write_all(request)?;
        read_frame(&mut stream, &mut buf)?;
        if timed {
            hist.record(started.elapsed().as_nanos() as u64)?;
        }
    }
    Ok(hist)
}

fn run_tokio(
    addr: std::net::SocketAddr,
    request: &[u8],
    stop: Stop,
) -> anyhow::Result<Histogram<u64>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let request = request.to_vec();
    rt.block_on(async move {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (mut rd, mut wr) = stream.into_split();
        let mut hist = new_histogram();
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        let mut timing = None;
        let mut i = 0;
        while let Some(timed) = stop.next(i, &mut timing) {
            i += 1;
            let started = Instant::now();
            wr.write_all(&request).await?;
            buf.clear();
            loop {
                if buf.len() >= 4 {
                    let len = u32::from_be_bytes(buf[..4].try_into()?) as usize;
                    if buf.len() >= 4 + len {
                        break;
                    }
                }
                let n = rd.read(&mut chunk).await?;
                anyhow::ensure!(n > 0, "the echo server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
            if timed {
                hist.record(started.elapsed().as_nanos() as u64)?;
            }
        }
        Ok(hist)
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (request, reply) = getattr_frames();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || serve(listener, reply.clone()).map(|()| reply.len()));
    let stop = Stop {
        warmup: cli.warmup,
        round_trips: cli.round_trips,
        duration: cli.duration,
    };
    let hist = match cli.mode {
        Mode::Std => run_std(addr, &request, stop)?,
        Mode::Tokio => run_tokio(addr, &request, stop)?,
    };
    let reply_len = server
        .join()
        .map_err(|_| anyhow::anyhow!("echo server panicked"))??;
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
    println!(
        "echo ({}): request frame {} bytes, reply frame {} bytes, {} round trips",
        match cli.mode {
            Mode::Std => "std",
            Mode::Tokio => "tokio",
        },
        request.len(),
        reply_len,
        hist.len()
    );
    println!(
        "latency (us): p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} (mean {:.1}, {} samples)",
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        hist.max() as f64 / 1e3,
        hist.mean() / 1e3,
        hist.len()
    );
    Ok(())
}
