//! Sessions across connections: a client that reconnects with its identity replaces its older
//! connection, gets the replies that were waiting for their commit on the new one, and a
//! resend of a request still waiting joins it instead of executing twice (before sessions, a
//! resent CREATE executed again and came back EEXIST).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::InProcess;
use mds_client::{Client, ClientError, ROOT, Session};
use mds_proto::{Body, Op};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_takes_over_the_pending_reply_and_a_resend_joins_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    // Long enough that the create below is still waiting when the client comes back.
    config.keys.commit_interval = Duration::from_secs(2);
    let server = InProcess::start(config);
    let observer = server.client().await;
    let before = observer.statfs().await.unwrap();

    let session = Arc::new(Session::new());
    let first = Client::connect_session(server.addr, session.clone())
        .await
        .unwrap();
    let (xid, _) = session.begin();
    let create = Op::Create {
        parent: ROOT,
        name: "once".into(),
        mode: 0o644,
    };
    let original = tokio::spawn({
        let (first, create) = (first.clone(), create.clone());
        async move { first.send_as(xid, create).await }
    });
    // Executed (it has its transno) but not committed: its reply waits.
    while observer.statfs().await.unwrap().last_transno == before.last_transno {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let second = Client::connect_session(server.addr, session.clone())
        .await
        .unwrap();
    assert!(
        matches!(original.await.unwrap(), Err(ClientError::Disconnected)),
        "the older connection is closed by the newer one"
    );
    let reply = second.send_as(xid, create).await.unwrap();
    assert!(
        matches!(reply.result, Ok(Body::Attr(_))),
        "the original's reply, not an EEXIST from a second execution: {reply:?}"
    );
    assert!(reply.transno > before.last_transno && reply.transno <= reply.last_committed);

    let after = observer.statfs().await.unwrap();
    assert_eq!(after.files, before.files + 1);
    assert_eq!(
        after.last_transno,
        before.last_transno + 1,
        "executed exactly once"
    );
    assert_eq!(common::names(&observer, ROOT).await, vec!["once"]);
    // The session's xids went on counting on the new connection.
    assert!(session.begin().0 > xid + 1);
    drop((first, second, observer));
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_are_told_apart_by_identity() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let a = server.client().await;
    let b = server.client().await;
    assert_ne!(a.session().id(), b.session().id());
    // Two identities, two live connections: neither replaced the other.
    a.mkdir(ROOT, "a", 0o755).await.unwrap();
    b.mkdir(ROOT, "b", 0o755).await.unwrap();
    a.ping().await.unwrap();
    let attr = a.resolve("/b").await.unwrap();
    // SAFETY: getuid cannot fail.
    assert_eq!(
        attr.uid,
        unsafe { libc::getuid() },
        "owner from the credentials"
    );
    drop((a, b));
    server.stop().unwrap();
}
