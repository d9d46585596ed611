//! Cost per million stream records of the chat's `StreamFunction`
//! (`cargo bench -p nishiki-cli --bench cost -- --app chat --writes 5000 --seed 7`):
//! the measurement of `worker_testkit::cost` on a seeded mix of the chat
//! clients' writes over the six tables.
//!
//! On a DynamoDB Local of its own, the six tables (their seed names) hold
//! `--users` users (default 300), 20 communities with 10 members each and
//! 30 group chats (`Capacity` 100) linked to them, as the worker left them
//! (the stream records of the seeding skipped). Then `--writes` client
//! writes, one after the other: join requests (both copies, pending) 35%,
//! acceptances (the chat's copy, while pending) 20%, cancellations (the
//! user's copy, while pending) 5%, private-chat memberships 15%, community
//! memberships 10%, unread notifications 10%, users removed (4%) and
//! created (1%). Then every table's stream is drained through the worker
//! as `infra/chat.yaml`'s mappings deliver them, each invocation metered
//! (`worker_testkit::cost::Meter`; the cross-table transactions through
//! `TimedTransactions`), and the cost is printed.

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chat_worker::app::{Stores, worker};
use chat_worker::config::for_tables;
use chat_worker::items::{RequestCopy, Status};
use chat_worker::keys::{self, ChatItem, ChatKind, CommunityItem, NotificationKey, RequestKey};
use chat_worker::schema::Table;
use chrono::{DateTime, Duration, Utc};
use rand::Rng;
use worker_engine::TableNames;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::store::{DynamoStore, ItemWriter, Key, Store, local_client};
use worker_testkit::TestTable;
use worker_testkit::cost::arg;
use worker_testkit::cost::{
    self, Costed, Meter, StreamFunction, Tallied, Timed, TimedTransactions, US_EAST_1,
};
use worker_testkit::workload::Seeded;

const NOW: &str = "2024-06-01T00:00:00Z";
const COMMUNITIES: usize = 20;
const COMMUNITY_MEMBERS: usize = 10;
const GROUP_CHATS: usize = 30;
const CAPACITY: i64 = 100;

fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// A user, with the personal attributes a client writes.
fn user(id: &str) -> Item {
    let mut i = keys::user(id);
    i.insert("Id".into(), s(id));
    i.insert("Username".into(), s(&format!("name-of-{id}")));
    i.insert("Email".into(), s(&format!("{id}@example.com")));
    i
}

fn group_chat(chat: &str) -> Item {
    let mut i = ChatItem::Chat {
        kind: ChatKind::Group,
        chat: chat.into(),
    }
    .key();
    i.insert("Id".into(), s(chat));
    i.insert(
        keys::CAPACITY.into(),
        AttributeValue::N(CAPACITY.to_string()),
    );
    i.insert(keys::NUM_MEMBERS.into(), AttributeValue::N("0".into()));
    i
}

/// A join request of `user` to group chat `chat`, made at `created`.
struct Request {
    id: String,
    user: String,
    chat: String,
    created: DateTime<Utc>,
}

impl Request {
    /// A copy (`0`: the user's, `1`: the chat's) with `status`, as the
    /// client writes it.
    fn copy(&self, which: usize, status: Status) -> Item {
        let keys = RequestKey::copies(&self.user, &self.chat, self.created, &self.id);
        RequestCopy {
            key: Some(keys[which].clone()),
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
}

enum Write {
    Put(Table, Item),
    Delete(Table, Key),
}

pub(crate) async fn run() -> Costed {
    let users = arg("--users", 300) as usize;
    let writes = arg("--writes", 5000) as usize;
    let mut rng = Seeded::new(arg("--seed", 7));
    let function = StreamFunction::of("infra/chat.yaml", "StreamFunction");

    // The population.
    let mut live: Vec<String> = (0..users).map(|u| format!("u{u}")).collect();
    let mut population: Vec<(Table, Item)> = live.iter().map(|u| (Table::Users, user(u))).collect();
    for c in 0..COMMUNITIES {
        let c = format!("c{c}");
        population.push((
            Table::Communities,
            CommunityItem::Community {
                community: c.clone(),
            }
            .key(),
        ));
        for _ in 0..COMMUNITY_MEMBERS {
            let u = &live[rng.rng().random_range(0..live.len())];
            population.push((
                Table::Communities,
                CommunityItem::Member {
                    community: c.clone(),
                    user: u.clone(),
                }
                .key(),
            ));
        }
    }
    for g in 0..GROUP_CHATS {
        let chat = format!("g{g}");
        population.push((Table::GroupChats, group_chat(&chat)));
        population.push((
            Table::Communities,
            CommunityItem::GroupChat {
                community: format!("c{}", g % COMMUNITIES),
                chat,
            }
            .key(),
        ));
    }

    // The clients' writes.
    let mut history: Vec<Write> = Vec::new();
    let mut pending: Vec<Request> = Vec::new();
    let mut time = now();
    let mut next = 0usize;
    while history.len() < writes {
        time += Duration::seconds(rng.rng().random_range(1..20));
        next += 1;
        let u = live[rng.rng().random_range(0..live.len())].clone();
        match rng.rng().random_range(0..100) {
            0..35 => {
                let r = Request {
                    id: format!("r{next}"),
                    user: u,
                    chat: format!("g{}", rng.rng().random_range(0..GROUP_CHATS)),
                    created: time,
                };
                history.push(Write::Put(Table::ChatRequests, r.copy(0, Status::Pending)));
                history.push(Write::Put(Table::ChatRequests, r.copy(1, Status::Pending)));
                pending.push(r);
            }
            35..55 if !pending.is_empty() => {
                let r = pending.swap_remove(rng.rng().random_range(0..pending.len()));
                history.push(Write::Put(Table::ChatRequests, r.copy(1, Status::Accepted)));
            }
            55..60 if !pending.is_empty() => {
                let r = pending.swap_remove(rng.rng().random_range(0..pending.len()));
                history.push(Write::Put(
                    Table::ChatRequests,
                    r.copy(0, Status::Cancelled),
                ));
            }
            60..75 => {
                let other = &live[rng.rng().random_range(0..live.len())];
                let chat = format!("p{next}");
                for who in [&u, other] {
                    let item = ChatItem::Member {
                        kind: ChatKind::Private,
                        chat: chat.clone(),
                        user: who.clone(),
                    }
                    .key();
                    history.push(Write::Put(Table::PrivateChats, item));
                }
            }
            75..85 => {
                let item = CommunityItem::Member {
                    community: format!("c{}", rng.rng().random_range(0..COMMUNITIES)),
                    user: u,
                }
                .key();
                history.push(Write::Put(Table::Communities, item));
            }
            85..95 => {
                let id = format!("n{next}");
                let mut item = NotificationKey {
                    user: u,
                    read: false,
                    time,
                    id: id.clone(),
                }
                .key();
                item.insert("Id".into(), s(&id));
                item.insert(keys::NOTIFICATION_TYPE.into(), s("Message"));
                history.push(Write::Put(Table::Notifications, item));
            }
            95..99 if live.len() > 10 => {
                live.retain(|l| *l != u);
                pending.retain(|r| r.user != u);
                history.push(Write::Delete(Table::Users, keys::user(&u)));
            }
            99 => {
                let id = format!("u{}", users + next);
                history.push(Write::Put(Table::Users, user(&id)));
                live.push(id);
            }
            _ => {}
        }
    }
    eprintln!(
        "{} items seeded ({users} users), {} client writes",
        population.len(),
        history.len()
    );

    let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
        .await
        .expect("DynamoDB Local must start (see the error for what to install)");
    let endpoint = local.endpoint_url();
    let mut tables = std::collections::BTreeMap::new();
    for t in Table::ALL {
        tables.insert(t, TestTable::create(&endpoint, t.name(), &t.schema()).await);
    }
    for (t, item) in population {
        tables[&t].store.put(item, None).await.expect("seed");
    }
    let mut tails = Vec::new();
    for t in Table::ALL {
        let (_, mut tail) = tables[&t].stream_tail().await;
        tail.poll().await.expect("read the stream");
        tails.push((t, tail));
    }
    for w in &history {
        match w {
            Write::Put(t, item) => tables[t].store.put(item.clone(), None).await,
            Write::Delete(t, key) => tables[t].store.delete(key, None).await,
        }
        .expect("a client write");
    }

    // The worker, each table's store its own, metered.
    let mut stores = Vec::new();
    let mut layers: Vec<Arc<dyn Tallied>> = Vec::new();
    let mut worker_stores = Vec::new();
    for t in Table::ALL {
        let store =
            Arc::new(DynamoStore::new(local_client(&endpoint), t.name()).with_key(t.schema().key));
        let timed = Arc::new(Timed::new(store.clone()));
        stores.push(store);
        layers.push(timed.clone());
        worker_stores.push((t, timed as Arc<dyn Store>));
    }
    let tx_store = Arc::new(DynamoStore::new(
        local_client(&endpoint),
        Table::ChatRequests.name(),
    ));
    let tx = Arc::new(TimedTransactions::new(tx_store.clone()));
    stores.push(tx_store);
    layers.push(tx.clone());
    let settings = for_tables(TableNames::new(|t: Table| t.name().to_owned()));
    let worker = worker(
        Stores::new(worker_stores),
        tx,
        settings,
        Arc::new(ManualClock::new(now())),
    );
    let mut meter = Meter::new(stores, layers);
    let mut streams: Vec<cost::Stream> = tails
        .into_iter()
        .map(|(t, tail)| cost::Stream {
            tail,
            mapping: function.mapping(Some(t.logical_id())).clone(),
        })
        .collect();
    meter.drain(&worker, &mut streams).await;
    Costed::of("chat", &function, US_EAST_1, &meter.run)
}
