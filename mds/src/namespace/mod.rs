//! The namespace: every inode and directory entry in memory (the NameNode model: memory
//! answers reads, the journal makes changes durable), the POSIX rules of each operation, and
//! transno assignment.
//!
//! An operation locks the inodes it touches, checks, applies its change, and takes its transno
//! while still holding those locks: so if operation B saw or built on operation A, A's
//! transno is smaller, and the transno order is a valid serial order. It returns the journal
//! record of the change; the caller queues the reply and hands the record to the committer.
//!
//! The state in memory has its own types (`node.rs`), not the journal's on-disk records: they
//! meet only when [`Namespace::load`] reads the store and when an operation builds its
//! record, so in-memory-only state can never change the disk encoding (`docs/schema.md`).

mod acl;
mod cred;
mod dir;
mod handles;
mod ino_run;
mod node;
mod op_lists;
mod ops;
mod perm;
mod table;
mod warm;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use journal::{Ceilings, Journal, JournalOp, Recovered, TxRecord};
use parking_lot::Mutex;

use handles::Handles;
pub use handles::OpenCaps;
use mds_proto::{Attr, Body, Cred, Errno};
use node::{AttrValue, DirName, Entries, Entry, FileKind, InodeAttr, Node};
use perm::squash_root;
use table::Table;
pub use warm::WarmNamespace;

/// Who asks for an operation, as commit-on-share sees it.
#[derive(Debug)]
pub struct Caller<'a> {
    /// The client's identity: its own uncommitted changes never hold it back.
    pub client: u64,
    /// Its credentials: what it may do (POSIX permissions, `perm.rs`), and who new inodes
    /// belong to. Root squash, if on, has already been applied.
    pub cred: &'a Cred,
    /// The `last_committed` the answer is judged against. `u64::MAX` turns commit-on-share
    /// off (`--cos off`): nothing counts as uncommitted.
    pub last_committed: u64,
    /// A replayed CREATE or MKDIR (recovery) takes the inode number it had before the
    /// restart again, so what its client was told stays true.
    pub reuse_ino: Option<u64>,
    /// A replay (recovery): what it executed through a handle executes without one — the
    /// restart lost the handles, and its ticket proves the server allowed it the first time.
    pub replay: bool,
    /// How its reads move atimes: its session's, as its CONNECT said.
    pub atime: mds_proto::Atime,
}

impl Caller<'_> {
    /// The server itself, acting for `client` (a session that ended releases its handles;
    /// orphans whose clients did not come back are reclaimed): root's credentials.
    pub fn server(client: u64, last_committed: u64) -> Caller<'static> {
        static ROOT: Cred = Cred {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        };
        Caller {
            client,
            cred: &ROOT,
            last_committed,
            reuse_ino: None,
            replay: false,
            atime: mds_proto::Atime::default(),
        }
    }
}

/// What executing one operation produced.
#[derive(Debug)]
pub enum Exec {
    /// A reply that changed nothing: reads, errors, no-ops. `wait` is 0, or the transno of
    /// another client's uncommitted change the answer was built on: then it may leave only
    /// once that is durable (commit-on-share).
    Now {
        result: Result<Body, Errno>,
        wait: u64,
    },
    /// A mutation: `record` must reach the committer at once (the caller adds its resend
    /// record): until it does, no later commit can be made. With commit-deferred replies its
    /// reply (`body`) leaves once `transno` is durable. `built_on` is 0, or the newest transno of
    /// another client's uncommitted change it built on: that commit should start now, and an
    /// early reply must wait for it.
    Mutation {
        transno: u64,
        record: TxRecord,
        body: Body,
        built_on: u64,
    },
}

/// The in-memory namespace.
pub struct Namespace {
    table: Table,
    /// Next inode number; never reused, even when a create fails. Threads take it a run at a
    /// time (`ino_run`).
    next_ino: AtomicU64,
    /// The name of this namespace's runs of inode numbers ([`ino_run::new_owner`]).
    run_owner: usize,
    /// Bumped by every replayed create, which takes its number back: a run taken before may
    /// hold that number, so every thread drops the run it has.
    run_epoch: AtomicU64,
    /// The first inode number past this shard's range ([`journal::ino_limit`]): creates
    /// there are refused with ENOSPC, so no two shards ever hand out the same number.
    ino_limit: u64,
    /// The shard's first inode number: a replay's below it was never handed out here.
    ino_floor: u64,
    /// The last transno handed out.
    last_transno: CachePadded<AtomicU64>,
    /// What may be handed out: the journal's durable ceilings ([`Namespace::publish_ceilings`]).
    /// Neither counter passes its ceiling, and neither can wrap: past it an operation is
    /// refused (EBUSY) rather than take a number a crash could not account for.
    ceilings: CeilingsNow,
    /// Serialises cross-directory renames, so the "not into its own subtree" check sees a
    /// tree that cannot change under it (the kernel's `s_vfs_rename_mutex`). Rare by nature.
    rename_lock: Mutex<()>,
    directories: AtomicU64,
    files: AtomicU64,
    /// Symbolic links, fifos, sockets and devices.
    others: AtomicU64,
    /// Bytes of extended attributes held in memory: names, values and a fixed overhead each.
    xattr_bytes: AtomicU64,
    /// The sizes of every regular file added up.
    file_bytes: AtomicU64,
    /// The data every regular file holds, in `journal::DATA_BLOCK`s (`InodeAttr::data_blocks`).
    data_blocks: AtomicU64,
    /// Open handles, all clients'.
    handles: Handles,
    /// Files kept only by open handles (`nlink` 0).
    orphans: AtomicU64,
    /// Orphans loaded from the store: their handles went with the last start, and they are
    /// reclaimed when recovery ends unless a client took a handle back (`reclaim_orphans`).
    loaded_orphans: Mutex<Vec<(u64, Vec<u64>)>>,
    /// Where committed file data is read from (`None`: tests without a store, which read
    /// every committed block as a hole).
    store: Option<Arc<Journal>>,
    /// Most bytes one file keeps on the server (`--inline-data-max`); 0: READ and WRITE are
    /// refused.
    inline_data_max: u64,
    /// Files may grow past the cap into an object store (`ops/objects.rs`).
    object_store: bool,
    /// The next slice id to hand out; `None` until the first ALLOC_SLICES reads the store's.
    next_slice: Mutex<Option<u64>>,
    /// Bytes of data written by changes that may not be durable yet (`Node::data`).
    pending_data_bytes: AtomicU64,
    /// (transno, inode) of each write whose data is held in memory until its commit, for
    /// [`Namespace::data_committed`] to find after the commit.
    pending_data: Mutex<VecDeque<(u64, u64)>>,
    /// Set when the journal fails: every mutation is refused with EIO from then on.
    read_only: AtomicBool,
    /// The journal failure that made it read-only was a full disk.
    no_space: AtomicBool,
    /// Directories whose entries live on other shards and wait for those shards' word
    /// (`ops/remote.rs`): made and not confirmed yet, or being removed; by inode. Locked
    /// after a stripe, never before one. Each with the transno that last marked it (0 for
    /// one loaded at start), so that the scrub's word on one mark is not taken for a newer.
    pending_dirs: Mutex<BTreeMap<u64, (journal::PendingDir, u64)>>,
    /// How many of `pending_dirs` are being removed: while none is, a new entry's check that
    /// its directory is not being removed costs one load, not the lock.
    removing_dirs: AtomicUsize,
    /// Root squash (`--root-squash`): requests from uid 0 run as nobody. Applied by
    /// [`Namespace::effective_cred`] to each request's credentials as they are decoded.
    root_squash: bool,
    /// Journal op lists the committer gave back, for the next mutations' records.
    op_lists: op_lists::OpLists,
}

/// The ceilings the counters may not pass, and when to ask for higher ones.
#[derive(Debug)]
struct CeilingsNow {
    /// The last transno that may be handed out.
    transno: AtomicU64,
    /// Inode numbers below this one may be handed out.
    ino: AtomicU64,
    /// Past this inode number, the ceiling should be raised before it is reached: creates
    /// that fail burn numbers without a commit to raise it.
    ino_low_water: AtomicU64,
    /// Set when an allocation passed `ino_low_water`; taken by [`Namespace::take_ceiling_request`].
    wanted: AtomicBool,
}

impl CeilingsNow {
    fn new(c: Ceilings, inode_counter: u64) -> CeilingsNow {
        let now = CeilingsNow {
            transno: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            ino_low_water: AtomicU64::new(0),
            wanted: AtomicBool::new(false),
        };
        now.raise(c, inode_counter);
        now
    }

    /// Raises the ceilings to `c`; the next request for more comes once half of the inode
    /// numbers left above `inode_counter` are used.
    fn raise(&self, c: Ceilings, inode_counter: u64) {
        self.transno.fetch_max(c.transno, Ordering::AcqRel);
        let ino = self.ino.fetch_max(c.ino, Ordering::AcqRel).max(c.ino);
        let left = ino.saturating_sub(inode_counter);
        self.ino_low_water
            .fetch_max(ino - left / 2, Ordering::AcqRel);
        self.wanted.store(false, Ordering::Release);
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("last_transno", &self.last_transno())
            .finish_non_exhaustive()
    }
}

impl Namespace {
    /// Loads the committed namespace from the journal, refusing a store whose entries name
    /// inodes that do not exist or are of another kind: serving it would fail later, in the
    /// middle of an operation that already holds its transno (an UNLINK of such an entry
    /// once panicked a partition there, and every commit after it waited forever).
    pub fn load(journal: &Journal, recovered: &Recovered) -> crate::error::Result<Namespace> {
        let ns = Namespace::without_inodes(journal, recovered)?;
        ns.fill(journal)?;
        Ok(ns)
    }

    /// What a start takes from the store but its inodes, entries, attributes and orphans:
    /// the counters, ceilings and pending directories `recovered` and `journal` say.
    fn without_inodes(journal: &Journal, recovered: &Recovered) -> crate::error::Result<Namespace> {
        // Above every number handed out before this start (a crash may have lost creates that
        // clients were told of early): none is ever handed out twice.
        let next_ino = recovered.next_ino.max(recovered.ceilings.ino);
        let pending_dirs = journal.pending_dirs()?;
        let removing = pending_dirs.iter().filter(|p| p.removing).count();
        Ok(Namespace {
            table: Table::new(),
            next_ino: AtomicU64::new(next_ino),
            run_owner: ino_run::new_owner(),
            run_epoch: AtomicU64::new(0),
            ino_limit: recovered.ino_limit,
            ino_floor: journal::first_ino(recovered.shard.as_ref().map_or(0, |s| s.shard)),
            last_transno: CachePadded::new(AtomicU64::new(recovered.last_committed)),
            ceilings: CeilingsNow::new(recovered.leased, next_ino),
            rename_lock: Mutex::new(()),
            directories: AtomicU64::new(0),
            files: AtomicU64::new(0),
            others: AtomicU64::new(0),
            xattr_bytes: AtomicU64::new(0),
            file_bytes: AtomicU64::new(0),
            data_blocks: AtomicU64::new(0),
            handles: Handles::default(),
            orphans: AtomicU64::new(0),
            loaded_orphans: Mutex::new(Vec::new()),
            store: None,
            inline_data_max: 0,
            object_store: false,
            next_slice: Mutex::new(None),
            pending_data_bytes: AtomicU64::new(0),
            pending_data: Mutex::new(VecDeque::new()),
            read_only: AtomicBool::new(false),
            no_space: AtomicBool::new(false),
            pending_dirs: Mutex::new(pending_dirs.into_iter().map(|p| (p.ino, (p, 0))).collect()),
            removing_dirs: AtomicUsize::new(removing),
            root_squash: false,
            op_lists: op_lists::OpLists::default(),
        })
    }

    /// Loads every inode, entry, attribute and orphan of `journal` into a namespace that has
    /// none yet, refusing what does not hold together (`Namespace::load`).
    fn fill(&self, journal: &Journal) -> crate::error::Result<()> {
        let ns = self;
        // The store keys entries by child (`docs/schema.md`): a directory's entries come
        // scattered and in no name order. Each directory's are gathered, sorted once (in
        // directory order, which puts equal names side by side) and built in one pass;
        // inserted one by one as they came, a start-up took 14-25% longer
        // (docs/benchmarks/journal.md, "Entries keyed by their child").
        let mut groups: BTreeMap<u64, Vec<(DirName, Entry)>> = BTreeMap::new();
        // Files with no link left: each must be an orphan (`load_orphans`). Noted here, in
        // the one pass over the inodes, rather than by walking the table again.
        let mut nameless = Vec::new();
        // Each directory with the number of entries its image records: checked against the
        // entries found, so that a store missing entries (or holding extra ones) is refused
        // here rather than served without them.
        let mut recorded = Vec::new();
        // One pass over each family: a new inode's image may be in its entry's value
        // (schema 6), which the journal merges with the images under their own keys.
        journal.scan_namespace(
            |parent, name, entry| {
                groups
                    .entry(parent)
                    .or_default()
                    .push((DirName::new(&name), Entry::from_record(entry)));
                Ok(())
            },
            |record| {
                let attr = InodeAttr::from_record(record);
                ns.count(attr.kind, 1);
                if !attr.kind.is_dir() && attr.nlink == 0 {
                    nameless.push(attr.ino);
                }
                if attr.kind.is_dir() {
                    recorded.push((attr.ino, attr.entries));
                }
                ns.count_file(&attr, true);
                let entries = attr.kind.is_dir().then(Entries::new);
                ns.table.insert_unlocked(Node::new(attr, entries));
                Ok(())
            },
        )?;
        let mut dirs: BTreeMap<u64, Entries> = BTreeMap::new();
        for (parent, mut entries) in groups {
            entries.sort_unstable_by(|a, b| mds_proto::name_order(a.0.as_bytes(), b.0.as_bytes()));
            // Two children under one name are two keys, which a store written by a broken
            // build could hold: refused, not one of them kept at random.
            if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(crate::error::Error::Inconsistent(format!(
                    "two entries {parent}/{:?}, naming inodes {} and {}; run `mds fsck --data {}`",
                    w[0].0,
                    w[0].1.ino,
                    w[1].1.ino,
                    journal.path().display()
                )));
            }
            dirs.insert(parent, entries.into_iter().collect());
        }
        // Counted before the entries go into their directories; reported after what is wrong
        // with an entry itself, which says more.
        let miscounted = recorded.into_iter().find_map(|(ino, recorded)| {
            let found = dirs.get(&ino).map_or(0, |e| e.len() as u64);
            (found != recorded).then_some((ino, recorded, found))
        });
        ns.load_xattrs(journal)?;
        ns.load_orphans(journal, &nameless)?;
        // Every entry must name a live inode of the kind it says, under a directory; an
        // entry naming another shard's inode, a directory (MKDIR_REMOTE's), whose inode that
        // shard checks.
        for (parent, entries) in dirs {
            for (name, entry) in entries.iter() {
                if ns.is_remote(entry.ino) {
                    if entry.kind != FileKind::Directory {
                        return Err(crate::error::Error::Inconsistent(format!(
                            "entry {parent}/{name:?} names inode {} of another shard, which \
                             only a directory may be; run `mds fsck --data {}`",
                            entry.ino,
                            journal.path().display()
                        )));
                    }
                    continue;
                }
                let child = ns
                    .table
                    .lock(&[entry.ino])
                    .get(entry.ino)
                    .map(|n| n.attr.kind);
                if child != Some(entry.kind) {
                    let found = match child {
                        None => "does not exist".to_owned(),
                        Some(kind) => format!("is a {kind:?}, not a {:?}", entry.kind),
                    };
                    return Err(crate::error::Error::Inconsistent(format!(
                        "entry {parent}/{name:?} names inode {}, which {found}; run `mds fsck \
                         --data {}`",
                        entry.ino,
                        journal.path().display()
                    )));
                }
            }
            let mut locked = ns.table.lock(&[parent]);
            let Some(dir) = locked.get_mut(parent).and_then(Node::entries_mut) else {
                return Err(crate::error::Error::Inconsistent(format!(
                    "{} entries under inode {parent}, which is not a directory; run `mds fsck \
                     --data {}`",
                    entries.len(),
                    journal.path().display()
                )));
            };
            *dir = entries;
        }
        if let Some((ino, recorded, found)) = miscounted {
            return Err(crate::error::Error::Inconsistent(format!(
                "directory {ino} records {recorded} entries and the store holds {found} under \
                 it; run `mds fsck --data {}`",
                journal.path().display()
            )));
        }
        Ok(())
    }

    /// A namespace of the root alone, with no store behind it and no ceiling that matters:
    /// for tests of what runs above the namespace.
    #[cfg(test)]
    pub(crate) fn empty() -> Namespace {
        tests::empty()
    }

    /// The same namespace, reading committed file data from `store` and holding at most
    /// `inline_data_max` bytes per file (0: no file data at all).
    pub fn with_data(self, store: Arc<Journal>, inline_data_max: u64) -> Namespace {
        Namespace {
            store: Some(store),
            inline_data_max,
            ..self
        }
    }

    /// The slice ids this shard hands out (ALLOC_SLICES): its inode numbers' range.
    pub fn slice_range(&self) -> std::ops::Range<u64> {
        self.ino_floor.max(1)..self.ino_limit
    }

    /// The same namespace, letting files grow past the inline cap into an object store.
    pub fn with_objects(self) -> Namespace {
        Namespace {
            object_store: true,
            ..self
        }
    }

    /// The same namespace, holding at most `caps` open handles (a start's, before any is
    /// open).
    pub fn capping_open(self, caps: OpenCaps) -> Namespace {
        debug_assert_eq!(
            self.handles.count(),
            0,
            "caps are set before handles are open"
        );
        Namespace {
            handles: Handles::with_caps(caps),
            ..self
        }
    }

    /// The same namespace, root-squashing (`--root-squash`) or not.
    pub fn squashing_root(self, on: bool) -> Namespace {
        Namespace {
            root_squash: on,
            ..self
        }
    }

    /// Turns the credentials a request carries into those it executes with: root-squashed
    /// (`perm::squash_root`) if the server was started so. In place: no allocation.
    #[inline]
    pub fn effective_cred(&self, cred: &mut Cred) {
        if self.root_squash {
            squash_root(cred);
        }
    }

    /// A mutation's journal ops, with room for the resend record dispatch adds to them: in
    /// a list the committer gave back if there is one ([`Namespace::give_back_ops`]).
    pub(crate) fn journal_ops<const N: usize>(&self, ops: [JournalOp; N]) -> Vec<JournalOp> {
        let mut list = self.op_list(N);
        list.extend(ops);
        list
    }

    /// An empty op list with room for `n` ops and the resend record, for a mutation that
    /// pushes its ops one by one: each is built where it goes, not in an array first and
    /// copied over with it ([`Namespace::journal_ops`]).
    pub(crate) fn op_list(&self, n: usize) -> Vec<JournalOp> {
        self.op_lists.take(n + op_lists::RESEND_OPS)
    }

    /// The records of a written commit, done with: their op lists go back for the next
    /// mutations (the committer calls it; the records' contents are dropped here).
    pub(crate) fn give_back_ops(&self, records: Vec<TxRecord>) {
        self.op_lists.give_back(records);
    }

    /// The last transno handed out.
    pub fn last_transno(&self) -> u64 {
        self.last_transno.load(Ordering::SeqCst)
    }

    /// Recovery: transnos up to `upto` will never be replayed (their clients did not come
    /// back); the next mutation takes `upto + 1`. Only while nothing else executes, and never
    /// past the ceiling (recovery validates what it skips to against the ceiling at start,
    /// which this one is at least).
    pub fn skip_to(&self, upto: u64) {
        let ceiling = self.ceilings.transno.load(Ordering::Acquire);
        self.last_transno
            .fetch_max(upto.min(ceiling), Ordering::SeqCst);
    }

    /// Takes the next transno, called with the operation's locks held before it changes
    /// anything; EBUSY past the ceiling (the journal has not made room for it yet).
    fn next_transno(&self) -> Result<u64, Errno> {
        let ceiling = self.ceilings.transno.load(Ordering::Acquire);
        self.last_transno
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                (t < ceiling).then(|| t + 1)
            })
            .map(|t| t + 1)
            .map_err(|_| Errno::EBUSY)
    }

    /// Takes an inode number for a create; EBUSY at the ceiling, ENOSPC past the shard's
    /// range (which no commit raises). A create that then fails burns it (numbers are never
    /// taken back). Anything but a directory takes the next number of this thread's run
    /// (`ino_run`), and a new run when it is used up. A directory (`dir`) takes the first
    /// number of a block of its own and burns the rest: creates in a directory lock its
    /// stripe, and the table stripes by block (`table::stripe_of`), so directories made one
    /// after another would share a stripe, and partitions creating in them would wait on each
    /// other's locks (docs/benchmarks/in-memory.md, "Inode numbers in runs").
    fn allocate_ino(&self, dir: bool) -> Result<u64, Errno> {
        let ceiling = self
            .ceilings
            .ino
            .load(Ordering::Acquire)
            .min(self.ino_limit);
        let epoch = self.run_epoch.load(Ordering::Acquire);
        if !dir && let Some(ino) = ino_run::next(self.run_owner, epoch, ceiling) {
            return Ok(ino);
        }
        // A run begins where the counter is, a directory at the next block's first number;
        // either takes the rest of its block, up to the ceiling.
        let first = |i: u64| if dir { ino_run::block_start_from(i) } else { i };
        let ino = match self
            .next_ino
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |i| {
                let start = first(i);
                (start < ceiling).then(|| ino_run::block_end(start).min(ceiling))
            }) {
            Ok(i) => first(i),
            Err(i) if first(i) >= self.ino_limit => return Err(Errno::ENOSPC),
            Err(_) => {
                self.ceilings.wanted.store(true, Ordering::Release);
                return Err(Errno::EBUSY);
            }
        };
        let end = ino_run::block_end(ino).min(ceiling);
        if end > self.ceilings.ino_low_water.load(Ordering::Relaxed) {
            self.ceilings.wanted.store(true, Ordering::Release);
        }
        if !dir {
            ino_run::keep(self.run_owner, epoch, ino, end);
        }
        Ok(ino)
    }

    /// Whether `ino` is in this shard's range and below the inode ceiling: a number that may
    /// have been handed out here.
    fn may_have_handed_out(&self, ino: u64) -> bool {
        ino >= self.ino_floor
            && ino < self.ino_limit
            && ino < self.ceilings.ino.load(Ordering::Acquire)
    }

    /// The journal made these ceilings durable: the counters may go up to them.
    pub fn publish_ceilings(&self, ceilings: Ceilings) {
        self.ceilings.raise(ceilings, self.inode_counter());
    }

    /// Whether inode numbers run short of the ceiling with no commit coming to raise it
    /// (creates that fail burn them); the caller asks the journal for a higher one. Taken:
    /// true once per shortage.
    pub fn take_ceiling_request(&self) -> bool {
        self.ceilings.wanted.load(Ordering::Relaxed)
            && self.ceilings.wanted.swap(false, Ordering::AcqRel)
    }

    /// The next inode number a create would take (burned ones counted): the journal keeps
    /// its ceiling a lease above this.
    pub fn inode_counter(&self) -> u64 {
        self.next_ino.load(Ordering::Relaxed)
    }

    /// Refuses all mutations from now on (the journal failed).
    /// The journal failed: refuse mutations from now on, with ENOSPC if the disk is full and
    /// EIO otherwise.
    pub fn set_read_only(&self, no_space: bool) {
        self.no_space.store(no_space, Ordering::SeqCst);
        self.read_only.store(true, Ordering::SeqCst);
    }

    /// What a mutation is refused with once read-only, and what a reply that waited for a
    /// commit that failed gets: the outcome of its change is unknown.
    pub fn refusal(&self) -> Errno {
        if self.no_space.load(Ordering::SeqCst) {
            Errno::ENOSPC
        } else {
            Errno::EIO
        }
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    /// The inodes in the namespace by kind, uncommitted changes included.
    pub fn counts(&self) -> Counts {
        Counts {
            directories: self.directories.load(Ordering::Relaxed),
            files: self.files.load(Ordering::Relaxed),
            others: self.others.load(Ordering::Relaxed),
            xattr_bytes: self.xattr_bytes.load(Ordering::Relaxed),
            file_bytes: self.file_bytes.load(Ordering::Relaxed),
            data_bytes: self.data_blocks.load(Ordering::Relaxed) * journal::DATA_BLOCK as u64,
        }
    }

    /// Counts a regular file's size and data into the totals (`add`), or out of them.
    fn count_file(&self, attr: &InodeAttr, add: bool) {
        if attr.kind != FileKind::File {
            return;
        }
        let blocks = u64::from(attr.data_blocks);
        if add {
            self.file_bytes.fetch_add(attr.size, Ordering::Relaxed);
            self.data_blocks.fetch_add(blocks, Ordering::Relaxed);
        } else {
            self.file_bytes.fetch_sub(attr.size, Ordering::Relaxed);
            self.data_blocks.fetch_sub(blocks, Ordering::Relaxed);
        }
    }

    /// A file now holds `blocks` of data: its count and the total follow.
    fn set_data_blocks(&self, attr: &mut InodeAttr, blocks: u64) {
        let blocks = u32::try_from(blocks).unwrap_or(u32::MAX);
        let old = std::mem::replace(&mut attr.data_blocks, blocks);
        // One shared counter for every partition: touched only when the count moves (an
        // overwrite, the common write inside a file, leaves it).
        match blocks.cmp(&old) {
            std::cmp::Ordering::Greater => self
                .data_blocks
                .fetch_add(u64::from(blocks - old), Ordering::Relaxed),
            std::cmp::Ordering::Less => self
                .data_blocks
                .fetch_sub(u64::from(old - blocks), Ordering::Relaxed),
            std::cmp::Ordering::Equal => 0,
        };
    }

    /// Counts `n` inodes of `kind` more (or fewer: `n` negative).
    fn count(&self, kind: FileKind, n: i64) {
        let counter = match kind {
            FileKind::Directory => &self.directories,
            FileKind::File => &self.files,
            _ => &self.others,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Loading: the orphans, each a file with no name left; refuses an orphan record of
    /// anything else, and a file with no name and no orphan record.
    fn load_orphans(&self, journal: &Journal, nameless: &[u64]) -> crate::error::Result<()> {
        let mut orphans = Vec::new();
        journal.scan_orphans(|ino, owners| {
            orphans.push((ino, owners));
            Ok(())
        })?;
        let inconsistent = |what: String| {
            crate::error::Error::Inconsistent(format!(
                "{what}; run `mds fsck --data {}`",
                journal.path().display()
            ))
        };
        for (ino, _) in &orphans {
            let orphan = self.table.lock(&[*ino]).get(*ino).map(Node::is_orphan);
            if orphan != Some(true) {
                return Err(inconsistent(format!(
                    "orphan record of inode {ino}, which is not a file without names"
                )));
            }
        }
        if let Some(ino) = nameless
            .iter()
            .find(|ino| !orphans.iter().any(|(o, _)| o == *ino))
        {
            return Err(inconsistent(format!(
                "inode {ino} has no names and no orphan record"
            )));
        }
        self.orphans.store(orphans.len() as u64, Ordering::Relaxed);
        *self.loaded_orphans.lock() = orphans;
        Ok(())
    }

    /// The clients the orphans loaded at start wait for: recovery keeps its window open for
    /// them, so that they can take their handles back.
    pub fn orphan_owners(&self) -> Vec<u64> {
        let mut owners: Vec<u64> = self
            .loaded_orphans
            .lock()
            .iter()
            .flat_map(|(_, o)| o.iter().copied())
            .collect();
        owners.sort_unstable();
        owners.dedup();
        owners
    }

    /// Handles open and orphans, all clients'.
    pub fn open_files(&self) -> (u64, u64) {
        (self.handles.count(), self.orphans.load(Ordering::Relaxed))
    }

    /// Whether `client` holds open handles (its session is not idle).
    pub fn holds_handles(&self, client: u64) -> bool {
        self.handles.holds_any(client)
    }

    /// Most bytes one file may hold; 0: no file data.
    pub fn inline_data_max(&self) -> u64 {
        self.inline_data_max
    }

    /// Bytes of file data held in memory until their commit.
    pub fn pending_data_bytes(&self) -> u64 {
        self.pending_data_bytes.load(Ordering::Relaxed)
    }

    /// Loading: every committed extended attribute onto its inode, refusing one whose inode
    /// does not exist.
    fn load_xattrs(&self, journal: &Journal) -> crate::error::Result<()> {
        let mut orphaned = None;
        journal.scan_xattrs(|ino, name, value| {
            let mut locked = self.table.lock(&[ino]);
            let Some(node) = locked.get_mut(ino) else {
                orphaned.get_or_insert((ino, name));
                return Ok(());
            };
            let bytes = node::xattr_charge(&name, &value);
            let xattrs = node.xattrs.get_or_insert_with(Default::default);
            xattrs.bytes += bytes;
            xattrs
                .by_name
                .insert(name.into(), AttrValue::committed(value));
            self.xattr_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            Ok(())
        })?;
        if let Some((ino, name)) = orphaned {
            return Err(crate::error::Error::Inconsistent(format!(
                "extended attribute {name:?} of inode {ino}, which does not exist; run `mds \
                 fsck --data {}`",
                journal.path().display()
            )));
        }
        Ok(())
    }
}

/// The namespace's inodes by kind, and the bytes of extended attributes it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub directories: u64,
    pub files: u64,
    /// Symbolic links, fifos, sockets and devices.
    pub others: u64,
    pub xattr_bytes: u64,
    /// The sizes of every regular file added up.
    pub file_bytes: u64,
    /// The data regular files hold, holes not counted (their `data_blocks`, in bytes).
    pub data_bytes: u64,
}

impl Counts {
    pub fn inodes(&self) -> u64 {
        self.directories + self.files + self.others
    }
}

/// The wire view of an inode.
pub(crate) fn to_attr(inode: &InodeAttr) -> Attr {
    Attr {
        ino: inode.ino,
        kind: inode.kind.wire(),
        mode: inode.mode,
        uid: inode.uid,
        gid: inode.gid,
        nlink: inode.nlink,
        size: match inode.kind {
            FileKind::Directory => inode.entries,
            _ => inode.size,
        },
        atime_ns: inode.atime_ns,
        mtime_ns: inode.mtime_ns,
        ctime_ns: inode.ctime_ns,
        rdev: inode.rdev,
        generation: inode.generation,
        blocks: match inode.kind {
            FileKind::File => u64::from(inode.data_blocks) * (journal::DATA_BLOCK as u64 / 512),
            _ => 0,
        },
    }
}

/// One wall-clock read per mutation (ctime/mtime): the only wall-clock read on the execution
/// path.
fn now_ns() -> i64 {
    journal::now_ns()
}

/// Seconds since the Unix epoch, as the object collector's records keep them.
pub(crate) fn unix_now() -> u64 {
    u64::try_from(now_ns() / 1_000_000_000).unwrap_or(0)
}

#[cfg(test)]
mod acl_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod open_tests;
#[cfg(test)]
mod perm_cos_tests;
#[cfg(test)]
mod tests;
