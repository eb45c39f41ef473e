//! An fsx-style exerciser of file data through the mount (issue 55), with the local disk as
//! the model: one file on a real mount and the same file in a local temporary directory get
//! the same random operations from a seeded PRNG (xorshift64*), and every read is compared.
//! The operations: pwrite at any offset and length up to 10 MiB files (past the end too,
//! leaving holes), write(2) through an `O_APPEND` descriptor, pwrite through an `O_DIRECT`
//! one, copy_file_range within the file; pread, and pread through `O_DIRECT` (the server's
//! bytes, past the page cache); ftruncate and truncate(2) up and down; a shared read-write
//! `mmap` of a range (extended by ftruncate first when it ends past the end, as fsx does; at
//! times of a descriptor opened `O_APPEND`) written through the map, then `msync`, or only
//! `munmap`, leaving the write-back to the kernel; an `mmap` read; fsync; close and reopen
//! (the mount's page cache dropped); fstat and stat sizes; and a read through a second mount
//! after an fsync. Each seed ends with a reopen and a compare of the whole file. Three runs:
//! the default server; `--ack early` with SIGKILLs and restarts of the server; and two
//! mounts used in turn (close on one, open on the other). The server runs with
//! `--inline-data-max 256k`: a file starts on the server and moves to the object store as it
//! grows past that, and a truncate below it leaves it there.
//!
//! On the first difference it fails with the seed, the operation's index, the last 30
//! operations, the first differing offset (with the bytes on both sides and the last
//! operation that wrote there) and the line that replays it. Bounded by default (3 seeds of
//! 1,000 operations a run, ~13 s in all on 2 cores); for long runs:
//!
//! - `FSX_SEED=N` — the first seed (decimal or 0x hex); with it alone, only that seed runs.
//! - `FSX_SEEDS=N` — how many seeds, counting up from the first.
//! - `FSX_OPS=N` — operations a seed.
//! - `FSX_MMAP=0` — skip the mmap family (writes through a map, map reads), for a data path
//!   that cannot map files; the other operations run the same.
//! - `FSX_VERBOSE=1` — print every operation as it runs.
//!
//! e.g. `FSX_SEED=7 FSX_SEEDS=50 FSX_OPS=20000 cargo test --release --workspace --test fsx`.
//! Left out: fsx's fallocate modes (punch hole, zero, collapse and insert range) and
//! clone/dedupe ranges — the mount answers them EOPNOTSUPP (mode 0 is a size change, which
//! the truncates cover).
//! Run after `cargo build --release --workspace`; needs root (or `fusermount3`) and /dev/fuse.

mod common;

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{Mounted, free_listen};
use mds_testkit::Server;

/// The largest file the exerciser makes.
const MAX_SIZE: u64 = 10 << 20;
/// The cap the server is started with: far below `MAX_SIZE`, so most of each run's data is in
/// the object store.
const INLINE_DATA_MAX: &str = "256k";
/// Operations shown before the one that failed.
const TAIL: usize = 30;
const SEEDS: u64 = 3;
const OPS: usize = 1000;
/// The first seed when `FSX_SEED` is not set: fixed, so a failure in CI replays as it is.
const BASE_SEED: u64 = 0x5eed_f5c0;

#[test]
fn random_reads_writes_truncates_and_maps_match_the_local_disk() {
    exercise(
        "random_reads_writes_truncates_and_maps_match_the_local_disk",
        &[],
        Extra::None,
    );
}

/// The same under `--ack early` (WRITEs answered before their commit, so reads find blocks
/// only memory holds, and commits trim them under the exerciser), with the server SIGKILLed
/// and restarted on its store and port now and then: the mount replays what was answered
/// early, and nothing may differ.
#[test]
fn the_same_under_early_replies_across_server_restarts() {
    exercise(
        "the_same_under_early_replies_across_server_restarts",
        &["--ack", "early"],
        Extra::Restarts,
    );
}

/// The same through two mounts in turn, both with `attr_timeout=0,entry_timeout=0`, under
/// `--ack early`: now and then the file is closed on one and opened on the other
/// (close-to-open), which must find what the first wrote — its map's pages too, and what is
/// not committed yet — and not what it kept in its page cache.
#[test]
fn the_same_through_two_mounts_in_turn() {
    exercise(
        "the_same_through_two_mounts_in_turn",
        &["--ack", "early"],
        Extra::TwoMounts,
    );
}

/// What a run adds to the operations every run makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extra {
    None,
    /// SIGKILL of the server and a restart ([`Op::Restart`]).
    Restarts,
    /// The file moves between two mounts ([`Op::Switch`]).
    TwoMounts,
}

/// Runs the seeds on one server started with `flags` and two mounts of it: the exerciser
/// works through the first (and in turn through the second, with [`Extra::TwoMounts`]), and
/// reads through the other ([`Op::ReadElsewhere`]).
/// `test` is the test's name, for the replay line of a failure.
fn exercise(test: &str, flags: &[&str], extra: Extra) {
    let settings = Settings::from_env();
    let dir = tempfile::tempdir().unwrap();
    let listen = free_listen();
    let mut flags: Vec<String> = flags.iter().map(|&f| f.to_owned()).collect();
    flags.extend(["--inline-data-max", INLINE_DATA_MAX, "--listen", &listen].map(str::to_owned));
    let mut served = Served::start(dir.path(), flags);
    let strict = ["-o", "attr_timeout=0,entry_timeout=0"];
    let first: &[&str] = if extra == Extra::TwoMounts {
        &strict
    } else {
        &[]
    };
    let m = Mounted::new(served.server.as_ref().unwrap(), first);
    let other = Mounted::new(served.server.as_ref().unwrap(), &strict);
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    for seed in settings.seeds() {
        let name = format!("fsx-{seed:x}");
        let started = Instant::now();
        let restart = (extra == Extra::Restarts).then_some(&mut served);
        let paths = (m.path(&name), other.path(&name));
        let mut fsx = Fsx::new(
            seed,
            (&paths.0, &paths.1),
            &local.path().join(&name),
            &settings,
            restart,
        );
        fsx.switching = extra == Extra::TwoMounts;
        if let Err(failure) = fsx.run(settings.ops) {
            drop(fsx);
            panic!(
                "{failure} -- --exact {test}\nthe first mount's log:\n{}\nthe other's:\n{}\n\
                 the server's:\n{}",
                m.log_text(),
                other.log_text(),
                served.log_text()
            );
        }
        eprintln!(
            "fsx seed {seed:#x}: {} operations in {:.1} s ({}), {} bytes at the end",
            settings.ops,
            started.elapsed().as_secs_f64(),
            fsx.counts(),
            fsx.size
        );
        drop(fsx);
        fs::remove_file(m.path(&name)).unwrap();
    }
    assert!(m.unmount().success());
    assert!(other.unmount().success());
}

/// The server, restarted on the same store and address by [`Served::restart`].
struct Served {
    server: Option<Server>,
    data: PathBuf,
    flags: Vec<String>,
    /// The logs of the servers killed before this one.
    before: String,
}

impl Served {
    fn start(dir: &Path, flags: Vec<String>) -> Served {
        let data = dir.join("data");
        let args: Vec<&str> = flags.iter().map(String::as_str).collect();
        Served {
            server: Some(Server::start(&mds_testkit::bin("mds"), &data, &args)),
            data,
            flags,
            before: String::new(),
        }
    }

    /// SIGKILL, then a start on the same store and address.
    fn restart(&mut self) {
        let server = self.server.take().unwrap();
        self.before += &server.log_text();
        self.before += "\n--- SIGKILL ---\n";
        server.kill();
        let args: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        self.server = Some(Server::start(&mds_testkit::bin("mds"), &self.data, &args));
    }

    fn log_text(&self) -> String {
        format!(
            "{}{}",
            self.before,
            self.server.as_ref().unwrap().log_text()
        )
    }
}

/// What the environment asks of a run (see the header).
struct Settings {
    first: u64,
    seeds: u64,
    ops: usize,
    mmap: bool,
    verbose: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number = |name: &str| {
            var(name).map(|v| {
                let parsed = match v.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => v.parse(),
                };
                parsed.unwrap_or_else(|_| panic!("{name}={v}: not a number"))
            })
        };
        let first = number("FSX_SEED");
        Settings {
            first: first.unwrap_or(BASE_SEED),
            seeds: number("FSX_SEEDS").unwrap_or(if first.is_some() { 1 } else { SEEDS }),
            ops: number("FSX_OPS").map_or(OPS, |n| n as usize),
            mmap: var("FSX_MMAP").is_none_or(|v| v != "0"),
            verbose: var("FSX_VERBOSE").is_some_and(|v| v != "0"),
        }
    }

    fn seeds(&self) -> impl Iterator<Item = u64> {
        (0..self.seeds).map(|i| self.first.wrapping_add(i))
    }
}

/// xorshift64*, seeded through splitmix64: small, fast and the same everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// How a write reaches the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// pwrite(2) through the descriptor the exerciser keeps.
    Pwrite,
    /// write(2) through a descriptor opened `O_APPEND` for it: at the end, wherever that is.
    Append,
    /// pwrite(2) through the descriptor opened `O_DIRECT`: past the page cache.
    Direct,
}

/// One operation, with everything needed to replay it but the bytes (which come from the
/// PRNG in order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Write {
        at: u64,
        len: u64,
        how: How,
    },
    /// copy_file_range(2) of `len` bytes from `from` to `to` in the file itself (the ranges
    /// do not overlap).
    Copy {
        from: u64,
        to: u64,
        len: u64,
    },
    Read {
        at: u64,
        len: u64,
    },
    /// ftruncate(2), or truncate(2) of the path.
    Truncate {
        from: u64,
        to: u64,
        by_path: bool,
    },
    /// A shared read-write map of the range, written through; the file is first extended
    /// with ftruncate if the range ends past `size` (as fsx does). With `append`, the map is
    /// of a descriptor of its own opened `O_RDWR | O_APPEND`, closed after: its bytes still
    /// go where they were mapped.
    MapWrite {
        at: u64,
        len: u64,
        size: u64,
        msync: bool,
        append: bool,
    },
    MapRead {
        at: u64,
        len: u64,
    },
    /// pread through a descriptor opened `O_DIRECT`: the server's bytes, past the page cache.
    DirectRead {
        at: u64,
        len: u64,
    },
    /// pread of the file opened through the other mount of the server (`attr_timeout=0`):
    /// what another client sees, after an fsync here — the mount's close-to-open model
    /// (`docs/mount.md`): a file's writes past the inline cap are kept by the mount that made
    /// them until a close or an fsync uploads them.
    ReadElsewhere {
        at: u64,
        len: u64,
    },
    Fsync,
    Reopen,
    /// Close on this mount, open on the other: the exerciser goes on through that one.
    Switch,
    Stat,
    /// SIGKILL of the server and a start on the same store and address.
    Restart,
}

impl Op {
    const NAMES: [&str; 15] = [
        "write",
        "append",
        "directwrite",
        "copy",
        "read",
        "truncate",
        "mapwrite",
        "mapread",
        "directread",
        "elsewhere",
        "fsync",
        "reopen",
        "switch",
        "stat",
        "restart",
    ];

    fn kind(self) -> usize {
        match self {
            Op::Write { how, .. } => how as usize,
            Op::Copy { .. } => 3,
            Op::Read { .. } => 4,
            Op::Truncate { .. } => 5,
            Op::MapWrite { .. } => 6,
            Op::MapRead { .. } => 7,
            Op::DirectRead { .. } => 8,
            Op::ReadElsewhere { .. } => 9,
            Op::Fsync => 10,
            Op::Reopen => 11,
            Op::Switch => 12,
            Op::Stat => 13,
            Op::Restart => 14,
        }
    }

    /// Whether this operation may have set the byte at `offset` (a truncate sets the bytes
    /// it cuts or adds).
    fn wrote(self, offset: u64) -> bool {
        match self {
            Op::Write { at, len, .. } | Op::Copy { to: at, len, .. } => {
                (at..at + len).contains(&offset)
            }
            Op::MapWrite { at, len, size, .. } => {
                (at..at + len).contains(&offset) || (size..at).contains(&offset)
            }
            Op::Truncate { from, to, .. } => (from.min(to)..from.max(to)).contains(&offset),
            _ => false,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = |f: &mut fmt::Formatter<'_>, name: &str, at: u64, len: u64| {
            write!(f, "{name:<11} {at:#09x} .. {:#09x} ({len} bytes)", at + len)
        };
        match *self {
            Op::Write { at, len, how } => range(f, Op::NAMES[how as usize], at, len),
            Op::Copy { from, to, len } => {
                range(f, "copy", to, len)?;
                write!(f, " from {from:#09x}")
            }
            Op::Read { at, len } => range(f, "read", at, len),
            Op::MapWrite {
                at,
                len,
                size,
                msync,
                append,
            } => {
                range(f, "mapwrite", at, len)?;
                if at + len > size {
                    write!(f, " (ftruncate up from {size:#09x} first)")?;
                }
                if append {
                    f.write_str(", mapped through an O_APPEND descriptor")?;
                }
                f.write_str(if msync { ", msync" } else { ", munmap only" })
            }
            Op::MapRead { at, len } => range(f, "mapread", at, len),
            Op::DirectRead { at, len } => range(f, "directread", at, len),
            Op::ReadElsewhere { at, len } => {
                range(f, "fsync, then read through the other mount", at, len)
            }
            Op::Truncate { from, to, by_path } => write!(
                f,
                "{:<11} {from:#09x} -> {to:#09x}",
                if by_path { "truncate" } else { "ftruncate" }
            ),
            Op::Fsync => f.write_str("fsync"),
            Op::Reopen => f.write_str("close and reopen"),
            Op::Switch => f.write_str("close, and open through the other mount"),
            Op::Stat => f.write_str("stat"),
            Op::Restart => f.write_str("SIGKILL of the server, and a restart"),
        }
    }
}

/// One file on the mount and its model on the local disk.
struct Fsx<'a> {
    seed: u64,
    rng: Rng,
    mount_path: PathBuf,
    model_path: PathBuf,
    mount: Option<File>,
    model: Option<File>,
    /// The mount's file opened `O_RDWR | O_DIRECT`.
    direct: Option<File>,
    /// The same file through the other mount.
    elsewhere: PathBuf,
    /// A map was written and unmapped without msync since the last fsync or close: its
    /// pages may still be the kernel's alone.
    unsynced_map: bool,
    /// Whether [`Op::Switch`] swaps `mount_path` and `elsewhere` now and then.
    switching: bool,
    /// The server, for `Op::Restart`; `None`: no restarts.
    served: Option<&'a mut Served>,
    /// The size both must have.
    size: u64,
    /// Every operation so far, for the tail of a failure and who last wrote a byte.
    history: Vec<Op>,
    counts: [usize; Op::NAMES.len()],
    settings: &'a Settings,
    page: u64,
}

/// The first difference: the message a failing test prints.
type Failure = String;

impl<'a> Fsx<'a> {
    fn new(
        seed: u64,
        (mount_path, elsewhere): (&Path, &Path),
        model_path: &Path,
        settings: &'a Settings,
        served: Option<&'a mut Served>,
    ) -> Fsx<'a> {
        let create = |path: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()))
        };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        Fsx {
            seed,
            rng: Rng::new(seed),
            mount: Some(create(mount_path)),
            model: Some(create(model_path)),
            direct: Some(open_direct(mount_path).expect("opening the mount's file O_DIRECT")),
            served,
            elsewhere: elsewhere.to_owned(),
            switching: false,
            unsynced_map: false,
            mount_path: mount_path.to_owned(),
            model_path: model_path.to_owned(),
            size: 0,
            history: Vec::new(),
            counts: [0; Op::NAMES.len()],
            settings,
            page,
        }
    }

    fn run(&mut self, ops: usize) -> Result<(), Failure> {
        for _ in 0..ops {
            let op = self.pick();
            self.history.push(op);
            self.counts[op.kind()] += 1;
            if self.settings.verbose {
                eprintln!("{:6} {op}", self.history.len() - 1);
            }
            self.apply(op)?;
        }
        // The whole file, from the server: the reopen drops the kernel's cached pages.
        self.history.push(Op::Reopen);
        self.apply(Op::Reopen)?;
        let mut at = 0;
        while at < self.size {
            let len = (self.size - at).min(1 << 20);
            self.history.push(Op::Read { at, len });
            self.apply(Op::Read { at, len })?;
            at += len;
        }
        self.history.push(Op::Stat);
        self.apply(Op::Stat)
    }

    fn counts(&self) -> String {
        Op::NAMES
            .iter()
            .zip(self.counts)
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{n} {name}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// An offset anywhere a file may reach, at times page-aligned.
    fn offset(&mut self, below: u64) -> u64 {
        let at = self.rng.below(below);
        if self.rng.one_in(4) {
            at & !(self.page - 1)
        } else {
            at
        }
    }

    /// A length: mostly up to 64 KiB (the mount's WRITE), at times up to 1 MiB, at times a
    /// few bytes; at times whole pages.
    fn length(&mut self) -> u64 {
        let len = match self.rng.below(8) {
            0 => 1 + self.rng.below(16),
            1 | 2 => 1 + self.rng.below(1 << 20),
            _ => 1 + self.rng.below(64 << 10),
        };
        if self.rng.one_in(4) {
            len.next_multiple_of(self.page)
        } else {
            len
        }
    }

    fn pick(&mut self) -> Op {
        loop {
            let op = match self.rng.below(100) {
                0..30 => {
                    let how = match self.rng.below(10) {
                        0 => How::Append,
                        1 | 2 => How::Direct,
                        _ => How::Pwrite,
                    };
                    let at = match how {
                        How::Append if self.size < MAX_SIZE => self.size,
                        How::Append => continue,
                        _ => self.offset(MAX_SIZE),
                    };
                    let len = self.length().min(MAX_SIZE - at);
                    Op::Write { at, len, how }
                }
                30..33 if self.size > 0 => {
                    let from = self.offset(self.size);
                    let len = self.length().min(self.size - from);
                    let to = self.offset(MAX_SIZE - len);
                    if to + len > from && from + len > to {
                        continue;
                    }
                    Op::Copy { from, to, len }
                }
                33..50 => {
                    let at = self.offset(self.size + 1);
                    let len = self.length();
                    Op::Read { at, len }
                }
                50..58 => {
                    let to = match self.rng.below(3) {
                        0 => self.rng.below(self.size + 1),
                        1 => self.size + self.rng.below(MAX_SIZE - self.size + 1),
                        _ => self.offset(MAX_SIZE + 1),
                    };
                    let by_path = self.rng.one_in(4);
                    Op::Truncate {
                        from: self.size,
                        to,
                        by_path,
                    }
                }
                58..72 if self.settings.mmap => {
                    // Within the file mostly; at times past its end, extended first.
                    let room = if self.rng.one_in(4) {
                        MAX_SIZE
                    } else {
                        self.size
                    };
                    if room == 0 {
                        continue;
                    }
                    let at = self.offset(room);
                    let len = self.length().min(room - at);
                    let msync = !self.rng.one_in(4);
                    let append = self.rng.one_in(8);
                    Op::MapWrite {
                        at,
                        len,
                        size: self.size,
                        msync,
                        append,
                    }
                }
                72..82 if self.settings.mmap && self.size > 0 => {
                    let at = self.offset(self.size);
                    let len = self.length().min(self.size - at);
                    Op::MapRead { at, len }
                }
                82..88 => {
                    let at = self.offset(self.size + 1);
                    let len = self.length();
                    Op::DirectRead { at, len }
                }
                88..90 => {
                    let at = self.offset(self.size + 1);
                    let len = self.length();
                    Op::ReadElsewhere { at, len }
                }
                90..91 => Op::Fsync,
                // Half the reopens go to the other mount when switching.
                91..93 if self.switching => Op::Switch,
                91..95 => Op::Reopen,
                95..99 => Op::Stat,
                // One in 300 of all operations.
                99 if self.served.is_some() && self.rng.one_in(3) => Op::Restart,
                _ => continue,
            };
            return op;
        }
    }

    fn files(&self) -> (&File, &File) {
        (self.mount.as_ref().unwrap(), self.model.as_ref().unwrap())
    }

    fn apply(&mut self, op: Op) -> Result<(), Failure> {
        match op {
            Op::Write { at, len, how } => {
                let mut data = vec![0; len as usize];
                self.rng.fill(&mut data);
                let (mount, model) = self.files();
                model.write_all_at(&data, at).expect("pwrite to the model");
                let written = match how {
                    How::Pwrite => mount.write_all_at(&data, at),
                    How::Direct => self.direct.as_ref().unwrap().write_all_at(&data, at),
                    How::Append => OpenOptions::new()
                        .append(true)
                        .open(&self.mount_path)
                        .and_then(|mut f| f.write_all(&data)),
                };
                written.map_err(|e| self.fail(&format!("{} on the mount: {e}", how_name(how))))?;
                self.size = self.size.max(at + len);
            }
            Op::Copy { from, to, len } => {
                let (mount, model) = self.files();
                copy_range(model, from, to, len).expect("copy_file_range on the model");
                copy_range(mount, from, to, len)
                    .map_err(|e| self.fail(&format!("copy_file_range on the mount: {e}")))?;
                self.size = self.size.max(to + len);
            }
            Op::Read { at, len } => {
                let (mount, model) = self.files();
                let want = read_at(model, at, len).expect("pread of the model");
                let got = read_at(mount, at, len)
                    .map_err(|e| self.fail(&format!("pread on the mount: {e}")))?;
                let expected = len.min(self.size.saturating_sub(at));
                if want.len() as u64 != expected {
                    return Err(self.fail(&format!(
                        "the model read {} bytes, {expected} expected: the exerciser is wrong",
                        want.len()
                    )));
                }
                self.compare("pread", at, &want, &got)?;
            }
            Op::Truncate { to, by_path, .. } => {
                let (mount, model) = self.files();
                model.set_len(to).expect("ftruncate of the model");
                let cut = if by_path {
                    truncate(&self.mount_path, to)
                } else {
                    mount.set_len(to)
                };
                cut.map_err(|e| self.fail(&format!("truncating on the mount: {e}")))?;
                self.size = to;
            }
            Op::MapWrite {
                at,
                len,
                size,
                msync,
                append,
            } => {
                let mut data = vec![0; len as usize];
                self.rng.fill(&mut data);
                let (mount, model) = self.files();
                if at + len > size {
                    model.set_len(at + len).expect("ftruncate of the model");
                    mount
                        .set_len(at + len)
                        .map_err(|e| self.fail(&format!("ftruncate on the mount: {e}")))?;
                    self.size = at + len;
                }
                let (mount, model) = self.files();
                model.write_all_at(&data, at).expect("pwrite to the model");
                let appending = if append {
                    let opened = OpenOptions::new()
                        .read(true)
                        .append(true)
                        .open(&self.mount_path);
                    Some(opened.map_err(|e| self.fail(&format!("opening O_APPEND: {e}")))?)
                } else {
                    None
                };
                let mut map = Map::new(
                    appending.as_ref().unwrap_or(mount),
                    at,
                    len,
                    true,
                    self.page,
                )
                .map_err(|e| self.fail(&format!("{e} (FSX_MMAP=0 skips maps)")))?;
                map.bytes_mut().copy_from_slice(&data);
                if msync {
                    map.msync()
                        .map_err(|e| self.fail(&format!("msync on the mount: {e}")))?;
                } else {
                    self.unsynced_map = true;
                }
            }
            Op::MapRead { at, len } => {
                let (mount, model) = self.files();
                let want = read_at(model, at, len).expect("pread of the model");
                let map = Map::new(mount, at, len, false, self.page)
                    .map_err(|e| self.fail(&format!("{e} (FSX_MMAP=0 skips maps)")))?;
                self.compare("mmap read", at, &want, map.bytes())?;
            }
            Op::DirectRead { at, len } => {
                let (_, model) = self.files();
                let want = read_at(model, at, len).expect("pread of the model");
                let got = read_at(self.direct.as_ref().unwrap(), at, len)
                    .map_err(|e| self.fail(&format!("O_DIRECT pread on the mount: {e}")))?;
                self.compare("O_DIRECT pread", at, &want, &got)?;
            }
            Op::ReadElsewhere { at, len } => {
                let (mount, _) = self.files();
                mount
                    .sync_all()
                    .map_err(|e| self.fail(&format!("fsync on the mount: {e}")))?;
                self.unsynced_map = false;
                let (_, model) = self.files();
                let want = read_at(model, at, len).expect("pread of the model");
                let got = File::open(&self.elsewhere)
                    .and_then(|f| read_at(&f, at, len))
                    .map_err(|e| self.fail(&format!("pread through the other mount: {e}")))?;
                self.compare("pread through the other mount", at, &want, &got)?;
            }
            Op::Restart => {
                // The mount's descriptors are closed across the restart: it forks this
                // process, and the child's copies of open descriptors are closed at its exec —
                // a FLUSH, which for writes the mount still keeps (close-to-open: a close
                // uploads them) waits for the very server being started.
                drop(self.mount.take());
                drop(self.direct.take());
                self.served.as_mut().unwrap().restart();
                self.open_on_the_mount()?;
            }
            Op::Fsync => {
                let all = self.rng.one_in(2);
                let (mount, _) = self.files();
                let synced = if all {
                    mount.sync_all()
                } else {
                    mount.sync_data()
                };
                synced.map_err(|e| self.fail(&format!("fsync on the mount: {e}")))?;
                self.unsynced_map = false;
            }
            Op::Reopen | Op::Switch => {
                // Closed first: the mount's close writes back what a map left dirty, and its
                // open drops the pages the kernel kept.
                drop(self.mount.take());
                drop(self.direct.take());
                drop(self.model.take());
                self.unsynced_map = false;
                if op == Op::Switch {
                    std::mem::swap(&mut self.mount_path, &mut self.elsewhere);
                }
                let model = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&self.model_path);
                self.model = Some(model.expect("reopening the model"));
                self.open_on_the_mount()?;
            }
            Op::Stat => {
                let (mount, model) = self.files();
                let sizes = [
                    ("the model's fstat", model.metadata().map(|m| m.size())),
                    ("fstat on the mount", mount.metadata().map(|m| m.size())),
                    (
                        "stat on the mount",
                        fs::metadata(&self.mount_path).map(|m| m.size()),
                    ),
                ];
                for (what, size) in sizes {
                    match size {
                        Ok(size) if size == self.size => {}
                        Ok(size) => {
                            return Err(self.fail(&format!(
                                "{what} says {size} bytes, {} expected",
                                self.size
                            )));
                        }
                        Err(e) => return Err(self.fail(&format!("{what}: {e}"))),
                    }
                }
            }
        }
        Ok(())
    }

    /// The bytes the mount gave (`got`) against the model's (`want`), read at `at`.
    fn compare(&self, how: &str, at: u64, want: &[u8], got: &[u8]) -> Result<(), Failure> {
        if let Some(i) = (0..want.len().min(got.len())).find(|&i| want[i] != got[i]) {
            let offset = at + i as u64;
            let around = |bytes: &[u8]| {
                let from = i.saturating_sub(8);
                let to = (i + 8).min(bytes.len());
                bytes[from..to]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let differ = (i..want.len().min(got.len()))
                .take_while(|&j| want[j] != got[j])
                .count();
            let writer = self.history[..self.history.len() - 1]
                .iter()
                .enumerate()
                .rev()
                .find(|(_, op)| op.wrote(offset))
                .map_or_else(
                    || "none: a hole".to_owned(),
                    |(index, op)| format!("#{index} {op}"),
                );
            return Err(self.fail(&format!(
                "{how}: first difference at offset {offset} ({offset:#x}), {differ} bytes \
                 differ from there on\n  the model's bytes from {:#x}: {}\n  the mount's bytes \
                 from {:#x}: {}\n  the last operation that wrote there: {writer}",
                offset.saturating_sub(8),
                around(want),
                offset.saturating_sub(8),
                around(got),
            )));
        }
        if want.len() != got.len() {
            return Err(self.fail(&format!(
                "{how}: the mount gave {} bytes, the model {} (size {})",
                got.len(),
                want.len(),
                self.size
            )));
        }
        Ok(())
    }

    /// The failure of the last operation in `history`: what went wrong, the tail, and the
    /// replay line.
    /// The file opened again on the mount, read-write and `O_DIRECT`.
    fn open_on_the_mount(&mut self) -> Result<(), Failure> {
        let open = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.mount_path);
        self.mount = Some(open.map_err(|e| self.fail(&format!("reopening on the mount: {e}")))?);
        let direct = open_direct(&self.mount_path);
        self.direct = Some(direct.map_err(|e| self.fail(&format!("reopening O_DIRECT: {e}")))?);
        Ok(())
    }

    fn fail(&self, what: &str) -> Failure {
        let index = self.history.len() - 1;
        let tail: Vec<String> = (self.history.iter().enumerate())
            .skip(index.saturating_sub(TAIL))
            .map(|(i, op)| format!("  {i:6} {op}"))
            .collect();
        format!(
            "fsx: seed {seed:#x}, operation #{index} ({op}): {what}\nthe last {n} operations \
             (size now {size}):\n{tail}\nreplay: FSX_SEED={seed:#x} FSX_OPS={ops} cargo test \
             --release --workspace --test fsx",
            seed = self.seed,
            op = self.history[index],
            n = tail.len(),
            size = self.size,
            tail = tail.join("\n"),
            ops = index + 1,
        )
    }
}

fn how_name(how: How) -> &'static str {
    match how {
        How::Pwrite => "pwrite",
        How::Append => "write O_APPEND",
        How::Direct => "pwrite O_DIRECT",
    }
}

fn open_direct(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// truncate(2) of `path`.
fn truncate(path: &Path, size: u64) -> std::io::Result<()> {
    let path = common::c_path(path);
    // SAFETY: a valid C string.
    if unsafe { libc::truncate(path.as_ptr(), size as libc::off_t) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// copy_file_range(2) of `len` bytes from `from` to `to` within `file`, until all are copied.
fn copy_range(file: &File, from: u64, to: u64, len: u64) -> std::io::Result<()> {
    let (mut from, mut to, mut left) = (from as libc::loff_t, to as libc::loff_t, len as usize);
    while left > 0 {
        let fd = file.as_raw_fd();
        // SAFETY: offsets this function owns; the kernel moves them.
        let n = unsafe { libc::copy_file_range(fd, &raw mut from, fd, &raw mut to, left, 0) };
        match n {
            0 => return Err(std::io::Error::other("copy_file_range copied nothing")),
            n if n > 0 => left -= n as usize,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// pread until `len` bytes or the end of the file.
fn read_at(file: &File, at: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; len as usize];
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(done);
    Ok(buf)
}

/// A shared map of `len` bytes at `at` (from the page below it), unmapped when dropped.
struct Map {
    base: *mut u8,
    mapped: usize,
    /// Where `at` is in the map.
    skip: usize,
    len: usize,
}

impl Map {
    fn new(file: &File, at: u64, len: u64, write: bool, page: u64) -> Result<Map, String> {
        let from = at & !(page - 1);
        let mapped = (at + len - from) as usize;
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh mapping of an open file, within its size; nothing else maps it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                from as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            let how = if write { "read-write" } else { "read-only" };
            return Err(format!(
                "mmap {how} shared of {mapped} bytes at {from:#x} on the mount: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Map {
            base: base.cast(),
            mapped,
            skip: (at - from) as usize,
            len: len as usize,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: within the mapping, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.add(self.skip), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: within a writable mapping that lives as long as `self`; one slice at a time.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(self.skip), self.len) }
    }

    fn msync(&self) -> std::io::Result<()> {
        // SAFETY: the whole of a live mapping.
        if unsafe { libc::msync(self.base.cast(), self.mapped, libc::MS_SYNC) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, not used after this.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}
