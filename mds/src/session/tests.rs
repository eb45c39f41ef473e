//! Session tests: attach and replace, resends joined or answered from their records, the
//! watermark, the record cap, expiry, bindings and restore.

use super::*;

/// The operation the tests' requests are (any one: a resend carries its request's).
const OP: u8 = mds_proto::opcode::CREATE;

/// Attaches `conn` as `client`, proving whatever secret the session has.
fn attach(sessions: &Sessions, client: u64, conn: Arc<ConnOutput>) -> Attached {
    sessions.attach(client, conn, |_| true).unwrap()
}

/// `Sessions::expire`, with the clients whose records it drops.
fn expire(sessions: &Sessions, expiry: Duration) -> (Vec<u64>, usize) {
    let mut dropped = Vec::new();
    let forgotten = sessions.expire(expiry, |client, journaled| {
        if journaled {
            dropped.push(client);
        }
    });
    (dropped, forgotten)
}

#[test]
fn a_second_connect_replaces_the_first_and_a_resend_joins_its_original() {
    let sessions = Sessions::default();
    let first = Arc::new(ConnOutput::new(1 << 10));
    let second = Arc::new(ConnOutput::new(1 << 10));
    let a = attach(&sessions, 42, first.clone());
    assert!(a.replaced.is_none());
    assert_eq!(a.session.begin(7, OP), Begin::New, "first time: execute");
    assert_eq!(
        a.session.begin(7, OP),
        Begin::Joined,
        "resend while pending: join, do not execute"
    );

    let b = attach(&sessions, 42, second.clone());
    assert!(
        Arc::ptr_eq(&a.session, &b.session),
        "same identity, same session"
    );
    assert_eq!(b.replaced.map(|c| c.id()), Some(first.id()));
    // The old connection closing does not take the client's new one away.
    assert!(!sessions.detach(&a.session, &first));
    let (to, idle) = b.session.release(7, true);
    assert_eq!(
        to.map(|g| g.conn().id()),
        Some(second.id()),
        "reply follows the client"
    );
    assert!(!idle);
    assert_eq!(b.session.replied_xid(), 7);
    assert_eq!(
        b.session.begin(7, OP),
        Begin::New,
        "nothing recorded: execute"
    );
    assert!(!b.session.abandon(7), "nobody resent it");
}

/// One xid for two operations is not a resend: neither joined nor answered from the other's
/// record, while a resend of the same operation still is; a record restored from the store
/// keeps no operation and answers any.
#[test]
fn an_xid_reused_for_another_operation_is_not_a_resend() {
    let sessions = Sessions::default();
    let s = attach(&sessions, 42, Arc::new(ConnOutput::new(1 << 10))).session;
    let unlink = mds_proto::opcode::UNLINK;
    assert_eq!(s.begin(3, OP), Begin::New);
    assert_eq!(s.begin(3, unlink), Begin::Reused, "pending");
    assert_eq!(s.begin(3, OP), Begin::Joined);
    s.remember(3, OP, 30, Body::Done, 0);
    assert!(s.abandon(3), "the resend joined it");
    assert_eq!(s.begin(3, unlink), Begin::Reused, "answered");
    assert!(matches!(s.begin(3, OP), Begin::Answered(a) if a.transno == 30));
    // Restored: the reply alone.
    s.state.lock().answered.insert(
        4,
        Answered {
            transno: 31,
            body: Body::Done,
            ticket: 0,
            opcode: None,
        },
    );
    assert!(matches!(s.begin(4, unlink), Begin::Answered(a) if a.transno == 31));
}

#[test]
fn a_resend_of_an_answered_mutation_is_answered_from_its_record_until_acked() {
    let sessions = Sessions::default();
    let conn = Arc::new(ConnOutput::new(1 << 10));
    let s = attach(&sessions, 42, conn.clone()).session;
    assert_eq!(s.begin(3, OP), Begin::New);
    s.remember(3, OP, 30, Body::Done, 0);
    assert_eq!(s.begin(4, OP), Begin::New);
    s.remember(4, OP, 31, Body::Pong, 0);
    s.release(3, true);
    s.release(4, true);
    let again = Answered {
        transno: 30,
        body: Body::Done,
        ticket: 0,
        opcode: Some(OP),
    };
    assert_eq!(s.begin(3, OP), Begin::Answered(again));
    // Away with records: kept for the client's return, not forgotten at once.
    assert!(sessions.detach(&s, &conn));
    assert!(!sessions.forget_if_idle(42, || {}));
    assert_eq!(sessions.len(), 1);
    let back = attach(&sessions, 42, conn.clone()).session;
    assert!(Arc::ptr_eq(&s, &back));
    // The client has the reply of 3 now: its record goes; 4's stays.
    back.note_acked(3);
    assert_eq!(back.begin(9, OP), Begin::New);
    assert!(!back.abandon(9));
    assert_eq!(back.remembered(), 1);
    assert!(matches!(back.begin(4, OP), Begin::Answered(a) if a.transno == 31));
    back.note_acked(9);
    assert_eq!(back.begin(10, OP), Begin::New);
    assert!(!back.abandon(10));
    assert_eq!(back.remembered(), 0);
    assert!(sessions.detach(&back, &conn));
    assert!(
        sessions.forget_if_idle(42, || {}),
        "forgotten; its journal records must be dropped"
    );
    assert!(sessions.is_empty());
}

impl AnsweredLog {
    /// Every xid held, in order.
    fn xids(&self) -> Vec<u64> {
        let mut all: Vec<u64> = self
            .in_order
            .iter()
            .map(|(x, _)| *x)
            .chain(self.stragglers.keys().copied())
            .collect();
        all.sort_unstable();
        all
    }
}

#[test]
fn the_answer_log_finds_every_answer_and_trims_below_the_watermark() {
    let answer = |transno| Answered {
        transno,
        body: Body::Done,
        ticket: 0,
        opcode: Some(OP),
    };
    let mut log = AnsweredLog::default();
    for xid in [3, 5, 4, 9, 1] {
        log.insert(xid, answer(xid * 10));
    }
    assert_eq!(log.xids(), [1, 3, 4, 5, 9]);
    assert_eq!(log.get(4).map(|a| a.transno), Some(40));
    assert_eq!(log.get(1).map(|a| a.transno), Some(10));
    assert!(log.get(2).is_none());
    log.insert(4, answer(44));
    assert_eq!(log.get(4).map(|a| a.transno), Some(44), "replaced");
    assert_eq!(log.len(), 5);
    log.remove(5);
    log.remove(1);
    log.trim(3);
    assert_eq!(log.xids(), [4, 9]);
    log.trim(100);
    assert!(log.is_empty());
}

/// Out-of-order xids (a client's requests on two connections) go beside the in-order
/// deque, not into its middle: inserting them costs no shift of what comes after
/// (regression: each one moved the whole tail, O(n) per mutation).
#[test]
fn out_of_order_answers_do_not_shift_the_in_order_ones() {
    let mut log = AnsweredLog::default();
    let answer = Answered {
        transno: 1,
        body: Body::Done,
        ticket: 0,
        opcode: Some(OP),
    };
    for xid in (0..10_000u64).map(|x| x * 2 + 1000) {
        log.insert(xid, answer.clone());
    }
    // Every even xid below the last, late.
    for xid in (0..10_000u64).map(|x| x * 2 + 999) {
        log.insert(xid, answer.clone());
    }
    assert_eq!(log.in_order.len(), 10_000, "the deque was not touched");
    assert_eq!(log.stragglers.len(), 10_000);
    assert!(log.get(999).is_some() && log.get(1000).is_some());
    log.trim(1999);
    assert_eq!(
        log.len(),
        20_000 - 1001,
        "500 in order and 501 late at or below 1999"
    );
}

#[test]
fn a_session_keeps_at_most_its_cap_of_records_and_pending_requests() {
    let sessions = Sessions::new(3);
    let conn = Arc::new(ConnOutput::new(1 << 10));
    let s = attach(&sessions, 9, conn.clone()).session;
    for xid in 1..=2 {
        assert_eq!(s.begin(xid, OP), Begin::New);
        s.remember(xid, OP, xid, Body::Done, 0);
        s.release(xid, true);
    }
    assert_eq!(
        s.begin(3, OP),
        Begin::New,
        "two records, one pending: at the cap"
    );
    assert_eq!(s.begin(4, OP), Begin::Full);
    assert!(
        matches!(s.begin(1, OP), Begin::Answered(_)),
        "resends still answered"
    );
    s.note_acked(2);
    assert_eq!(s.begin(4, OP), Begin::New, "the watermark let two go");
}

/// A session started by one connection is bound to it: another attach with its identity
/// must prove the secret issued then; a session restored without a secret (a store of a
/// build before bindings) is bound by the next attach.
#[test]
fn a_session_is_bound_to_the_secret_its_first_connect_was_issued() {
    let sessions = Sessions::default();
    let conn = Arc::new(ConnOutput::new(4));
    let first = sessions.attach(5, conn.clone(), |_| false).unwrap();
    let secret = first.issued.expect("a new session is issued a secret");
    assert!(sessions.requires_proof(5));
    assert!(!sessions.requires_proof(6));
    assert_eq!(
        sessions.attach(5, conn.clone(), |_| false).err(),
        Some(AttachRefused::Unproved)
    );
    let again = sessions.attach(5, conn.clone(), |s| *s == secret).unwrap();
    assert!(again.issued.is_none());
    // Restored with its binding: the same secret guards it.
    let restored = Sessions::default();
    restored
        .restore(vec![], vec![(5, *secret.bytes())], &[7])
        .unwrap();
    assert!(restored.requires_proof(5));
    assert!(restored.attach(5, conn.clone(), |s| *s == secret).is_ok());
    // Known without a binding: the next attach binds it.
    assert!(!restored.requires_proof(7));
    let bound = restored.attach(7, conn, |_| false).unwrap();
    assert!(bound.issued.is_some());
}

#[test]
fn a_mutation_whose_commit_failed_keeps_no_record() {
    let sessions = Sessions::default();
    let conn = Arc::new(ConnOutput::new(1 << 10));
    let s = attach(&sessions, 43, conn.clone()).session;
    assert_eq!(s.begin(1, OP), Begin::New);
    s.remember(1, OP, 10, Body::Done, 0);
    s.release(1, false);
    assert_eq!(s.remembered(), 0);
    assert_eq!(
        s.begin(1, OP),
        Begin::New,
        "a resend is not told it succeeded"
    );
}

#[test]
fn an_away_session_with_records_expires_and_restored_ones_count_as_away() {
    let sessions = Sessions::default();
    let conn = Arc::new(ConnOutput::new(1 << 10));
    let s = attach(&sessions, 5, conn.clone()).session;
    assert_eq!(s.begin(1, OP), Begin::New);
    s.remember(1, OP, 10, Body::Done, 0);
    s.release(1, true);
    assert_eq!(expire(&sessions, Duration::ZERO), (vec![], 0), "connected");
    assert!(sessions.detach(&s, &conn));
    assert_eq!(expire(&sessions, Duration::from_secs(3600)), (vec![], 0));
    assert_eq!(expire(&sessions, Duration::ZERO), (vec![5], 1));
    assert!(sessions.is_empty());

    let reply = protocol::encode(&Body::Done);
    let restored = sessions
        .restore(
            vec![ClientResend {
                client: 6,
                acked_xid: 1,
                records: vec![journal::ResendRecord {
                    xid: 2,
                    transno: 20,
                    reply: reply.into(),
                }],
            }],
            vec![],
            &[],
        )
        .unwrap();
    assert_eq!(restored, 1);
    let s = attach(&sessions, 6, conn.clone()).session;
    assert_eq!(s.acked_xid(), 1);
    assert!(matches!(s.begin(2, OP), Begin::Answered(a) if a.transno == 20));
    let bad = ClientResend {
        client: 7,
        acked_xid: 0,
        records: vec![journal::ResendRecord {
            xid: 1,
            transno: 1,
            reply: vec![0xff, 0xff].into(),
        }],
    };
    assert!(
        sessions
            .restore(vec![bad], vec![], &[])
            .unwrap_err()
            .to_string()
            .contains("xid 1")
    );
}

#[test]
fn a_session_is_forgotten_once_it_has_no_connection_and_nothing_pending() {
    let sessions = Sessions::default();
    let conn = Arc::new(ConnOutput::new(1 << 10));
    let s = attach(&sessions, 5, conn.clone()).session;
    assert_eq!(s.begin(1, OP), Begin::New);
    sessions.detach(&s, &conn);
    assert!(!sessions.forget_if_idle(5, || {}));
    assert_eq!(sessions.len(), 1, "a reply is still pending");
    let (to, idle) = s.release(1, true);
    assert!(to.is_none() && idle, "nobody to send it to");
    assert!(
        !sessions.forget_if_idle(s.client(), || {}),
        "never journaled"
    );
    assert!(sessions.is_empty());
    s.note_acked(9);
    s.note_acked(3);
    assert_eq!(s.acked_xid(), 9, "the watermark never goes down");
}

#[test]
fn a_reply_released_to_a_newer_connection_is_counted_in_flight_there() {
    let sessions = Sessions::default();
    let (old, new) = (
        Arc::new(ConnOutput::new(1 << 10)),
        Arc::new(ConnOutput::new(1 << 10)),
    );
    let s = attach(&sessions, 11, old.clone()).session;
    assert_eq!(s.begin(1, OP), Begin::New);
    assert_eq!(s.begin(2, OP), Begin::New);
    attach(&sessions, 11, new.clone());
    assert_eq!(s.begin(1, OP), Begin::Joined);
    assert!(s.owes_replies_to(&new) && !s.owes_replies_to(&old));
    // Released: no longer owed, but counted on the connection it will leave through
    // until the drain has appended it and dropped the guard.
    let (to, _) = s.release(1, true);
    assert_eq!(to.as_ref().map(|g| g.conn().id()), Some(new.id()));
    assert_eq!(new.inflight(), 1);
    assert!(s.owes_replies_to(&new), "2 is still pending");
    drop(to);
    assert_eq!(new.inflight(), 0, "appended: no longer in flight");
    let (to, _) = s.release(2, true);
    assert_eq!(to.map(|g| g.conn().id()), Some(new.id()));
    assert_eq!(new.inflight(), 0);
    assert!(!s.owes_replies_to(&new));
}

/// The committer applies known-client changes in the order it gets them: a forget sent
/// after the session's lock was let go could arrive after the know of a client that came
/// straight back, and leave a client the session thinks known forgotten by the journal
/// (its early replies then unprotected by a crash). The forget is sent under the lock.
#[test]
fn a_forget_reaches_the_committer_before_the_know_of_a_client_that_came_back() {
    let sessions = Arc::new(Sessions::default());
    let conn = Arc::new(ConnOutput::new(4));
    let s = attach(&sessions, 8, conn.clone()).session;
    let committer = Arc::new(Mutex::new(Vec::new()));
    assert!(s.know(5, || committer.lock().push("know")).first);
    assert!(sessions.detach(&s, &conn));
    let mut back = None;
    let settled = s.settle(5, |after| {
        assert_eq!(after, 5);
        // The client reconnects and is told something early while this forget is on
        // its way to the committer.
        let (sessions, theirs) = (sessions.clone(), committer.clone());
        let (started_tx, started) = std::sync::mpsc::channel();
        back = Some(std::thread::spawn(move || {
            started_tx.send(()).unwrap();
            let s = attach(&sessions, 8, Arc::new(ConnOutput::new(4))).session;
            s.know(6, || theirs.lock().push("know")).first
        }));
        // Give it every chance to overtake: it runs, and has time to reach the lock.
        started.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        committer.lock().push("forget");
    });
    assert!(settled);
    assert!(back.unwrap().join().unwrap(), "known again");
    assert_eq!(*committer.lock(), ["know", "forget", "know"]);
    assert!(s.is_known());
}

#[test]
fn past_its_cap_of_sessions_only_a_new_identity_is_refused() {
    let sessions = Sessions::default().capped(2);
    let conn = || Arc::new(ConnOutput::new(1 << 10));
    let a = attach(&sessions, 1, conn());
    let b = attach(&sessions, 2, conn());
    assert!(matches!(
        sessions.attach(3, conn(), |_| true),
        Err(AttachRefused::Full)
    ));
    assert_eq!(
        sessions.len(),
        2,
        "the refused identity left nothing behind"
    );
    assert!(sessions.get(3).is_none());
    // An identity the server keeps attaches again, full or not.
    let again = attach(&sessions, 1, conn());
    assert!(Arc::ptr_eq(&again.session, &a.session));
    // A session that goes makes room: one forgotten when idle, one expired.
    let away = b.session.connection().unwrap();
    assert!(sessions.detach(&b.session, &away));
    sessions.forget_if_idle(2, || {});
    assert_eq!(sessions.len(), 1);
    let c = attach(&sessions, 3, conn());
    assert_eq!(c.session.begin(1, OP), Begin::New);
    c.session.remember(1, OP, 10, Body::Done, 0);
    c.session.release(1, true);
    let to = c.session.connection().unwrap();
    assert!(sessions.detach(&c.session, &to));
    assert!(
        sessions.attach(4, conn(), |_| true).is_err(),
        "3 keeps a record"
    );
    assert_eq!(expire(&sessions, Duration::ZERO), (vec![3], 1));
    assert!(sessions.attach(4, conn(), |_| true).is_ok());
    assert_eq!(sessions.len(), 2);
}
