//! The on-disk schema: column-family names, key layouts, record encodings and the version
//! checked at open. Values are postcard-encoded serde structs; keys are big-endian so that
//! RocksDB's byte order is numeric order (an inode's attributes, a file's blocks, are one
//! contiguous range; entries come in their children's order).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use mds_proto::Placed;

/// Bumped whenever a key layout or a record encoding changes incompatibly: what counts, and
/// how, is in `docs/schema.md`; the golden-bytes tests below and in `store.rs` fail first.
pub const SCHEMA_VERSION: u32 = 9;

/// The version before an inode counted its file's data ([`Inode::data_blocks`]): its images
/// end at the symlink target ([`decode_inode`] reads both). A writable open counts every
/// file's blocks and layout and rewrites the inodes of files that hold data
/// (`Journal::count_file_data`) before it records the new version; a read-only open reads
/// such a store with every count 0.
pub(crate) const SCHEMA_VERSION_UNCOUNTED_DATA: u32 = 8;

/// The version before file data could be in an object store (layouts, their garbage and the
/// slice counter in `meta`): nothing stored changes, so a writable open records the new
/// version, and a read-only open reads such a store as it is. A build of version 7 refuses a
/// store of version 8, whose files in objects it would read as holes.
pub(crate) const SCHEMA_VERSION_INLINE_ONLY: u32 = 7;

/// The version before the edit log carried resend slots (`clients`) in a commit's edit, and
/// client changes in edits of their own keyed after a commit's (`store::edits`): nothing
/// stored changes, so a writable open records the new version, and a read-only open reads
/// such a store as it is. A build of version 6 refuses a store of version 7, whose edits it
/// would call corrupt.
pub(crate) const SCHEMA_VERSION_SLOTS_APART: u32 = 6;

/// The version before a new inode's first image could be kept in its entry's value
/// ([`embedded_image`]): nothing stored changes, so a writable open records the new version
/// (after finishing a cut-short move of the entries, `Journal::finish_rekey`), and a
/// read-only open reads such a store as it is. A build of version 5 refuses a store of
/// version 6, whose inodes it would not all find.
pub(crate) const SCHEMA_VERSION_IMAGES_APART: u32 = 5;

/// The version before resend records were written: its `clients` family is always empty, so
/// such a store is upgraded in place at open (`docs/schema.md`).
pub(crate) const SCHEMA_VERSION_WITHOUT_RESEND: u32 = 1;

/// The version before inodes had an atime, a device number and a symlink target
/// ([`InodeV2`]): a writable open rewrites every inode in the new layout, in the same synced
/// batch that records the new version; a read-only open reads them in the old one.
pub(crate) const SCHEMA_VERSION_V2_INODES: u32 = 2;

/// The version before file data and orphans: its store lacks their two families, which a
/// writable open adds (nothing else changed).
pub(crate) const SCHEMA_VERSION_BEFORE_DATA: u32 = 3;

/// The version whose `dentries` were keyed by parent and name ([`named_key`]), which every
/// version before 5 shares: a writable open rewrites each entry under its child's key
/// (`Journal::upgrade`), a read-only open reads them as they are.
pub(crate) const SCHEMA_VERSION_PARENT_KEYED_DENTRIES: u32 = 4;

/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;

/// File data is kept in blocks of this many bytes: a WRITE rewrites the blocks it touches,
/// and a block past the end of its file is never kept.
pub const DATA_BLOCK: usize = 4096;

/// Inodes by number: key = ino (u64 BE), value = [`Inode`].
pub(crate) const CF_INODES: &str = "inodes";
/// Directory entries: key = child ino (u64 BE) ++ parent ino (u64 BE) ++ name bytes, value =
/// [`Dentry`] ([`dentry_key`]: the child first, so that new entries, whose children are new
/// inodes with growing numbers, land in key order as new inodes do).
pub(crate) const CF_DENTRIES: &str = "dentries";
/// Per-client resend records in fixed slots: key = client id (u64 BE) ++ slot (u32 BE), value =
/// [`ResendSlot`]. A slot is overwritten in place once the client has the replies of every
/// record in it; nothing is range-deleted (range tombstones pile up in RocksDB).
pub(crate) const CF_CLIENTS: &str = "clients";
/// Store-wide values: schema version, `last_committed`, next inode number.
pub(crate) const CF_META: &str = "meta";
/// Extended attributes: key = ino (u64 BE) ++ name bytes, value = the attribute's bytes as
/// given. One key per attribute, so a SETXATTR writes only the attribute it changes.
pub(crate) const CF_XATTRS: &str = "xattrs";
/// File data: key = ino (u64 BE) ++ block number (u32 BE), value = the block's bytes up to the
/// file's end when it was written (a shorter block reads as zeros after its bytes; a missing
/// one, a hole, as zeros throughout).
pub(crate) const CF_DATA: &str = "data";
/// Orphans, Lustre's PENDING directory: files whose last name is gone while handles kept them
/// open. key = ino (u64 BE), value = the clients that held them open (postcard `Vec<u64>`),
/// whose return after a restart they wait for.
pub(crate) const CF_ORPHANS: &str = "orphans";
/// The edit log (`store/edits.rs`): key = a commit's last transno (u64 BE), value = the
/// commit's changes to [`CF_INODES`] and [`CF_DENTRIES`] in RocksDB's batch format, kept until
/// a checkpoint has written the images they leave into those families.
pub(crate) const CF_EDITS: &str = "edits";
pub(crate) const ALL_CFS: [&str; 8] = [
    CF_INODES,
    CF_DENTRIES,
    CF_CLIENTS,
    CF_META,
    CF_XATTRS,
    CF_DATA,
    CF_ORPHANS,
    CF_EDITS,
];
/// Families later versions added, which a store of an older one lacks: a read-only open
/// opens it without them, a writable one adds them once the store is current.
pub(crate) const ADDED_CFS: [&str; 4] = [CF_XATTRS, CF_DATA, CF_ORPHANS, CF_EDITS];

pub(crate) const META_SCHEMA_VERSION: &[u8] = b"schema_version";
pub(crate) const META_LAST_COMMITTED: &[u8] = b"last_committed";
pub(crate) const META_NEXT_INO: &[u8] = b"next_ino";
/// Known clients: key = this prefix ++ client id (u64 BE), empty value. A client is known
/// while it may hold replies the server sent before their commit (`--ack early`); after a
/// crash the server waits for its known clients to replay (the recovery window).
pub(crate) const META_CLIENT_PREFIX: &[u8] = b"client/";
/// The key of the replay tickets (`Recovered::replay_key`): 32 random bytes, drawn when the
/// store is created (or first opened by a build that issues tickets), never changed.
pub(crate) const META_REPLAY_KEY: &[u8] = b"replay_key";
/// No transno above this one has been handed out (u64 LE): raised with every commit, before
/// the server may hand out the transnos it covers, so after a crash it bounds what any replay
/// may claim.
pub(crate) const META_TRANSNO_CEILING: &[u8] = b"transno_ceiling";
/// No inode number at or above this one has been handed out (u64 LE): raised like the transno
/// ceiling. After a crash new inodes start here, above any a client may have been told of.
pub(crate) const META_INO_CEILING: &[u8] = b"ino_ceiling";
/// Present (empty) while an upgrade to version 5 moves the entries under their children's
/// keys: written with the new version, deleted once every entry is moved. An open that
/// finds it reads entries in either layout, key by key, and a writable one finishes the move.
pub(crate) const META_DENTRIES_TO_REKEY: &[u8] = b"dentries_to_rekey";
/// Present (empty) while an upgrade to version 9 counts the files' data
/// ([`Inode::data_blocks`]): written with the new version, deleted once every file holding
/// data has its count. A writable open that finds it counts (again) once the edits left are
/// written out; a read-only one reads the counts as 0 where not yet written.
pub(crate) const META_DATA_TO_COUNT: &[u8] = b"data_to_count";
/// Session bindings: key = this prefix ++ client id (u64 BE), value = the 32-byte secret the
/// server issued the client's session, which a reconnect with that identity must prove.
/// Written with the session's first journaled change, deleted with its resend records.
pub(crate) const META_SESSION_PREFIX: &[u8] = b"session/";
/// Which shard of which cluster the store is ([`crate::ShardIdentity`], postcard): written by
/// the first open of a cluster's claimant, rewritten with each new owner's epoch. Absent in a
/// store made outside a cluster.
pub(crate) const META_SHARD: &[u8] = b"shard";
/// Present while the store's owner writes an edit log (`CF_EDITS`): a follower refuses the
/// store then.
pub(crate) const META_EDIT_LOG: &[u8] = b"edit_log";
/// Pending directories ([`PendingDir`]): key = this prefix ++ inode (u64 BE), value = postcard
/// `(parent, name)`, followed by postcard `true` for one being removed (the byte a build
/// before remote RMDIR ignores, reading it as pending from a MKDIR_REMOTE: its scrub resolves
/// both alike). Only in a cluster's store.
pub(crate) const META_PENDING_PREFIX: &[u8] = b"pending_dir/";
/// Layouts of files whose data is in the object store: key = this prefix ++ inode (u64 BE),
/// value = postcard `Vec<Placed>`, oldest piece first. Present exactly for such files (an
/// empty list for one with no data yet), and kept after the file is deleted until the
/// collector has deleted its slices ([`META_GONE_PREFIX`]).
pub(crate) const META_LAYOUT_PREFIX: &[u8] = b"layout/";
/// Deleted files whose layouts' slices are to be deleted from the object store: key = this
/// prefix ++ inode (u64 BE), value = postcard `u64`, the deletion's Unix time in seconds.
pub(crate) const META_GONE_PREFIX: &[u8] = b"layout_gone/";
/// Slices no layout names any more (a truncate cut them off): key = this prefix ++ slice id
/// (u64 BE), value = postcard `(size, since)`, since in Unix seconds.
pub(crate) const META_GARBAGE_PREFIX: &[u8] = b"garbage/";
/// No slice id at or above this one has been handed out (u64 LE).
pub(crate) const META_NEXT_SLICE: &[u8] = b"next_slice";
/// Bytes of a session secret and of the replay key.
pub const SECRET_LEN: usize = 32;

pub(crate) fn client_key(client: u64) -> Vec<u8> {
    prefixed_key(META_CLIENT_PREFIX, client)
}

pub(crate) fn pending_key(ino: u64) -> Vec<u8> {
    prefixed_key(META_PENDING_PREFIX, ino)
}

pub(crate) fn layout_key(ino: u64) -> Vec<u8> {
    prefixed_key(META_LAYOUT_PREFIX, ino)
}

pub(crate) fn gone_key(ino: u64) -> Vec<u8> {
    prefixed_key(META_GONE_PREFIX, ino)
}

pub(crate) fn garbage_key(slice: u64) -> Vec<u8> {
    prefixed_key(META_GARBAGE_PREFIX, slice)
}

pub(crate) fn session_key(client: u64) -> Vec<u8> {
    prefixed_key(META_SESSION_PREFIX, client)
}

fn prefixed_key(prefix: &[u8], client: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 8);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&client.to_be_bytes());
    key
}

/// What an inode is. Appended to only: a variant's index is its encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileKind {
    Directory,
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// One inode as stored. The server keeps its own in-memory type and converts at the boundary,
/// so nothing it adds in memory changes this encoding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits (no file-type bits; `kind` says that).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Directories: 2 + subdirectories. Others: the number of entries naming it.
    pub nlink: u32,
    pub size: u64,
    /// Nanoseconds since the Unix epoch.
    pub ctime_ns: i64,
    pub mtime_ns: i64,
    /// The transno that created this inode: with `ino`, a handle no later inode can alias.
    pub generation: u64,
    /// Directories: the parent directory (the root is its own parent). Others: 0.
    pub parent: u64,
    /// Directories: how many entries they hold, so emptiness and size need no scan. Regular
    /// files: 1 when their data is in the object store (a layout under
    /// [`META_LAYOUT_PREFIX`]), 0 when it is in the `data` family.
    pub entries: u64,
    /// The transno of the last mutation that changed this inode; never above
    /// `last_committed` in a consistent store.
    pub transno: u64,
    /// Nanoseconds since the Unix epoch. Written with the inode's other changes: an atime
    /// moved by a read alone is not journaled until something else changes the inode.
    pub atime_ns: i64,
    /// Character and block devices: the device number. 0 otherwise.
    pub rdev: u64,
    /// Symbolic links: the target, as given. Empty otherwise.
    #[serde(serialize_with = "as_bytes")]
    pub target: Vec<u8>,
    /// Regular files: the data they hold, in [`DATA_BLOCK`]s — the blocks stored in `data`,
    /// or the bytes the layout's pieces cover, rounded up — which `st_blocks` counts, so a
    /// sparse file's holes are not counted. 0 for every other kind.
    pub data_blocks: u64,
}

/// A stored inode, in this version's encoding or (its data not counted: 0) version 8's,
/// which is this one without the last field — how images written before an upgrade, in the
/// store or in an edit not yet written out, read after it. A count of 0 is the one byte 0,
/// so an image of version 8 is read as itself with that byte after it.
pub(crate) fn decode_inode(what: &'static str, bytes: &[u8]) -> Result<Inode> {
    match postcard::from_bytes::<Inode>(bytes) {
        Err(postcard::Error::DeserializeUnexpectedEnd) => {
            let mut counted = Vec::with_capacity(bytes.len() + 1);
            counted.extend_from_slice(bytes);
            counted.push(0);
            decode(what, &counted)
        }
        decoded => decoded.map_err(|e| Error::Corrupt {
            what,
            detail: e.to_string(),
        }),
    }
}

/// An inode as schema versions 1 and 2 stored it: [`Inode`] without `atime_ns`, `rdev` and
/// `target` (and only directories and regular files). Read to upgrade such a store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InodeV2 {
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub ctime_ns: i64,
    pub mtime_ns: i64,
    pub generation: u64,
    pub parent: u64,
    pub entries: u64,
    pub transno: u64,
}

impl From<InodeV2> for Inode {
    /// The old inode in the new layout: its atime is taken to be its mtime (the old layout
    /// kept none), no device, no target.
    fn from(old: InodeV2) -> Inode {
        let InodeV2 {
            ino,
            kind,
            mode,
            uid,
            gid,
            nlink,
            size,
            ctime_ns,
            mtime_ns,
            generation,
            parent,
            entries,
            transno,
        } = old;
        Inode {
            ino,
            kind,
            mode,
            uid,
            gid,
            nlink,
            size,
            ctime_ns,
            mtime_ns,
            generation,
            parent,
            entries,
            transno,
            atime_ns: mtime_ns,
            rdev: 0,
            target: Vec::new(),
            data_blocks: 0,
        }
    }
}

/// The [`DATA_BLOCK`]s of data a layout holds ([`Inode::data_blocks`]): the bytes its
/// pieces cover — once, however many pieces overlap there — rounded up.
pub fn layout_data_blocks(layout: &[Placed]) -> u64 {
    let mut ranges: Vec<(u64, u64)> = layout.iter().map(|p| (p.file_off, p.file_end())).collect();
    ranges.sort_unstable();
    let (mut covered, mut reached) = (0u64, 0u64);
    for (start, end) in ranges {
        let start = start.max(reached);
        if end > start {
            covered += end - start;
            reached = end;
        }
    }
    covered.div_ceil(DATA_BLOCK as u64)
}

/// Wall-clock time as inode times store it: nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl Inode {
    /// The root directory of a new store, created at `now_ns`: owned by root, mode 01777 —
    /// like `/tmp`, every user may create in it and only remove what is theirs. A fresh
    /// store must be usable by clients that are not root (mdsctl, loadgen, applications run
    /// by users), and until an administrator shapes the tree the root is all there is; 0755
    /// would refuse them all, 0777 would let each remove the others' entries.
    pub fn root(now_ns: i64) -> Inode {
        Inode {
            ino: ROOT_INO,
            kind: FileKind::Directory,
            mode: 0o1777,
            uid: 0,
            gid: 0,
            nlink: 2,
            size: 0,
            ctime_ns: now_ns,
            mtime_ns: now_ns,
            generation: 0,
            parent: ROOT_INO,
            entries: 0,
            transno: 0,
            atime_ns: now_ns,
            rdev: 0,
            target: Vec::new(),
            data_blocks: 0,
        }
    }
}

/// A directory entry's value: the child it names and that child's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dentry {
    pub ino: u64,
    pub kind: FileKind,
}

/// What the server remembers of an executed request so that a resend is answered from the
/// record, never executed twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResendRecord {
    pub xid: u64,
    pub transno: u64,
    /// The encoded reply body, opaque to the journal.
    #[serde(serialize_with = "as_bytes", deserialize_with = "reply_bytes")]
    pub reply: ReplyBytes,
}

/// Replies a [`ResendRecord`] keeps inside itself, without an allocation of their own.
pub const REPLY_INLINE: usize = 64;

/// An encoded reply body: inline up to [`REPLY_INLINE`] bytes (a create's ATTR body is ~40),
/// so that journaling a mutation's reply allocates nothing (the committer freed each reply's
/// `Vec` on another thread than the one that made it, ~250 instructions a create counted).
pub type ReplyBytes = smallvec::SmallVec<[u8; REPLY_INLINE]>;

/// Names a [`JournalOp`] keeps inside itself, without an allocation of their own.
pub const NAME_INLINE: usize = 32;

/// A directory entry's name in a [`JournalOp`]: inline up to [`NAME_INLINE`] bytes, so that
/// journaling a create allocates nothing for its name. As a `String` it was allocated by the
/// partition that decoded the request and freed by the committer that dropped the op, on
/// another thread, which glibc pays for twice (~280 instructions a create in `malloc` and
/// `free`, counted). Serialized as a `str`, as the `String` it replaced: the same bytes.
pub type EntryName = smallstr::SmallString<[u8; NAME_INLINE]>;

/// Writes a byte vector in one piece. postcard encodes bytes exactly as a sequence of `u8`
/// (a varint length, then the bytes), so this changes no byte on disk, only the work: a
/// sequence goes through the serializer one element at a time.
fn as_bytes<B, S>(bytes: &B, s: S) -> std::result::Result<S::Ok, S::Error>
where
    B: AsRef<[u8]>,
    S: serde::Serializer,
{
    s.serialize_bytes(bytes.as_ref())
}

/// Reads what [`as_bytes`] wrote into a [`ReplyBytes`]: postcard hands the bytes over whole;
/// a format that writes bytes as a sequence of numbers is read number by number.
fn reply_bytes<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<ReplyBytes, D::Error> {
    struct Bytes;
    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = ReplyBytes;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a reply's bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> std::result::Result<ReplyBytes, E> {
            Ok(ReplyBytes::from_slice(v))
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<ReplyBytes, A::Error> {
            let mut out = ReplyBytes::new();
            while let Some(byte) = seq.next_element::<u8>()? {
                out.push(byte);
            }
            Ok(out)
        }
    }
    d.deserialize_bytes(Bytes)
}

/// One slot of a client's resend records: the records one commit wrote for that client, and
/// the client's trim watermark then (every xid at or below it has its reply at the client).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResendSlot {
    pub acked_xid: u64,
    pub records: Vec<ResendRecord>,
}

/// [`ResendSlot`] by reference, for writing without copying the replies: serde encodes a
/// reference exactly as the value, so the bytes are a `ResendSlot`'s.
#[derive(Serialize)]
pub(crate) struct ResendSlotRef<'a> {
    pub acked_xid: u64,
    pub records: Vec<&'a ResendRecord>,
}

/// One change inside a transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JournalOp {
    PutInode(Inode),
    DeleteInode(u64),
    PutDentry {
        parent: u64,
        name: EntryName,
        entry: Dentry,
    },
    /// The entry `name` in `parent`, which names `child`, is gone. The child is part of the
    /// entry's key ([`CF_DENTRIES`]): an entry replaced by another (a RENAME over a target)
    /// is deleted by its own op before the new one is put.
    DeleteDentry {
        parent: u64,
        name: EntryName,
        child: u64,
    },
    /// Remember how a client's request was answered. `acked_xid` is the client's watermark
    /// from that request: records at or below it are not needed any more, and their slots
    /// are free to overwrite.
    PutResend {
        client: u64,
        acked_xid: u64,
        record: ResendRecord,
    },
    /// Forget all of a client's resend records (its session ended): one point delete per slot.
    DropResend {
        client: u64,
    },
    /// The client may now hold replies sent before their commit: after a crash, wait for it.
    KnowClient {
        client: u64,
    },
    /// The client holds no such reply any more (or was evicted): do not wait for it.
    ForgetClient {
        client: u64,
    },
    /// The secret of the client's session, which a reconnect must prove: kept until the
    /// session's resend records are dropped (`DropResend`), so that after a restart nobody
    /// can take over a session whose records or replays the journal keeps.
    BindSession {
        client: u64,
        secret: [u8; SECRET_LEN],
    },
    /// Sets one extended attribute of an inode.
    PutXattr {
        ino: u64,
        name: String,
        #[serde(serialize_with = "as_bytes")]
        value: Vec<u8>,
    },
    /// Removes one extended attribute (also each of a deleted inode's, one by one: nothing
    /// is range-deleted).
    DeleteXattr {
        ino: u64,
        name: String,
    },
    /// One block of a file's data ([`DATA_BLOCK`] bytes at most), whole.
    PutData {
        ino: u64,
        block: u32,
        #[serde(serialize_with = "as_bytes")]
        bytes: Vec<u8>,
    },
    /// Every block of the file from `from` up to `to` (exclusive): a truncate or the file's
    /// deletion. A few blocks are point deletes, more one range delete.
    DeleteData {
        ino: u64,
        from: u32,
        to: u32,
    },
    /// The file lost its last name while `owners` held it open: it is kept until they
    /// release it, or, after a restart, until the recovery window ends without them.
    PutOrphan {
        ino: u64,
        owners: Vec<u64>,
    },
    /// The orphan's last handle went: its inode goes in the same record.
    DeleteOrphan(u64),
    /// A directory made for another shard's entry (MAKE_PENDING_DIR): kept pending until
    /// that entry is found, or deleted when it is found missing.
    PutPendingDir(PendingDir),
    /// The pending directory's entry was found (or the directory deleted): it is not pending.
    DeletePendingDir(u64),
    /// A regular file's whole layout: its data is in the object store.
    PutLayout {
        ino: u64,
        placed: Vec<Placed>,
    },
    /// The file in objects `ino` was deleted at `since` (Unix seconds): its layout stays until
    /// the collector has deleted its slices ([`JournalOp::DeleteLayout`]).
    LayoutGone {
        ino: u64,
        since: u64,
    },
    /// A deleted file's slices are gone from the object store: its layout and gone mark too.
    DeleteLayout(u64),
    /// A slice no layout names any more, of `size` bytes, since `since` (Unix seconds).
    PutGarbage {
        slice: u64,
        size: u64,
        since: u64,
    },
    /// The slice is gone from the object store.
    DeleteGarbage(u64),
    /// Slice ids below `next` have been handed out.
    NextSlice(u64),
}

/// A directory of this shard whose entry lives on another shard, and which waits for that
/// shard to say whether the entry `name` in `parent` (the other shard's inode) names `ino`:
/// made for an entry not confirmed yet (MKDIR_REMOTE), or to be removed with its entry
/// (RMDIR). Either way it is kept if the entry is there and deleted if it is not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDir {
    pub ino: u64,
    pub parent: u64,
    pub name: String,
    /// Being removed (PREPARE_RMDIR): empty, and refusing new entries until it is resolved.
    pub removing: bool,
}

/// One mutation's changes, made durable atomically with its transno.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxRecord {
    pub transno: u64,
    pub ops: Vec<JournalOp>,
}

pub(crate) fn ino_key(ino: u64) -> [u8; 8] {
    ino.to_be_bytes()
}

/// A directory entry's key: the child's number, the parent's, then the name's bytes. A
/// create's entry then comes after every earlier create's in key order, so the memtable
/// inserts it with a hint, as it does the new inode, and the flush sorts nothing; an
/// entry's key by parent and name (as versions before 5 had it) landed anywhere, and the
/// flush sorted them: 1,743 instructions a create more, counted (docs/BENCHMARKS.md). The
/// server reads entries from the store only at start-up, all of them, so no lookup by name
/// needs them grouped by directory.
pub(crate) fn dentry_key(child: u64, parent: u64, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + name.len());
    dentry_key_into(&mut key, child, parent, name);
    key
}

/// [`dentry_key`] into a buffer the caller reuses (the committer, once per entry it writes).
pub(crate) fn dentry_key_into(key: &mut Vec<u8>, child: u64, parent: u64, name: &str) {
    key.clear();
    key.extend_from_slice(&child.to_be_bytes());
    key.extend_from_slice(&parent.to_be_bytes());
    key.extend_from_slice(name.as_bytes());
}

/// An inode's number, then a name's bytes: an extended attribute's key (one inode's
/// attributes are one contiguous range), and a directory entry's before version 5.
pub(crate) fn named_key(ino: u64, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + name.len());
    named_key_into(&mut key, ino, name);
    key
}

/// [`named_key`] into a buffer the caller reuses.
pub(crate) fn named_key_into(key: &mut Vec<u8>, ino: u64, name: &str) {
    key.clear();
    key.extend_from_slice(&ino.to_be_bytes());
    key.extend_from_slice(name.as_bytes());
}

/// An extended attribute's key ([`named_key`]).
pub(crate) fn xattr_key(ino: u64, name: &str) -> Vec<u8> {
    named_key(ino, name)
}

/// A data block's key: the inode's number, then the block's, so one file's blocks are one
/// contiguous range in order.
pub(crate) fn data_key(ino: u64, block: u32) -> [u8; 12] {
    resend_key(ino, block)
}

/// The key just past block `to - 1` of `ino` (the end of a range delete), which for `to` of
/// `u32::MAX` blocks and beyond is the next inode's first block.
pub(crate) fn data_key_end(ino: u64, to: u32) -> [u8; 12] {
    match to {
        u32::MAX => data_key(ino.saturating_add(1), 0),
        to => data_key(ino, to),
    }
}

pub(crate) fn resend_key(client: u64, slot: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&client.to_be_bytes());
    key[8..].copy_from_slice(&slot.to_be_bytes());
    key
}

pub(crate) fn decode_resend_key(key: &[u8]) -> Result<(u64, u32)> {
    let client = decode_u64_key("resend key", key)?;
    let slot: [u8; 4] = key
        .get(8..)
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| Error::Corrupt {
            what: "resend key",
            detail: format!("key of {} bytes", key.len()),
        })?;
    Ok((client, u32::from_be_bytes(slot)))
}

pub(crate) fn decode_u64_key(what: &'static str, key: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = key
        .get(..8)
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| Error::Corrupt {
            what,
            detail: format!("key of {} bytes", key.len()),
        })?;
    Ok(u64::from_be_bytes(bytes))
}

/// Reads a [`named_key`]: the inode's number and the name.
pub(crate) fn decode_named_key(what: &'static str, key: &[u8]) -> Result<(u64, String)> {
    let ino = decode_u64_key(what, key)?;
    let name = std::str::from_utf8(&key[8..]).map_err(|e| Error::Corrupt {
        what,
        detail: format!("a name that is not UTF-8: {e}"),
    })?;
    Ok((ino, name.to_owned()))
}

/// Reads a [`dentry_key`] as `(child, parent, name)`.
pub(crate) fn decode_dentry_key(key: &[u8]) -> Result<(u64, u64, String)> {
    let child = decode_u64_key("dentry key", key)?;
    let (parent, name) = decode_named_key("dentry key", key.get(8..).unwrap_or_default())?;
    Ok((child, parent, name))
}

/// Reads one stored entry, key and value, as `(parent, name, entry)`: in the current layout
/// ([`dentry_key`]), whose child must be the one the value names, or in the layout of
/// versions before 5 ([`named_key`]) when `parent_keyed`.
pub(crate) fn decode_dentry(
    key: &[u8],
    value: &[u8],
    parent_keyed: bool,
) -> Result<(u64, String, Dentry)> {
    let entry: Dentry = decode("dentry", value)?;
    if parent_keyed {
        let (parent, name) = decode_named_key("dentry key", key)?;
        return Ok((parent, name, entry));
    }
    let (child, parent, name) = decode_dentry_key(key)?;
    if child != entry.ino {
        return Err(Error::Corrupt {
            what: "dentry",
            detail: format!(
                "the key of {parent}/{name:?} is child {child}'s, its value names {}",
                entry.ino
            ),
        });
    }
    Ok((parent, name, entry))
}

/// Whether a stored entry is in the current layout: its key begins with the number of the
/// child its value names. An entry of the old layout begins with its parent's number, which
/// is never the child's (no directory holds an entry for itself), so a store whose upgrade
/// was cut short reads unambiguously, key by key, and the next open finishes it.
pub(crate) fn is_child_keyed(key: &[u8], entry: &Dentry) -> bool {
    key.len() >= 16 && key[..8] == entry.ino.to_be_bytes()
}

/// Longest symbolic link target [`with_inode_bytes`] writes by hand; a longer one goes through
/// serde (rare: most targets are short, and most inodes have none).
const HAND_TARGET_MAX: usize = 64;

/// Gives `put` the image of `inode` as stored: postcard's bytes, written by hand on the stack
/// ([`mds_proto::PostcardWriter`]: every create writes one or two images, and serde's
/// encoding of one costs ~800 instructions). A proptest checks the bytes are serde's.
pub(crate) fn with_inode_bytes<R>(inode: &Inode, put: impl FnOnce(&[u8]) -> R) -> R {
    if inode.target.len() > HAND_TARGET_MAX {
        return put(&encode(inode));
    }
    // 16 integers of at most 10 bytes, the target and its length: within 256.
    let mut w = mds_proto::PostcardWriter::<256>::new();
    w.varint(inode.ino);
    w.varint(inode.kind as u64);
    w.varint(inode.mode.into());
    w.varint(inode.uid.into());
    w.varint(inode.gid.into());
    w.varint(inode.nlink.into());
    w.varint(inode.size);
    w.signed(inode.ctime_ns);
    w.signed(inode.mtime_ns);
    w.varint(inode.generation);
    w.varint(inode.parent);
    w.varint(inode.entries);
    w.varint(inode.transno);
    w.signed(inode.atime_ns);
    w.varint(inode.rdev);
    w.bytes(&inode.target);
    w.varint(inode.data_blocks);
    put(w.as_slice())
}

/// Gives `put` an entry's value as stored (a [`Dentry`]'s bytes), written by hand.
pub(crate) fn with_dentry_bytes<R>(entry: &Dentry, put: impl FnOnce(&[u8]) -> R) -> R {
    let mut w = mds_proto::PostcardWriter::<32>::new();
    w.varint(entry.ino);
    w.varint(entry.kind as u64);
    put(w.as_slice())
}

/// The image of a new inode that its entry's value carries after the [`Dentry`] (schema
/// version 6): `None` for an entry that carries none. The commit that creates an inode keeps
/// its image there rather than under its own key in `inodes` (one key a create instead of
/// two: docs/BENCHMARKS.md, "A new inode's image in its entry"); the inode's first later
/// change writes its `inodes` key, which from then on is the newer image.
pub(crate) fn embedded_image(value: &[u8]) -> Result<Option<Inode>> {
    let (_, rest) = postcard::take_from_bytes::<Dentry>(value).map_err(|e| Error::Corrupt {
        what: "dentry",
        detail: e.to_string(),
    })?;
    if rest.is_empty() {
        return Ok(None);
    }
    decode_inode("inode image in a dentry", rest).map(Some)
}

/// Gives `put` a resend slot's value as stored (a [`ResendSlot`]'s bytes): by hand on the
/// stack when it fits, through serde otherwise. A proptest checks the bytes are serde's.
///
/// A client's records of one commit are short replies (an ATTR body is ~50 bytes), one per
/// request it had in flight: 2 KiB holds a client with 16 outstanding. With 512 bytes, a busy
/// batch (five or more of one client's creates) went through serde, whose output `Vec` grew
/// by doubling: ~170 instructions a create in reallocations and copies, counted.
///
/// The buffer is the smallest of four sizes that holds the slot: a writer's buffer is zeroed
/// when it is made, and 2 KiB zeroed for the ~500 bytes a busy client's slot takes was ~130
/// instructions a create (counted).
pub(crate) fn with_slot_bytes<R>(slot: &ResendSlotRef<'_>, put: impl FnOnce(&[u8]) -> R) -> R {
    // Per record: two integers and a length of at most 10 bytes each, then the reply.
    let need = 20
        + slot
            .records
            .iter()
            .map(|r| 30 + r.reply.len())
            .sum::<usize>();
    match need {
        0..=256 => slot_bytes_in::<256, R>(slot, put),
        257..=512 => slot_bytes_in::<512, R>(slot, put),
        513..=1024 => slot_bytes_in::<1024, R>(slot, put),
        1025..=2048 => slot_bytes_in::<2048, R>(slot, put),
        _ => put(&encode(slot)),
    }
}

/// [`with_slot_bytes`] in a writer of `ROOM` bytes, which the caller made sure is enough.
fn slot_bytes_in<const ROOM: usize, R>(
    slot: &ResendSlotRef<'_>,
    put: impl FnOnce(&[u8]) -> R,
) -> R {
    let mut w = mds_proto::PostcardWriter::<ROOM>::new();
    w.varint(slot.acked_xid);
    w.varint(slot.records.len() as u64);
    for record in &slot.records {
        w.varint(record.xid);
        w.varint(record.transno);
        w.bytes(&record.reply);
    }
    put(w.as_slice())
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("encoding into a Vec cannot fail")
}

pub(crate) fn decode<'a, T: Deserialize<'a>>(what: &'static str, bytes: &'a [u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::Corrupt {
        what,
        detail: e.to_string(),
    })
}

pub(crate) fn decode_meta_u64(what: &'static str, bytes: &[u8]) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| Error::Corrupt {
        what,
        detail: format!("{} bytes", bytes.len()),
    })?;
    Ok(u64::from_le_bytes(arr))
}

/// What a golden-bytes test says when it fails.
#[cfg(test)]
pub(crate) const ENCODING_CHANGED: &str = "the on-disk encoding changed: bump SCHEMA_VERSION \
     and read docs/schema.md before updating these golden bytes";

/// Lower-case hex, for golden bytes in tests.
#[cfg(test)]
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file_kind() -> impl Strategy<Value = FileKind> {
        proptest::sample::select(vec![
            FileKind::Directory,
            FileKind::File,
            FileKind::Symlink,
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::CharDevice,
            FileKind::BlockDevice,
        ])
    }

    fn any_inode() -> impl Strategy<Value = Inode> {
        (
            (
                any::<u64>(),
                file_kind(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
            ),
            (
                any::<u32>(),
                any::<u64>(),
                any::<i64>(),
                any::<i64>(),
                any::<u64>(),
            ),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<i64>(),
                any::<u64>(),
            ),
            proptest::collection::vec(any::<u8>(), 0..200),
            any::<u64>(),
        )
            .prop_map(
                |(
                    (ino, kind, mode, uid, gid),
                    (nlink, size, ctime_ns, mtime_ns, generation),
                    (parent, entries, transno, atime_ns, rdev),
                    target,
                    data_blocks,
                )| Inode {
                    ino,
                    kind,
                    mode,
                    uid,
                    gid,
                    nlink,
                    size,
                    ctime_ns,
                    mtime_ns,
                    generation,
                    parent,
                    entries,
                    transno,
                    atime_ns,
                    rdev,
                    target,
                    data_blocks,
                },
            )
    }

    fn any_record() -> impl Strategy<Value = ResendRecord> {
        (
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(xid, transno, reply)| ResendRecord {
                xid,
                transno,
                reply: reply.into(),
            })
    }

    proptest! {
        /// An op's entry name, inline or not (past [`NAME_INLINE`] bytes), is written and
        /// read as the `String` it replaced: the same postcard bytes both ways.
        #[test]
        fn entry_names_encode_as_strings_do(name in "\\PC{0,40}") {
            let inline = EntryName::from(name.as_str());
            prop_assert_eq!(inline.spilled(), name.len() > NAME_INLINE);
            let bytes = postcard::to_stdvec(&inline).unwrap();
            prop_assert_eq!(&bytes, &postcard::to_stdvec(&name).unwrap());
            prop_assert_eq!(postcard::from_bytes::<EntryName>(&bytes).unwrap(), inline);
            prop_assert_eq!(postcard::from_bytes::<String>(&bytes).unwrap(), name);
        }

        #[test]
        fn an_entry_by_hand_is_serdes(ino in any::<u64>(), kind in file_kind()) {
            let entry = Dentry { ino, kind };
            prop_assert_eq!(with_dentry_bytes(&entry, <[u8]>::to_vec), encode(&entry));
        }

        /// A resend slot by hand is serde's, byte for byte, below and above what fits the
        /// stack, and reads back as a `ResendSlot`.
        #[test]
        fn a_resend_slot_by_hand_is_serdes(
            acked_xid in any::<u64>(),
            records in proptest::collection::vec(any_record(), 0..24),
        ) {
            let slot = ResendSlotRef { acked_xid, records: records.iter().collect() };
            let by_hand = with_slot_bytes(&slot, <[u8]>::to_vec);
            prop_assert_eq!(&by_hand, &encode(&slot));
            let read: ResendSlot = decode("slot", &by_hand).unwrap();
            prop_assert_eq!(read, ResendSlot { acked_xid, records });
        }

        /// Every buffer size's edges: slots whose bound is just under and over each.
        #[test]
        fn a_resend_slot_of_every_size_is_serdes(reply_len in 0usize..120, acked_xid in any::<u64>()) {
            for count in 0..40 {
                let records: Vec<_> = (0..count)
                    .map(|i| ResendRecord { xid: u64::MAX - i, transno: 1 << (i % 64), reply: vec![7; reply_len].into() })
                    .collect();
                let slot = ResendSlotRef { acked_xid, records: records.iter().collect() };
                prop_assert_eq!(with_slot_bytes(&slot, <[u8]>::to_vec), encode(&slot));
            }
        }

        /// The hand-written image is serde's, byte for byte, for every field's whole range
        /// and targets either side of what it writes by hand.
        #[test]
        fn an_inode_image_by_hand_is_serdes(inode in any_inode()) {
            let by_hand = with_inode_bytes(&inode, <[u8]>::to_vec);
            prop_assert_eq!(&by_hand, &encode(&inode));
            prop_assert_eq!(decode::<Inode>("image", &by_hand).unwrap(), inode);
        }
    }

    /// `value` encodes to exactly `golden` (hex), and `golden` decodes back to `value`: what
    /// this build writes, and that it reads what a store of this version holds.
    fn pinned<T>(what: &str, value: &T, golden: &str)
    where
        T: Serialize + for<'a> Deserialize<'a> + PartialEq + std::fmt::Debug,
    {
        let bytes = encode(value);
        assert_eq!(hex(&bytes), golden, "{what}: {ENCODING_CHANGED}");
        assert_eq!(&decode::<T>("golden", &bytes).unwrap(), value, "{what}");
    }

    #[test]
    fn a_layouts_data_counts_overlapping_bytes_once_and_holes_not_at_all() {
        let piece = |file_off, len| Placed {
            slice: 1,
            slice_size: 1 << 30,
            slice_off: 0,
            file_off,
            len,
        };
        assert_eq!(layout_data_blocks(&[]), 0);
        assert_eq!(layout_data_blocks(&[piece(0, 1)]), 1);
        // 0..8192 and 4096..12288 overlap: 12288 bytes, three blocks.
        assert_eq!(layout_data_blocks(&[piece(4096, 8192), piece(0, 8192)]), 3);
        // A piece inside another adds nothing; a hole of 1 GiB between two counts nothing.
        let far = 1 << 30;
        let layout = [piece(0, 8192), piece(100, 10), piece(far, 4096)];
        assert_eq!(layout_data_blocks(&layout), 3);
    }

    #[test]
    fn record_encodings_are_pinned() {
        // Every field differs from the others, so a reordered or retyped field shows.
        // postcard: unsigned integers are LEB128 varints, signed ones zigzag varints, an enum
        // variant its index as a varint, a Vec its length then its bytes.
        let old = InodeV2 {
            ino: 300,
            kind: FileKind::File,
            mode: 0o640,
            uid: 1000,
            gid: 100,
            nlink: 3,
            size: 70_000,
            ctime_ns: 1_700_000_000_123_456_789,
            mtime_ns: -2,
            generation: 42,
            parent: 0,
            entries: 5,
            transno: 43,
        };
        // What versions 1 and 2 wrote, unchanged: the upgrade reads it.
        pinned(
            "version 2 file inode",
            &old,
            "ac0201a003e8076403f0a204aab4aed8c7bfce972f032a00052b",
        );
        let upgraded = Inode::from(old);
        assert_eq!((upgraded.atime_ns, upgraded.rdev), (-2, 0));
        assert!(upgraded.target.is_empty());
        pinned(
            "upgraded file inode",
            &upgraded,
            "ac0201a003e8076403f0a204aab4aed8c7bfce972f032a00052b03000000",
        );
        // Version 8 wrote the same without the data count last: read as holding none.
        let v8 = "ac0201a003e8076403f0a204aab4aed8c7bfce972f032a00052b030000";
        let v8 = (0..v8.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&v8[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>();
        assert_eq!(decode_inode("version 8 inode", &v8).unwrap(), upgraded);
        assert!(
            decode_inode("cut short", &v8[..v8.len() - 1]).is_err(),
            "a version 8 image cut short is not one"
        );
        let counted = Inode {
            data_blocks: 300,
            ..upgraded.clone()
        };
        pinned(
            "file inode holding data",
            &counted,
            "ac0201a003e8076403f0a204aab4aed8c7bfce972f032a00052b030000ac02",
        );
        assert_eq!(decode_inode("current", &encode(&counted)).unwrap(), counted);
        let device = Inode {
            kind: FileKind::BlockDevice,
            atime_ns: 7,
            rdev: 0x0801,
            ..upgraded.clone()
        };
        pinned(
            "block device inode",
            &device,
            "ac0206a003e8076403f0a204aab4aed8c7bfce972f032a00052b0e81100000",
        );
        let symlink = Inode {
            kind: FileKind::Symlink,
            size: 3,
            target: b"a/b".to_vec(),
            ..upgraded
        };
        pinned(
            "symlink inode",
            &symlink,
            "ac0202a003e807640303aab4aed8c7bfce972f032a00052b030003612f6200",
        );
        pinned(
            "root inode",
            &Inode::root(1),
            "0100ff070000020002020001000002000000",
        );

        let dentry = Dentry {
            ino: 300,
            kind: FileKind::File,
        };
        pinned("file dentry", &dentry, "ac0201");
        let dentry = Dentry {
            ino: 2,
            kind: FileKind::Directory,
        };
        pinned("directory dentry", &dentry, "0200");
        let resend = ResendRecord {
            xid: 200,
            transno: 43,
            reply: vec![1, 2, 3].into(),
        };
        pinned("resend record", &resend, "c8012b03010203");
        let slot = ResendSlot {
            acked_xid: 150,
            records: vec![resend.clone()],
        };
        pinned("resend slot", &slot, "960101c8012b03010203");
        let by_ref = ResendSlotRef {
            acked_xid: 150,
            records: vec![&resend],
        };
        assert_eq!(
            encode(&by_ref),
            encode(&slot),
            "a slot written by reference"
        );
    }

    #[test]
    fn key_layouts_are_pinned() {
        let keys = [
            ("inode key", ino_key(300).to_vec(), "000000000000012c"),
            (
                "dentry key",
                dentry_key(9, 2, "f\u{e9}"),
                "0000000000000009000000000000000266c3a9",
            ),
            (
                "extended attribute key",
                xattr_key(2, "user.x"),
                "0000000000000002757365722e78",
            ),
            (
                "data key",
                data_key(2, 3).to_vec(),
                "000000000000000200000003",
            ),
            (
                "resend key",
                resend_key(7, 200).to_vec(),
                "0000000000000007000000c8",
            ),
            (
                "known client key",
                client_key(7),
                "636c69656e742f0000000000000007",
            ),
            (
                "session key",
                session_key(7),
                "73657373696f6e2f0000000000000007",
            ),
        ];
        for (what, key, golden) in keys {
            assert_eq!(hex(&key), golden, "{what}: {ENCODING_CHANGED}");
        }
    }

    #[test]
    fn dentry_keys_sort_by_child_then_parent_then_name() {
        let a = dentry_key(3, 9, "zzz");
        let b = dentry_key(4, 1, "zzz");
        let c = dentry_key(4, 2, "aaa");
        let d = dentry_key(4, 2, "aab");
        assert!(a < b && b < c && c < d);
        assert_eq!(decode_dentry_key(&d).unwrap(), (4, 2, "aab".to_owned()));
    }

    /// Both layouts read, each as what it is; a key whose child is not its value's, a short
    /// key and a name that is not UTF-8 are corrupt, not misread.
    #[test]
    fn entries_read_in_either_layout_and_bad_ones_are_corrupt() {
        let entry = Dentry {
            ino: 9,
            kind: FileKind::File,
        };
        let value = encode(&entry);
        let new = dentry_key(9, 2, "f");
        let old = named_key(2, "f");
        assert_eq!(
            decode_dentry(&new, &value, false).unwrap(),
            (2, "f".to_owned(), entry)
        );
        assert_eq!(
            decode_dentry(&old, &value, true).unwrap(),
            (2, "f".to_owned(), entry)
        );
        assert!(is_child_keyed(&new, &entry));
        assert!(!is_child_keyed(&old, &entry));
        let corrupt = |key: &[u8]| {
            matches!(
                decode_dentry(key, &value, false),
                Err(Error::Corrupt { .. })
            )
        };
        assert!(corrupt(&dentry_key(8, 2, "f")), "another child's key");
        assert!(corrupt(&old), "the old layout read as the new");
        assert!(corrupt(&new[..12]), "a short key");
        let mut not_utf8 = dentry_key(9, 2, "");
        not_utf8.push(0xff);
        assert!(corrupt(&not_utf8), "a name that is not UTF-8");
    }

    #[test]
    fn short_keys_are_corrupt_not_panics() {
        assert!(matches!(
            decode_u64_key("inode key", &[1, 2]),
            Err(Error::Corrupt { .. })
        ));
        assert!(decode::<Inode>("inode", &[0xff, 0xff]).is_err());
    }
}
