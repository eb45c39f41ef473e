//! The decisions, table-driven: each case sets up a namespace in memory and a reply
//! queue with no store behind them, dispatches one request of client B, and checks when
//! its reply leaves, whether a commit notice is owed, and what went to the committer.

use super::*;
use crate::config::{Ack, Cos};
use crate::namespace::Namespace;
use crate::output::ConnOutput;
use crate::queue::Replies;
use crate::recovery::Recovery;
use crate::session::Begin;
use mds_proto::{Cred, Kind, ROOT_INO, Replay};

/// Two clients, A and B, attached to a core in memory.
struct Harness {
    core: Core,
    commits: crossbeam_channel::Receiver<CommitMsg>,
    metrics: PartitionMetrics,
    a: Arc<Session>,
    b: Arc<Session>,
    next_xid: std::cell::Cell<u64>,
    /// Where dispatch's waits (none here: no recovery window) would run.
    rt: tokio::runtime::Runtime,
}

impl Harness {
    fn new(cos: Cos, ack: Ack) -> Harness {
        let (core, commits) = Core::for_tests(Namespace::empty(), 1, cos, ack);
        let attach = |client| {
            let conn = Arc::new(ConnOutput::new(1 << 10));
            let session = core
                .sessions
                .attach(client, conn, |_| true)
                .unwrap()
                .session;
            // As a CONNECT that asks nothing settles it: the server's `--ack`.
            session.set_early(ack == Ack::Early);
            session
        };
        let (a, b) = (attach(0xA), attach(0xB));
        Harness {
            core,
            commits,
            metrics: PartitionMetrics::register(0),
            a,
            b,
            next_xid: std::cell::Cell::new(1),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    fn request(&self, op: Op) -> Request {
        let xid = self.next_xid.get();
        self.next_xid.set(xid + 1);
        Request {
            xid,
            op,
            acked_xid: 0,
            cred: Cred::default(),
            replay: None,
        }
    }

    fn dispatch(&self, session: &Arc<Session>, request: Request) -> Answer {
        self.dispatch_from(session, request, Origin::Client)
    }

    fn dispatch_from(&self, session: &Arc<Session>, request: Request, origin: Origin) -> Answer {
        self.rt.block_on(dispatch(
            &self.core,
            &self.metrics,
            session,
            request,
            origin,
        ))
    }

    /// `session` creates `name` in the root: the transno it took.
    fn create(&self, session: &Arc<Session>, name: &str) -> u64 {
        let answer = self.dispatch(session, self.request(create(name)));
        transno(&answer).expect("the create executed")
    }

    /// Everything executed so far is durable.
    fn commit_all(&self) {
        let Replies::PerCpu(engine) = &*self.core.replies else {
            unreachable!("tests run the per-CPU queue")
        };
        engine.publish(self.core.namespace.last_transno());
    }

    /// What went to the committer since the last look, by kind.
    fn sent(&self) -> Vec<&'static str> {
        self.commits.try_iter().map(|m| kind(&m)).collect()
    }
}

fn create(name: &str) -> Op {
    Op::Create {
        parent: ROOT_INO,
        name: name.into(),
        mode: 0o644,
    }
}

fn lookup(name: &str) -> Op {
    Op::Lookup {
        parent: ROOT_INO,
        name: name.into(),
    }
}

fn transno(answer: &Answer) -> Option<u64> {
    match &answer.deliver {
        Deliver::Now(r) | Deliver::AtCommit { response: r, .. } => {
            (r.transno > 0).then_some(r.transno)
        }
        _ => None,
    }
}

fn kind(msg: &CommitMsg) -> &'static str {
    match msg {
        CommitMsg::Record(r) => {
            let resend = r
                .ops
                .iter()
                .any(|op| matches!(op, journal::JournalOp::PutResend { .. }));
            if resend { "record+resend" } else { "record" }
        }
        CommitMsg::Flush(_) => "flush",
        CommitMsg::KnowClient(_) => "know",
        CommitMsg::BindSession { .. } => "bind",
        CommitMsg::ForgetClient { .. } => "forget",
        CommitMsg::DropResend(_) => "drop",
        CommitMsg::Skip { .. } => "skip",
        CommitMsg::RaiseCeilings => "ceilings",
        CommitMsg::Drain
        | CommitMsg::Checkpoint(_)
        | CommitMsg::Shutdown
        | CommitMsg::Collected(_) => "other",
        // Dispatch sends one message at a time; a partition's poll gathers them.
        CommitMsg::Batch(_) => "batch",
    }
}

/// When the reply of a case's request leaves.
#[derive(Debug, Clone, Copy, PartialEq)]
enum When {
    /// Now, reporting no transno (a read, an error, a no-op).
    Now,
    /// Now, before its own commit: an early reply, with a ticket.
    NowEarly,
    /// Now, from its resend record: the transno `before` returned, again.
    NowAgain,
    /// Once its own transno is durable.
    AtOwn,
    /// Once the transno `before` returned is durable; `cos`: held by commit-on-share.
    AtBefore {
        cos: bool,
    },
    Joined,
    Close,
}

struct Case {
    name: &'static str,
    cos: Cos,
    ack: Ack,
    /// What happens first (A's changes and B's earlier ones); returns the transno the
    /// expectation may name.
    before: fn(&Harness) -> u64,
    /// B's request.
    request: fn(&Harness) -> Request,
    when: When,
    notice: bool,
    /// What the request sends the committer, in order.
    sends: &'static [&'static str],
}

fn nothing(_: &Harness) -> u64 {
    0
}

/// A creates "shared", not yet durable.
fn a_uncommitted(h: &Harness) -> u64 {
    h.create(&h.a, "shared")
}

/// B created "b0" and it is durable: with early replies the journal knows B.
fn b_durable(h: &Harness) -> u64 {
    let t = h.create(&h.b, "b0");
    h.commit_all();
    t
}

/// B's first early mutation executed and its commit (which makes B known) is in flight.
fn b_first_in_flight(h: &Harness) -> u64 {
    h.create(&h.b, "b0")
}

/// B created "again" (xid kept as the next request's), it is durable, and its reply
/// left (as the drain releases it).
fn b_answered(h: &Harness) -> u64 {
    let t = h.create(&h.b, "again");
    h.commit_all();
    let xid = h.next_xid.get() - 1;
    drop(h.b.release(xid, true));
    h.next_xid.set(xid);
    t
}

/// B created "waiting" (xid kept as the next request's), not yet durable.
fn b_pending(h: &Harness) -> u64 {
    let t = h.create(&h.b, "waiting");
    h.next_xid.set(h.next_xid.get() - 1);
    t
}

const CASES: &[Case] = &[
    Case {
        name: "commit-deferred: a mutation waits for its own commit",
        cos: Cos::On,
        ack: Ack::Commit,
        before: nothing,
        request: |h| h.request(create("f")),
        when: When::AtOwn,
        notice: false,
        sends: &["bind", "record+resend"],
    },
    Case {
        name: "commit-deferred: built on another client's change, its commit starts now",
        cos: Cos::On,
        ack: Ack::Commit,
        before: a_uncommitted,
        request: |h| {
            h.request(Op::Unlink {
                parent: ROOT_INO,
                name: "shared".into(),
            })
        },
        when: When::AtOwn,
        notice: false,
        sends: &["bind", "record+resend", "flush"],
    },
    Case {
        name: "commit-on-share: a read of another client's change waits for its commit",
        cos: Cos::On,
        ack: Ack::Commit,
        before: a_uncommitted,
        request: |h| h.request(lookup("shared")),
        when: When::AtBefore { cos: true },
        notice: false,
        sends: &["flush"],
    },
    Case {
        name: "commit-on-share off: the same read leaves at once",
        cos: Cos::Off,
        ack: Ack::Commit,
        before: a_uncommitted,
        request: |h| h.request(lookup("shared")),
        when: When::Now,
        notice: false,
        sends: &[],
    },
    Case {
        name: "commit-on-share: an error that builds on another's change waits too",
        cos: Cos::On,
        ack: Ack::Commit,
        before: a_uncommitted,
        request: |h| h.request(create("shared")),
        when: When::AtBefore { cos: true },
        notice: false,
        sends: &["flush"],
    },
    Case {
        name: "a client's own uncommitted change holds nothing of its own back",
        cos: Cos::On,
        ack: Ack::Commit,
        before: b_first_in_flight,
        request: |h| h.request(lookup("b0")),
        when: When::Now,
        notice: false,
        sends: &[],
    },
    Case {
        name: "early: a client's first mutation waits for the commit that makes it known",
        cos: Cos::On,
        ack: Ack::Early,
        before: nothing,
        request: |h| h.request(create("f")),
        when: When::AtOwn,
        notice: true,
        sends: &["bind", "know", "record+resend", "flush"],
    },
    Case {
        name: "early: once the client is known, a mutation leaves before its commit",
        cos: Cos::On,
        ack: Ack::Early,
        before: b_durable,
        request: |h| h.request(create("f")),
        when: When::NowEarly,
        notice: true,
        sends: &["record+resend"],
    },
    Case {
        name: "early: not before the commit that makes the client known is durable",
        cos: Cos::On,
        ack: Ack::Early,
        before: b_first_in_flight,
        request: |h| h.request(create("f")),
        when: When::AtBefore { cos: false },
        notice: true,
        sends: &["record+resend"],
    },
    Case {
        name: "early: not before another client's change it built on is durable",
        cos: Cos::On,
        ack: Ack::Early,
        before: |h| {
            b_durable(h);
            a_uncommitted(h)
        },
        request: |h| {
            h.request(Op::Unlink {
                parent: ROOT_INO,
                name: "shared".into(),
            })
        },
        when: When::AtBefore { cos: false },
        notice: true,
        sends: &["record+resend", "flush"],
    },
    Case {
        name: "a resend of an answered mutation is answered from its record",
        cos: Cos::On,
        ack: Ack::Commit,
        before: b_answered,
        request: |h| h.request(create("again")),
        when: When::NowAgain,
        notice: false,
        sends: &[],
    },
    Case {
        name: "a resend of a mutation still waiting joins it",
        cos: Cos::On,
        ack: Ack::Commit,
        before: b_pending,
        request: |h| h.request(create("waiting")),
        when: When::Joined,
        notice: false,
        sends: &[],
    },
    Case {
        name: "SYNC with nothing uncommitted is answered at once",
        cos: Cos::On,
        ack: Ack::Commit,
        before: nothing,
        request: |h| h.request(Op::Sync),
        when: When::Now,
        notice: false,
        sends: &[],
    },
    Case {
        name: "SYNC waits for everything handed out, and asks for its commit",
        cos: Cos::On,
        ack: Ack::Commit,
        before: a_uncommitted,
        request: |h| h.request(Op::Sync),
        when: When::AtBefore { cos: false },
        notice: false,
        sends: &["flush"],
    },
    Case {
        name: "a second CONNECT closes the connection",
        cos: Cos::On,
        ack: Ack::Commit,
        before: nothing,
        request: |h| {
            h.request(Op::Connect {
                version: mds_proto::PROTOCOL_VERSION,
                client: 0xB,
                atime: mds_proto::Atime::default(),
                ack: mds_proto::AckAsked::default(),
            })
        },
        when: When::Close,
        notice: false,
        sends: &[],
    },
    Case {
        name: "a replay of a read is forged: the connection closes",
        cos: Cos::On,
        ack: Ack::Early,
        before: nothing,
        request: |h| Request {
            replay: Some(Replay {
                xid: 1,
                transno: 1,
                ino: 0,
                ticket: 1,
            }),
            ..h.request(lookup("x"))
        },
        when: When::Close,
        notice: false,
        sends: &[],
    },
    Case {
        name: "a replay after the window closed is refused: its change is lost",
        cos: Cos::On,
        ack: Ack::Early,
        before: nothing,
        request: |h| Request {
            replay: Some(Replay {
                xid: 1,
                transno: 1,
                ino: 0,
                ticket: 1,
            }),
            ..h.request(create("late"))
        },
        when: When::Now,
        notice: false,
        sends: &[],
    },
];

#[test]
fn each_request_is_answered_when_what_it_depends_on_allows() {
    for case in CASES {
        let h = Harness::new(case.cos, case.ack);
        let before = (case.before)(&h);
        h.sent();
        let answer = h.dispatch(&h.b, (case.request)(&h));
        let sent = h.sent();
        let name = case.name;
        let when = match &answer.deliver {
            Deliver::Now(r) if r.transno == 0 => When::Now,
            Deliver::Now(r) if r.transno == before => When::NowAgain,
            Deliver::Now(r) => {
                assert!(r.ticket != 0, "{name}: an early reply carries a ticket");
                assert!(r.transno > h.core.replies.last_committed(), "{name}");
                When::NowEarly
            }
            Deliver::AtCommit {
                until,
                response,
                cos,
            } if *until == response.transno && before != *until => {
                assert!(!cos, "{name}: a mutation's own commit is no sharing");
                When::AtOwn
            }
            Deliver::AtCommit { until, cos, .. } => {
                assert_eq!(*until, before, "{name}: waits for the wrong commit");
                When::AtBefore { cos: *cos }
            }
            Deliver::Joined => When::Joined,
            Deliver::Locked { .. } => panic!("{name}: no case here takes a lock"),
            Deliver::Close { response, .. } => {
                assert_eq!(response.result, Err(Errno::EPROTO), "{name}");
                When::Close
            }
        };
        assert_eq!(when, case.when, "{name}: {answer:?}");
        assert_eq!(answer.notice.is_some(), case.notice, "{name}: {answer:?}");
        if let (Some(notice), Some(t)) = (answer.notice, transno(&answer)) {
            assert_eq!(notice, t, "{name}: the notice is for its own transno");
        }
        assert_eq!(sent, case.sends, "{name}: to the committer");
    }
}

/// What a mutation hands the committer carries the resend record of its answer, so a
/// resend after a restart is answered the same way; the session remembers it too.
#[test]
fn a_mutation_record_carries_its_answer_for_resends() {
    let h = Harness::new(Cos::On, Ack::Commit);
    let request = h.request(create("kept"));
    let xid = request.xid;
    let answer = h.dispatch(&h.b, request);
    let t = transno(&answer).unwrap();
    let record = h
        .commits
        .try_iter()
        .find_map(|m| match m {
            CommitMsg::Record(r) => Some(r),
            _ => None,
        })
        .expect("a record");
    assert_eq!(record.transno, t);
    let Some(journal::JournalOp::PutResend { client, record, .. }) = record.ops.last() else {
        panic!("the resend record comes last: {record:?}");
    };
    assert_eq!((*client, record.xid, record.transno), (0xB, xid, t));
    let Deliver::AtCommit { response, .. } = answer.deliver else {
        unreachable!()
    };
    let body: Body = mds_proto::decode(&record.reply).unwrap();
    assert_eq!(Ok(body), response.result);
    assert_eq!(h.b.remembered(), 1);
}

/// A failed mutation takes no transno, sends nothing, and is answered at once; the
/// session forgets it was pending.
#[test]
fn a_failed_mutation_is_answered_at_once_and_journals_nothing() {
    let h = Harness::new(Cos::On, Ack::Early);
    let answer = h.dispatch(
        &h.b,
        h.request(Op::Rmdir {
            parent: ROOT_INO,
            name: "none".into(),
        }),
    );
    assert_eq!(
        answer.deliver,
        Deliver::Now(Response::new(
            1,
            mds_proto::opcode::RMDIR,
            0,
            Err(Errno::ENOENT)
        ))
    );
    assert_eq!(answer.notice, None);
    assert!(h.sent().is_empty());
    assert_eq!(h.b.pending(), 0);
    assert_eq!(h.core.namespace.last_transno(), 0);
}

/// A resend that joined its original while the original executed is answered by the
/// original's reply: one given on the spot goes through the reply queue (released at once),
/// whose release sends it to the session's connection of now, not only to the request's own.
#[test]
fn an_answer_given_on_the_spot_reaches_a_resend_that_joined_it() {
    let h = Harness::new(Cos::On, Ack::Early);
    let op = mds_proto::opcode::SETXATTR;
    let (alone, joined) = (40, 41);
    assert_eq!(h.b.begin(alone, mds_proto::opcode::CREATE), Begin::New);
    let answer = answer_begun(&h.core, &h.b, Response::new(alone, op, 0, Ok(Body::Done)));
    assert!(matches!(answer.deliver, Deliver::Now(_)), "{answer:?}");
    assert_eq!(h.b.pending(), 0);

    assert_eq!(
        h.b.begin(joined, mds_proto::opcode::CREATE),
        Begin::New,
        "the original, executing"
    );
    assert_eq!(
        h.b.begin(joined, mds_proto::opcode::CREATE),
        Begin::Joined,
        "its copy on a newer connection"
    );
    let answer = answer_begun(&h.core, &h.b, Response::new(joined, op, 0, Ok(Body::Done)));
    let last_committed = h.core.replies.last_committed();
    assert!(
        matches!(answer.deliver, Deliver::AtCommit { until, cos: false, .. } if until <= last_committed),
        "released at once through the queue: {answer:?}"
    );
    assert_eq!(h.b.pending(), 0);
}

/// Who serves what is answered while the recovery window is open, without waiting for it
/// and without telling the window a known client is done: SHARD_MAP, and its long-poll
/// SHARD_MAP_WAIT — which a stopping server answers at once, whatever wait it asked for.
#[test]
fn the_shard_map_is_answered_inside_the_recovery_window_and_a_wait_ends_at_shutdown() {
    let mut h = Harness::new(Cos::On, Ack::Commit);
    let known = 0xC;
    let bounds = crate::recovery::Bounds {
        last_committed: 0,
        transno_ceiling: 0,
        ino_ceiling: 0,
        ino_floor: journal::first_ino(0),
    };
    let key = ReplayKey::new(&[7; journal::SECRET_LEN]);
    h.core.recovery = Recovery::new(vec![known], bounds, key, Box::new(|_, _| {}));
    let view = Arc::new(crate::shard::ShardView::default());
    view.serve(0);
    h.core.shard_view = Some(view);
    let conn = Arc::new(ConnOutput::new(1 << 10));
    let c = h
        .core
        .sessions
        .attach(known, conn, |_| true)
        .unwrap()
        .session;
    let answered = |session: &Arc<Session>, op: Op| {
        let request = h.request(op);
        let bounded = async {
            let limit = std::time::Duration::from_secs(10);
            let asked = dispatch(&h.core, &h.metrics, session, request, Origin::Client);
            tokio::time::timeout(limit, asked).await
        };
        match h.rt.block_on(bounded).expect("answered, not held").deliver {
            Deliver::Now(response) => response.result,
            other => panic!("{other:?}"),
        }
    };
    let map = || mds_proto::ShardMap {
        shard: Some(0),
        ..mds_proto::ShardMap::default()
    };
    assert_eq!(answered(&c, Op::ShardMap), Ok(Body::ShardMap(map())));
    let no_wait = Op::ShardMapWait {
        after: 0,
        wait_ms: 0,
    };
    let at = |revision| {
        Ok(Body::ShardMapAt {
            revision,
            map: map(),
        })
    };
    assert_eq!(answered(&c, no_wait.clone()), at(0));
    assert_eq!(answered(&h.b, no_wait), at(0));
    assert!(
        h.core.recovery.is_open(),
        "neither ends the known client's part"
    );
    h.core.shutdown.cancel();
    let long = Op::ShardMapWait {
        after: 0,
        wait_ms: u32::MAX,
    };
    assert_eq!(answered(&h.b, long), at(0));
}

/// A harness whose core serves shard 0 of a cluster of `shards`, root-squashing or not.
fn in_cluster(shards: u16, squash: bool) -> Harness {
    let mut h = Harness::new(Cos::On, Ack::Commit);
    let (core, commits) = Core::for_tests(
        Namespace::empty().squashing_root(squash),
        1,
        Cos::On,
        Ack::Commit,
    );
    h.core = core;
    h.commits = commits;
    let attach = |client| {
        let conn = Arc::new(ConnOutput::new(1 << 10));
        h.core
            .sessions
            .attach(client, conn, |_| true)
            .unwrap()
            .session
    };
    (h.a, h.b) = (attach(0xA), attach(0xB));
    let view = Arc::new(crate::shard::ShardView::default());
    view.serve(0);
    view.peers.start(
        h.rt.handle().clone(),
        "127.0.0.1:9".into(),
        mds_client::ConnectOptions::default(),
        shards,
    );
    h.core.shard_view = Some(view);
    h
}

/// Root's credentials, as a peer sends them and as any client may claim them.
fn root() -> Cred {
    Cred::default()
}

/// The answer given now, or at a commit.
fn result(answer: &Answer) -> &Result<Body, Errno> {
    match &answer.deliver {
        Deliver::Now(r) | Deliver::AtCommit { response: r, .. } => &r.result,
        other => panic!("{other:?}"),
    }
}

/// The operations only the cluster's servers send (a remote directory's steps on the other
/// shard, and the scrub's question) are refused EPERM on a client's connection — one that
/// did not begin with PEER_CONNECT and prove the cluster's peer secret — whatever uid it
/// claims, before anything executes or anything of the namespace is told: RESOLVE_REMOTE
/// does not say EBUSY for a name under way. On 8d645ab a client claiming uid 0 had each of
/// them executed (and RESOLVE_REMOTE answered EBUSY before it looked at who asked).
#[test]
fn server_only_operations_are_refused_on_a_clients_connection_whatever_uid_it_claims() {
    let h = in_cluster(2, false);
    let parent = 1 << mds_proto::SHARD_SHIFT | 1;
    // A pending directory, as a peer makes one.
    let made = h.dispatch_from(
        &h.a,
        Request {
            cred: root(),
            ..h.request(Op::MakePendingDir {
                shard: 0,
                parent,
                name: "d".into(),
                mode: 0o755,
                uid: 1000,
                gid: 100,
            })
        },
        Origin::Peer,
    );
    let Ok(Body::Attr(d)) = result(&made) else {
        panic!("{made:?}")
    };
    let d = d.ino;
    h.commit_all();
    h.sent();
    let pending = h.core.namespace.pending_dirs();
    let counts = h.core.namespace.counts();
    let view = h.core.shard_view.clone().unwrap();
    let _under_way = view.peers.begin(ROOT_INO, "busy").unwrap();
    let server_only = [
        Op::MakePendingDir {
            shard: 0,
            parent,
            name: "e".into(),
            mode: 0o755,
            uid: 0,
            gid: 0,
        },
        Op::PrepareRmdir {
            ino: d,
            parent,
            name: "bogus".into(),
            owner: None,
        },
        Op::ResolveRemote {
            parent: ROOT_INO,
            name: "busy".into(),
            ino: parent,
        },
        Op::ResolveRemote {
            parent: ROOT_INO,
            name: "d".into(),
            ino: d,
        },
    ];
    for op in server_only {
        assert!(op.is_server_only());
        let answer = h.dispatch(
            &h.b,
            Request {
                cred: root(),
                ..h.request(op.clone())
            },
        );
        match &answer.deliver {
            Deliver::Now(r) => assert_eq!(r.result, Err(Errno::EPERM), "{op:?}"),
            other => panic!("{op:?}: {other:?}"),
        }
        assert_eq!(h.sent(), Vec::<&str>::new(), "{op:?}: nothing to commit");
    }
    assert_eq!(h.core.namespace.pending_dirs(), pending, "nothing marked");
    assert_eq!(h.core.namespace.counts().inodes(), counts.inodes());
    // Every other operation is a client's.
    for op in [
        Op::MkdirRemote {
            parent: ROOT_INO,
            name: "x".into(),
            mode: 0o755,
            shard: 0,
        },
        Op::ShardMap,
        Op::Ping,
    ] {
        assert!(!op.is_server_only(), "{op:?}");
    }
}

/// A peer's steps run as root even on a server started with `--root-squash` (on 8d645ab the
/// squash made them EPERM, and remote MKDIR, RMDIR and the scrub failed); and RESOLVE_REMOTE
/// answers a peer EBUSY for a name under way.
#[test]
fn a_peers_steps_run_as_root_under_root_squash() {
    let h = in_cluster(2, true);
    let parent = 1 << mds_proto::SHARD_SHIFT | 1;
    let peer = |op| {
        h.dispatch_from(
            &h.a,
            Request {
                cred: root(),
                ..h.request(op)
            },
            Origin::Peer,
        )
    };
    let made = peer(Op::MakePendingDir {
        shard: 0,
        parent,
        name: "d".into(),
        mode: 0o755,
        uid: 1000,
        gid: 100,
    });
    let Ok(Body::Attr(d)) = result(&made) else {
        panic!("{made:?}")
    };
    let d = d.ino;
    let prepared = peer(Op::PrepareRmdir {
        ino: d,
        parent,
        name: "d".into(),
        owner: None,
    });
    assert_eq!(result(&prepared), &Ok(Body::Done));
    let view = h.core.shard_view.clone().unwrap();
    let _under_way = view.peers.begin(ROOT_INO, "busy").unwrap();
    let busy = peer(Op::ResolveRemote {
        parent: ROOT_INO,
        name: "busy".into(),
        ino: parent,
    });
    assert_eq!(result(&busy), &Err(Errno::EBUSY));
    // A client claiming root is squashed as before.
    let squashed = h.dispatch(
        &h.b,
        Request {
            cred: root(),
            ..h.request(Op::Setattr {
                ino: ROOT_INO,
                attr: mds_proto::SetAttr {
                    mode: Some(0o700),
                    ..mds_proto::SetAttr::default()
                },
            })
        },
    );
    assert_eq!(result(&squashed), &Err(Errno::EPERM));
}

/// MAKE_PENDING_DIR and PREPARE_RMDIR naming a parent on a shard the cluster does not have
/// are refused EINVAL, even from a peer: no entry could ever name the directory, and the
/// scrub would ask a shard nobody serves (on 8d645ab an inode was made, and every scrub
/// round then waited 10 s for it).
#[test]
fn a_step_naming_a_shard_the_cluster_does_not_have_is_refused() {
    let h = in_cluster(2, false);
    let nowhere = 5 << mds_proto::SHARD_SHIFT | 1;
    let counts = h.core.namespace.counts().inodes();
    for op in [
        Op::MakePendingDir {
            shard: 0,
            parent: nowhere,
            name: "d".into(),
            mode: 0o755,
            uid: 0,
            gid: 0,
        },
        Op::PrepareRmdir {
            ino: ROOT_INO,
            parent: nowhere,
            name: "d".into(),
            owner: None,
        },
    ] {
        let answer = h.dispatch_from(
            &h.a,
            Request {
                cred: root(),
                ..h.request(op.clone())
            },
            Origin::Peer,
        );
        assert_eq!(result(&answer), &Err(Errno::EINVAL), "{op:?}");
    }
    assert_eq!(h.core.namespace.counts().inodes(), counts);
    assert!(h.core.namespace.pending_dirs().is_empty());
    assert_eq!(h.sent(), Vec::<&str>::new());
}

/// The other shards as a table answers them: what was sent to them, in order, and the
/// answer each kind of step gets.
struct TableShards {
    sent: parking_lot::Mutex<Vec<Op>>,
    answer: fn(&Op) -> Result<Body, Errno>,
}

impl crate::shard::OtherShards for TableShards {
    fn call(
        &self,
        op: Op,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Body, Errno>> + Send + '_>> {
        let answer = (self.answer)(&op);
        self.sent.lock().push(op);
        Box::pin(async move { answer })
    }
}

impl TableShards {
    fn sent(&self) -> Vec<&'static str> {
        self.sent.lock().iter().map(Op::name).collect()
    }
}

/// The directory shard 1 makes for a MKDIR_REMOTE.
const REMOTE_DIR: u64 = 1 << mds_proto::SHARD_SHIFT | 0x40;

#[allow(clippy::unnecessary_wraps)] // a row of the table: its answers may be refusals
fn pending_dir_made(op: &Op) -> Result<Body, Errno> {
    let Op::MakePendingDir { mode, uid, gid, .. } = op else {
        return Ok(Body::Done); // PREPARE_RMDIR: the directory is empty and marked
    };
    Ok(Body::Attr(mds_proto::Attr {
        ino: REMOTE_DIR,
        kind: Kind::Directory,
        mode: *mode,
        uid: *uid,
        gid: *gid,
        nlink: 2,
        size: 0,
        atime_ns: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        rdev: 0,
        generation: 1,
        blocks: 0,
    }))
}

/// Shard 0 of a two-shard cluster, its other shard answered by `answer`, replies `ack`.
fn reaching(ack: Ack, answer: fn(&Op) -> Result<Body, Errno>) -> (Harness, Arc<TableShards>) {
    let mut h = in_cluster(2, false);
    h.core.ack = ack;
    let other = Arc::new(TableShards {
        sent: parking_lot::Mutex::new(Vec::new()),
        answer,
    });
    h.core
        .shard_view
        .as_ref()
        .unwrap()
        .peers
        .reach_through(other.clone());
    (h, other)
}

fn mkdir_remote(name: &str, shard: u16) -> Op {
    Op::MkdirRemote {
        parent: ROOT_INO,
        name: name.into(),
        mode: 0o755,
        shard,
    }
}

/// Issue 54: the remote decisions, without etcd, a socket or a store — one row each.
/// MKDIR_REMOTE asks the child's shard for the directory and makes the entry only once it
/// answered, and is answered after its commit even under early replies (no replay could
/// redo the other shard's half); the other shard's refusal is the client's answer, with no
/// entry; a shard the cluster does not have is EINVAL, asked of nobody; a name under way is
/// EBUSY to a second MKDIR_REMOTE and to the scrub's RESOLVE_REMOTE; a remote RMDIR asks
/// PREPARE_RMDIR first and removes the entry only if it was granted.
#[test]
fn the_remote_decisions_answer_from_a_table_of_the_other_shards() {
    // MKDIR_REMOTE, granted: entry made, answered at its commit even under --ack early.
    for ack in [Ack::Commit, Ack::Early] {
        let (h, other) = reaching(ack, pending_dir_made);
        let answer = h.dispatch(&h.b, h.request(mkdir_remote("d", 1)));
        assert!(
            matches!(answer.deliver, Deliver::AtCommit { .. }),
            "{ack:?}: never early: {answer:?}"
        );
        let Ok(Body::Attr(made)) = result(&answer) else {
            panic!("{answer:?}")
        };
        assert_eq!(made.ino, REMOTE_DIR);
        assert_eq!(other.sent(), ["make_pending_dir"]);
        h.commit_all();
        let found = h.dispatch(&h.b, h.request(lookup("d")));
        assert_eq!(
            result(&found),
            &Ok(Body::Remote {
                ino: REMOTE_DIR,
                kind: Kind::Directory
            }),
            "{ack:?}: the entry names the other shard's directory"
        );
    }

    // Refused by the child's shard: that answer, and no entry.
    let (h, other) = reaching(Ack::Commit, |_| Err(Errno::ENOSPC));
    let answer = h.dispatch(&h.b, h.request(mkdir_remote("d", 1)));
    assert_eq!(result(&answer), &Err(Errno::ENOSPC));
    assert_eq!(other.sent(), ["make_pending_dir"]);
    h.commit_all();
    let found = h.dispatch(&h.b, h.request(lookup("d")));
    assert_eq!(result(&found), &Err(Errno::ENOENT));

    // A shard the cluster does not have: EINVAL, nobody asked.
    let (h, other) = reaching(Ack::Commit, pending_dir_made);
    let answer = h.dispatch(&h.b, h.request(mkdir_remote("d", 7)));
    assert_eq!(result(&answer), &Err(Errno::EINVAL));
    assert!(other.sent().is_empty());

    // A name under way: EBUSY to a second MKDIR_REMOTE and to RESOLVE_REMOTE; asked again
    // once it is not, each goes on.
    let (h, other) = reaching(Ack::Commit, pending_dir_made);
    let peers = &h.core.shard_view.as_ref().unwrap().peers;
    let held = peers.begin(ROOT_INO, "d").unwrap();
    let answer = h.dispatch(&h.b, h.request(mkdir_remote("d", 1)));
    assert_eq!(result(&answer), &Err(Errno::EBUSY));
    let resolve = Op::ResolveRemote {
        parent: ROOT_INO,
        name: "d".into(),
        ino: REMOTE_DIR,
    };
    let asked = h.dispatch_from(
        &h.a,
        Request {
            cred: root(),
            ..h.request(resolve.clone())
        },
        Origin::Peer,
    );
    assert_eq!(result(&asked), &Err(Errno::EBUSY));
    assert!(
        other.sent().is_empty(),
        "nothing asked while the name is held"
    );
    drop(held);
    let answer = h.dispatch(&h.b, h.request(mkdir_remote("d", 1)));
    assert!(result(&answer).is_ok(), "{answer:?}");

    // A remote RMDIR: PREPARE_RMDIR first; granted, the entry goes (at its commit).
    h.commit_all();
    let rmdir = Op::Rmdir {
        parent: ROOT_INO,
        name: "d".into(),
    };
    let answer = h.dispatch(&h.b, h.request(rmdir.clone()));
    assert!(
        matches!(answer.deliver, Deliver::AtCommit { .. }),
        "{answer:?}"
    );
    assert_eq!(result(&answer), &Ok(Body::Done));
    assert_eq!(other.sent(), ["make_pending_dir", "prepare_rmdir"]);
    h.commit_all();
    let found = h.dispatch(&h.b, h.request(lookup("d")));
    assert_eq!(result(&found), &Err(Errno::ENOENT));

    // Refused by the child's shard (not empty there): that answer, and the entry stays.
    let (h, other) = reaching(Ack::Commit, |op| match op {
        Op::PrepareRmdir { .. } => Err(Errno::ENOTEMPTY),
        op => pending_dir_made(op),
    });
    h.dispatch(&h.b, h.request(mkdir_remote("d", 1)));
    h.commit_all();
    let answer = h.dispatch(&h.b, h.request(rmdir));
    assert_eq!(result(&answer), &Err(Errno::ENOTEMPTY));
    assert_eq!(other.sent(), ["make_pending_dir", "prepare_rmdir"]);
    h.commit_all();
    let found = h.dispatch(&h.b, h.request(lookup("d")));
    assert!(
        matches!(result(&found), Ok(Body::Remote { .. })),
        "{found:?}"
    );
}
