//! The apps' cases of the `decide` CPU benchmark (`benches/codec.rs`): for
//! each app on the engine (archive, chat, shop), a realistic 1,000-record
//! event of its table and the app's CPU path over it: the event bytes
//! read as the app's stream function reads them (`decode_views` of its
//! `images::Image`: each image read into what the handlers read of it,
//! as the event is read), then each record through what the app's stream
//! handlers do before their first read or write (the key parsed, the
//! pure decision); and the same path through items. No I/O.

use std::collections::HashMap;

use archive_worker::items::{ArchivedFile, UnzipItem};
use archive_worker::keys::{FileTime, ItemKey as ArchiveKey};
use archive_worker::lookup::rules as lookup_rules;
use chat_worker::items::{RequestCopy, Status};
use chat_worker::keys::{Owner, RequestKey, RequestsItem};
use chat_worker::requests::rules as request_rules;
use chrono::{DateTime, TimeDelta, Utc};
use shop_worker::derive::rules::Derivation;
use shop_worker::items::{Order, Product, Stamps, User};
use shop_worker::keys::{Id, ItemKey as ShopKey};
use worker_engine::item::Item;
use worker_engine::stream::{
    ChangeKind, DecodeEvent, StreamChange, decode_event_bytes, decode_views, encode_event,
};

use crate::typed_floor::{self, Picks};

fn now() -> DateTime<Utc> {
    "2024-06-01T12:00:00Z".parse().expect("a time")
}

/// The stream ARN the records of `table` carry.
fn stream_arn(table: &str) -> String {
    format!("arn:aws:dynamodb:us-east-1:123456789012:table/{table}/stream/2024-06-01T00:00:00.000")
}

fn change(
    arn_table: &str,
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
        approximate_creation: Some(now() - TimeDelta::seconds((n % 60) as i64)),
        keys,
        old_image: old,
        new_image: new,
        event_source_arn: Some(stream_arn(arn_table).into()),
        size_bytes: Some(size as i64),
        typed: None,
    }
}

/// What the typed floor of `P` reads of `changes`.
fn floor_reads<P: Picks>(changes: &[StreamChange]) -> typed_floor::Read {
    let picked = changes
        .iter()
        .flat_map(|c| [&c.old_image, &c.new_image])
        .flatten()
        .map(|image| {
            image
                .keys()
                .filter(|k| P::NAMES.contains(&k.as_str()))
                .count()
        })
        .sum();
    typed_floor::Read {
        records: changes.len(),
        picked,
    }
}

fn keys_of(item: &Item) -> Item {
    ["PK", "SK"]
        .into_iter()
        .map(|k| (k.to_owned(), item[k].clone()))
        .collect()
}

fn bytes(changes: &[StreamChange]) -> Vec<u8> {
    serde_json::to_vec(&encode_event(changes, None)).expect("JSON")
}

/// One app's event and its CPU path.
pub(crate) struct AppCase {
    /// The bench function's name (`app_<name>`).
    pub name: &'static str,
    pub bytes: Vec<u8>,
    decide: fn(&[u8]) -> Counts,
    /// The same path, each image built into an item first and read from
    /// it (the path of an event the reader does not take, and the apps'
    /// path before their readers).
    items: fn(&[u8]) -> Counts,
    expected: Counts,
    /// The typed floor of the app's event ([`typed_floor::read`]).
    floor: fn(&[u8]) -> typed_floor::Read,
    /// What the floor must come to: every record, and each image's
    /// attributes of the names it picks.
    floor_reads: typed_floor::Read,
}

/// What the decisions over one event came to, by outcome.
pub(crate) type Counts = HashMap<&'static str, usize>;

impl AppCase {
    /// Run the app's path over its event.
    pub(crate) fn decide(&self) -> Counts {
        (self.decide)(&self.bytes)
    }

    /// [`Self::decide`] through items.
    pub(crate) fn decide_from_items(&self) -> Counts {
        (self.items)(&self.bytes)
    }

    /// The records of the app's event.
    pub(crate) fn records(&self) -> usize {
        self.floor_reads.records
    }

    /// The typed floor on the app's event.
    pub(crate) fn floor_typed(&self) -> typed_floor::Read {
        (self.floor)(&self.bytes)
    }

    /// The decisions are real: each outcome as often as the event holds
    /// it, either way.
    pub(crate) fn check(&self) {
        assert_eq!(self.decide(), self.expected, "{}", self.name);
        assert_eq!(
            self.decide_from_items(),
            self.expected,
            "{} through items",
            self.name
        );
        assert_eq!(
            self.floor_typed(),
            self.floor_reads,
            "{} typed floor",
            self.name
        );
    }
}

/// The bench functions' names, in [`cases`]' order (each also with
/// `_items`, its path through items).
pub(crate) fn cases_names() -> [&'static str; 3] {
    ["app_archive", "app_chat", "app_shop"]
}

/// Every app's case, 1,000 records each.
pub(crate) fn cases() -> Vec<AppCase> {
    vec![archive(), chat(), shop()]
}

// --- archive: files of a day's uploads, the unzip items of some of them ---

fn file_time(n: usize) -> FileTime {
    FileTime::from_epoch(now().timestamp() - 86_400 + 37 * n as i64).expect("a time")
}

fn file(n: usize, unzipped: bool) -> Item {
    ArchivedFile {
        time: file_time(n),
        key_name: Some(format!(
            "photos/2024/06/01/camera-{:02}/IMG_{n:06}-a-name-as-long-as-a-camera-writes-it.zip",
            n % 7
        )),
        is_unzipped: Some(unzipped),
        vault: Some(format!("vault-{}", n % 3)),
    }
    .to_item()
}

fn unzip_item(stage: archive_worker::items::Stage, n: usize) -> Item {
    UnzipItem {
        stage,
        created: now().timestamp() - 3_600 + n as i64,
        key_name: Some(format!(
            "photos/2024/06/01/camera-{:02}/IMG_{n:06}-a-name-as-long-as-a-camera-writes-it.zip",
            n % 7
        )),
    }
    .to_item()
}

/// Of every 100 records: 70 uploaded files, 10 files removed, 5 flag
/// changes, 10 unzip requests, 5 unzipped files.
fn archive() -> AppCase {
    use archive_worker::items::Stage;
    let mut changes = Vec::with_capacity(1000);
    for n in 0..1000 {
        let (old, new) = match n % 100 {
            0..70 => (None, Some(file(n, false))),
            70..80 => (Some(file(n, false)), None),
            80..85 => (Some(file(n, false)), Some(file(n, true))),
            85..95 => (None, Some(unzip_item(Stage::Unzipping, n))),
            _ => (None, Some(unzip_item(Stage::Unzipped, n))),
        };
        let keys = keys_of(old.as_ref().or(new.as_ref()).expect("an image"));
        changes.push(change("archive", n, keys, old, new));
    }
    AppCase {
        name: "app_archive",
        bytes: bytes(&changes),
        floor: typed_floor::read::<typed_floor::Archive>,
        floor_reads: floor_reads::<typed_floor::Archive>(&changes),
        decide: archive_decide,
        items: archive_decide_from_items,
        expected: Counts::from([
            ("lookup paths", 800),
            ("file flags read", 750),
            ("unzip records", 150),
        ]),
    }
}

/// The lookup handler (`DateLookup`) and the unzip handler
/// (`UnzipLifecycle`) up to their first read, on the event as the stream
/// function reads it (`decode_views` of archive's `images::Image`: each
/// image typed as the event is read; every record must come typed).
fn archive_decide(bytes: &[u8]) -> Counts {
    archive_path(bytes, decode_views::<archive_worker::images::Image>, true)
}

/// [`archive_decide`] through items.
fn archive_decide_from_items(bytes: &[u8]) -> Counts {
    archive_path(bytes, decode_event_bytes, false)
}

fn archive_path(bytes: &[u8], decode: DecodeEvent, typed: bool) -> Counts {
    use archive_worker::images::{Image, Images};
    let mut counts = Counts::new();
    for record in decode(bytes).expect("an event") {
        let change = record.expect("a record");
        assert_eq!(change.typed.is_some(), typed, "typed as read");
        let key = ArchiveKey::from_item(&change.keys).expect("a key");
        let images = Images::of(&change);
        match key {
            ArchiveKey::File(t) => {
                // DateLookup: the lookup items listing the file.
                if change.kind != ChangeKind::Modify {
                    let path = lookup_rules::path(t);
                    assert_eq!(path.len(), 4);
                    *counts.entry("lookup paths").or_default() += 1;
                }
                // UnzipLifecycle: the file's flag against its KeyName.
                if !change.kind.is_removal()
                    && let Some(Image::File(file)) = &images.new
                    && file.key_name.is_some()
                {
                    *counts.entry("file flags read").or_default() += 1;
                }
            }
            ArchiveKey::Unzipped { .. } | ArchiveKey::Unzipping { .. } => {
                let mut names: Vec<&str> = [&images.old, &images.new]
                    .into_iter()
                    .flatten()
                    .filter_map(Image::key_name)
                    .collect();
                names.sort_unstable();
                names.dedup();
                let own = matches!(&images.new, Some(Image::Unzip(_)));
                if !names.is_empty() && own {
                    *counts.entry("unzip records").or_default() += 1;
                }
            }
            _ => {}
        }
    }
    counts
}

// --- chat: the request copies' table as clients and the worker write it ---

fn uid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

fn copy(key: RequestKey, user: &str, chat: &str, status: Status) -> RequestCopy {
    RequestCopy {
        id: key.request.clone(),
        user_id: user.to_owned(),
        chat_id: chat.to_owned(),
        created_at: chat_worker::keys::format_time(key.created),
        status,
        seen: false,
        // Clients set the status only: the worker drops `PendingId` from
        // a copy that left `pending`.
        pending_id: Some(key.request.clone()),
        status_reason: (status == Status::Rejected).then(|| "capacity".to_owned()),
        joined_at: None,
        key: Some(key),
    }
}

/// A request's two copies, the user's and the group chat's.
struct Request {
    user: RequestCopy,
    chat: RequestCopy,
}

fn request(n: usize, user_status: Status, chat_status: Status) -> Request {
    let (user, chat, id) = (uid(1, n), uid(2, n / 20), uid(3, n));
    let created = now() - TimeDelta::minutes(n as i64);
    let [u, c] = RequestKey::copies(&user, &chat, created, &id);
    Request {
        user: copy(u, &user, &chat, user_status),
        chat: copy(c, &user, &chat, chat_status),
    }
}

/// Of every 100 records: 40 new requests (each copy's insert), 30
/// answers on the group chat's copy (accepted or rejected, the user's
/// still pending), 20 followed answers on the user's copy, 10 cancels.
fn chat() -> AppCase {
    use Status::*;
    let mut changes = Vec::with_capacity(1000);
    let mut twins = HashMap::new();
    for n in 0..1000 {
        let (copy_of, old, new, twin) = match n % 100 {
            0..40 => {
                let r = request(n, Pending, Pending);
                (r.user.key().clone(), None, r.user, r.chat)
            }
            40..70 => {
                let status = if n % 2 == 0 { Accepted } else { Rejected };
                let before = request(n, Pending, Pending);
                let after = request(n, Pending, status);
                (
                    after.chat.key().clone(),
                    Some(before.chat),
                    after.chat,
                    after.user,
                )
            }
            70..90 => {
                let before = request(n, Pending, Accepted);
                let after = request(n, Accepted, Accepted);
                (
                    after.user.key().clone(),
                    Some(before.user),
                    after.user,
                    after.chat,
                )
            }
            _ => {
                let before = request(n, Pending, Pending);
                let after = request(n, Cancelled, Pending);
                (
                    after.user.key().clone(),
                    Some(before.user),
                    after.user,
                    after.chat,
                )
            }
        };
        twins.insert(copy_of.clone(), twin);
        changes.push(change(
            "chat-requests",
            n,
            copy_of.key(),
            old.map(|c| c.to_item()),
            Some(new.to_item()),
        ));
    }
    CHAT_TWINS
        .set(twins)
        .unwrap_or_else(|_| panic!("one chat case"));
    AppCase {
        name: "app_chat",
        bytes: bytes(&changes),
        floor: typed_floor::read::<typed_floor::Chat>,
        floor_reads: floor_reads::<typed_floor::Chat>(&changes),
        decide: chat_decide,
        items: chat_decide_from_items,
        expected: Counts::from([
            ("in step", 400),
            ("follow", 400),
            ("joins", 350),
            ("drop pending id", 800),
        ]),
    }
}

/// The twin of each record's copy, as the handler's read would find it.
static CHAT_TWINS: std::sync::OnceLock<HashMap<RequestKey, RequestCopy>> =
    std::sync::OnceLock::new();

/// The request handler (`RequestSync`): the record's copy read, its twin
/// as the handler would read it, the plan; on the event as the stream
/// function reads it (`decode_views` of chat's `images::Image`: each
/// image typed as the event is read; every record must come typed).
fn chat_decide(bytes: &[u8]) -> Counts {
    chat_path(bytes, decode_views::<chat_worker::images::Image>, true)
}

/// [`chat_decide`] through items.
fn chat_decide_from_items(bytes: &[u8]) -> Counts {
    chat_path(bytes, decode_event_bytes, false)
}

fn chat_path(bytes: &[u8], decode: DecodeEvent, typed: bool) -> Counts {
    let twins = CHAT_TWINS.get().expect("the chat case");
    let mut counts = Counts::new();
    for record in decode(bytes).expect("an event") {
        let change = record.expect("a record");
        assert_eq!(change.typed.is_some(), typed, "typed as read");
        let Ok(RequestsItem::Copy(key)) = RequestsItem::parse(&change.keys) else {
            panic!("a copy's key");
        };
        let images = chat_worker::images::Images::of(&change);
        let image = images.new.as_ref().expect("a new image");
        let Some(Ok(seen)) = &image.copy else {
            panic!("a copy");
        };
        let twin = &twins[&key];
        assert_eq!(seen.twin_key(), *twin.key());
        let (user, chat) = match key.owner {
            Owner::User(_) => (seen, twin),
            Owner::GroupChat(_) => (twin, seen),
        };
        let plan = request_rules::plan(Some(user), Some(chat));
        let mut count = |what, n: usize| *counts.entry(what).or_default() += n;
        count(
            "in step",
            usize::from(plan == request_rules::Plan::default()),
        );
        count("follow", usize::from(plan.follow.is_some()));
        count("add pending id", usize::from(plan.add_pending_id.is_some()));
        count("joins", usize::from(plan.join));
        count("drop pending id", plan.drop_pending_id.len());
    }
    counts.retain(|_, n| *n > 0);
    counts
}

// --- shop: products, orders, users and references as the service writes them ---

fn shop_id(kind: u8, n: usize) -> Id {
    let mut payload = [kind; 16];
    payload[..8].copy_from_slice(&(n as u64).to_be_bytes());
    Id::at(now().timestamp() - 90 * 86_400 + n as i64, payload)
}

fn stamps(n: usize) -> Stamps {
    let t = now().timestamp() - 30 * 86_400 + n as i64;
    Stamps {
        created_at: t,
        updated_at: t + 60,
    }
}

fn product(n: usize, price: f64) -> Item {
    Product {
        id: shop_id(3, n),
        name: Some(format!(
            "Product {n:06}, a name as long as a shop's listing shows it, with its size and colour"
        )),
        price: Some(price),
        stock: Some(12),
        brand_id: Some(shop_id(1, n % 40)),
        category_id: Some(shop_id(2, n % 25)),
        stamps: stamps(n),
    }
    .to_item()
}

fn order(n: usize, status: &str) -> Item {
    Order {
        user: shop_id(4, n % 200),
        id: shop_id(5, n),
        status: Some(status.into()),
        total_price: Some(42.5 + n as f64),
        stamps: stamps(n),
    }
    .to_item()
}

fn user(n: usize) -> Item {
    User {
        id: shop_id(4, n),
        name: Some(format!("User {n}")),
        email: Some(format!("user{n}@example.com")),
        stamps: stamps(n),
    }
    .to_item()
}

/// The item with its derived index attributes (as the worker leaves it).
fn derived(item: Item) -> Item {
    Derivation::of(&item)
        .expect("a well-formed entity")
        .expect("an entity")
        .apply(&item)
}

/// Of every 100 records: 30 new products, 20 price changes (derived
/// attributes in place), 25 new orders, 15 status changes, 5 new users,
/// 5 brand and category removals.
fn shop() -> AppCase {
    let mut changes = Vec::with_capacity(1000);
    for n in 0..1000 {
        let (old, new) = match n % 100 {
            0..30 => (None, Some(product(n, 19.99))),
            30..50 => (
                Some(derived(product(n, 19.99))),
                Some(derived(product(n, 17.99))),
            ),
            50..75 => (None, Some(order(n, "pending"))),
            75..90 => (
                Some(derived(order(n, "pending"))),
                Some(order(n, "shipped")),
            ),
            90..95 => (None, Some(user(n))),
            _ => {
                let id = shop_id(if n % 2 == 0 { 1 } else { 2 }, n);
                let key = if n % 2 == 0 {
                    ShopKey::Brand(id)
                } else {
                    ShopKey::Category(id)
                };
                let mut item = key.key();
                item.insert(
                    "name".into(),
                    aws_sdk_dynamodb::types::AttributeValue::S(format!("Reference {n}")),
                );
                (Some(derived(item)), None)
            }
        };
        let keys = keys_of(old.as_ref().or(new.as_ref()).expect("an image"));
        changes.push(change("shop", n, keys, old, new));
    }
    AppCase {
        name: "app_shop",
        bytes: bytes(&changes),
        floor: typed_floor::read::<typed_floor::Shop>,
        floor_reads: floor_reads::<typed_floor::Shop>(&changes),
        decide: shop_decide,
        items: shop_decide_from_items,
        expected: Counts::from([
            ("derived up to date", 200),
            ("derived to write", 750),
            ("references removed", 50),
        ]),
    }
}

/// The derive handler (`DeriveKeys`) and the references handler
/// (`DeletedReferences`) up to their first read or write, on the event as
/// the stream function reads it (`decode_views` of shop's
/// `images::Image`: of each image, its key and what a derivation reads,
/// as the event is read; every record must come typed).
fn shop_decide(bytes: &[u8]) -> Counts {
    shop_path(bytes, decode_views::<shop_worker::images::Image>, true)
}

/// [`shop_decide`] through items.
fn shop_decide_from_items(bytes: &[u8]) -> Counts {
    shop_path(bytes, decode_event_bytes, false)
}

fn shop_path(bytes: &[u8], decode: DecodeEvent, typed: bool) -> Counts {
    let mut counts = Counts::new();
    for record in decode(bytes).expect("an event") {
        let change = record.expect("a record");
        assert_eq!(change.typed.is_some(), typed, "typed as read");
        let key = ShopKey::from_item(&change.keys).expect("a key");
        if change.kind.is_removal() {
            if matches!(key, ShopKey::Brand(_) | ShopKey::Category(_)) {
                *counts.entry("references removed").or_default() += 1;
            }
            continue;
        }
        let images = shop_worker::images::Images::of(&change);
        let image = images.new.as_ref().expect("a new image");
        let d = Derivation::of(image)
            .expect("derivable")
            .expect("an entity");
        if d.satisfied_by(image) {
            *counts.entry("derived up to date").or_default() += 1;
        } else {
            let _update = d.update();
            *counts.entry("derived to write").or_default() += 1;
        }
    }
    counts
}
