//! Who gets in, and what they may claim to be: the bounds on connections that have not
//! completed their handshake, the connection slot taken once one has, and the check of the
//! credentials each request carries (`--cred-check`).
//!
//! A connection is accepted into a *handshake slot* — one of its partition's
//! `max_unauthenticated`, one of its address's `max_unauthenticated_per_address` and one of its
//! prefix's (/24 of IPv4, /64 of IPv6) `max_unauthenticated_per_prefix` — and moves to a
//! *connection slot* (`max_connections`) only when its CONNECT (with its TLS handshake and
//! proofs, under one deadline) has completed. So a flood of connections that never
//! authenticate holds handshake slots alone: it can neither fill the connection slots clients
//! hold nor, from a few addresses or one network (an IPv6 /64 is as many addresses as its
//! owner wants), take every handshake slot.
//!
//! A flood from many networks can still fill a partition's handshake slots. A full partition
//! does not refuse the newcomer, which may be a client about to prove its key or session:
//! it closes its oldest connection still in its handshake (EBUSY), one that has not even sent
//! its CONNECT first, and takes that one's slot. A connection that has sent its CONNECT is
//! therefore closed only once every silent one is gone, and then only after
//! `max_unauthenticated` newer connections: a client whose handshake takes less than that many
//! accepts is never refused by a flood of connections that never prove anything, however many
//! addresses it comes from. Address and prefix caps still refuse at accept: they are the
//! flood's own share.
//!
//! Credentials are the client's word, as in NFS's AUTH_SYS. With `--cred-check owner` a
//! request may carry credentials other than its connection owner's only if the connection
//! came from a privileged source port (below 1024: only root can bind one) or proved the
//! shared key, as NFS's `secure` export option asks of its clients; otherwise its uid must be
//! the owner's and its groups the owner's groups. The owner of a loopback connection is the
//! user the kernel says holds the client's socket (one exact sock_diag lookup by the
//! connection's addresses, as `ss` makes; the user's groups from the user database, cached a
//! minute); a connection from elsewhere has no owner the server can learn, and is refused at
//! CONNECT.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mds_proto::Cred;
use parking_lot::Mutex;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::Partition;
use crate::config::{CredCheck, Limits};

/// Connections that have not completed their handshake, server-wide: each in accept order,
/// and how many by address, by prefix and by partition.
#[derive(Clone, Debug, Default)]
pub struct Unauthenticated {
    table: Arc<Mutex<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    /// The next connection's number: accept order.
    next: u64,
    /// Every connection in its handshake, oldest first.
    waiting: BTreeMap<u64, Waiting>,
    by_address: HashMap<IpAddr, usize>,
    by_prefix: HashMap<Prefix, usize>,
    by_partition: HashMap<usize, usize>,
}

/// One connection in its handshake.
#[derive(Debug)]
struct Waiting {
    partition: usize,
    ip: IpAddr,
    /// It sent its CONNECT: closed to make room only when no silent one is left.
    spoke: bool,
    /// Cancelled when it is closed to make room.
    evict: CancellationToken,
}

/// The network an address belongs to as far as the caps go: the /24 of an IPv4 address, the
/// /64 of an IPv6 one (a site's subnet: its owner has every address of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Prefix {
    V4([u8; 3]),
    V6([u8; 8]),
}

impl Prefix {
    fn of(ip: IpAddr) -> Prefix {
        match ip {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                Prefix::V4([o[0], o[1], o[2]])
            }
            IpAddr::V6(v6) => {
                let o = v6.octets();
                Prefix::V6(o[..8].try_into().expect("8 bytes"))
            }
        }
    }
}

/// `key`'s count.
fn count<K: std::hash::Hash + Eq>(counts: &HashMap<K, usize>, key: &K) -> usize {
    counts.get(key).copied().unwrap_or(0)
}

/// Takes one off `key`'s count, dropping the entry at 0.
fn uncount<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

impl Table {
    /// Takes connection `id` out, with its counts; returns it if it was in.
    fn remove(&mut self, id: u64) -> Option<Waiting> {
        let gone = self.waiting.remove(&id)?;
        uncount(&mut self.by_address, &gone.ip);
        uncount(&mut self.by_prefix, &Prefix::of(gone.ip));
        uncount(&mut self.by_partition, &gone.partition);
        Some(gone)
    }

    /// The connection of `partition` to close for room: its oldest silent one, else its
    /// oldest.
    fn oldest_of(&self, partition: usize) -> Option<u64> {
        let mine = || {
            self.waiting
                .iter()
                .filter(|(_, w)| w.partition == partition)
        };
        mine()
            .find(|(_, w)| !w.spoke)
            .or_else(|| mine().next())
            .map(|(&id, _)| id)
    }
}

impl Unauthenticated {
    /// Connections from `ip` in their handshake now.
    pub fn from(&self, ip: IpAddr) -> usize {
        let ip = ip.to_canonical();
        self.table.lock().by_address.get(&ip).copied().unwrap_or(0)
    }

    /// All connections in their handshake now.
    pub fn total(&self) -> usize {
        self.table.lock().waiting.len()
    }

    /// A handshake slot on `partition` for a connection from `ip`, under `limits`; when the
    /// partition's are all taken, the oldest connection in its handshake there (a silent one
    /// first) is evicted for it (returned `true`).
    fn admit(
        &self,
        partition: usize,
        ip: IpAddr,
        limits: &Limits,
    ) -> Result<(HandshakeSlot, bool), Refused> {
        // An IPv4 client of a listener on `[::]` arrives as `::ffff:a.b.c.d`.
        let ip = ip.to_canonical();
        let prefix = Prefix::of(ip);
        let mut table = self.table.lock();
        if count(&table.by_address, &ip) >= limits.max_unauthenticated_per_address {
            return Err(Refused::Address);
        }
        if count(&table.by_prefix, &prefix) >= limits.max_unauthenticated_per_prefix {
            return Err(Refused::Prefix);
        }
        let mut evicted = false;
        if count(&table.by_partition, &partition) >= limits.max_unauthenticated {
            let oldest = table.oldest_of(partition).ok_or(Refused::Handshakes)?;
            let gone = table.remove(oldest).expect("just found");
            gone.evict.cancel();
            evicted = true;
        }
        let id = table.next;
        table.next += 1;
        let evict = CancellationToken::new();
        table.waiting.insert(
            id,
            Waiting {
                partition,
                ip,
                spoke: false,
                evict: evict.clone(),
            },
        );
        *table.by_address.entry(ip).or_insert(0) += 1;
        *table.by_prefix.entry(prefix).or_insert(0) += 1;
        *table.by_partition.entry(partition).or_insert(0) += 1;
        drop(table);
        Ok((
            HandshakeSlot {
                id,
                counts: self.clone(),
                evict,
            },
            evicted,
        ))
    }
}

/// A connection's place while it has not completed its handshake: released when it does, or
/// when it ends; taken from it when it is evicted for a newer connection.
#[derive(Debug)]
pub struct HandshakeSlot {
    id: u64,
    counts: Unauthenticated,
    evict: CancellationToken,
}

impl HandshakeSlot {
    /// The connection sent its CONNECT: it is closed for room only after the silent ones.
    pub fn spoke(&self) {
        if let Some(w) = self.counts.table.lock().waiting.get_mut(&self.id) {
            w.spoke = true;
        }
    }

    /// Resolves when the slot was taken for a newer connection: the connection must close.
    pub async fn evicted(&self) {
        self.evict.cancelled().await;
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.counts.table.lock().remove(self.id);
    }
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its partition's connection slots are all held by clients that completed their
    /// handshake.
    Connections,
    /// Its partition's handshake slots are all taken (and none could be made free).
    Handshakes,
    /// Its address has its cap of connections in their handshake.
    Address,
    /// Its address's /24 (IPv4) or /64 (IPv6) has its cap of connections in their handshake.
    Prefix,
}

impl Refused {
    pub fn describe(self, limits: &Limits) -> String {
        match self {
            Refused::Connections => format!(
                "connection limit reached ({} per partition)",
                limits.max_connections
            ),
            Refused::Handshakes => format!(
                "{} connections of this partition are in their handshake",
                limits.max_unauthenticated
            ),
            Refused::Address => format!(
                "{} connections from this address are in their handshake",
                limits.max_unauthenticated_per_address
            ),
            Refused::Prefix => format!(
                "{} connections from this address's /24 or /64 are in their handshake",
                limits.max_unauthenticated_per_prefix
            ),
        }
    }
}

/// The refusal counters, registered once per partition (series present from start-up).
pub struct RefusedCounters {
    connections: metrics::Counter,
    handshakes: metrics::Counter,
    address: metrics::Counter,
    prefix: metrics::Counter,
}

impl RefusedCounters {
    pub fn register() -> RefusedCounters {
        let unauthenticated = |reason: &'static str| {
            let c = metrics::counter!(crate::metrics::UNAUTHENTICATED_REFUSED, "reason" => reason);
            c.increment(0);
            c
        };
        let connections = metrics::counter!(crate::metrics::CONNECTIONS_REFUSED);
        connections.increment(0);
        RefusedCounters {
            connections,
            handshakes: unauthenticated("partition"),
            address: unauthenticated("address"),
            prefix: unauthenticated("prefix"),
        }
    }

    /// Counts a refusal, or (`Handshakes`) an eviction for room.
    pub fn count(&self, why: Refused) {
        match why {
            Refused::Connections => &self.connections,
            Refused::Handshakes => &self.handshakes,
            Refused::Address => &self.address,
            Refused::Prefix => &self.prefix,
        }
        .increment(1);
    }

    /// Counts the eviction of the oldest connection in its handshake, for room.
    pub fn count_eviction(&self) {
        self.count(Refused::Handshakes);
    }
}

impl Partition {
    /// The refusal counters of the accept loop (`Partition::serve`), registered.
    pub(super) fn refusal_counters() -> RefusedCounters {
        RefusedCounters::register()
    }

    /// A handshake slot for a connection from `peer`, or why there is none; `true` with it
    /// when an older connection in its handshake was evicted to make room.
    pub(super) fn handshake_slot(
        &self,
        peer: SocketAddr,
    ) -> Result<(HandshakeSlot, bool), Refused> {
        self.shared
            .net
            .unauthenticated
            .admit(self.id, peer.ip(), &self.shared.net.limits)
    }

    /// A connection slot for a connection that completed its handshake, or `None`: the
    /// partition serves as many as it may.
    pub(super) fn connection_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }
}

/// What one connection's requests may say they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Anyone: `--cred-check off`, a privileged source port, the shared key, or root's own.
    Any,
    /// Only this user, with groups among these (its primary group first).
    Owner { uid: u32, groups: Vec<u32> },
}

impl Credentials {
    /// Whether a request may carry `cred`.
    pub fn admit(&self, cred: &Cred) -> bool {
        match self {
            Credentials::Any => true,
            Credentials::Owner { uid, groups } => {
                cred.uid == *uid
                    && groups.contains(&cred.gid)
                    && cred.groups.iter().all(|g| groups.contains(g))
            }
        }
    }

    /// What a connection from `peer` to `local` may carry under `check`, given whether it
    /// proved the shared key; `Err` says why it may not connect at all.
    pub fn of(
        check: CredCheck,
        peer: SocketAddr,
        local: SocketAddr,
        keyed: bool,
    ) -> Result<Credentials, &'static str> {
        if check == CredCheck::Off || keyed || peer.port() < 1024 {
            return Ok(Credentials::Any);
        }
        // An IPv4 client of a listener on `[::]` arrives as `::ffff:a.b.c.d`.
        let (peer, local) = (canonical(peer), canonical(local));
        if !peer.ip().is_loopback() {
            return Err(
                "--cred-check owner: a connection from another host must come from a \
                        privileged port or prove the shared key",
            );
        }
        let uid = socket_owner(peer, local)
            .ok_or("--cred-check owner: the kernel does not say who holds this connection")?;
        if uid == 0 {
            return Ok(Credentials::Any);
        }
        let groups = user_groups(uid).ok_or("--cred-check owner: the owner is not a known user")?;
        Ok(Credentials::Owner { uid, groups })
    }
}

/// `addr` with an IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The user holding the TCP socket at `peer` connected to `local`, both on this host: one
/// sock_diag request for exactly that socket (the kernel finds it by its four addresses, as
/// `ss` asks), or, where netlink is not to be had, its line in `/proc/net/tcp`.
pub fn socket_owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    sock_diag_owner(peer, local).or_else(|| proc_owner(peer, local))
}

/// `SOCK_DIAG_BY_FAMILY`, `NLM_F_REQUEST`, `NLMSG_ERROR` (linux/sock_diag.h, netlink.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;

/// The owner from one `inet_diag_req_v2` for the socket whose source is `peer` and destination
/// `local`; `None` if netlink refuses or the kernel does not find it.
fn sock_diag_owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let family = match peer {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // struct nlmsghdr (16 bytes), then struct inet_diag_req_v2 (56): family, protocol, ext,
    // pad, states, and the socket id — ports and addresses in network order, the interface,
    // and the cookie INET_DIAG_NOCOOKIE (all ones).
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel's
    req.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&peer.port().to_be_bytes());
    req.extend_from_slice(&local.port().to_be_bytes());
    for ip in [peer.ip(), local.ip()] {
        let mut words = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => words[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => words.copy_from_slice(&v6.octets()),
        }
        req.extend_from_slice(&words);
    }
    req.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    req.extend_from_slice(&[0xff; 8]);
    debug_assert_eq!(req.len(), 72);
    // SAFETY: socket(2) with constant arguments; the descriptor, if any, is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a descriptor this function just opened and nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: the option value is a timeval of the size passed, alive for the call.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    // SAFETY: a zeroed sockaddr_nl is valid; the family makes it the kernel's address.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: the buffer and the address are valid for the lengths passed.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&raw const kernel).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent != req.len() as isize {
        return None;
    }
    let mut reply = [0u8; 1024];
    // SAFETY: the buffer is valid for its length.
    let got = unsafe { libc::recv(fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
    // nlmsghdr, then struct inet_diag_msg: family, state, timer, retrans, the socket id (48
    // bytes), expires, rqueue, wqueue, then the uid.
    let uid_at = 16 + 4 + 48 + 12;
    if got < (uid_at + 4) as isize {
        return None;
    }
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    if kind != SOCK_DIAG_BY_FAMILY || kind == NLMSG_ERROR {
        return None;
    }
    Some(u32::from_ne_bytes(
        reply[uid_at..uid_at + 4].try_into().expect("4 bytes"),
    ))
}

/// The `uid` column of the socket's line in `/proc/net/tcp` (or `tcp6`), where its local
/// address is `peer` and its remote one `local`: reads the whole table, so only a fallback.
fn proc_owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let table = match peer {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    let (want_local, want_remote) = (proc_address(peer), proc_address(local));
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 7
            && fields[1].eq_ignore_ascii_case(&want_local)
            && fields[2].eq_ignore_ascii_case(&want_remote))
        .then(|| fields[7].parse().ok())
        .flatten()
    })
}

/// An address as `/proc/net/tcp{,6}` writes it: the address's 32-bit words in host byte
/// order as hex, a colon, the port as hex.
fn proc_address(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => format!("{:08X}", u32::from_ne_bytes(v4.octets())),
        IpAddr::V6(v6) => v6.octets().chunks(4).fold(String::new(), |mut out, w| {
            let word = u32::from_ne_bytes(w.try_into().expect("4 bytes"));
            let _ = write!(out, "{word:08X}");
            out
        }),
    };
    format!("{ip}:{:04X}", addr.port())
}

/// How long the groups of a user are taken from the cache rather than the user database (a
/// lookup may go to the network, and a busy port would make one per CONNECT).
const GROUPS_FOR: Duration = Duration::from_secs(60);

/// Each user's groups, with when they were looked up.
type GroupsCache = HashMap<u32, (Instant, Vec<u32>)>;

/// The groups of user `uid` (its primary group first), from the user database, cached.
pub fn user_groups(uid: u32) -> Option<Vec<u32>> {
    static CACHE: parking_lot::Mutex<Option<GroupsCache>> = parking_lot::Mutex::new(None);
    if let Some((at, groups)) = CACHE.lock().get_or_insert_with(HashMap::new).get(&uid)
        && at.elapsed() < GROUPS_FOR
    {
        return Some(groups.clone());
    }
    let groups = lookup_groups(uid)?;
    let mut cache = CACHE.lock();
    let cache = cache.get_or_insert_with(HashMap::new);
    if cache.len() >= 4096 {
        cache.clear();
    }
    cache.insert(uid, (Instant::now(), groups.clone()));
    Some(groups)
}

fn lookup_groups(uid: u32) -> Option<Vec<u32>> {
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, the buffer's length is the one passed, and
    // `found` is set to `&pwd` or null.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &raw mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &raw mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    let primary = pwd.pw_gid;
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut n = groups.len() as libc::c_int;
    // SAFETY: `pw_name` points into `buf`, alive here; `groups` holds `n` entries, and on
    // return `n` says how many were written (or needed, when -1 is returned).
    let rc = unsafe { libc::getgrouplist(pwd.pw_name, primary, groups.as_mut_ptr(), &raw mut n) };
    let mut out = vec![primary];
    if rc >= 0 {
        groups.truncate(n.max(0) as usize);
        out.extend(groups.into_iter().filter(|&g| g != primary));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_their_prefixes_are_capped_and_a_full_partition_evicts_its_oldest() {
        let limits = Limits {
            max_unauthenticated: 3,
            max_unauthenticated_per_address: 2,
            max_unauthenticated_per_prefix: 3,
            ..Limits::default()
        };
        let u = Unauthenticated::default();
        let admit = |partition, ip: &str| u.admit(partition, ip.parse().unwrap(), &limits);
        let slot = |partition, ip: &str| {
            let (slot, evicted) = admit(partition, ip).unwrap();
            assert!(!evicted, "{ip}");
            slot
        };
        // One address, then its /24 (on another partition: the caps are server-wide).
        let a1 = slot(0, "10.0.0.1");
        let a2 = slot(0, "10.0.0.1");
        assert_eq!(admit(0, "10.0.0.1").unwrap_err(), Refused::Address);
        let b = slot(1, "10.0.0.2");
        assert_eq!(admit(1, "10.0.0.3").unwrap_err(), Refused::Prefix);
        assert_eq!(
            admit(1, "::ffff:10.0.0.4").unwrap_err(),
            Refused::Prefix,
            "an IPv4-mapped address is its IPv4 address"
        );
        // Every address of an IPv6 /64 is one prefix; the next /64 another.
        let v6 = [
            slot(2, "2001:db8::1"),
            slot(2, "2001:db8::ffff:2"),
            slot(1, "2001:db8::3"),
        ];
        assert_eq!(admit(1, "2001:db8::4").unwrap_err(), Refused::Prefix);
        let other64 = slot(1, "2001:db8:0:1::1");
        assert_eq!(u.total(), 7);
        // Partition 0 holds two; a third fills it. Then each newcomer takes the place of the
        // oldest still in its handshake, silent ones first: a1 has spoken, a2 goes first.
        let c = slot(0, "10.0.1.1");
        a1.spoke();
        let (d, evicted) = admit(0, "10.0.2.1").unwrap();
        assert!(evicted);
        assert!(a2.evict.is_cancelled() && !a1.evict.is_cancelled());
        assert_eq!(
            u.from("10.0.0.1".parse().unwrap()),
            1,
            "a2's count went with it"
        );
        let (e, _) = admit(0, "10.0.3.1").unwrap();
        assert!(c.evict.is_cancelled(), "then the next silent one");
        let (f, _) = admit(0, "10.0.4.1").unwrap();
        assert!(d.evict.is_cancelled());
        let (g, _) = admit(0, "10.0.5.1").unwrap();
        assert!(e.evict.is_cancelled());
        // With no silent one left, the oldest of those that spoke.
        f.spoke();
        g.spoke();
        let (_h, _) = admit(0, "10.0.6.1").unwrap();
        assert!(a1.evict.is_cancelled() && !f.evict.is_cancelled());
        // Other partitions were never touched; an evicted slot dropped later counts nothing.
        assert!(!b.evict.is_cancelled() && !other64.evict.is_cancelled());
        drop((a1, a2, c, d, e));
        assert_eq!(u.total(), 3 + 5, "partition 0's three and five elsewhere");
        drop((b, v6, other64, f));
        assert_eq!(u.total(), 2);
    }

    #[test]
    fn the_kernel_names_the_owner_of_a_loopback_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_served, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!(socket_owner(peer, listener.local_addr().unwrap()), Some(me));
        let unknown = "127.0.0.1:1".parse().unwrap();
        assert_eq!(socket_owner(unknown, listener.local_addr().unwrap()), None);
    }

    #[test]
    fn an_owner_may_carry_only_its_own_uid_and_groups() {
        let owner = Credentials::Owner {
            uid: 1000,
            groups: vec![1000, 27],
        };
        let cred = |uid, gid, groups: &[u32]| Cred {
            uid,
            gid,
            groups: groups.to_vec(),
        };
        assert!(owner.admit(&cred(1000, 1000, &[27])));
        assert!(owner.admit(&cred(1000, 27, &[])));
        assert!(!owner.admit(&cred(0, 1000, &[])), "another uid");
        assert!(!owner.admit(&cred(1000, 0, &[])), "a group it is not in");
        assert!(
            !owner.admit(&cred(1000, 1000, &[27, 0])),
            "a supplementary group"
        );
        assert!(Credentials::Any.admit(&cred(0, 0, &[0])));
    }

    #[test]
    fn who_may_carry_any_credentials() {
        let local: SocketAddr = "127.0.0.1:7400".parse().unwrap();
        let privileged: SocketAddr = "10.1.2.3:700".parse().unwrap();
        let remote: SocketAddr = "10.1.2.3:40000".parse().unwrap();
        let of = |check, peer, keyed| Credentials::of(check, peer, local, keyed);
        assert_eq!(of(CredCheck::Off, remote, false), Ok(Credentials::Any));
        assert_eq!(
            of(CredCheck::Owner, privileged, false),
            Ok(Credentials::Any)
        );
        assert_eq!(of(CredCheck::Owner, remote, true), Ok(Credentials::Any));
        assert!(of(CredCheck::Owner, remote, false).is_err());
        assert_eq!(
            user_groups(0).map(|g| g[0]),
            Some(0),
            "root's primary group"
        );
    }
}
