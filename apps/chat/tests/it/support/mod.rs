//! What the chat worker's tests share: the six tables on DynamoDB Local,
//! the worker over them, Lambda-like delivery of every table's stream, and
//! the items a client writes.

#![allow(dead_code)] // each test binary uses a part

pub(crate) mod race;

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chat_worker::app::{Stores, worker};
use chat_worker::config::{Settings, for_tables};
use chat_worker::items::{RequestCopy, Status};
use chat_worker::keys::{self, ChatItem, ChatKind, CommunityItem, Job, RequestKey};
use chat_worker::schema::Table;
use chrono::{DateTime, Utc};
use serde_json::Value;
use worker_engine::TableNames;
use worker_engine::Worker;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::metrics::{CapturedLines, Emitter};
use worker_engine::store::Transactions;
use worker_engine::store::{DynamoStore, ItemReader, ItemWriter, Key, QueryStore, ScanSpec, Store};
use worker_engine::stream::StreamChange;
use worker_testkit::{Drain, TestTable};

pub(crate) const NOW: &str = "2024-06-01T00:00:00Z";

pub(crate) fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

pub(crate) fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("a time")
}

/// The six tables, the worker over them and a reader of each stream.
pub(crate) struct Chat {
    pub tables: BTreeMap<Table, TestTable>,
    pub drains: BTreeMap<Table, Drain>,
    pub worker: Worker<Job>,
    pub clock: ManualClock,
    pub settings: Settings,
    pub lines: CapturedLines,
}

impl Chat {
    pub(crate) async fn new() -> Self {
        Self::with(|_| {}).await
    }

    pub(crate) async fn with(configure: impl FnOnce(&mut Settings)) -> Self {
        let mut tables = BTreeMap::new();
        for t in Table::ALL {
            tables.insert(t, TestTable::with_schema(&t.schema()).await);
        }
        let mut settings = for_tables(TableNames::new(|t| tables[&t].name.clone()));
        configure(&mut settings);
        let clock = ManualClock::new(now());
        let lines = CapturedLines::default();
        let worker = build(&tables, &settings, &clock).with_metrics(Emitter::new(
            "ChatWorker",
            "test",
            Arc::new(lines.clone()),
        ));
        let mut drains = BTreeMap::new();
        for (t, table) in &tables {
            drains.insert(*t, Drain::new(table).await);
        }
        Chat {
            tables,
            drains,
            worker,
            clock,
            settings,
            lines,
        }
    }

    /// Another worker over the same tables (a second Lambda instance).
    pub(crate) fn another_worker(&self) -> Worker<Job> {
        build(&self.tables, &self.settings, &self.clock)
    }

    /// The worker again, its stores and transactions wrapped (the race
    /// layers of [`race`]); metrics still captured.
    pub(crate) fn rewire(
        &mut self,
        wrap: impl Fn(Table, Arc<dyn Store>) -> Arc<dyn Store>,
        wrap_tx: impl FnOnce(Arc<dyn Transactions>) -> Arc<dyn Transactions>,
    ) {
        self.worker = self
            .wrapped_worker(wrap, wrap_tx)
            .with_metrics(Emitter::new(
                "ChatWorker",
                "test",
                Arc::new(self.lines.clone()),
            ));
    }

    /// A worker over the same tables, its stores and transactions wrapped.
    pub(crate) fn wrapped_worker(
        &self,
        wrap: impl Fn(Table, Arc<dyn Store>) -> Arc<dyn Store>,
        wrap_tx: impl FnOnce(Arc<dyn Transactions>) -> Arc<dyn Transactions>,
    ) -> Worker<Job> {
        let stores = Stores::new(
            self.tables
                .iter()
                .map(|(t, table)| (*t, wrap(*t, table.store.clone() as Arc<dyn Store>))),
        );
        let tx = wrap_tx(self.tables[&Table::ChatRequests].store.clone());
        worker(
            stores,
            tx,
            self.settings.clone(),
            Arc::new(self.clock.clone()),
        )
    }

    /// Deliver `changes` as one batch and return the engine's report
    /// (failures not asserted).
    pub(crate) async fn deliver_report(
        &self,
        changes: &[StreamChange],
    ) -> worker_engine::stream::BatchReport {
        let event = worker_engine::stream::encode_event(changes, None);
        use worker_engine::EventFunction;
        self.worker
            .invoke_stream(&event)
            .await
            .expect("stream event")
    }

    /// The records of `t` written since its last read, unhandled (the
    /// other streams are not read).
    pub(crate) async fn read_table(&mut self, t: Table) -> Vec<StreamChange> {
        self.drains
            .get_mut(&t)
            .expect("a drain per table")
            .read()
            .await
    }

    /// Handle `t`'s stream only, until it has nothing new.
    pub(crate) async fn settle_table(&mut self, t: Table) -> usize {
        let d = self.drains.get_mut(&t).expect("a drain per table");
        d.run(&self.worker).await
    }

    pub(crate) fn store(&self, t: Table) -> &Arc<DynamoStore> {
        &self.tables[&t].store
    }

    /// Handle every table's records, the worker's own included, until no
    /// stream has anything new.
    pub(crate) async fn settle(&mut self) -> usize {
        let mut total = 0;
        for _round in 0..50 {
            let mut n = 0;
            for d in self.drains.values_mut() {
                n += d.run(&self.worker).await;
            }
            if n == 0 {
                return total;
            }
            total += n;
        }
        panic!("the streams did not settle");
    }

    /// The records written since the last read, of every table, unhandled.
    pub(crate) async fn read(&mut self) -> Vec<StreamChange> {
        let mut all = Vec::new();
        for d in self.drains.values_mut() {
            all.extend(d.read().await);
        }
        all
    }

    /// Deliver `changes` as one Lambda batch (they must be of one table).
    pub(crate) async fn deliver(&self, changes: &[StreamChange]) {
        let event = worker_engine::stream::encode_event(changes, None);
        use worker_engine::EventFunction;
        let report = self
            .worker
            .invoke_stream(&event)
            .await
            .expect("stream event");
        assert!(report.batch_item_failures.is_empty(), "{report:?}");
    }

    pub(crate) async fn tick(&self, job: &str) -> Value {
        use worker_engine::EventFunction;
        let tick =
            serde_json::json!({"job": job, "scheduledTime": keys::format_time(self.clock_now())});
        self.worker.invoke_schedule(&tick).await.expect("tick runs")
    }

    pub(crate) fn clock_now(&self) -> DateTime<Utc> {
        use worker_engine::clock::Clock;
        self.clock.now()
    }

    pub(crate) async fn put(&self, t: Table, item: Item) {
        self.store(t).put(item, None).await.expect("put");
    }

    pub(crate) async fn delete(&self, t: Table, key: Key) {
        self.store(t).delete(&key, None).await.expect("delete");
    }

    pub(crate) async fn get(&self, t: Table, key: &Key) -> Option<Item> {
        self.store(t).get(key, true).await.expect("get")
    }

    pub(crate) async fn snapshot(&self) -> BTreeMap<Table, Vec<Item>> {
        let mut out = BTreeMap::new();
        for (t, table) in &self.tables {
            out.insert(*t, table.snapshot().await);
        }
        out
    }

    /// Every entry of the sparse index (a Scan of the index).
    pub(crate) async fn pending_index(&self) -> Vec<Item> {
        self.store(Table::ChatRequests)
            .scan_all(&ScanSpec {
                index: Some(keys::PENDING_REQUESTS_INDEX.into()),
                ..Default::default()
            })
            .await
            .expect("scan the index")
    }

    /// A request copy as it is now.
    pub(crate) async fn copy(&self, key: &RequestKey) -> Option<RequestCopy> {
        self.get(Table::ChatRequests, &key.key())
            .await
            .map(|i| RequestCopy::from_item(&i).expect("a request copy"))
    }

    /// The statuses of a request's copies: (user's, chat's).
    pub(crate) async fn statuses(&self, r: &Request) -> (Option<Status>, Option<Status>) {
        let [u, g] = r.keys();
        (
            self.copy(&u).await.map(|c| c.status),
            self.copy(&g).await.map(|c| c.status),
        )
    }

    /// `NumMembers` of a group chat, and its `USER#` items.
    pub(crate) async fn members(&self, chat: &str) -> (Option<i64>, Vec<String>) {
        let items = self.tables[&Table::GroupChats].snapshot().await;
        let pk = keys::chat_pk(ChatKind::Group, chat);
        let mut n = None;
        let mut users = Vec::new();
        for i in items.iter().filter(|i| i["PK"] == s(&pk)) {
            match ChatItem::parse(ChatKind::Group, i) {
                Ok(ChatItem::Chat { .. }) => {
                    n = i
                        .get(keys::NUM_MEMBERS)
                        .map(|v| v.as_n().expect("a number").parse().expect("an integer"))
                }
                Ok(ChatItem::Member { user, .. }) => users.push(user),
                _ => {}
            }
        }
        (n, users)
    }

    /// A metric's total over the EMF lines written so far.
    pub(crate) fn metric(&self, name: &str) -> f64 {
        self.lines
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v[name].as_f64())
            .sum()
    }
}

fn build(
    tables: &BTreeMap<Table, TestTable>,
    settings: &Settings,
    clock: &ManualClock,
) -> Worker<Job> {
    let stores = Stores::new(
        tables
            .iter()
            .map(|(t, table)| (*t, table.store.clone() as Arc<dyn Store>)),
    );
    let tx = tables[&Table::ChatRequests].store.clone();
    worker(stores, tx, settings.clone(), Arc::new(clock.clone()))
}

pub(crate) fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

pub(crate) fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A user, with the personal attributes a client writes.
pub(crate) fn user(id: &str) -> Item {
    let mut i = keys::user(id);
    i.insert("Id".into(), s(id));
    i.insert("Username".into(), s(&format!("name-of-{id}")));
    i.insert("Email".into(), s(&format!("{id}@example.com")));
    i
}

/// A group chat's own item.
pub(crate) fn group_chat(chat: &str, capacity: Option<i64>, num_members: Option<i64>) -> Item {
    let mut i = ChatItem::Chat {
        kind: ChatKind::Group,
        chat: chat.into(),
    }
    .key();
    i.insert("Id".into(), s(chat));
    if let Some(c) = capacity {
        i.insert(keys::CAPACITY.into(), n(c));
    }
    if let Some(m) = num_members {
        i.insert(keys::NUM_MEMBERS.into(), n(m));
    }
    i
}

pub(crate) fn member(kind: ChatKind, chat: &str, user: &str) -> Item {
    ChatItem::Member {
        kind,
        chat: chat.into(),
        user: user.into(),
    }
    .key()
}

pub(crate) fn community(c: &str) -> Item {
    CommunityItem::Community {
        community: c.into(),
    }
    .key()
}

pub(crate) fn community_member(c: &str, user: &str) -> Item {
    CommunityItem::Member {
        community: c.into(),
        user: user.into(),
    }
    .key()
}

pub(crate) fn community_chat(c: &str, chat: &str) -> Item {
    CommunityItem::GroupChat {
        community: c.into(),
        chat: chat.into(),
    }
    .key()
}

/// A chat request, as a client would write its copies.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub id: String,
    pub user: String,
    pub chat: String,
    pub created: DateTime<Utc>,
}

impl Request {
    pub(crate) fn new(id: &str, user: &str, chat: &str, created: &str) -> Self {
        Request {
            id: id.into(),
            user: user.into(),
            chat: chat.into(),
            created: at(created),
        }
    }

    /// (user's copy, chat's copy).
    pub(crate) fn keys(&self) -> [RequestKey; 2] {
        RequestKey::copies(&self.user, &self.chat, self.created, &self.id)
    }

    /// A copy (`0`: the user's, `1`: the chat's) with `status`; pending
    /// copies carry a `PendingId`, as the client writes them.
    pub(crate) fn copy(&self, which: usize, status: Status) -> Item {
        RequestCopy {
            key: Some(self.keys()[which].clone()),
            id: self.id.clone(),
            user_id: self.user.clone(),
            chat_id: self.chat.clone(),
            created_at: keys::format_time(self.created),
            status,
            seen: false,
            pending_id: (status == Status::Pending).then(|| format!("pid-{}", self.id)),
            status_reason: None,
            joined_at: None,
        }
        .to_item()
    }

    pub(crate) fn both(&self, status: Status) -> [Item; 2] {
        [self.copy(0, status), self.copy(1, status)]
    }
}

/// The notifications of `user`.
pub(crate) async fn notifications(chat: &Chat, user: &str) -> Vec<Item> {
    chat.tables[&Table::Notifications]
        .snapshot()
        .await
        .into_iter()
        .filter(|i| i["PK"] == s(&keys::user_pk(user)))
        .collect()
}
