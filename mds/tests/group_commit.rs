//! Group commit at work: with 64 concurrent clients, commits hold many mutations each (as the
//! server counts them, not as assumed), and no reply precedes its commit's sync.

mod common;

use mds_client::ROOT;
use mds_proto::{Body, Op};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::InProcess::on(dir.path());
    let setup = server.client().await;
    let clients = 64;
    let per_client = 150;
    let mut prepared = Vec::new();
    for i in 0..clients {
        let d = setup
            .mkdir(ROOT, &format!("c{i}"), 0o755)
            .await
            .unwrap()
            .ino;
        prepared.push((d, server.client().await));
    }
    // Counted from here: only the creates below.
    let before = setup.statfs().await.unwrap();
    let mut workers = Vec::new();
    for (d, client) in prepared {
        workers.push(tokio::spawn(async move {
            let mut early = 0;
            for n in 0..per_client {
                let reply = client
                    .call_reply(Op::Create {
                        parent: d,
                        name: format!("f{n}"),
                        mode: 0o644,
                    })
                    .await
                    .unwrap();
                assert!(matches!(reply.result, Ok(Body::Attr(_))), "{reply:?}");
                if reply.transno > reply.last_committed {
                    early += 1;
                }
            }
            early
        }));
    }
    let mut early = 0;
    for w in workers {
        early += w.await.unwrap();
    }
    assert_eq!(early, 0, "replies sent before their commit");
    let after = setup.statfs().await.unwrap();
    let commits = after.commits - before.commits;
    let txns = after.committed_transactions - before.committed_transactions;
    assert!(txns >= (clients * per_client) as u64);
    let per_commit = txns as f64 / commits as f64;
    eprintln!(
        "{txns} mutations in {commits} commits: {per_commit:.1} per commit, max {}",
        after.max_transactions_per_commit
    );
    // With 64 clients each waiting on its own reply, one commit per mutation would mean the
    // group commit is not grouping at all.
    assert!(
        per_commit >= 4.0,
        "only {per_commit:.1} mutations per commit"
    );
    assert!(after.max_transactions_per_commit >= 16);
}
