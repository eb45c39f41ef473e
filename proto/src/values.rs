//! The values requests and replies both carry: what an inode is ([`Kind`]: MKNOD names one,
//! attributes and entries report one), and the byte strings of file data, symbolic link
//! targets and extended attribute values (WRITE and SETXATTR send them, READ, READLINK and
//! GETXATTR answer with them). Apart from `op.rs` and `reply.rs` so that each of those two
//! depends on these, and neither on the other.

use serde::{Deserialize, Serialize};

/// What an inode is: the file-type bits of `st_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    Directory,
    /// A regular file.
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Kind {
    /// Every kind, in wire order.
    pub const ALL: [Kind; 7] = [
        Kind::Directory,
        Kind::File,
        Kind::Symlink,
        Kind::Fifo,
        Kind::Socket,
        Kind::CharDevice,
        Kind::BlockDevice,
    ];

    /// The `S_IFMT` bits of `st_mode` for this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::Directory => 0o040_000,
            Kind::File => 0o100_000,
            Kind::Symlink => 0o120_000,
            Kind::Fifo => 0o010_000,
            Kind::Socket => 0o140_000,
            Kind::CharDevice => 0o020_000,
            Kind::BlockDevice => 0o060_000,
        }
    }

    /// The kind of `S_IFMT` bits, `None` for bits that name no kind.
    pub fn from_mode_bits(mode: u32) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.mode_bits() == mode & 0o170_000)
    }

    /// The letter `ls -l` shows for it.
    pub fn letter(self) -> char {
        match self {
            Kind::Directory => 'd',
            Kind::File => '-',
            Kind::Symlink => 'l',
            Kind::Fifo => 'p',
            Kind::Socket => 's',
            Kind::CharDevice => 'c',
            Kind::BlockDevice => 'b',
        }
    }
}

/// File data: bytes, at most [`crate::MAX_IO`] in one READ or WRITE.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Data(#[serde(serialize_with = "as_bytes")] pub Vec<u8>);

/// One piece of a regular file's data in the object store: bytes `file_off..file_off + len` of
/// the file are bytes `slice_off..slice_off + len` of slice `slice`, an object of `slice_size`
/// bytes that is written once and never changed. A file's layout is a list of these, oldest
/// first: where two overlap, the later one is what the file holds; a byte no piece covers
/// (below the file's size) is a hole and reads as zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placed {
    pub slice: u64,
    pub slice_size: u64,
    pub slice_off: u64,
    pub file_off: u64,
    pub len: u64,
}

impl Placed {
    /// The first byte of the file past this piece.
    pub fn file_end(&self) -> u64 {
        self.file_off.saturating_add(self.len)
    }

    /// Whether it names bytes inside its slice, and no byte past `u64::MAX`.
    pub fn is_valid(&self) -> bool {
        self.len > 0
            && self
                .slice_off
                .checked_add(self.len)
                .is_some_and(|end| end <= self.slice_size)
            && self.file_off.checked_add(self.len).is_some()
    }
}

/// A symbolic link's target: bytes, as Linux keeps them (not necessarily UTF-8).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target(#[serde(serialize_with = "as_bytes")] pub Vec<u8>);

/// An extended attribute's value: bytes, at most [`crate::MAX_XATTR_VALUE`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XattrValue(#[serde(serialize_with = "as_bytes")] pub Vec<u8>);

/// Writes a byte vector in one piece. postcard encodes bytes exactly as a sequence of `u8` (a
/// varint length, then the bytes), so this changes no byte on the wire, only the work: a
/// sequence goes through the serializer one element at a time.
fn as_bytes<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(bytes)
}
