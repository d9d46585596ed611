//! The scheduled jobs on DynamoDB Local: `expire-requests` (both copies,
//! the index only, cut by the deadline) and `audit-requests` (a missing
//! twin recreated or reported, resumed from its checkpoint).

use crate::support;

use std::time::{Duration, Instant};

use chat_worker::items::Status;
use chat_worker::keys::{self, Job};
use chat_worker::schema::Table;
use serde_json::json;
use support::*;

const OLD: &str = "2024-04-01T00:00:00Z"; // 61 days before NOW
const YOUNG: &str = "2024-05-20T00:00:00Z"; // 12 days before NOW

fn tick(job: &str) -> serde_json::Value {
    json!({"job": job, "scheduledTime": NOW})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_pending_requests_expire_on_both_copies_from_the_index_alone() {
    let mut chat = Chat::new().await;
    let old: Vec<_> = (0..3)
        .map(|i| Request::new(&format!("old{i}"), "u1", "g1", OLD))
        .collect();
    let young: Vec<_> = (0..2)
        .map(|i| Request::new(&format!("young{i}"), "u1", "g1", YOUNG))
        .collect();
    let decided = Request::new("decided", "u1", "g1", OLD);
    for r in old.iter().chain(&young) {
        for c in r.both(Status::Pending) {
            chat.put(Table::ChatRequests, c).await;
        }
    }
    for c in decided.both(Status::Accepted) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", None, Some(0)))
        .await;
    chat.settle().await;

    let store = chat.store(Table::ChatRequests).clone();
    let before = store.metrics().snapshot();
    let report = chat.tick("expire-requests").await;
    let used = store.metrics().snapshot().since(&before);
    assert_eq!(report["complete"], true);
    assert_eq!(report["details"]["entries_read"], 10, "{report}");
    assert_eq!(report["details"]["expired"], 6);
    assert_eq!(report["details"]["cutoff"], "2024-05-02T00:00:00.000Z");
    // Its reads: the index, nothing else.
    assert_eq!(used.read_requests(), used.scan, "{used:?}");
    assert!(
        store
            .metrics()
            .indexes()
            .iter()
            .all(|(_, i)| i == keys::PENDING_REQUESTS_INDEX)
    );
    for r in &old {
        for k in r.keys() {
            let c = chat.copy(&k).await.unwrap();
            assert_eq!(c.status, Status::Expired);
            assert_eq!(c.status_reason.as_deref(), Some(keys::REASON_EXPIRED));
            assert_eq!(c.pending_id, None);
        }
    }
    for r in &young {
        assert_eq!(
            chat.statuses(r).await,
            (Some(Status::Pending), Some(Status::Pending))
        );
    }
    assert_eq!(chat.pending_index().await.len(), 4);

    // Again, and the stream of the expiry: nothing more to do.
    let settled = chat.snapshot().await;
    let again = chat.tick("expire-requests").await;
    assert_eq!(again["details"]["expired"], 0);
    chat.settle().await;
    assert_eq!(chat.snapshot().await, settled);
    assert!(chat.metric("RequestsExpired") >= 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_cut_by_the_deadline_resumes_to_the_same_result() {
    let chat = Chat::with(|s| s.requests.expiry_days = 7).await;
    let due: Vec<_> = (0..4)
        .map(|i| Request::new(&format!("r{i}"), "u1", "g1", YOUNG))
        .collect();
    for r in &due {
        for c in r.both(Status::Pending) {
            chat.put(Table::ChatRequests, c).await;
        }
    }
    // Every tick starts past its deadline (margin 2 s): one copy each.
    let mut ticks = 0;
    loop {
        ticks += 1;
        assert!(ticks < 20, "the pass ends");
        let deadline = Some(Instant::now() + Duration::from_secs(2));
        let report = chat
            .worker
            .handle_schedule(&tick("expire-requests"), deadline)
            .await
            .expect("the tick runs");
        if report.complete {
            break;
        }
        assert_eq!(report.details["expired"], 1);
    }
    assert_eq!(ticks, 8, "eight copies, one a tick, the last one completes");
    for r in &due {
        assert_eq!(
            chat.statuses(r).await,
            (Some(Status::Expired), Some(Status::Expired))
        );
    }
    assert!(chat.pending_index().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_twin_is_recreated_while_pending_and_reported_otherwise() {
    let chat = Chat::with(|s| s.requests.twin_grace_minutes = 30).await;
    let orphans: Vec<_> = (0..120)
        .map(|i| Request::new(&format!("p{i}"), &format!("u{i}"), "g1", OLD))
        .collect();
    for (i, r) in orphans.iter().enumerate() {
        // Either copy may be the survivor.
        chat.put(Table::ChatRequests, r.copy(i % 2, Status::Pending))
            .await;
    }
    let decided = Request::new("d", "u1", "g1", OLD);
    chat.put(Table::ChatRequests, decided.copy(1, Status::Rejected))
        .await;
    let fresh = Request::new("f", "u1", "g1", "2024-05-31T23:50:00Z");
    chat.put(Table::ChatRequests, fresh.copy(0, Status::Pending))
        .await;
    let whole = Request::new("w", "u1", "g1", OLD);
    for c in whole.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }

    // A late tick does one page and saves where it stopped.
    let deadline = Some(Instant::now() + Duration::from_secs(2));
    let first = chat
        .worker
        .handle_schedule(&tick("audit-requests"), deadline)
        .await
        .expect("the tick runs");
    assert!(!first.complete);
    assert!(
        chat.get(Table::ChatRequests, &keys::checkpoint(Job::AuditRequests))
            .await
            .is_some()
    );
    let mut recreated = first.details["recreated"].as_u64().unwrap();
    let mut missing = first.details["missing"].as_u64().unwrap();
    let mut ticks = 1;
    loop {
        let report = chat.tick("audit-requests").await;
        ticks += 1;
        recreated += report["details"]["recreated"].as_u64().unwrap();
        missing += report["details"]["missing"].as_u64().unwrap();
        assert_eq!(report["details"]["resumed"], true);
        if report["complete"] == true {
            break;
        }
    }
    assert_eq!(ticks, 2);
    assert_eq!((recreated, missing), (120, 1));
    assert!(
        chat.get(Table::ChatRequests, &keys::checkpoint(Job::AuditRequests))
            .await
            .is_none()
    );
    for r in &orphans {
        assert_eq!(
            chat.statuses(r).await,
            (Some(Status::Pending), Some(Status::Pending))
        );
    }
    assert_eq!(
        chat.statuses(&decided).await,
        (None, Some(Status::Rejected))
    );
    assert_eq!(chat.statuses(&fresh).await, (Some(Status::Pending), None));

    // A new pass finds nothing to recreate.
    let again = chat.tick("audit-requests").await;
    assert_eq!(again["details"]["recreated"], 0);
    assert_eq!(again["details"]["missing"], 1);
}
