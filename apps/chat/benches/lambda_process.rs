//! Peak memory of the chat worker's Lambda `bootstrap`s (`chat-stream`,
//! `chat-schedule`), built with the release settings that ship
//! (`worker_testkit::lambda_process`: the `bootstrap` profile) and driven
//! through a local Lambda Runtime API on their worst legal inputs, against
//! the six chat tables (and the parking table) on a DynamoDB Local of their
//! own: the process's `VmHWM` after init and after each delivery, and the
//! `MemorySize` (128 MB, then steps of 64) that holds it with a 50% margin,
//! beside the one `infra/chat.yaml` sets. The functions' variables, the
//! mappings' `BatchSize` and the schedules' `Input` are read from that
//! template. Every case checks that the work was done (no batch item
//! failure, the job's report, the tables afterwards).
//!
//! 1. `StreamFunction` (`chat-stream`). A batch comes from ONE table's
//!    stream (one mapping per table, `BatchSize` records each), at most
//!    Lambda's 6 MiB; each batch goes to a fresh process, twice (the second
//!    a redelivery, which must change nothing):
//!    (a) **Users, 100 users removed**: the worst table. Each REMOVE's old
//!    image is padded so the batch is just under 6 MiB, and each removed
//!    user leaves 20 community memberships, 20 group-chat and 10
//!    private-chat memberships, 20 pending requests (both copies) and 100
//!    notifications. The user cascade reads whole partitions into memory
//!    (the member indexes, the user's request and notification partitions,
//!    full items) and the engine runs the 100 removals at once
//!    (`STREAM_CONCURRENCY` 1000): the largest images the payload allows
//!    and every removed user's fan-out, held together. The fan-out is not
//!    bounded by the batch: `-- --scale N` multiplies it.
//!    (b) **ChatRequests, 100 acceptances**, for comparison: the group
//!    chat's copy turned `accepted`, old and new images padded to the same
//!    6 MiB; the request handler reads both copies (as large as the images)
//!    and writes the follow, the membership, the count and the
//!    notification. (The other tables' handlers hold less: a community's
//!    cascade is one partition of the user's five; a group chat's recount
//!    holds its members' keys only; Notifications and PrivateChats records
//!    have no handler.)
//! 2. `ExpireRequestsFunction` (`WORKER_JOB=expire-requests`), one fresh
//!    process: a tick over 10 full pages of the sparse index (5,000 due
//!    pending copies, the job's `PAGE` of 500 entries), each copy expired
//!    by an update. The job holds one page at a time: more pages add time,
//!    not memory (its deadline bounds a tick's pages).
//! 3. `AuditRequestsFunction` (`audit-requests`), one fresh process: a tick
//!    over 2,000 copies of about 10 KB each, so each scan page (the job's
//!    `PAGE` of 100 items) is as large as DynamoDB's 1 MB page allows and
//!    its twins (one consistent BatchGetItem of up to 100 keys) are as
//!    large again; 100 pending copies lost their twin and get it recreated.
//!    It too holds one page (and its twins) at a time.
//!
//! Run: `cargo bench -p chat-worker --bench lambda_process`
//! (`-- --scale N`: the removed users' fan-out times N).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use chat_worker::items::{Notification, RequestCopy, Status};
use chat_worker::keys::{self, ChatItem, ChatKind, CommunityItem, NotificationKey, RequestKey};
use chat_worker::schema::Table;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use worker_engine::item::{Item, encode};
use worker_engine::store::{QueryStore, ScanSpec};
use worker_engine::stream::{ChangeKind, StreamChange, encode_event};
use worker_testkit::TestTable;
use worker_testkit::lambda_process::{self as process, MIB, PAYLOAD_LIMIT};
use worker_testkit::template::{Stack, load};

/// The fixed clock of every function (`WORKER_NOW`) and the ticks' time.
const NOW: &str = "2024-06-01T00:00:00Z";
/// Left free under Lambda's payload limit by the padded batches.
const PAYLOAD_SLACK: usize = 16 * 1024;
/// Concurrent BatchWriteItem sequences seeding a table.
const SEED_TASKS: usize = 4;
/// The margin the MemorySize holds above the peak.
const MARGIN: f64 = 0.5;

fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

/// A UUID-shaped id (the ids clients write), `kind` telling them apart.
fn uid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// The template's view of the functions: variables, batch size, ticks.
struct Template(Stack);

impl Template {
    fn load() -> Self {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/chat.yaml");
        Template(Stack::new(load(&path), "chat-worker-dev", "", &[]))
    }

    fn memory_size(&self, function: &str) -> u64 {
        self.0.resource(function)["Properties"]["MemorySize"]
            .as_u64()
            .unwrap_or_else(|| panic!("{function} has no MemorySize"))
    }

    /// The `BatchSize` of the stream function's mappings (one per table,
    /// all the same).
    fn batch_size(&self) -> usize {
        let events = self.0.resource("StreamFunction")["Properties"]["Events"].clone();
        let sizes: Vec<u64> = events
            .as_object()
            .expect("the stream function's events")
            .values()
            .map(|e| e["Properties"]["BatchSize"].as_u64().expect("a BatchSize"))
            .collect();
        assert_eq!(sizes.len(), Table::ALL.len(), "one mapping per table");
        assert!(sizes.iter().all(|s| *s == sizes[0]), "{sizes:?}");
        sizes[0] as usize
    }

    /// The `Input` of the schedule that invokes `function`, at [`NOW`].
    fn tick(&self, function: &str) -> Vec<u8> {
        let arn = format!("getatt:{function}.Arn");
        let schedules = self.0.resources_of("AWS::Scheduler::Schedule");
        let input = schedules
            .values()
            .map(|r| &r["Properties"]["Target"])
            .find(|t| t["Arn"] == arn.as_str())
            .unwrap_or_else(|| panic!("no schedule invokes {function}"))["Input"]
            .as_str()
            .expect("an Input")
            .replace("<aws.scheduler.scheduled-time>", NOW);
        serde_json::from_str::<Value>(&input).expect("the Input is JSON");
        input.into_bytes()
    }
}

/// The six tables and the parking table on a DynamoDB Local of their own
/// (no streams: the batches are built here), dropped before the instance.
struct Chat {
    tables: BTreeMap<Table, TestTable>,
    parking: TestTable,
    _local: worker_toolkit::local::DynamoDbLocal,
}

impl Chat {
    async fn new() -> Chat {
        let schema = |t: Table| t.schema().without_stream();
        let (local, users) =
            TestTable::on_own_local("chat-bench-users", &schema(Table::Users)).await;
        let endpoint = local.endpoint_url();
        let mut tables = BTreeMap::from([(Table::Users, users)]);
        for t in &Table::ALL[1..] {
            let name = format!("chat-bench-{}", t.name().to_lowercase());
            tables.insert(*t, TestTable::create(&endpoint, name, &schema(*t)).await);
        }
        let parking = TestTable::create(
            &endpoint,
            "chat-bench-parking",
            &worker_engine::park::schema(),
        )
        .await;
        Chat {
            tables,
            parking,
            _local: local,
        }
    }

    fn name(&self, t: Table) -> &str {
        &self.tables[&t].name
    }

    /// The stream ARN the records of `t` carry.
    fn stream_arn(&self, t: Table) -> String {
        format!(
            "arn:aws:dynamodb:us-east-1:123456789012:table/{}/stream/2024-06-01T00:00:00.000",
            self.name(t)
        )
    }

    /// `function`'s variables as the template sets them, its tables these
    /// ones, on this DynamoDB Local at the fixed clock.
    fn env(&self, template: &Template, function: &str) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = template
            .0
            .env(function)
            .into_iter()
            .map(|(k, v)| {
                let v = v.as_str().expect("a resolved variable").to_owned();
                let v = match v.strip_prefix("ref:") {
                    Some("ParkingTable") => self.parking.name.clone(),
                    Some(id) => Table::ALL
                        .iter()
                        .find(|t| t.logical_id() == id)
                        .map(|t| self.name(*t).to_owned())
                        .unwrap_or_else(|| panic!("{k}: !Ref {id}")),
                    None => v,
                };
                (k, v)
            })
            .collect();
        env.push((
            worker_engine::aws::DYNAMODB_ENDPOINT_ALIAS.into(),
            self.tables[&Table::Users].endpoint.clone(),
        ));
        env.push((worker_engine::clock::NOW_VAR.into(), NOW.into()));
        env
    }

    async fn seed(&self, t: Table, items: Vec<Item>) {
        worker_testkit::seed_concurrently(&self.tables[&t].store, items, SEED_TASKS).await;
    }

    async fn all(&self, t: Table) -> Vec<Item> {
        self.tables[&t].snapshot().await
    }

    /// A record of table `t` as its stream (NEW_AND_OLD_IMAGES) holds it.
    fn record(
        &self,
        t: Table,
        n: usize,
        keys: Item,
        old: Option<Item>,
        new: Option<Item>,
    ) -> StreamChange {
        let kind = match (&old, &new) {
            (None, Some(_)) => ChangeKind::Insert,
            (Some(_), Some(_)) => ChangeKind::Modify,
            _ => ChangeKind::Remove,
        };
        let size = [&old, &new]
            .into_iter()
            .flatten()
            .flat_map(|i| i.iter())
            .map(|(k, v)| k.len() + v.as_s().map_or(8, String::len))
            .sum::<usize>();
        StreamChange {
            event_id: format!("{n:032x}"),
            kind,
            sequence_number: Some(format!("{:021}", 7_000_000 + n).parse().expect("a number")),
            approximate_creation: Some(now()),
            keys,
            old_image: old,
            new_image: new,
            event_source_arn: Some(self.stream_arn(t).into()),
            size_bytes: Some(size as i64),
            typed: None,
        }
    }
}

/// The padding per image that brings `records` records of `images` images
/// each, built by `event`, just under Lambda's payload limit.
fn padding(records: usize, images: usize, event: impl Fn(usize) -> Vec<u8>) -> usize {
    let base = event(0).len();
    (PAYLOAD_LIMIT - PAYLOAD_SLACK - base) / (records * images)
}

/// The stream event of `changes`, checked against Lambda's limit.
fn payload(changes: &[StreamChange]) -> Vec<u8> {
    let bytes = serde_json::to_vec(&encode_event(changes, None)).expect("JSON");
    assert!(bytes.len() <= PAYLOAD_LIMIT, "{} bytes", bytes.len());
    bytes
}

/// Runs `binary` on `payload` `deliveries` times; the peak, after checking
/// that no stream delivery reported a batch item failure.
async fn measure(
    binary: &Path,
    env: &[(String, String)],
    payload: &[u8],
    deliveries: usize,
) -> process::Peak {
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let peak = process::peak(binary, &env, payload, deliveries).await;
    for (n, d) in peak.deliveries.iter().enumerate() {
        if let Some(failures) = d.response.get("batchItemFailures") {
            assert_eq!(
                failures.as_array().map(Vec::len),
                Some(0),
                "delivery {}: {}",
                n + 1,
                d.response
            );
        }
    }
    peak
}

/// A request copy (`which`: 0 the user's, 1 the chat's) with `status`; a
/// pending one carries its `PendingId`, as clients write them; `pad`
/// bytes of a client's `Message` when above 0.
fn copy(key: &RequestKey, user: &str, chat: &str, status: Status, pad: usize) -> Item {
    let mut item = RequestCopy {
        key: Some(key.clone()),
        id: key.request.clone(),
        user_id: user.into(),
        chat_id: chat.into(),
        created_at: keys::format_time(key.created),
        status,
        seen: false,
        pending_id: (status == Status::Pending).then(|| format!("pid-{}", key.request)),
        status_reason: None,
        joined_at: None,
    }
    .to_item();
    if pad > 0 {
        item.insert("Message".into(), s(&"m".repeat(pad)));
    }
    item
}

fn status_of(item: &Item) -> &str {
    item.get(keys::STATUS)
        .and_then(|v| v.as_s().ok())
        .map_or("", String::as_str)
}

/// How many of each thing a removed user leaves (times `--scale`).
struct FanOut {
    communities: usize,
    group_chats: usize,
    private_chats: usize,
    requests: usize,
    notifications: usize,
}

impl FanOut {
    fn scaled(n: usize) -> Self {
        FanOut {
            communities: 20 * n,
            group_chats: 20 * n,
            private_chats: 10 * n,
            requests: 20 * n,
            notifications: 100 * n,
        }
    }

    fn items(&self) -> usize {
        self.communities
            + self.group_chats
            + 2 * self.private_chats
            + 2 * self.requests
            + self.notifications
    }
}

/// Stream case (a): `records` users removed (one batch of the Users
/// table), each leaving `fan`; every trace of them gone after the first
/// delivery, nothing changed by the second.
async fn users_removed(stream: &Path, template: &Template, records: usize, fan: &FanOut) -> f64 {
    let chat = Chat::new().await;
    let seeding = Instant::now();
    let users: Vec<String> = (0..records).map(|i| uid(1, i)).collect();
    let (n_communities, n_chats) = (2 * fan.communities, 2 * fan.group_chats.max(50));
    let community = |j: usize| uid(2, j);
    let group_chat = |j: usize| uid(3, j);
    let (mut communities, mut groups, mut privates) = (vec![], vec![], vec![]);
    let (mut requests, mut notifications) = (vec![], vec![]);
    for j in 0..n_communities {
        let mut c = CommunityItem::Community {
            community: community(j),
        }
        .key();
        c.insert("Name".into(), s(&format!("Community {j}")));
        communities.push(c);
    }
    for j in 0..n_chats {
        let mut g = ChatItem::Chat {
            kind: ChatKind::Group,
            chat: group_chat(j),
        }
        .key();
        g.insert(keys::CAPACITY.into(), AttributeValue::N("1000".into()));
        groups.push(g);
    }
    for (i, user) in users.iter().enumerate() {
        for k in 0..fan.communities {
            communities.push(
                CommunityItem::Member {
                    community: community((i + k) % n_communities),
                    user: user.clone(),
                }
                .key(),
            );
        }
        for k in 0..fan.group_chats {
            groups.push(member(
                ChatKind::Group,
                &group_chat((i + k) % n_chats),
                user,
            ));
        }
        for k in 0..fan.private_chats {
            // A private chat of two: the friend stays.
            let p = uid(4, i * fan.private_chats + k);
            privates.push(member(ChatKind::Private, &p, user));
            privates.push(member(ChatKind::Private, &p, &uid(5, i)));
        }
        for k in 0..fan.requests {
            let created = now() - Duration::days(1) - Duration::minutes(k as i64);
            let g = group_chat((i + k) % n_chats);
            let request = uid(6, i * fan.requests + k);
            for key in RequestKey::copies(user, &g, created, &request) {
                requests.push(copy(&key, user, &g, Status::Pending, 0));
            }
        }
        for k in 0..fan.notifications {
            let time = now() - Duration::minutes(k as i64);
            let key = NotificationKey {
                user: user.clone(),
                read: k % 3 == 0,
                time,
                id: uid(7, i * fan.notifications + k),
            };
            let n = Notification {
                id: key.id.clone(),
                notification_type: keys::NOTIFICATION_REQUEST_ACCEPTED.into(),
                target: group_chat(k % n_chats),
                created_at: keys::format_time(time),
                read: key.read,
                seen: key.read,
            };
            notifications.push(encode(&n, key.key()));
        }
    }
    let seeded =
        communities.len() + groups.len() + privates.len() + requests.len() + notifications.len();
    let kept_privates = privates.len() / 2;
    let copies = requests.len();
    chat.seed(Table::Communities, communities).await;
    chat.seed(Table::GroupChats, groups).await;
    chat.seed(Table::PrivateChats, privates).await;
    chat.seed(Table::ChatRequests, requests).await;
    chat.seed(Table::Notifications, notifications).await;
    let seeding = seeding.elapsed();

    // The users are gone from the table; their REMOVE records carry their
    // old images, a client's profile padded up to the payload limit.
    let event = |pad: usize| {
        let changes: Vec<StreamChange> = users
            .iter()
            .enumerate()
            .map(|(n, u)| {
                let mut old = keys::user(u);
                old.insert("Id".into(), s(u));
                old.insert("Username".into(), s(&format!("name-of-{u}")));
                old.insert("Email".into(), s(&format!("{u}@example.com")));
                old.insert("Bio".into(), s(&"b".repeat(pad)));
                chat.record(Table::Users, n, keys::user(u), Some(old), None)
            })
            .collect();
        payload(&changes)
    };
    let bytes = event(padding(records, 1, event));

    let env = chat.env(template, "StreamFunction");
    let peak = measure(stream, &env, &bytes, 2).await;

    let left = |items: &[Item]| {
        items
            .iter()
            .filter(|i| {
                let pk = i[keys::PK].as_s().map_or("", String::as_str);
                let sk = i.get(keys::SK).and_then(|v| v.as_s().ok());
                users.iter().any(|u| {
                    let mine = keys::user_pk(u);
                    pk == mine || sk.is_some_and(|sk| *sk == mine)
                })
            })
            .count()
    };
    for t in [
        Table::Communities,
        Table::GroupChats,
        Table::PrivateChats,
        Table::Notifications,
    ] {
        let items = chat.all(t).await;
        assert_eq!(
            left(&items),
            0,
            "{t:?} still holds the removed users' items"
        );
        let kept = match t {
            Table::Communities => n_communities,
            Table::GroupChats => n_chats,
            Table::PrivateChats => kept_privates,
            _ => 0,
        };
        assert_eq!(items.len(), kept, "{t:?}: the others' items are kept");
    }
    let all = chat.all(Table::ChatRequests).await;
    assert_eq!(all.len(), copies);
    assert!(
        all.iter()
            .all(|c| status_of(c) == Status::Cancelled.as_str()
                && c.get(keys::STATUS_REASON) == Some(&s(keys::REASON_USER_DELETED))),
        "every request of the removed users cancelled (both copies)"
    );
    println!(
        "memory StreamFunction (a) Users, {records} users removed, each leaving {} items \
         ({} community, {} group-chat, {} private-chat memberships, {} pending requests, {} \
         notifications; {seeded} items seeded in {:.0} s): {records} records, {:.2} MiB payload; \
         all cascaded, the redelivery idempotent; {}",
        fan.items(),
        fan.communities,
        fan.group_chats,
        fan.private_chats,
        fan.requests,
        fan.notifications,
        seeding.as_secs_f64(),
        bytes.len() as f64 / MIB,
        peak.describe()
    );
    peak.mib()
}

fn member(kind: ChatKind, chat: &str, user: &str) -> Item {
    ChatItem::Member {
        kind,
        chat: chat.into(),
        user: user.into(),
    }
    .key()
}

/// Stream case (b): `records` group chats' copies turned `accepted` (one
/// batch of the ChatRequests table), copies padded like their images; each
/// user a member after the first delivery, once.
async fn requests_accepted(stream: &Path, template: &Template, records: usize) -> f64 {
    let chat = Chat::new().await;
    let created = now() - Duration::days(1);
    let request = |i: usize| {
        let (user, g) = (uid(1, i), uid(3, i));
        let keys = RequestKey::copies(&user, &g, created, &uid(6, i));
        (user, g, keys)
    };
    let changes = |pad: usize| -> Vec<StreamChange> {
        (0..records)
            .map(|i| {
                let (user, g, [_, theirs]) = request(i);
                let old = copy(&theirs, &user, &g, Status::Pending, pad);
                let mut new = old.clone();
                new.insert(keys::STATUS.into(), s(Status::Accepted.as_str()));
                chat.record(Table::ChatRequests, i, theirs.key(), Some(old), Some(new))
            })
            .collect()
    };
    let pad = padding(records, 2, |pad| payload(&changes(pad)));
    let (mut users, mut groups, mut copies) = (vec![], vec![], vec![]);
    for i in 0..records {
        let (user, g, [mine, theirs]) = request(i);
        let mut u = keys::user(&user);
        u.insert("Id".into(), s(&user));
        users.push(u);
        let mut chat_item = ChatItem::Chat {
            kind: ChatKind::Group,
            chat: g.clone(),
        }
        .key();
        chat_item.insert(keys::CAPACITY.into(), AttributeValue::N("10".into()));
        chat_item.insert(keys::NUM_MEMBERS.into(), AttributeValue::N("0".into()));
        groups.push(chat_item);
        copies.push(copy(&mine, &user, &g, Status::Pending, pad));
        let mut accepted = copy(&theirs, &user, &g, Status::Pending, pad);
        accepted.insert(keys::STATUS.into(), s(Status::Accepted.as_str()));
        copies.push(accepted);
    }
    chat.seed(Table::Users, users).await;
    chat.seed(Table::GroupChats, groups).await;
    chat.seed(Table::ChatRequests, copies).await;
    let bytes = payload(&changes(pad));

    let env = chat.env(template, "StreamFunction");
    let peak = measure(stream, &env, &bytes, 2).await;

    let all = chat.all(Table::ChatRequests).await;
    let marks = all
        .iter()
        .filter(|i| i[keys::PK].as_s().is_ok_and(|pk| pk.starts_with("JOINED#")))
        .count();
    let accepted = all
        .iter()
        .filter(|i| status_of(i) == Status::Accepted.as_str() && !i.contains_key(keys::PENDING_ID))
        .count();
    assert_eq!(
        (marks, accepted),
        (records, 2 * records),
        "joined once, copies in step"
    );
    let groups = chat.all(Table::GroupChats).await;
    let members = groups
        .iter()
        .filter(|i| i[keys::SK].as_s().is_ok_and(|sk| keys::user_of(sk).is_ok()))
        .count();
    let counted = groups
        .iter()
        .filter(|i| i.get(keys::NUM_MEMBERS) == Some(&AttributeValue::N("1".into())))
        .count();
    assert_eq!(
        (members, counted),
        (records, records),
        "one member each, counted once"
    );
    assert_eq!(
        chat.all(Table::Notifications).await.len(),
        records,
        "one notification each"
    );
    println!(
        "memory StreamFunction (b) ChatRequests, {records} acceptances (copies and images of \
         {:.1} KB): {records} records, {:.2} MiB payload; each joined once; {}",
        pad as f64 / 1e3,
        bytes.len() as f64 / MIB,
        peak.describe()
    );
    peak.mib()
}

/// The schedule case of `function`: a fresh process, one tick; its report.
async fn tick(
    schedule: &Path,
    template: &Template,
    chat: &Chat,
    function: &str,
) -> (process::Peak, Value) {
    let env = chat.env(template, function);
    let peak = measure(schedule, &env, &template.tick(function), 1).await;
    let report = peak.deliveries[0].response.clone();
    assert_eq!(report["complete"], true, "{report}");
    (peak, report)
}

/// `expire-requests` over `requests` due pending requests (both copies in
/// the sparse index): every copy expired, the index empty.
async fn expire_tick(schedule: &Path, template: &Template, requests: usize) -> f64 {
    let chat = Chat::new().await;
    let mut copies = Vec::with_capacity(2 * requests);
    for i in 0..requests {
        let created = now() - Duration::days(60) - Duration::minutes(i as i64);
        let (user, g) = (uid(1, i % 1_000), uid(3, i % 300));
        for key in RequestKey::copies(&user, &g, created, &uid(6, i)) {
            copies.push(copy(&key, &user, &g, Status::Pending, 0));
        }
    }
    chat.seed(Table::ChatRequests, copies).await;
    let (peak, report) = tick(schedule, template, &chat, "ExpireRequestsFunction").await;
    assert_eq!(report["details"]["expired"], 2 * requests, "{report}");
    let index = chat.tables[&Table::ChatRequests]
        .store
        .scan_all(&ScanSpec {
            index: Some(keys::PENDING_REQUESTS_INDEX.into()),
            ..Default::default()
        })
        .await
        .expect("scan the index");
    assert!(index.is_empty(), "the sparse index is empty");
    let all = chat.all(Table::ChatRequests).await;
    assert!(all.iter().all(|c| status_of(c) == Status::Expired.as_str()));
    println!(
        "memory ExpireRequestsFunction: {} due pending copies ({} index pages of {}): {}; {}",
        2 * requests,
        (2 * requests).div_ceil(chat_worker::requests::expire::PAGE as usize),
        chat_worker::requests::expire::PAGE,
        report["summary"],
        peak.describe()
    );
    peak.mib()
}

/// `audit-requests` over `requests` requests of ~10 KB copies, the last
/// `orphans` of them without the chat's copy: each orphan's twin recreated.
async fn audit_tick(schedule: &Path, template: &Template, requests: usize, orphans: usize) -> f64 {
    let chat = Chat::new().await;
    // 100 of them fill a 1 MB scan page.
    let pad = 9_800;
    let mut copies = Vec::with_capacity(2 * requests);
    for i in 0..requests {
        let created = now() - Duration::days(2) - Duration::minutes(i as i64);
        let (user, g) = (uid(1, i % 1_000), uid(3, i % 300));
        let status = if i % 2 == 0 || i >= requests - orphans {
            Status::Pending
        } else {
            Status::Accepted
        };
        let [mine, theirs] = RequestKey::copies(&user, &g, created, &uid(6, i));
        copies.push(copy(&mine, &user, &g, status, pad));
        if i < requests - orphans {
            copies.push(copy(&theirs, &user, &g, status, pad));
        }
    }
    let seeded = copies.len();
    chat.seed(Table::ChatRequests, copies).await;
    let (peak, report) = tick(schedule, template, &chat, "AuditRequestsFunction").await;
    let details = &report["details"];
    assert_eq!(details["recreated"], orphans, "{report}");
    assert_eq!(details["missing"], 0, "{report}");
    assert!(
        details["copies"].as_u64().unwrap_or(0) >= seeded as u64,
        "{report}"
    );
    assert_eq!(chat.all(Table::ChatRequests).await.len(), 2 * requests);
    println!(
        "memory AuditRequestsFunction: {seeded} copies of {:.1} KB ({} scan pages of {}), \
         {orphans} without their twin: {}; {}",
        pad as f64 / 1e3,
        details["pages"],
        chat_worker::requests::audit::PAGE,
        report["summary"],
        peak.describe()
    );
    peak.mib()
}

fn summary(template: &Template, function: &str, peak: f64) {
    println!(
        "memory chat: {function} peak {peak:.1} MiB -> MemorySize {} MB ({:.0}% margin; \
         infra/chat.yaml sets {} MB)",
        process::memory_size(peak, MARGIN),
        MARGIN * 100.0,
        template.memory_size(function)
    );
}

fn build() -> PathBuf {
    process::build("chat-worker", &["chat-stream", "chat-schedule"], &[])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scale = args
        .iter()
        .position(|a| a == "--scale")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(1usize);
    let dir = build();
    let (stream, schedule) = (dir.join("chat-stream"), dir.join("chat-schedule"));
    let template = Template::load();
    let records = template.batch_size();

    let a = users_removed(&stream, &template, records, &FanOut::scaled(scale)).await;
    let b = requests_accepted(&stream, &template, records).await;
    let expire = expire_tick(&schedule, &template, 2_500).await;
    let audit = audit_tick(&schedule, &template, 1_000, 100).await;

    summary(&template, "StreamFunction", a.max(b));
    summary(&template, "ExpireRequestsFunction", expire);
    summary(&template, "AuditRequestsFunction", audit);
}
