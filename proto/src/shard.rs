//! The cluster's inode-number layout, the one definition of it: which shard an inode number
//! belongs to, how many shards there can be, and the numbers each shard hands out.
//!
//! Inode numbers carry their shard in their top 16 bits (`ino = shard << 48 | local`), so no
//! two shards can ever hand out the same one, and anyone holding a number — a client routing a
//! request, a server checking an entry, the journal numbering a new store — finds its shard
//! without asking. Shard 0 holds the root ([`ROOT_INO`]).

use crate::ROOT_INO;

/// Bits of an inode number below its shard.
pub const SHARD_SHIFT: u32 = 48;

/// The most shards a cluster can have (16 bits of inode number name one).
pub const MAX_SHARDS: u32 = 1 << (64 - SHARD_SHIFT);

/// The shard an inode number belongs to.
pub const fn shard_of(ino: u64) -> u16 {
    (ino >> SHARD_SHIFT) as u16
}

/// The first inode number shard `shard` hands out: after the root on shard 0, and
/// `shard << 48 | 2` elsewhere (local numbers 0 and 1 are never used, so a local part reads
/// the same on every shard).
pub const fn first_ino(shard: u16) -> u64 {
    ((shard as u64) << SHARD_SHIFT) | (ROOT_INO + 1)
}

/// The inode numbers below this one are shard `shard`'s (with [`first_ino`] the first); the
/// last shard's end at `u64::MAX`, which is never handed out.
pub const fn ino_limit(shard: u16) -> u64 {
    match shard {
        u16::MAX => u64::MAX,
        _ => (shard as u64 + 1) << SHARD_SHIFT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_name_their_shard_and_never_overlap() {
        assert_eq!(first_ino(0), 2);
        assert_eq!(ino_limit(0), 1 << 48);
        assert_eq!(first_ino(3), 3 << 48 | 2);
        assert_eq!(shard_of(first_ino(3)), 3);
        assert_eq!(shard_of(ino_limit(3) - 1), 3);
        assert_eq!(shard_of(ROOT_INO), 0);
        assert_eq!(ino_limit(u16::MAX), u64::MAX);
        assert_eq!(shard_of(ino_limit(u16::MAX)), u16::MAX);
        for shard in [0u16, 1, 7, 1000] {
            assert!(ino_limit(shard) <= first_ino(shard + 1));
        }
    }
}
