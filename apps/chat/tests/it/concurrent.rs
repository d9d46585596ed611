//! The chat service and the worker at the same time, on DynamoDB Local.
//!
//! A seeded model of the service ([`Model`]) issues requests from
//! [`TASKS`] tasks at once: users and communities created, removed and
//! created again, community and private-chat memberships, notifications,
//! chat requests (a quarter without `PendingId`), acceptances, a user's
//! cancellations, accepted copies written again (without `JoinedAt`), and
//! bursts that conflict on purpose (a user removed while their request is
//! accepted; an accepted copy written again twice at once; a community
//! removed while members join; a user removed and created again at once,
//! so the cascade runs while the user exists again). Meanwhile the worker
//! follows the six streams in real time ([`Followers`]: one
//! follower per stream, at a parallelization factor of 1 and of 10). Then
//! the streams are drained to quiet, the scheduled jobs run across their
//! grace periods (the injected clock moved on), and every documented
//! invariant is checked ([`check`]), among them the worker's first
//! promise: **nothing the service still shows as live was deleted or
//! settled by the worker** (the model keeps its own view of what is live:
//! an item written after its owners' last creation, owners live at the
//! end, must be there; a request of such a user is never cancelled as
//! `user-deleted`).
//!
//! The model behaves as a service would: writes for one user or community
//! are serialized against its removal (a lock per owner; a removed owner
//! gets no new items), an acceptance or a cancellation is a put
//! conditional on the copy being `pending`, a rewrite one conditional on
//! it being `accepted`.
//!
//! Seed 1 in `scripts/test`, at factor 1 and at factor 10. The soak, in
//! the long run, runs seeds 2 and 3 (`SOAK_SEEDS=<n>`: 2 to n) at each
//! factor: `SOAK_SEEDS=<n> cargo test -p chat-worker --test it concurrent::
//! -- --include-ignored`; each seed prints its counts and timings
//! (`--nocapture`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chat_worker::items::{RequestCopy, Status};
use chat_worker::keys::{self, ChatItem, ChatKind, CommunityItem, RequestsItem};
use chat_worker::schema::Table;
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use support::*;
use tokio::sync::RwLock;
use worker_engine::item::Item;
use worker_engine::store::{DynamoStore, Expr, ItemWriter, Key, WriteOutcome};
use worker_testkit::follow::{Followers, Mapping, Tail, assert_no_problems, quiet, service_tasks};

/// Service tasks in flight.
const TASKS: usize = 8;
/// Requests per task.
const OPS_PER_TASK: usize = 20;
const USERS: usize = 10;
const COMMUNITIES: usize = 3;
const GROUP_CHATS: usize = 4;

/// A user or a community, as the service knows it.
#[derive(Debug, Clone, Copy, Default)]
struct Owner {
    live: bool,
    /// Sequence number of the last creation (completed).
    created: u64,
    ever_removed: bool,
}

/// An item the service wrote, owned by users and communities: while they
/// stay live since before it was written, it is live.
#[derive(Debug, Clone)]
struct Written {
    table: Table,
    key: Key,
    users: Vec<String>,
    communities: Vec<String>,
    seq: u64,
}

/// A request the service made.
#[derive(Debug, Clone)]
struct Made {
    r: Request,
    seq: u64,
}

struct Model {
    stores: BTreeMap<Table, Arc<DynamoStore>>,
    seq: AtomicU64,
    users: Mutex<BTreeMap<String, Owner>>,
    communities: Mutex<BTreeMap<String, Owner>>,
    user_locks: BTreeMap<String, Arc<RwLock<()>>>,
    community_locks: BTreeMap<String, Arc<RwLock<()>>>,
    written: Mutex<Vec<Written>>,
    requests: Mutex<Vec<Made>>,
    ops: Mutex<BTreeMap<&'static str, usize>>,
}

fn user_id(i: usize) -> String {
    format!("u{i}")
}

fn community_id(i: usize) -> String {
    format!("c{i}")
}

fn chat_id(i: usize) -> String {
    format!("g{i}")
}

impl Model {
    fn new(chat: &Chat) -> Self {
        let stores = Table::ALL
            .iter()
            .map(|t| (*t, chat.store(*t).clone()))
            .collect();
        Model {
            stores,
            seq: AtomicU64::new(1),
            users: Mutex::default(),
            communities: Mutex::default(),
            user_locks: (0..USERS).map(|i| (user_id(i), Arc::default())).collect(),
            community_locks: (0..COMMUNITIES)
                .map(|i| (community_id(i), Arc::default()))
                .collect(),
            written: Mutex::default(),
            requests: Mutex::default(),
            ops: Mutex::default(),
        }
    }

    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    fn count(&self, op: &'static str) {
        *self.ops.lock().unwrap().entry(op).or_default() += 1;
    }

    fn store(&self, t: Table) -> &Arc<DynamoStore> {
        &self.stores[&t]
    }

    fn user(&self, u: &str) -> Owner {
        self.users
            .lock()
            .unwrap()
            .get(u)
            .copied()
            .unwrap_or_default()
    }

    fn community(&self, c: &str) -> Owner {
        self.communities
            .lock()
            .unwrap()
            .get(c)
            .copied()
            .unwrap_or_default()
    }

    async fn put(&self, t: Table, item: Item) {
        self.store(t).put(item, None).await.expect("service put");
    }

    /// A put only while the item's `Status` is `status` (a client acting
    /// on the copy it read).
    async fn put_if(&self, item: Item, status: Status) -> bool {
        let cond = Expr::new("#st = :st")
            .name("#st", keys::STATUS)
            .string(":st", status.as_str());
        self.store(Table::ChatRequests)
            .put(item, Some(cond))
            .await
            .expect("service put")
            == WriteOutcome::Applied
    }

    fn record(&self, table: Table, key: Key, users: &[&str], communities: &[&str], seq: u64) {
        self.written.lock().unwrap().push(Written {
            table,
            key,
            users: users.iter().map(|s| s.to_string()).collect(),
            communities: communities.iter().map(|s| s.to_string()).collect(),
            seq,
        });
    }

    async fn create_user(&self, u: &str) {
        let _g = self.user_locks[u].write().await;
        if self.user(u).live {
            return;
        }
        self.put(Table::Users, user(u)).await;
        let seq = self.next();
        let mut users = self.users.lock().unwrap();
        let o = users.entry(u.to_owned()).or_default();
        o.live = true;
        o.created = seq;
        self.count("create user");
    }

    async fn remove_user(&self, u: &str) {
        let _g = self.user_locks[u].write().await;
        if !self.user(u).live {
            return;
        }
        {
            let mut users = self.users.lock().unwrap();
            let o = users.get_mut(u).expect("a known user");
            o.live = false;
            o.ever_removed = true;
        }
        self.store(Table::Users)
            .delete(&keys::user(u), None)
            .await
            .expect("service delete");
        self.count("remove user");
    }

    async fn create_community(&self, c: &str) {
        let _g = self.community_locks[c].write().await;
        if self.community(c).live {
            return;
        }
        self.put(Table::Communities, community(c)).await;
        let seq = self.next();
        let mut all = self.communities.lock().unwrap();
        let o = all.entry(c.to_owned()).or_default();
        o.live = true;
        o.created = seq;
        self.count("create community");
    }

    async fn remove_community(&self, c: &str) {
        let _g = self.community_locks[c].write().await;
        if !self.community(c).live {
            return;
        }
        {
            let mut all = self.communities.lock().unwrap();
            let o = all.get_mut(c).expect("a known community");
            o.live = false;
            o.ever_removed = true;
        }
        let key = CommunityItem::Community {
            community: c.to_owned(),
        }
        .key();
        self.store(Table::Communities)
            .delete(&key, None)
            .await
            .expect("service delete");
        self.count("remove community");
    }

    async fn join_community(&self, u: &str, c: &str) {
        let _gu = self.user_locks[u].read().await;
        let _gc = self.community_locks[c].read().await;
        if !self.user(u).live || !self.community(c).live {
            return;
        }
        let seq = self.next();
        let item = community_member(c, u);
        self.put(Table::Communities, item.clone()).await;
        self.record(Table::Communities, item, &[u], &[c], seq);
        self.count("join community");
    }

    async fn join_private(&self, u: &str, p: &str) {
        let _g = self.user_locks[u].read().await;
        if !self.user(u).live {
            return;
        }
        let seq = self.next();
        let item = member(ChatKind::Private, p, u);
        self.put(Table::PrivateChats, item.clone()).await;
        self.record(Table::PrivateChats, item, &[u], &[], seq);
        self.count("join private chat");
    }

    async fn notify(&self, u: &str, n: &str) {
        let _g = self.user_locks[u].read().await;
        if !self.user(u).live {
            return;
        }
        let seq = self.next();
        let key = keys::NotificationKey {
            user: u.to_owned(),
            read: false,
            time: now(),
            id: n.to_owned(),
        };
        let mut item = key.key();
        item.insert("Id".into(), s(n));
        item.insert(keys::NOTIFICATION_TYPE.into(), s("Message"));
        self.put(Table::Notifications, item.clone()).await;
        let key = item
            .into_iter()
            .filter(|(k, _)| k == "PK" || k == "SK")
            .collect();
        self.record(Table::Notifications, key, &[u], &[], seq);
        self.count("notify");
    }

    async fn make_request(&self, r: Request, without_pending_id: bool) {
        let _g = self.user_locks[&r.user].read().await;
        if !self.user(&r.user).live {
            return;
        }
        let seq = self.next();
        for mut c in r.both(Status::Pending) {
            if without_pending_id {
                c.remove(keys::PENDING_ID);
            }
            self.put(Table::ChatRequests, c).await;
        }
        self.requests.lock().unwrap().push(Made { r, seq });
        self.count(if without_pending_id {
            "request (no PendingId)"
        } else {
            "request"
        });
    }

    async fn accept(&self, r: &Request) {
        if self
            .put_if(r.copy(1, Status::Accepted), Status::Pending)
            .await
        {
            self.count("accept");
        }
    }

    async fn cancel(&self, r: &Request) {
        let _g = self.user_locks[&r.user].read().await;
        if !self.user(&r.user).live {
            return;
        }
        if self
            .put_if(r.copy(0, Status::Cancelled), Status::Pending)
            .await
        {
            self.count("cancel");
        }
    }

    async fn rewrite_accepted(&self, r: &Request) {
        if self
            .put_if(r.copy(1, Status::Accepted), Status::Accepted)
            .await
        {
            self.count("rewrite accepted copy");
        }
    }

    fn some_request(&self, rng: &mut StdRng) -> Option<Request> {
        let all = self.requests.lock().unwrap();
        if all.is_empty() {
            return None;
        }
        Some(all[rng.random_range(0..all.len())].r.clone())
    }

    /// One service request (or burst), chosen by `rng`.
    async fn step(&self, rng: &mut StdRng, task: usize, n: usize) {
        let u = user_id(rng.random_range(0..USERS));
        let c = community_id(rng.random_range(0..COMMUNITIES));
        let g = chat_id(rng.random_range(0..GROUP_CHATS));
        let dice = rng.random_range(0..100);
        match dice {
            0..=4 => self.create_user(&u).await,
            5..=7 => self.remove_user(&u).await,
            8..=15 => self.join_community(&u, &c).await,
            16..=21 => {
                let p = format!("p{}", rng.random_range(0..2));
                self.join_private(&u, &p).await
            }
            22..=27 => self.notify(&u, &format!("svc-{task}-{n}")).await,
            28..=47 => {
                let days = rng.random_range(0..40);
                let created = now() - chrono::Duration::days(days)
                    + chrono::Duration::seconds(rng.random_range(0..86_400));
                let r = Request {
                    id: format!("r{task}-{n}"),
                    user: u.clone(),
                    chat: g,
                    created,
                };
                let bare = rng.random_bool(0.25);
                self.make_request(r, bare).await
            }
            48..=62 => {
                if let Some(r) = self.some_request(rng) {
                    self.accept(&r).await
                }
            }
            63..=67 => {
                if let Some(r) = self.some_request(rng) {
                    self.cancel(&r).await
                }
            }
            68..=75 => {
                if let Some(r) = self.some_request(rng) {
                    self.rewrite_accepted(&r).await
                }
            }
            76..=79 => self.remove_community(&c).await,
            80..=84 => self.create_community(&c).await,
            85..=88 => {
                // A user removed while their request is accepted.
                if let Some(r) = self.some_request(rng) {
                    self.count("burst: remove user while accepted");
                    tokio::join!(self.accept(&r), self.remove_user(&r.user));
                }
            }
            89..=91 => {
                // An accepted copy written again twice at once.
                if let Some(r) = self.some_request(rng) {
                    self.count("burst: rewrites");
                    tokio::join!(self.rewrite_accepted(&r), self.rewrite_accepted(&r));
                }
            }
            92..=95 => {
                // A community removed while members join; then created
                // again while its cascade may still run.
                let v = user_id(rng.random_range(0..USERS));
                self.count("burst: remove community while joining");
                tokio::join!(
                    self.remove_community(&c),
                    self.join_community(&u, &c),
                    self.join_community(&v, &c)
                );
                self.create_community(&c).await;
                self.join_community(&v, &c).await;
            }
            _ => {
                // A user removed and created again at once: the cascade
                // runs while the user exists again.
                self.count("burst: remove and create user");
                self.remove_user(&u).await;
                self.create_user(&u).await;
                self.join_community(&u, &c).await;
                self.notify(&u, &format!("svc-{task}-{n}-again")).await;
            }
        }
    }
}

fn attr<'a>(i: &'a Item, name: &str) -> Option<&'a str> {
    i.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn key_of(t: Table, i: &Item) -> Key {
    i.iter()
        .filter(|(k, _)| *k == "PK" || (*k == "SK" && t != Table::Users))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Every invariant the app documents, against the tables as they are;
/// the problems found.
async fn check(chat: &Chat, model: &Model, after_jobs: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let snap = chat.snapshot().await;
    let keys_of = |t: Table| -> BTreeSet<Vec<(String, String)>> {
        snap[&t]
            .iter()
            .map(|i| {
                let mut k: Vec<_> = key_of(t, i)
                    .into_iter()
                    .map(|(k, v)| (k, v.as_s().cloned().unwrap_or_default()))
                    .collect();
                k.sort();
                k
            })
            .collect()
    };
    let present: BTreeMap<Table, _> = Table::ALL.iter().map(|t| (*t, keys_of(*t))).collect();
    let users = model.users.lock().unwrap().clone();
    let communities = model.communities.lock().unwrap().clone();
    let live_since = |o: Option<&Owner>, seq: u64| o.is_some_and(|o| o.live && o.created < seq);

    // 1. Nothing the service still shows as live was deleted.
    for w in model.written.lock().unwrap().iter() {
        let live = w.users.iter().all(|u| live_since(users.get(u), w.seq))
            && w.communities
                .iter()
                .all(|c| live_since(communities.get(c), w.seq));
        if !live {
            continue;
        }
        let mut k: Vec<_> = w
            .key
            .iter()
            .map(|(k, v)| (k.clone(), v.as_s().cloned().unwrap_or_default()))
            .collect();
        k.sort();
        if !present[&w.table].contains(&k) {
            problems.push(format!("live item deleted: {:?} {k:?}", w.table));
        }
    }

    // 2. A removed user leaves no memberships, notifications or open
    // requests; a removed community no links.
    let marks: BTreeMap<(String, String), String> = snap[&Table::ChatRequests]
        .iter()
        .filter_map(|i| match RequestsItem::parse(i) {
            Ok(RequestsItem::Joined(m)) => Some((
                (m.chat.clone(), m.request.clone()),
                attr(i, keys::USER_ID).unwrap_or_default().to_owned(),
            )),
            _ => None,
        })
        .collect();
    for (u, o) in &users {
        if o.live {
            continue;
        }
        let sk = keys::user_pk(u);
        for t in [Table::Communities, Table::GroupChats, Table::PrivateChats] {
            for i in &snap[&t] {
                if attr(i, "SK") == Some(sk.as_str()) {
                    problems.push(format!("removed user {u} still in {t:?}: {i:?}"));
                }
            }
        }
        for i in &snap[&Table::Notifications] {
            if attr(i, "PK") == Some(sk.as_str()) {
                problems.push(format!("removed user {u} still notified: {i:?}"));
            }
        }
    }
    for (c, o) in &communities {
        if o.live {
            continue;
        }
        let pk = format!("COMMUNITY#{c}");
        for i in &snap[&Table::Communities] {
            if attr(i, "PK") == Some(pk.as_str()) {
                problems.push(format!("removed community {c} still has {i:?}"));
            }
        }
    }

    // 3. Requests: copies in step, the sparse index sparse, a removed
    // user's requests settled, a live user's never cancelled for removal.
    let copies: BTreeMap<(String, String), RequestCopy> = snap[&Table::ChatRequests]
        .iter()
        .filter(|i| matches!(RequestsItem::parse(i), Ok(RequestsItem::Copy(_))))
        .map(|i| {
            let c = RequestCopy::from_item(i).expect("a copy");
            (
                (
                    attr(i, "PK").unwrap().to_owned(),
                    attr(i, "SK").unwrap().to_owned(),
                ),
                c,
            )
        })
        .collect();
    for c in copies.values() {
        if (c.status == Status::Pending) != c.pending_id.is_some() {
            problems.push(format!("PendingId on a {:?} copy: {:?}", c.status, c.key()));
        }
    }
    let cutoff = chat.clock_now() - chrono::Duration::days(30);
    for m in model.requests.lock().unwrap().iter() {
        let [ku, kg] = m.r.keys();
        let get = |k: &keys::RequestKey| {
            let key = k.key();
            copies
                .get(&(
                    key["PK"].as_s().unwrap().clone(),
                    key["SK"].as_s().unwrap().clone(),
                ))
                .cloned()
        };
        let (Some(cu), Some(cg)) = (get(&ku), get(&kg)) else {
            problems.push(format!("a copy of {} is missing", m.r.id));
            continue;
        };
        if cu.status != cg.status && !(cu.status.is_terminal() && cg.status.is_terminal()) {
            problems.push(format!(
                "copies of {} not in step: {:?} / {:?}",
                m.r.id, cu.status, cg.status
            ));
        }
        // Two clients deciding the two copies differently (a cancel on the
        // user's, an acceptance on the chat's) is a conflict: reported and
        // left (`RequestConflicts`). The worker never makes one.
        let conflict = cu.status != cg.status;
        if conflict && (cu.status_reason.is_some() || cg.status_reason.is_some()) {
            problems.push(format!(
                "conflict on {} involving the worker: {:?} {:?} / {:?} {:?}",
                m.r.id, cu.status, cu.status_reason, cg.status, cg.status_reason
            ));
        }
        let joined = marks.contains_key(&(m.r.chat.clone(), m.r.id.clone()));
        let owner = users.get(&m.r.user).copied().unwrap_or_default();
        if !owner.live && !conflict {
            for c in [&cu, &cg] {
                let open = c.status == Status::Pending || (c.status == Status::Accepted && !joined);
                if open {
                    problems.push(format!(
                        "request {} of removed user {} left {:?} (copies {:?} {:?} / {:?} {:?})",
                        m.r.id,
                        m.r.user,
                        c.status,
                        cu.status,
                        cu.status_reason,
                        cg.status,
                        cg.status_reason
                    ));
                }
            }
        }
        if live_since(Some(&owner), m.seq) {
            for c in [&cu, &cg] {
                if c.status_reason.as_deref() == Some(keys::REASON_USER_DELETED) {
                    problems.push(format!(
                        "request {} of live user {} cancelled as user-deleted",
                        m.r.id, m.r.user
                    ));
                }
            }
        }
        if after_jobs && m.r.created < cutoff {
            for c in [&cu, &cg] {
                if c.status == Status::Pending {
                    problems.push(format!("request {} past expiry still pending", m.r.id));
                }
            }
        }
    }

    // 4. One notification per accepted request; members only by a join;
    // NumMembers equals the member items, within Capacity.
    let mut accepted_notes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for i in &snap[&Table::Notifications] {
        let id = attr(i, "Id").unwrap_or_default();
        if id.starts_with("chatrequest-") {
            let user = attr(i, "PK").unwrap().to_owned();
            *accepted_notes.entry((user, id.to_owned())).or_default() += 1;
        }
    }
    for (k, n) in &accepted_notes {
        if *n > 1 {
            problems.push(format!("{n} acceptance notifications: {k:?}"));
        }
    }
    for ((_, request), user) in &marks {
        let o = users.get(user).copied().unwrap_or_default();
        if !o.ever_removed {
            let id = keys::acceptance_notification_id(request);
            if accepted_notes.get(&(keys::user_pk(user), id)) != Some(&1) {
                problems.push(format!("joined request {request} without its notification"));
            }
        }
    }
    for g in 0..GROUP_CHATS {
        let g = chat_id(g);
        let (n, members) = chat.members(&g).await;
        if n != Some(members.len() as i64) {
            problems.push(format!("{g}: NumMembers {n:?}, {} members", members.len()));
        }
        for u in &members {
            if !marks.iter().any(|((c, _), mu)| *c == g && mu == u) {
                problems.push(format!("{g}: member {u} without a join"));
            }
        }
        let item = chat
            .get(
                Table::GroupChats,
                &ChatItem::Chat {
                    kind: ChatKind::Group,
                    chat: g.clone(),
                }
                .key(),
            )
            .await
            .expect("the chat");
        let cap: usize = item[keys::CAPACITY].as_n().unwrap().parse().unwrap();
        if members.len() > cap {
            problems.push(format!(
                "{g}: {} members over Capacity {cap}",
                members.len()
            ));
        }
    }
    problems
}

/// One seed at one parallelization factor.
async fn run(seed: u64, factor: usize) {
    let started = Instant::now();
    let chat = Chat::new().await;
    let model = Arc::new(Model::new(&chat));
    let mut rng = StdRng::seed_from_u64(seed);
    for g in 0..GROUP_CHATS {
        chat.put(
            Table::GroupChats,
            group_chat(&chat_id(g), Some(rng.random_range(2..6)), Some(0)),
        )
        .await;
    }
    for u in 0..USERS {
        model.create_user(&user_id(u)).await;
    }
    for c in 0..COMMUNITIES {
        model.create_community(&community_id(c)).await;
    }
    let worker = Arc::new(chat.another_worker());
    let mut tails = Vec::new();
    for table in chat.tables.values() {
        tails.push(Tail::new(table).await);
    }
    let mapping = Mapping::new(factor);
    let followers = Followers::start(tails, worker.clone(), mapping.clone());

    let service_time = service_tasks(TASKS, seed, |task, mut rng| {
        let model = model.clone();
        async move {
            for n in 0..OPS_PER_TASK {
                model.step(&mut rng, task, n).await;
            }
        }
    })
    .await;
    let (mut drains, mut stats) = followers.stop().await;
    stats.add(quiet(&mut drains, worker.as_ref(), &mapping).await);
    let drained = started.elapsed();

    let mut problems = check(&chat, &model, false).await;

    // The scheduled jobs, past the twins' grace: the audit, then the
    // expiry, each followed by the streams to quiet.
    chat.clock.advance(chrono::Duration::hours(2));
    let audit = chat.tick("audit-requests").await;
    stats.add(quiet(&mut drains, worker.as_ref(), &mapping).await);
    let expire = chat.tick("expire-requests").await;
    stats.add(quiet(&mut drains, worker.as_ref(), &mapping).await);
    problems.extend(check(&chat, &model, true).await);
    if stats.rejected + stats.malformed > 0 {
        problems.push(format!("records rejected: {stats:?}"));
    }
    let failed_reads: usize = drains.iter().map(|d| d.failed_reads).sum();
    let ops = model.ops.lock().unwrap().clone();
    let total: usize = ops.values().sum();
    eprintln!(
        "seed {seed} factor {factor}: {total} service requests {ops:?}; {} records, {} invocations, {} retries, {failed_reads} stream reads again; service {:.1}s, drained at {:.1}s, done {:.1}s; audit {}, expire {}",
        stats.records,
        stats.invocations,
        stats.retries,
        service_time.as_secs_f64(),
        drained.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        audit["details"],
        expire["details"],
    );
    assert_no_problems(seed, factor, &problems);
}

worker_testkit::soak_tests!(run);
