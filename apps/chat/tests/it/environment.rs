//! Environment faults over the chat worker's six tables: a user removed
//! while a member of a group chat (the cascade reads the chat tables'
//! member index) is delivered with every request denied, with a table
//! deleted, and with the member index missing. Each time the batch stops
//! with an environment fault (the invocation fails), nothing is rejected,
//! parked or skipped, and the `EnvironmentFaults` metric counts it; once
//! the deployment is right again the same batch is handled.

use crate::support;

use std::sync::Arc;

use chat_worker::keys::{self, ChatKind};
use chat_worker::schema::Table;
use support::*;
use worker_engine::EventFunction;
use worker_engine::schema::TableSchema;
use worker_engine::store::DynamoStore;
use worker_engine::stream::BatchReport;
use worker_engine::stream::{StreamChange, encode_event};
use worker_testkit::fault_proxy::{FaultConfig, FaultKind, FaultPlan, FaultProxy, client_via};
use worker_testkit::{TestTable, seed_concurrently};

/// A chat with u1 a member of c1, settled; then the service removes u1:
/// the records of that removal, not delivered yet.
async fn user_removed() -> (Chat, Vec<StreamChange>) {
    let mut chat = Chat::new().await;
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("c1", Some(10), Some(0)))
        .await;
    chat.put(Table::GroupChats, member(ChatKind::Group, "c1", "u1"))
        .await;
    chat.settle().await;
    chat.delete(Table::Users, keys::user("u1")).await;
    let changes = chat.read().await;
    assert!(!changes.is_empty(), "the removal's record");
    (chat, changes)
}

/// The batch stopped for the environment: nothing given up on.
fn stopped(report: &BatchReport, what: &str) {
    assert!(
        report.environment_fault.is_some(),
        "{what}: no environment fault: {report:?}"
    );
    assert_eq!(
        (
            report.rejected,
            report.malformed,
            report.parked,
            report.handled
        ),
        (0, 0, 0, 0),
        "{what}: {report:?}"
    );
    assert!(report.environment > 0, "{what}");
}

async fn deliver(chat: &Chat, changes: &[StreamChange]) -> BatchReport {
    chat.worker
        .invoke_stream(&encode_event(changes, None))
        .await
        .expect("a stream event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_fails_the_batch_and_parks_nothing() {
    let (mut chat, changes) = user_removed().await;
    let endpoint = chat.tables[&Table::Users].endpoint.clone();
    let proxy = FaultProxy::start(&endpoint, FaultConfig::none())
        .await
        .expect("the proxy starts");
    let client = client_via(&proxy, 1);
    let names: std::collections::BTreeMap<Table, String> = chat
        .tables
        .iter()
        .map(|(t, table)| (*t, table.name.clone()))
        .collect();
    let via = |t: Table| DynamoStore::new(client.clone(), &names[&t]).with_key(t.schema().key);
    let denied = chat.wrapped_worker(
        |t, _| Arc::new(via(t)),
        |_| Arc::new(via(Table::ChatRequests)),
    );
    proxy.set_plan(FaultPlan::Always(FaultKind::AccessDenied));
    let report = denied
        .invoke_stream(&encode_event(&changes, None))
        .await
        .expect("a stream event");
    stopped(&report, "denied");
    assert!(proxy.stats().count(FaultKind::AccessDenied) > 0);

    // Allowed again: the same batch is handled.
    proxy.set_plan(FaultPlan::None);
    let report = denied
        .invoke_stream(&encode_event(&changes, None))
        .await
        .expect("a stream event");
    assert!(report.environment_fault.is_none(), "{report:?}");
    chat.settle().await;
    assert_eq!(chat.members("c1").await.1, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_fails_the_batch_and_counts_in_the_metric() {
    let (chat, changes) = user_removed().await;
    let table = &chat.tables[&Table::GroupChats];
    table
        .store
        .client()
        .delete_table()
        .table_name(&table.name)
        .send()
        .await
        .expect("delete the table");
    let report = deliver(&chat, &changes).await;
    stopped(&report, "table missing");
    assert!(chat.metric("EnvironmentFaults") >= 1.0);
}

/// The member index missing from the group chats' table. (DynamoDB Local
/// answers a query on an index deleted by `UpdateTable` with a 500
/// `InternalFailure`, where AWS says `ValidationException: The table does
/// not have the specified index`; so the table is made without it, which
/// DynamoDB Local answers as AWS does.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_index_fails_the_batch_and_parks_nothing() {
    let (mut chat, changes) = user_removed().await;
    let schema = TableSchema {
        indexes: Vec::new(),
        ..Table::GroupChats.schema()
    };
    let bare = TestTable::with_schema(&schema).await;
    seed_concurrently(
        &bare.store,
        chat.tables[&Table::GroupChats].snapshot().await,
        1,
    )
    .await;
    let store = bare.store.clone();
    let worker = chat.wrapped_worker(
        |t, s| {
            if t == Table::GroupChats {
                store.clone()
            } else {
                s
            }
        },
        |tx| tx,
    );
    let report = worker
        .invoke_stream(&encode_event(&changes, None))
        .await
        .expect("a stream event");
    stopped(&report, "index missing");
    assert!(
        report
            .environment_fault
            .as_deref()
            .unwrap_or("")
            .contains("index"),
        "{report:?}"
    );
    // Nothing of the cascade ran: u1 is still listed in c1.
    chat.settle().await;
    assert_eq!(chat.members("c1").await.1, vec!["u1".to_owned()]);
}
