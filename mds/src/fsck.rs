//! `mds fsck`: an offline consistency check of a store.
//!
//! Every entry must name a live inode of the kind it says, in a directory; every inode but the
//! root must be named exactly once (no orphans, no second name for a directory); link counts
//! and entry counts must match the entries; a directory's parent pointer must match the entry
//! that names it; no inode may carry a transno above `last_committed`, and no inode number may
//! be at or above the next one to be handed out. A non-directory's link count must equal the
//! entries naming it; a symlink must have a target of 1 to 4095 bytes, and its size be the
//! target's length; only devices carry a device number; every extended attribute must belong
//! to a live inode, with a name and value within Linux's limits. Resend records must hold a
//! reply this build decodes and a transno no later than `last_committed` (they are written
//! with their mutation). A file no entry names must be an orphan — `nlink` 0 and an orphan
//! record (an unlinked file a handle held when the server stopped) — and every orphan record
//! such a file. Every data block must belong to a live regular file on the server (not in
//! the object store) and lie within its size. Every layout (a file in the object store) must
//! belong to a live file in objects, or a deleted one the collector has still to clear, with
//! pieces inside their slices and the file's size; with the object store the default directory
//! (`objects/` inside the store, or in a cluster's data root), every slice a layout names must
//! be there whole, and the slices of the store's range that nothing names are counted.
//!
//! A cluster's shard also holds the two halves of remote directories (MKDIR_REMOTE): entries
//! naming another shard's inode (a directory; its inode is that shard's to check), and remote
//! roots — directories whose parent is another shard's, which no entry here names and from
//! which the walk down starts too. A remote root not confirmed yet is pending (a meta record
//! the start-up scrub resolves): reported, not a finding. `mds fsck --cluster ROOT` checks
//! every `ROOT/shard-N` store and then both halves against each other: each remote entry
//! must name a remote root of its shard whose parent is the entry's directory, and each
//! confirmed remote root must be named by exactly one such entry.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use journal::{FileKind, Inode, Journal, ROOT_INO};

use mds_proto::check_name;

/// The pid holding RocksDB's lock on the store (an `fcntl` write lock on its LOCK file), if
/// another process holds it. `mds serve` asks too, to refuse a store another server holds by
/// naming that server rather than with RocksDB's lock error.
pub(crate) fn lock_holder(lock: &Path) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(lock)
        .ok()?;
    // SAFETY: a zeroed flock is a valid argument; F_GETLK only fills it in.
    let mut query: libc::flock = unsafe { std::mem::zeroed() };
    query.l_type = libc::F_WRLCK as libc::c_short;
    query.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: the descriptor is open for the duration of the call; `query` outlives it.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut query) };
    (rc == 0 && query.l_type != libc::F_UNLCK as libc::c_short).then_some(query.l_pid)
}

/// What fsck found.
#[derive(Debug, Default)]
pub struct Report {
    pub inodes: u64,
    pub entries: u64,
    /// Files no entry names, kept for the handles that held them (reclaimed by the next
    /// start once its recovery window ends without their clients).
    pub orphans: u64,
    /// File data blocks, and their bytes.
    pub data_blocks: u64,
    pub data_bytes: u64,
    pub last_committed: u64,
    /// The store's shard (0 outside a cluster).
    pub shard: u16,
    /// Entries naming another shard's directory: (parent, name, inode).
    pub remote_entries: Vec<(u64, String, u64)>,
    /// Directories whose parent is another shard's: (inode, parent).
    pub remote_roots: Vec<(u64, u64)>,
    /// Remote roots not confirmed yet (their entry may never have been made).
    pub pending: Vec<journal::PendingDir>,
    /// Files whose data is in the object store, and the distinct slices their layouts name.
    pub layouts: u64,
    pub named_slices: u64,
    /// Deleted files and cut-out slices the collector has still to delete.
    pub garbage: u64,
    /// What a listing of the object store found (None: not checked, the store is not a
    /// directory of this host): slices no layout names, which the collector deletes after
    /// its grace.
    pub unnamed_slices: Option<u64>,
    /// One line per problem; empty when the store is clean.
    pub findings: Vec<String>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Checks the store in `data`, read-only. Refuses a store a running server holds: what it
/// would read is only what that server has flushed, not the store's state.
pub fn check(data: &Path) -> crate::error::Result<Report> {
    if let Some(pid) = lock_holder(&data.join("LOCK")) {
        return Err(crate::error::Error::InUse {
            path: data.to_owned(),
            pid,
        });
    }
    let (journal, recovered) =
        Journal::open_read_only(data).map_err(|source| crate::error::Error::Journal {
            what: format!("opening {} read-only", data.display()),
            source,
        })?;
    let mut report = Report {
        last_committed: recovered.last_committed,
        ..Report::default()
    };
    let mut inodes: HashMap<u64, Inode> = HashMap::new();
    journal.scan_inodes(|inode| {
        inodes.insert(inode.ino, inode);
        Ok(())
    })?;
    report.inodes = inodes.len() as u64;
    let mut orphans = HashSet::new();
    journal.scan_orphans(|ino, _| {
        orphans.insert(ino);
        Ok(())
    })?;
    report.orphans = orphans.len() as u64;
    let (blocks, bytes) = check_data(&journal, &inodes, &mut report.findings)?;
    (report.data_blocks, report.data_bytes) = (blocks, bytes);
    let shard = recovered.shard.as_ref().map_or(0, |s| s.shard);
    report.shard = shard;
    report.pending = journal.pending_dirs()?;
    let f = &mut report.findings;
    let mut tree = Tree::scan(&journal, &inodes, shard, f)?;
    report.entries = tree.count;
    for inode in inodes.values() {
        if inode.kind == FileKind::Directory
            && inode.ino != ROOT_INO
            && journal::shard_of(inode.parent) != shard
        {
            tree.remote_roots.push(inode.ino);
            report.remote_roots.push((inode.ino, inode.parent));
        }
    }
    report.remote_roots.sort_unstable();
    for p in &report.pending {
        match inodes.get(&p.ino) {
            None => f.push(format!(
                "pending directory {} ({}/{:?}) does not exist",
                p.ino, p.parent, p.name
            )),
            Some(i) if i.kind != FileKind::Directory || i.parent != p.parent => f.push(format!(
                "pending directory {} ({}/{:?}) is not a directory of that parent",
                p.ino, p.parent, p.name
            )),
            Some(_) => {}
        }
    }
    report.remote_entries = std::mem::take(&mut tree.remote_entries);
    match inodes.get(&ROOT_INO) {
        // The root is shard 0's; another shard's store holds only what lives there.
        None if shard != 0 => {}
        Some(_) if shard != 0 => f.push(format!(
            "shard {shard} holds inode 1, which is the root on shard 0"
        )),
        None => f.push("root inode 1 is missing".into()),
        Some(root) if root.kind != FileKind::Directory => {
            f.push("root inode 1 is not a directory".into());
        }
        Some(_) => {}
    }
    let reached = tree.reachable();
    let mut sorted: Vec<&Inode> = inodes.values().collect();
    sorted.sort_by_key(|i| i.ino);
    tree.find_cycles(&sorted, &reached, f);
    for inode in sorted {
        check_inode(
            inode,
            &recovered,
            &tree,
            &reached,
            orphans.contains(&inode.ino),
            f,
        );
    }
    for ino in &orphans {
        if !inodes.contains_key(ino) {
            f.push(format!(
                "orphan record of inode {ino}, which does not exist"
            ));
        }
    }
    check_resend_records(&recovered, f);
    check_xattrs(&journal, &inodes, f)?;
    check_layouts(&journal, &inodes, &mut report)?;
    let objects = if recovered.shard.is_some() {
        // A cluster's shards share one store, beside theirs in the data root.
        data.parent().unwrap_or(data).join("objects")
    } else {
        data.join("objects")
    };
    check_objects(&objects, shard, &journal, &mut report)?;
    Ok(report)
}

/// Every layout belongs to a live regular file in objects (or a deleted one the collector
/// has still to clear), with valid pieces within the file's size; every file in objects has
/// one; no file in objects has data blocks.
fn check_layouts(
    journal: &Journal,
    inodes: &HashMap<u64, Inode>,
    report: &mut Report,
) -> journal::Result<()> {
    let gone: HashSet<u64> = journal
        .gone_layouts()?
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    let garbage = journal.garbage()?;
    report.garbage = (gone.len() + garbage.len()) as u64;
    let mut with_layout = HashSet::new();
    let mut slices = HashSet::new();
    let counted = journal.data_counted()?;
    let f = &mut report.findings;
    journal.scan_layouts(|ino, layout| {
        with_layout.insert(ino);
        slices.extend(layout.iter().map(|p| p.slice));
        let at = format!("layout of inode {ino}");
        match inodes.get(&ino) {
            None if gone.contains(&ino) => {}
            None => f.push(format!(
                "{at}: the inode does not exist, and it is not deleted"
            )),
            Some(i) if i.kind != FileKind::File || i.entries != 1 => {
                f.push(format!("{at}: not a regular file in objects"));
            }
            Some(i) => {
                for p in &layout {
                    if !p.is_valid() || p.file_end() > i.size {
                        f.push(format!(
                            "{at}: piece {p:?} past its slice or the size {}",
                            i.size
                        ));
                    }
                }
                let covered = journal::layout_data_blocks(&layout);
                if counted && covered != i.data_blocks {
                    f.push(format!(
                        "{at}: covers {covered} blocks, the inode counts {}",
                        i.data_blocks
                    ));
                }
            }
        }
        Ok(())
    })?;
    for ino in &gone {
        if inodes.contains_key(ino) {
            f.push(format!(
                "inode {ino} is live but marked deleted for the collector"
            ));
        }
    }
    for i in inodes.values() {
        if i.kind == FileKind::File && i.entries == 1 && !with_layout.contains(&i.ino) {
            f.push(format!("inode {} is in objects but has no layout", i.ino));
        }
    }
    report.layouts = with_layout.len() as u64;
    report.named_slices = slices.len() as u64;
    Ok(())
}

/// With the object store a directory beside the store (the default, `objects/`): every slice
/// a layout names is there whole, and the slices nothing names are counted.
fn check_objects(
    dir: &Path,
    shard: u16,
    journal: &Journal,
    report: &mut Report,
) -> crate::error::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    let listing = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::error::Error::Invalid(format!("starting a runtime: {e}")))?
        .block_on(async {
            mds_objects::Store::open(&mds_objects::Address::Local(dir.to_owned()))?
                .list()
                .await
        })
        .map_err(|e| crate::error::Error::Invalid(format!("listing {}: {e}", dir.display())))?;
    let mut stored: HashMap<u64, HashSet<u32>> = HashMap::new();
    for b in &listing.blocks {
        stored.entry(b.id).or_default().insert(b.block);
    }
    let mut named = HashSet::new();
    let garbage: HashSet<u64> = journal.garbage()?.into_iter().map(|(s, _, _)| s).collect();
    let f = &mut report.findings;
    journal.scan_layouts(|ino, layout| {
        for p in layout {
            if !named.insert(p.slice) {
                continue;
            }
            let have = stored.get(&p.slice);
            let missing = (0..mds_objects::blocks_of(p.slice_size))
                .find(|b| !have.is_some_and(|h| h.contains(b)));
            if let Some(block) = missing {
                f.push(format!(
                    "slice {:016x} of inode {ino}: object {block} is not in {}",
                    p.slice,
                    dir.display()
                ));
            }
        }
        Ok(())
    })?;
    // Only this shard's ids: in a cluster the store holds every shard's slices.
    let ours = journal::first_ino(shard)..journal::ino_limit(shard);
    report.unnamed_slices = Some(
        stored
            .keys()
            .filter(|id| ours.contains(*id) && !named.contains(*id) && !garbage.contains(*id))
            .count() as u64,
    );
    Ok(())
}

/// Every data block belongs to a live regular file, within its size and at most one block
/// long, and every file on the server counts the blocks it holds; returns the blocks and
/// their bytes.
fn check_data(
    journal: &Journal,
    inodes: &HashMap<u64, Inode>,
    f: &mut Vec<String>,
) -> journal::Result<(u64, u64)> {
    let (mut blocks, mut bytes) = (0, 0);
    let mut held: HashMap<u64, u64> = HashMap::new();
    let block_size = journal::DATA_BLOCK as u64;
    journal.scan_data(|ino, block, data| {
        blocks += 1;
        *held.entry(ino).or_default() += 1;
        bytes += data.len() as u64;
        let at = format!("data block {block} of inode {ino}");
        match inodes.get(&ino) {
            None => f.push(format!("{at}: the inode does not exist")),
            Some(i) if i.kind != FileKind::File => f.push(format!("{at}: a {:?}", i.kind)),
            Some(i) if i.entries == 1 => f.push(format!("{at}: the file is in objects")),
            Some(i) => {
                let start = u64::from(block) * block_size;
                if start + data.len() as u64 > i.size {
                    f.push(format!(
                        "{at}: {} bytes from {start}, past the size {}",
                        data.len(),
                        i.size
                    ));
                }
            }
        }
        if data.len() as u64 > block_size {
            f.push(format!("{at}: {} bytes, more than a block", data.len()));
        }
        Ok(())
    })?;
    if journal.data_counted()? {
        let on_server = inodes
            .values()
            .filter(|i| i.kind == FileKind::File && i.entries != 1);
        for i in on_server {
            let stored = held.get(&i.ino).copied().unwrap_or(0);
            if stored != i.data_blocks {
                f.push(format!(
                    "inode {}: holds {stored} data blocks, counts {}",
                    i.ino, i.data_blocks
                ));
            }
        }
    }
    Ok((blocks, bytes))
}

/// Every extended attribute belongs to a live inode and is within Linux's limits.
fn check_xattrs(
    journal: &Journal,
    inodes: &HashMap<u64, Inode>,
    f: &mut Vec<String>,
) -> journal::Result<()> {
    journal.scan_xattrs(|ino, name, value| {
        let at = format!("extended attribute {name:?} of inode {ino}");
        if !inodes.contains_key(&ino) {
            f.push(format!("{at}: the inode does not exist"));
        }
        if name.is_empty() || name.len() > mds_proto::MAX_XATTR_NAME {
            f.push(format!("{at}: a name of {} bytes", name.len()));
        }
        if value.len() > mds_proto::MAX_XATTR_VALUE {
            f.push(format!("{at}: a value of {} bytes", value.len()));
        }
        Ok(())
    })
}

/// What the entries say: who names each inode, and each directory's entries.
#[derive(Default)]
struct Tree {
    /// The directories whose entries name each inode.
    names: HashMap<u64, Vec<u64>>,
    /// Subdirectories of each directory.
    subdirs: HashMap<u64, u32>,
    /// Entries of each directory.
    entries: HashMap<u64, u64>,
    /// The inodes each directory's entries name.
    children: HashMap<u64, Vec<u64>>,
    /// Entries in all.
    count: u64,
    /// Entries naming another shard's directory: (parent, name, inode).
    remote_entries: Vec<(u64, String, u64)>,
    /// Directories whose parent is another shard's: where the walk down starts, beside the
    /// root, and named by no entry here.
    remote_roots: Vec<u64>,
}

impl Tree {
    /// Reads every entry, noting what is wrong with each on its own.
    fn scan(
        journal: &Journal,
        inodes: &HashMap<u64, Inode>,
        shard: u16,
        f: &mut Vec<String>,
    ) -> journal::Result<Tree> {
        let mut tree = Tree::default();
        journal.scan_dentries(|parent, name, entry| {
            tree.count += 1;
            let at = format!("entry {parent}/{name:?}");
            if check_name(&name).is_err() {
                f.push(format!("{at}: invalid name"));
            }
            match inodes.get(&parent) {
                None => f.push(format!("{at}: parent {parent} does not exist")),
                Some(p) if p.kind != FileKind::Directory => {
                    f.push(format!("{at}: parent {parent} is not a directory"));
                }
                Some(_) => {}
            }
            if journal::shard_of(entry.ino) != shard {
                // A remote directory's entry: its inode is on its own shard (`--cluster`).
                if entry.kind != FileKind::Directory {
                    f.push(format!(
                        "{at}: names inode {} of shard {}, which only a directory may be",
                        entry.ino,
                        journal::shard_of(entry.ino)
                    ));
                }
                *tree.subdirs.entry(parent).or_default() += 1;
                tree.remote_entries.push((parent, name.clone(), entry.ino));
                *tree.entries.entry(parent).or_default() += 1;
                return Ok(());
            }
            match inodes.get(&entry.ino) {
                None => f.push(format!(
                    "{at}: names inode {} which does not exist",
                    entry.ino
                )),
                Some(child) if child.kind != entry.kind => f.push(format!(
                    "{at}: says {:?} but inode {} is {:?}",
                    entry.kind, entry.ino, child.kind
                )),
                Some(child) => {
                    if child.kind == FileKind::Directory {
                        *tree.subdirs.entry(parent).or_default() += 1;
                        if child.parent != parent {
                            f.push(format!(
                                "{at}: directory {} records parent {}",
                                entry.ino, child.parent
                            ));
                        }
                    }
                }
            }
            if entry.ino == ROOT_INO {
                f.push(format!("{at}: names the root"));
            }
            tree.names.entry(entry.ino).or_default().push(parent);
            tree.children.entry(parent).or_default().push(entry.ino);
            *tree.entries.entry(parent).or_default() += 1;
            Ok(())
        })?;
        Ok(tree)
    }

    /// Walks down from the root along the entries: what is named but never reached hangs off
    /// an orphan directory or sits in a cycle of directories.
    fn reachable(&self) -> HashSet<u64> {
        let mut reached: HashSet<u64> = HashSet::new();
        let mut stack = vec![ROOT_INO];
        stack.extend(self.remote_roots.iter().copied());
        while let Some(dir) = stack.pop() {
            if reached.insert(dir) {
                stack.extend(self.children.get(&dir).into_iter().flatten().copied());
            }
        }
        reached
    }

    /// Reports each cycle of directories not reached from the root, once.
    fn find_cycles(&self, sorted: &[&Inode], reached: &HashSet<u64>, f: &mut Vec<String>) {
        let mut in_reported_cycle: HashSet<u64> = HashSet::new();
        for inode in sorted {
            if inode.kind != FileKind::Directory
                || reached.contains(&inode.ino)
                || in_reported_cycle.contains(&inode.ino)
            {
                continue;
            }
            // Follow the entries naming each directory upward; coming back to one on the
            // path is a cycle.
            let mut path: Vec<u64> = Vec::new();
            let mut at = inode.ino;
            while !reached.contains(&at) && !in_reported_cycle.contains(&at) {
                if let Some(start) = path.iter().position(|&p| p == at) {
                    let cycle = &path[start..];
                    let shown: Vec<String> =
                        cycle.iter().chain([&at]).map(u64::to_string).collect();
                    f.push(format!("directory cycle: {}", shown.join(" -> ")));
                    in_reported_cycle.extend(cycle.iter().copied());
                    break;
                }
                path.push(at);
                match self.names.get(&at).and_then(|parents| parents.first()) {
                    Some(&parent) => at = parent,
                    None => break,
                }
            }
        }
    }
}

/// One inode against the store's counters and what the entries say of it.
fn check_inode(
    inode: &Inode,
    recovered: &journal::Recovered,
    tree: &Tree,
    reached: &HashSet<u64>,
    orphan_record: bool,
    f: &mut Vec<String>,
) {
    let at = format!("inode {}", inode.ino);
    if inode.transno > recovered.last_committed {
        f.push(format!(
            "{at}: transno {} is above last_committed {}",
            inode.transno, recovered.last_committed
        ));
    }
    if inode.ino >= recovered.next_ino {
        f.push(format!("{at}: at or above next_ino {}", recovered.next_ino));
    }
    let shard = recovered.shard.as_ref().map_or(0, |s| s.shard);
    if inode.ino != ROOT_INO && journal::shard_of(inode.ino) != shard {
        f.push(format!(
            "{at}: in shard {}'s range, not this store's (shard {shard})",
            journal::shard_of(inode.ino)
        ));
    }
    let refs = tree.names.get(&inode.ino).map_or(0, std::vec::Vec::len) as u32;
    let kept_open = inode.kind != FileKind::Directory && inode.nlink == 0 && refs == 0;
    if orphan_record && !kept_open {
        f.push(format!(
            "{at}: an orphan record, but it is a {:?} with {} links and {refs} names",
            inode.kind, inode.nlink
        ));
    }
    if kept_open {
        if !orphan_record {
            f.push(format!("{at}: no links, no names and no orphan record"));
        }
    } else if inode.ino != ROOT_INO && refs == 0 && !tree.remote_roots.contains(&inode.ino) {
        f.push(format!("{at}: orphan (no entry names it)"));
    } else if !reached.contains(&inode.ino) {
        f.push(format!("{at}: not reachable from the root"));
    }
    match inode.kind {
        FileKind::Directory => {
            if refs > 1 {
                f.push(format!("{at}: directory named {refs} times"));
            }
            let expect_nlink = 2 + tree.subdirs.get(&inode.ino).copied().unwrap_or(0);
            if inode.nlink != expect_nlink {
                f.push(format!(
                    "{at}: nlink {} but {expect_nlink} expected",
                    inode.nlink
                ));
            }
            let n = tree.entries.get(&inode.ino).copied().unwrap_or(0);
            if inode.entries != n {
                f.push(format!(
                    "{at}: records {} entries but has {n}",
                    inode.entries
                ));
            }
        }
        kind => {
            if refs > 0 && inode.nlink != refs {
                f.push(format!(
                    "{at}: nlink {} but named {refs} times",
                    inode.nlink
                ));
            }
            check_kind_fields(inode, kind, &at, f);
        }
    }
}

/// What only some kinds carry: a symlink's target, a device's number.
fn check_kind_fields(inode: &Inode, kind: FileKind, at: &str, f: &mut Vec<String>) {
    if kind == FileKind::Symlink {
        let len = inode.target.len();
        if len == 0 || len > mds_proto::MAX_SYMLINK {
            f.push(format!("{at}: a symlink with a target of {len} bytes"));
        }
        if inode.size != len as u64 {
            f.push(format!(
                "{at}: a symlink of size {} with a target of {len} bytes",
                inode.size
            ));
        }
    } else if !inode.target.is_empty() {
        f.push(format!("{at}: a {kind:?} with a symlink target"));
    }
    let device = matches!(kind, FileKind::CharDevice | FileKind::BlockDevice);
    if !device && inode.rdev != 0 {
        f.push(format!(
            "{at}: a {kind:?} with device number {}",
            inode.rdev
        ));
    }
}

/// The first schema version whose resend records hold replies this build decodes: version 9
/// came with protocol 11, whose `Attr` gained `blocks` (protocol 12 changed only CONNECT);
/// the replies of versions 4 to 8 are in protocols 5 to 10.
const REPLIES_IN_THIS_PROTOCOL: u32 = 9;

/// Every resend record is durable and decodes. The replies of a store of a schema before
/// version 9 are in its build's protocol, which this build does not decode (its first
/// writable open drops them: no client of that protocol can resend to this build); only
/// their transnos are checked.
fn check_resend_records(recovered: &journal::Recovered, f: &mut Vec<String>) {
    let current = recovered.schema_version >= REPLIES_IN_THIS_PROTOCOL;
    for client in &recovered.resend {
        for record in &client.records {
            let at = format!(
                "resend record of client {:016x} xid {}",
                client.client, record.xid
            );
            if record.transno > recovered.last_committed {
                f.push(format!(
                    "{at}: transno {} is above last_committed {}",
                    record.transno, recovered.last_committed
                ));
            }
            if !current {
                continue;
            }
            if let Err(e) = mds_proto::decode::<mds_proto::Body>(&record.reply) {
                f.push(format!("{at}: reply does not decode: {e}"));
            }
        }
    }
}

/// Each shard store's report, by path, and the findings across shards.
pub type ClusterReport = (Vec<(std::path::PathBuf, Report)>, Vec<String>);

/// `mds fsck --cluster ROOT`: every `ROOT/shard-N` store on its own, then the remote
/// directories' halves against each other. The reports by shard, and the cross-shard
/// findings.
pub fn check_cluster(root: &Path) -> crate::error::Result<ClusterReport> {
    let mut stores = Vec::new();
    let listing = std::fs::read_dir(root).map_err(|source| crate::error::Error::Io {
        what: format!("listing {}", root.display()),
        source,
    })?;
    for dir in listing.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if name
            .strip_prefix("shard-")
            .is_some_and(|n| n.parse::<u16>().is_ok())
        {
            stores.push(dir.path());
        }
    }
    stores.sort();
    let mut reports = Vec::new();
    for store in stores {
        let report = check(&store)?;
        reports.push((store, report));
    }
    let mut f = Vec::new();
    let by_shard: HashMap<u16, &Report> = reports.iter().map(|(_, r)| (r.shard, r)).collect();
    let mut named: HashMap<u64, u32> = HashMap::new();
    for (_, report) in &reports {
        for (parent, name, ino) in &report.remote_entries {
            let at = format!("shard {}: entry {parent}/{name:?}", report.shard);
            let child_shard = journal::shard_of(*ino);
            *named.entry(*ino).or_default() += 1;
            match by_shard.get(&child_shard) {
                None => f.push(format!("{at}: names inode {ino} of shard {child_shard}, whose store is not under {}", root.display())),
                Some(child) => match child.remote_roots.iter().find(|(i, _)| i == ino) {
                    None => f.push(format!("{at}: names inode {ino}, which shard {child_shard} has no remote directory of")),
                    Some((_, p)) if p != parent => f.push(format!("{at}: inode {ino} on shard {child_shard} records parent {p}")),
                    Some(_) => {}
                },
            }
        }
    }
    for (_, report) in &reports {
        for (ino, parent) in &report.remote_roots {
            let n = named.get(ino).copied().unwrap_or(0);
            let pending = report.pending.iter().any(|p| p.ino == *ino);
            let at = format!(
                "shard {}: remote directory {ino} (parent {parent})",
                report.shard
            );
            if n > 1 {
                f.push(format!("{at}: named {n} times"));
            } else if n == 0 && !pending && by_shard.contains_key(&journal::shard_of(*parent)) {
                f.push(format!(
                    "{at}: no entry on shard {} names it",
                    journal::shard_of(*parent)
                ));
            }
        }
    }
    Ok((reports, f))
}
