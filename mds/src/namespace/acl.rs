//! POSIX access control lists as Linux keeps and enforces them: the check of a caller who is
//! not the owner against an inode's access ACL (`posix_acl_permission`), the mode an ACL
//! stands for and whether the mode alone says as much (`posix_acl_equiv_mode`), the ACL a
//! chmod rewrites (`__posix_acl_chmod`), and the access ACL and mode a new inode takes from
//! its directory's default ACL (`posix_acl_create_masq`). Mode and ACL are kept in step as
//! Linux keeps them: the owner's, the group class's and the others' bits of the mode are the
//! ACL's owner entry, its mask (or its owning-group entry when it has no mask), and its
//! others entry; an ACL the mode says all of is not stored.
//!
//! An ACL here is its entries as the `system.posix_acl_*` value carries them after the
//! 4-byte version header: 8 bytes each (tag u16, permissions u16, id u32, little-endian), in
//! the order `perm::check_acl` asks for. Pure functions of their arguments; `perm.rs` calls
//! [`permits`] for every check, `ops/xattr.rs` and `ops/mod.rs` the rest.

use mds_proto::{Cred, Errno};

use super::cred::in_group;

pub(crate) const ACL_USER_OBJ: u16 = 0x01;
pub(crate) const ACL_USER: u16 = 0x02;
pub(crate) const ACL_GROUP_OBJ: u16 = 0x04;
pub(crate) const ACL_GROUP: u16 = 0x08;
pub(crate) const ACL_MASK: u16 = 0x10;
pub(crate) const ACL_OTHER: u16 = 0x20;
/// The bytes of one entry.
pub(crate) const ACL_ENTRY: usize = 8;
/// The value's header: the version, 2, little-endian.
const HEADER: [u8; 4] = 2u32.to_le_bytes();

/// The most entries one ACL may have (E2BIG beyond, as XFS answers past its own limit): with
/// the header that is the longest value kept in memory (`node::INLINE_XATTR_MAX`, which
/// `node.rs` holds to it at compile time), so that every permission check finds its ACL in
/// memory, never in the store.
pub(crate) const MAX_ACL_ENTRIES: usize = 31;

/// The bytes of the longest ACL value: its header and [`MAX_ACL_ENTRIES`] entries.
pub(crate) const MAX_ACL_BYTES: usize = HEADER.len() + MAX_ACL_ENTRIES * ACL_ENTRY;

/// One ACL entry: tag, permissions, id.
pub(crate) fn entries(acl: &[u8]) -> impl Iterator<Item = (u16, u16, u32)> + '_ {
    acl.chunks_exact(ACL_ENTRY).map(|e| {
        (
            u16::from_le_bytes([e[0], e[1]]),
            u16::from_le_bytes([e[2], e[3]]),
            u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
        )
    })
}

/// The entries of a stored `system.posix_acl_*` value (checked when it was set).
pub(crate) fn of_value(value: &[u8]) -> &[u8] {
    value.get(HEADER.len()..).unwrap_or_default()
}

/// The `system.posix_acl_*` value of `acl`'s entries.
pub(crate) fn to_value(acl: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(HEADER.len() + acl.len());
    value.extend_from_slice(&HEADER);
    value.extend_from_slice(acl);
    value
}

/// Whether `cred`, which does not own the inode (the owner's class is the mode's, checked
/// before), may `want` (a mask of `rwx` bits) by the inode's access ACL, as Linux's
/// `posix_acl_permission` judges: a named user entry of the caller decides, limited by the
/// mask; else the caller's groups — the owning group and named groups — any one of which
/// grants all of `want` within the mask allows it, and none does if one matched but none
/// granted it; else the others' entry. EACCES if not.
#[allow(clippy::verbose_bit_mask)] // a mask of rwx bits, not a count of trailing zeros
pub(crate) fn permits(cred: &Cred, owning_gid: u32, acl: &[u8], want: u32) -> Result<(), Errno> {
    let mask = entries(acl)
        .find(|&(tag, _, _)| tag == ACL_MASK)
        .map_or(0o7, |(_, perm, _)| u32::from(perm));
    let grants = |perm: u16, masked: bool| {
        let perm = u32::from(perm) & if masked { mask } else { 0o7 };
        want & !perm & 0o7 == 0
    };
    let mut group_matched = false;
    for (tag, perm, id) in entries(acl) {
        match tag {
            ACL_USER if id == cred.uid => {
                return if grants(perm, true) {
                    Ok(())
                } else {
                    Err(Errno::EACCES)
                };
            }
            ACL_GROUP_OBJ | ACL_GROUP => {
                let gid = if tag == ACL_GROUP_OBJ { owning_gid } else { id };
                if in_group(cred, gid) {
                    group_matched = true;
                    if grants(perm, true) {
                        return Ok(());
                    }
                }
            }
            ACL_OTHER => {
                return if !group_matched && grants(perm, false) {
                    Ok(())
                } else {
                    Err(Errno::EACCES)
                };
            }
            _ => {}
        }
    }
    // A stored ACL always ends with its others' entry (`perm::check_acl`).
    Err(Errno::EACCES)
}

/// The permission bits (`rwx` for owner, group class and others) that `acl` stands for, and
/// whether the mode says all the ACL does (no named entry and no mask: it need not be
/// stored). The group class is the mask where there is one, else the owning group's entry.
pub(crate) fn mode_of(acl: &[u8]) -> (u32, bool) {
    let (mut user, mut group, mut mask, mut other) = (0, 0, None, 0);
    let mut equivalent = true;
    for (tag, perm, _) in entries(acl) {
        let perm = u32::from(perm) & 0o7;
        match tag {
            ACL_USER_OBJ => user = perm,
            ACL_GROUP_OBJ => group = perm,
            ACL_OTHER => other = perm,
            ACL_MASK => {
                mask = Some(perm);
                equivalent = false;
            }
            _ => equivalent = false,
        }
    }
    (user << 6 | mask.unwrap_or(group) << 3 | other, equivalent)
}

/// `acl` with the entries that stand for the mode's classes — the owner's, the mask (else
/// the owning group's entry) and the others' — given `apply(their permissions, the mode's bits
/// for that class)`. Named entries keep theirs.
fn with_class_bits(acl: &[u8], mode: u32, apply: impl Fn(u16, u16) -> u16) -> Vec<u8> {
    let has_mask = entries(acl).any(|(tag, _, _)| tag == ACL_MASK);
    let mut out = acl.to_vec();
    for (e, (tag, perm, _)) in out.chunks_exact_mut(ACL_ENTRY).zip(entries(acl)) {
        let bits = match tag {
            ACL_USER_OBJ => mode >> 6,
            ACL_MASK => mode >> 3,
            ACL_GROUP_OBJ if !has_mask => mode >> 3,
            ACL_OTHER => mode,
            _ => continue,
        };
        let perm = apply(perm, (bits & 0o7) as u16);
        e[2..4].copy_from_slice(&perm.to_le_bytes());
    }
    out
}

/// `acl` rewritten for a chmod to `mode`, as Linux's `__posix_acl_chmod`: the owner's and the
/// others' entries take the mode's bits, and the mask (else the owning group's entry) the
/// group class's. Named entries keep theirs: the mask now limits them.
pub(crate) fn chmod(acl: &[u8], mode: u32) -> Vec<u8> {
    with_class_bits(acl, mode, |_, bits| bits)
}

/// What a new inode created with `mode` (its permission bits, before any umask) takes from
/// its directory's default ACL `default`, as Linux's `posix_acl_create_masq`: the default
/// ACL's entries limited by the mode — the owner's by the owner bits, the mask (else the
/// owning group's entry) by the group bits, the others' by the others' bits; named entries
/// as they are, under the mask — and the permission bits that ACL stands for. The access ACL
/// is `None` where the mode says all of it. The umask plays no part: a default ACL replaces
/// it.
pub(crate) fn inherit(default: &[u8], mode: u32) -> (u32, Option<Vec<u8>>) {
    let acl = with_class_bits(default, mode, |perm, bits| perm & bits);
    let (bits, equivalent) = mode_of(&acl);
    (bits, (!equivalent).then_some(acl))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const BOB: u32 = 2000;
    const CAROL: u32 = 3000;
    const USERS: u32 = 100;
    const STAFF: u32 = 50;
    const AUDIT: u32 = 60;

    /// An ACL's entries from (tag, permissions, id) triples.
    pub(crate) fn acl(list: &[(u16, u16, u32)]) -> Vec<u8> {
        list.iter()
            .flat_map(|&(tag, perm, id)| {
                let mut e = Vec::with_capacity(ACL_ENTRY);
                e.extend_from_slice(&tag.to_le_bytes());
                e.extend_from_slice(&perm.to_le_bytes());
                e.extend_from_slice(&id.to_le_bytes());
                e
            })
            .collect()
    }

    const NONE: u32 = u32::MAX;

    fn cred(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    /// `u::rw-,u:bob:rwx,g::r--,g:staff:rw-,m::r-x,o::---` (group users).
    fn shared() -> Vec<u8> {
        acl(&[
            (ACL_USER_OBJ, 0o6, NONE),
            (ACL_USER, 0o7, BOB),
            (ACL_GROUP_OBJ, 0o4, NONE),
            (ACL_GROUP, 0o6, STAFF),
            (ACL_MASK, 0o5, NONE),
            (ACL_OTHER, 0o0, NONE),
        ])
    }

    #[test]
    fn a_named_user_is_limited_by_the_mask() {
        let bob = cred(BOB, AUDIT, &[]);
        assert_eq!(permits(&bob, USERS, &shared(), 0o4), Ok(()));
        assert_eq!(permits(&bob, USERS, &shared(), 0o1), Ok(()));
        // rwx granted, but the mask takes w away.
        assert_eq!(permits(&bob, USERS, &shared(), 0o2), Err(Errno::EACCES));
    }

    #[test]
    fn a_named_user_entry_decides_even_when_a_group_would_grant_more() {
        let list = acl(&[
            (ACL_USER_OBJ, 0o6, NONE),
            (ACL_USER, 0o0, BOB),
            (ACL_GROUP_OBJ, 0o4, NONE),
            (ACL_MASK, 0o7, NONE),
            (ACL_OTHER, 0o4, NONE),
        ]);
        let bob = cred(BOB, USERS, &[]);
        assert_eq!(permits(&bob, USERS, &list, 0o4), Err(Errno::EACCES));
    }

    #[test]
    fn any_matching_group_grants_and_a_matched_group_shuts_out_the_others_entry() {
        // Carol is in users (g::r--) and staff (g:staff:rw-): w comes from staff, under the
        // mask r-x... which takes it away again.
        let carol = cred(CAROL, USERS, &[STAFF]);
        assert_eq!(permits(&carol, USERS, &shared(), 0o4), Ok(()));
        assert_eq!(permits(&carol, USERS, &shared(), 0o2), Err(Errno::EACCES));
        // A member of a group that grants nothing asked gets nothing from the others' entry.
        let list = acl(&[
            (ACL_USER_OBJ, 0o6, NONE),
            (ACL_GROUP_OBJ, 0o0, NONE),
            (ACL_OTHER, 0o4, NONE),
        ]);
        assert_eq!(
            permits(&cred(CAROL, USERS, &[]), USERS, &list, 0o4),
            Err(Errno::EACCES)
        );
        assert_eq!(permits(&cred(CAROL, AUDIT, &[]), USERS, &list, 0o4), Ok(()));
    }

    #[test]
    fn the_others_entry_is_not_masked() {
        let list = acl(&[
            (ACL_USER_OBJ, 0o6, NONE),
            (ACL_USER, 0o6, BOB),
            (ACL_GROUP_OBJ, 0o4, NONE),
            (ACL_MASK, 0o0, NONE),
            (ACL_OTHER, 0o4, NONE),
        ]);
        assert_eq!(permits(&cred(CAROL, AUDIT, &[]), USERS, &list, 0o4), Ok(()));
        assert_eq!(
            permits(&cred(BOB, AUDIT, &[]), USERS, &list, 0o4),
            Err(Errno::EACCES)
        );
    }

    #[test]
    fn the_mode_of_an_acl_takes_the_mask_for_the_group_class() {
        assert_eq!(mode_of(&shared()), (0o650, false));
        let plain = acl(&[
            (ACL_USER_OBJ, 0o7, NONE),
            (ACL_GROUP_OBJ, 0o5, NONE),
            (ACL_OTHER, 0o1, NONE),
        ]);
        assert_eq!(mode_of(&plain), (0o751, true));
        // A mask alone makes the ACL more than the mode.
        let masked = acl(&[
            (ACL_USER_OBJ, 0o7, NONE),
            (ACL_GROUP_OBJ, 0o5, NONE),
            (ACL_MASK, 0o1, NONE),
            (ACL_OTHER, 0o1, NONE),
        ]);
        assert_eq!(mode_of(&masked), (0o711, false));
    }

    #[test]
    fn chmod_sets_the_mask_not_the_owning_groups_entry() {
        let changed = chmod(&shared(), 0o704);
        assert_eq!(
            changed,
            acl(&[
                (ACL_USER_OBJ, 0o7, NONE),
                (ACL_USER, 0o7, BOB),
                (ACL_GROUP_OBJ, 0o4, NONE),
                (ACL_GROUP, 0o6, STAFF),
                (ACL_MASK, 0o0, NONE),
                (ACL_OTHER, 0o4, NONE),
            ])
        );
        assert_eq!(mode_of(&changed).0, 0o704);
        // Without a mask, the owning group's entry is the group class.
        let plain = acl(&[
            (ACL_USER_OBJ, 0o7, NONE),
            (ACL_GROUP_OBJ, 0o5, NONE),
            (ACL_OTHER, 0o1, NONE),
        ]);
        assert_eq!(mode_of(&chmod(&plain, 0o640)).0, 0o640);
    }

    #[test]
    fn a_new_inode_takes_the_default_acl_limited_by_its_mode() {
        let default = acl(&[
            (ACL_USER_OBJ, 0o7, NONE),
            (ACL_USER, 0o7, BOB),
            (ACL_GROUP_OBJ, 0o7, NONE),
            (ACL_MASK, 0o7, NONE),
            (ACL_OTHER, 0o5, NONE),
        ]);
        // A file asked for 0666: no x anywhere in the class entries, named entries kept.
        let (mode, access) = inherit(&default, 0o666);
        assert_eq!(mode, 0o664);
        assert_eq!(
            access,
            Some(acl(&[
                (ACL_USER_OBJ, 0o6, NONE),
                (ACL_USER, 0o7, BOB),
                (ACL_GROUP_OBJ, 0o7, NONE),
                (ACL_MASK, 0o6, NONE),
                (ACL_OTHER, 0o4, NONE),
            ]))
        );
        // A default ACL the mode says all of leaves no access ACL.
        let plain = acl(&[
            (ACL_USER_OBJ, 0o7, NONE),
            (ACL_GROUP_OBJ, 0o5, NONE),
            (ACL_OTHER, 0o0, NONE),
        ]);
        assert_eq!(inherit(&plain, 0o777), (0o750, None));
    }

    #[test]
    fn values_round_trip() {
        let value = to_value(&shared());
        assert_eq!(&value[..4], &[2, 0, 0, 0]);
        assert_eq!(of_value(&value), shared().as_slice());
        assert_eq!(MAX_ACL_ENTRIES, 31);
    }
}
