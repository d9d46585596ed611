//! Decisions that must still hold when their write lands, against DynamoDB
//! Local: the worker reads, decides, and right before its first write the
//! service writes (`worker_testkit::race::RaceBeforeWrite`), the way the
//! live service does while the worker runs. Each cascade's deletes carry a
//! condition on the item the decision was read from, so none lands on live
//! data; the outcome says how many were withheld.

use crate::service;
use crate::support;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::jobs::relationships::AuditReport;
use nishiki_worker::keys::{ItemKey, Job};
use service::*;
use support::{Drain, TestTable};
use worker_engine::store::Store;
use worker_testkit::race::{RaceBeforeWrite, ServiceOp};

fn t0() -> DateTime<Utc> {
    "2024-03-25T00:00:00Z".parse().unwrap()
}

fn app_on(table: &TestTable, store: Arc<dyn Store>, clock: &ManualClock) -> App {
    App::new(
        store,
        Config::for_table(&table.name),
        Arc::new(clock.clone()),
    )
}

/// The table, a drain that has handled the setup, and a clock.
struct Race {
    table: TestTable,
    store: Arc<dyn Store>,
    drain: Drain,
    clock: ManualClock,
}

impl Race {
    async fn new() -> Self {
        let table = support::nishiki_table().await;
        let store: Arc<dyn Store> = table.store.clone();
        let drain = Drain::new(&table).await;
        Race {
            table,
            store,
            drain,
            clock: ManualClock::new(t0()),
        }
    }

    /// Handle everything written so far with a plain worker.
    async fn settle(&mut self) {
        let app = app_on(&self.table, self.store.clone(), &self.clock);
        self.drain.run(&app).await;
    }

    /// Handle the new records with a worker whose first write is preceded
    /// by the service's `writes`; whether they fired.
    async fn handle_racing(&mut self, writes: Vec<ServiceOp>) -> Vec<String> {
        let racing = Arc::new(RaceBeforeWrite::at_first_write(self.store.clone(), writes));
        let app = app_on(&self.table, racing.clone(), &self.clock);
        let changes = self.drain.read().await;
        assert!(!changes.is_empty());
        self.drain.run_batch(&app, &changes).await;
        assert!(
            racing.fired(),
            "the worker decided to write, and the service raced it"
        );
        let report = self.drain.batches.last().unwrap();
        assert_eq!(report.failed + report.malformed, 0, "{report:?}");
        report.records.iter().map(|r| format!("{r:?}")).collect()
    }
}

#[tokio::test]
async fn a_group_written_again_during_its_cascade_keeps_its_members_links_and_containers() {
    let mut r = Race::new().await;
    let s = r.store.clone();
    let a = sign_up(&s).await;
    let c2 = add_container(&s, a.group).await;
    r.settle().await;
    let live = r.table.keys().await;

    // The service deletes the Group item (its containers' deletes not yet
    // issued); while the worker cascades, an update of the group puts the
    // Group item again (the service re-puts it on every update).
    in_order(&s, vec![Call::Delete(ItemKey::Group(a.group))]).await;
    let outcomes = r.handle_racing(vec![ServiceOp::Put(group(a.group))]).await;

    assert_eq!(
        r.table.keys().await,
        live,
        "the membership, both links and both containers ({}, {c2}) survive",
        a.container
    );
    assert!(
        outcomes.iter().any(|o| o.contains("withheld")),
        "the outcome says the deletes were withheld: {outcomes:?}"
    );
}

#[tokio::test]
async fn a_user_written_again_during_its_cascade_keeps_its_memberships() {
    let mut r = Race::new().await;
    let s = r.store.clone();
    let a = sign_up(&s).await;
    let b = sign_up(&s).await;
    join(&s, a.user, b.group).await;
    r.settle().await;
    let live = r.table.keys().await;

    // Renamed while being deleted: the rename's Put lands after the delete.
    in_order(&s, vec![Call::Delete(ItemKey::User(a.user))]).await;
    let outcomes = r.handle_racing(vec![ServiceOp::Put(user(a.user))]).await;

    assert_eq!(r.table.keys().await, live, "both memberships survive");
    assert!(
        outcomes.iter().any(|o| o.contains("withheld")),
        "{outcomes:?}"
    );
}

#[tokio::test]
async fn a_container_written_again_during_its_cascade_keeps_its_link() {
    let mut r = Race::new().await;
    let s = r.store.clone();
    let a = sign_up(&s).await;
    r.settle().await;
    let live = r.table.keys().await;

    // The service rewrites a container it read just before it was deleted.
    in_order(&s, vec![Call::Delete(ItemKey::Container(a.container))]).await;
    let outcomes = r
        .handle_racing(vec![ServiceOp::Put(container(a.container, 0))])
        .await;

    assert_eq!(r.table.keys().await, live, "the link survives");
    assert!(
        outcomes.iter().any(|o| o.contains("withheld")),
        "{outcomes:?}"
    );
}

#[tokio::test]
async fn a_group_back_before_the_audit_repairs_keeps_its_memberships_and_links() {
    let mut r = Race::new().await;
    let s = r.store.clone();
    let a = sign_up(&s).await;
    // Left behind by a group deletion the stream never saw (the worker
    // deployed after it): the membership and link without their group.
    in_order(&s, vec![Call::Delete(ItemKey::Group(a.group))]).await;
    let app = app_on(&r.table, s.clone(), &r.clock);
    r.drain.skip_existing().await;
    let first = app.run_job(Job::Audit, None).await.unwrap();
    let first: AuditReport = serde_json::from_value(first.details).unwrap();
    assert_eq!(first.violations["MembershipWithoutGroup"].new_suspects, 1);

    // Past the grace: the audit re-checks (the group is still gone), and
    // the service writes the group again right before the repair lands.
    r.clock.set(t0() + chrono::Duration::hours(2));
    let racing = Arc::new(RaceBeforeWrite::new(
        s.clone(),
        worker_testkit::race::Trigger::Touching(
            ItemKey::Membership {
                user: a.user,
                group: a.group,
            }
            .to_attributes(),
        ),
        vec![ServiceOp::Put(group(a.group))],
    ));
    let app = app_on(&r.table, racing.clone(), &r.clock);
    let second = app.run_job(Job::Audit, None).await.unwrap();
    let second: AuditReport = serde_json::from_value(second.details).unwrap();
    assert!(racing.fired());
    let keys = r.table.keys().await;
    for k in [
        ItemKey::Membership {
            user: a.user,
            group: a.group,
        },
        ItemKey::ContainerLink {
            group: a.group,
            container: a.container,
        },
    ] {
        assert!(keys.contains(&k.encode()), "{k:?} survives: {keys:?}");
    }
    assert_eq!(
        second.violations["MembershipWithoutGroup"].conflicts, 1,
        "{second:?}"
    );
}
