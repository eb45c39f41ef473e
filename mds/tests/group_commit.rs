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

/// `--commit-siblings` (on by default): with one client of one request at a time nothing
/// ever waits for it, since a commit's reply is what the client waits for; with two such
/// clients every create is answered and counted, whatever the waits did; `off` never waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_commits_wait_for_siblings_only_when_there_are_siblings() {
    let waits = |server: &mds_testkit::Server| {
        let text = common::scrape(server.metrics);
        ["joined", "timed_out"].map(|outcome| {
            let series = format!("mds_commit_sibling_waits_total{{outcome=\"{outcome}\"}}");
            common::sample(&text, &series).unwrap_or(0.0)
        })
    };
    for switch in ["on", "off"] {
        let dir = tempfile::tempdir().unwrap();
        let server = common::start(&dir.path().join("data"), &["--commit-siblings", switch]);
        let one = mds_client::Client::connect(&server.addr.to_string())
            .await
            .unwrap();
        for n in 0..200 {
            let reply = one
                .call_reply(common::create(ROOT, &format!("alone{n}")))
                .await
                .unwrap();
            assert!(matches!(reply.result, Ok(Body::Attr(_))), "{reply:?}");
        }
        assert_eq!(
            waits(&server),
            [0.0, 0.0],
            "--commit-siblings {switch}: a lone client was waited for"
        );

        let before = one.statfs().await.unwrap();
        let mut workers = Vec::new();
        for c in 0..2 {
            let client = mds_client::Client::connect(&server.addr.to_string())
                .await
                .unwrap();
            workers.push(tokio::spawn(async move {
                for n in 0..400 {
                    let reply = client
                        .call_reply(common::create(ROOT, &format!("pair{c}-{n}")))
                        .await
                        .unwrap();
                    assert!(matches!(reply.result, Ok(Body::Attr(_))), "{reply:?}");
                    assert!(
                        reply.transno <= reply.last_committed,
                        "answered before its commit"
                    );
                }
            }));
        }
        for w in workers {
            w.await.unwrap();
        }
        let after = one.statfs().await.unwrap();
        let txns = after.committed_transactions - before.committed_transactions;
        let commits = after.commits - before.commits;
        assert_eq!(txns, 800, "every create committed once");
        let [joined, timed_out] = waits(&server);
        eprintln!(
            "--commit-siblings {switch}, two clients: {:.2} per commit, waits joined {joined}, \
             timed out {timed_out}",
            txns as f64 / commits as f64
        );
        if switch == "off" {
            assert_eq!([joined, timed_out], [0.0, 0.0], "off waited");
        }
        let names = common::names(&one, ROOT).await;
        assert_eq!(names.len(), 1000, "200 alone and 2 x 400");
        assert!(server.stop().success());
        let (code, text) = common::fsck(&dir.path().join("data"));
        assert_eq!(code, 0, "{text}");
    }
}
