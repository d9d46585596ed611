//! The realistic stream event of the `decide` CPU benchmark
//! (`benches/codec.rs`) and the stream handler's CPU path over it: decode
//! the Lambda event bytes, route each change like `worker::Router` (typed key
//! and images, loop guard, the handlers that want the item kind) and run each
//! job's pure decision. No I/O: the handlers' reads and writes are left out,
//! the decisions that drive them are made.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use nishiki_worker::config::Config;
use nishiki_worker::datetime;
use nishiki_worker::items::{
    Container, ContainerLink, Entity, Food, Group, InvitationLink, Item, Membership, User,
};
use nishiki_worker::jobs::expiry::{self, ExpiryRules, StreamPlan};
use nishiki_worker::jobs::invitations::ttl_to_stamp;
use nishiki_worker::jobs::relationships::{self, StreamCascade};
use nishiki_worker::jobs::{self, JobDeps};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, UserId};
use nishiki_worker::worker::{BatchFacts, Change, ChangeHandler};
use uuid::Uuid;
use worker_engine::RecordingPublisher;
use worker_engine::store::{self, DynamoStore};
use worker_engine::stream::{ChangeKind, StreamChange, decode_event_bytes, encode_event};

const FOODS: usize = 20;

fn now() -> DateTime<Utc> {
    datetime::parse("2024-04-10T09:00:00.000Z").expect("valid")
}

fn id(kind: u128, n: usize) -> Uuid {
    Uuid::from_u128((kind << 96) | n as u128)
}

/// What the decisions over one event came to (checked against the event's
/// composition, so the timed work is the real decision).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Summary {
    pub records: usize,
    pub worker_owned: usize,
    pub cascades: HashMap<&'static str, usize>,
    pub left_to_audit: usize,
    pub containers_replanned: usize,
    pub containers_unchanged: usize,
    pub food_plans: usize,
    pub expiry_writes: usize,
    pub place_flags: usize,
    pub remove_flags: usize,
    pub ttl_stamps: usize,
}

/// The composition of every 100 records (in this order within the block).
const MIX: [(&str, usize); 14] = [
    ("container modify, expiry edits", 28),
    ("container modify, rename and quantities", 14),
    ("container insert", 5),
    ("container remove", 4),
    ("membership insert", 12),
    ("membership remove", 8),
    ("group modify", 8),
    ("group remove", 3),
    ("group insert", 3),
    ("user remove", 4),
    ("user modify", 2),
    ("link insert", 3),
    ("link remove", 2),
    ("invitation insert/modify/remove", 4),
];

pub(crate) struct Fixture {
    changes: Vec<StreamChange>,
    counts: HashMap<&'static str, usize>,
    /// The group each container is linked to (what the handler would read).
    groups: HashMap<ContainerId, Vec<GroupId>>,
    handlers: Vec<Arc<dyn ChangeHandler<Change>>>,
    rules: ExpiryRules,
    now: DateTime<Utc>,
}

fn foods(n: usize) -> Vec<Food> {
    (0..FOODS)
        .map(|f| {
            let k = n * FOODS + f;
            Food {
                food_id: FoodId(id(5, k)),
                name: format!("Food {f}"),
                unit: (f % 2 == 0).then(|| "g".to_owned()),
                quantity: (f % 3 != 0).then_some(f as f64 * 1.5),
                category: Some(
                    if f % 4 == 0 {
                        "unselected"
                    } else {
                        "vegetables"
                    }
                    .into(),
                ),
                // Most foods carry an expiry, from 5 days ago to 2 months ahead.
                expiry: (f % 5 != 0)
                    .then(|| now() + TimeDelta::hours((k as i64 * 37) % (65 * 24) - 5 * 24)),
                created_at: now() - TimeDelta::days(30) + TimeDelta::minutes(k as i64),
            }
        })
        .collect()
}

fn container(n: usize) -> Container {
    Container {
        id: ContainerId(id(3, n)),
        container_name: format!("Fridge {n}"),
        foods: foods(n),
        extra: Item::new(),
    }
}

fn change(n: usize, kind: ChangeKind, old: Option<Entity>, new: Option<Entity>) -> StreamChange {
    let key = old.as_ref().or(new.as_ref()).expect("an image").key();
    let old = old.map(|e| e.to_item());
    let new = new.map(|e| e.to_item());
    StreamChange {
        event_id: format!("{:032x}", id(7, n).as_u128()),
        kind,
        sequence_number: Some(format!("{:021}", 4_000_000 + n).parse().expect("number")),
        approximate_creation: Some(now() - TimeDelta::seconds(60 - (n % 60) as i64)),
        keys: key.to_attributes(),
        size_bytes: Some(
            (old.as_ref().map_or(0, |i| i.len()) + new.as_ref().map_or(0, |i| i.len())) as i64
                * 40,
        ),
        old_image: old,
        new_image: new,
        event_source_arn: Some(
            "arn:aws:dynamodb:us-east-1:123456789012:table/nishiki-table-prod-db/stream/2024-01-01T00:00:00.000".into(),
        ),
        typed: None,
    }
}

impl Fixture {
    /// `records` stream records (a multiple of 100) in the [`MIX`].
    pub(crate) fn new(records: usize) -> Fixture {
        assert!(records.is_multiple_of(100), "records: a multiple of 100");
        let mut changes = Vec::with_capacity(records);
        let mut counts = HashMap::new();
        let mut groups = HashMap::new();
        let group_of = |n: usize| GroupId(id(1, n / 10));
        for block in 0..records / 100 {
            for (what, count) in MIX {
                *counts.entry(what).or_default() += count;
                for j in 0..count {
                    let n = changes.len();
                    let g = group_of(n);
                    let _ = (block, j);
                    let c = match what {
                        "container modify, expiry edits" => {
                            let old = container(n);
                            let mut new = old.clone();
                            // Two foods get a new expiry (a week later), one is
                            // renamed, one quantity changes.
                            for f in [1, 7] {
                                new.foods[f].expiry = Some(
                                    new.foods[f].expiry.expect("has expiry") + TimeDelta::days(7),
                                );
                            }
                            new.foods[3].name = "Renamed".into();
                            new.foods[4].quantity = Some(99.0);
                            groups.insert(old.id, vec![g]);
                            change(
                                n,
                                ChangeKind::Modify,
                                Some(Entity::Container(old)),
                                Some(Entity::Container(new)),
                            )
                        }
                        "container modify, rename and quantities" => {
                            let old = container(n);
                            let mut new = old.clone();
                            new.container_name = "Pantry".into();
                            for f in &mut new.foods {
                                f.quantity = Some(f.quantity.unwrap_or(0.0) + 1.0);
                            }
                            groups.insert(old.id, vec![g]);
                            change(
                                n,
                                ChangeKind::Modify,
                                Some(Entity::Container(old)),
                                Some(Entity::Container(new)),
                            )
                        }
                        "container insert" => {
                            let c = container(n);
                            groups.insert(c.id, vec![g]);
                            change(n, ChangeKind::Insert, None, Some(Entity::Container(c)))
                        }
                        "container remove" => {
                            let c = container(n);
                            groups.insert(c.id, vec![g]);
                            change(n, ChangeKind::Remove, Some(Entity::Container(c)), None)
                        }
                        "membership insert" | "membership remove" => {
                            let m = Entity::Membership(Membership {
                                user: UserId(id(2, n)),
                                group: g,
                                extra: Item::new(),
                            });
                            if what == "membership insert" {
                                change(n, ChangeKind::Insert, None, Some(m))
                            } else {
                                change(n, ChangeKind::Remove, Some(m), None)
                            }
                        }
                        "group modify" | "group remove" | "group insert" => {
                            let e = |name: &str| {
                                Entity::Group(Group {
                                    id: g,
                                    group_name: name.into(),
                                    extra: Item::new(),
                                })
                            };
                            match what {
                                "group modify" => {
                                    change(n, ChangeKind::Modify, Some(e("Home")), Some(e("Flat")))
                                }
                                "group remove" => {
                                    change(n, ChangeKind::Remove, Some(e("Home")), None)
                                }
                                _ => change(n, ChangeKind::Insert, None, Some(e("Home"))),
                            }
                        }
                        "user remove" | "user modify" => {
                            let u = |name: &str| {
                                Entity::User(User {
                                    id: UserId(id(2, n)),
                                    user_name: name.into(),
                                    email_address: format!("u{n}@example.invalid"),
                                    extra: Item::new(),
                                })
                            };
                            if what == "user remove" {
                                change(n, ChangeKind::Remove, Some(u("someone")), None)
                            } else {
                                change(
                                    n,
                                    ChangeKind::Modify,
                                    Some(u("someone")),
                                    Some(u("renamed")),
                                )
                            }
                        }
                        "link insert" | "link remove" => {
                            let l = Entity::ContainerLink(ContainerLink {
                                group: g,
                                container: ContainerId(id(3, n)),
                                extra: Item::new(),
                            });
                            if what == "link insert" {
                                change(n, ChangeKind::Insert, None, Some(l))
                            } else {
                                change(n, ChangeKind::Remove, Some(l), None)
                            }
                        }
                        _ => {
                            let link = |h: u128, days: i64| {
                                Entity::InvitationLink(InvitationLink {
                                    group: g,
                                    invitation_link_hash: format!(
                                        "{:032x}",
                                        id(9, n).as_u128() + h
                                    ),
                                    link_expiry_datetime: now() + TimeDelta::days(days),
                                    extra: Item::new(),
                                })
                            };
                            match j % 4 {
                                0 | 1 => change(n, ChangeKind::Insert, None, Some(link(0, 7))),
                                2 => change(
                                    n,
                                    ChangeKind::Modify,
                                    Some(link(0, 1)),
                                    Some(link(0, 8)),
                                ),
                                _ => change(n, ChangeKind::Remove, Some(link(0, -1)), None),
                            }
                        }
                    };
                    changes.push(c);
                }
            }
        }
        let mut config = Config::for_table("nishiki-table-bench-db");
        config.invitations.ttl = true;
        let rules = ExpiryRules::from_config(&config);
        // Handlers exist only for their routing (`wants`, `name`); nothing
        // here sends a request.
        let deps = JobDeps::new(
            Arc::new(DynamoStore::new(
                store::local_client("http://127.0.0.1:9"),
                &config.common.table_name,
            )),
            config,
            Arc::new(RecordingPublisher::default()),
        );
        Fixture {
            changes,
            counts,
            groups,
            handlers: jobs::APP.handlers(&deps),
            rules,
            now: now(),
        }
    }

    pub(crate) fn records(&self) -> usize {
        self.changes.len()
    }

    /// The event as Lambda delivers it.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let event = encode_event(
            &self.changes,
            Some(
                "arn:aws:dynamodb:us-east-1:123456789012:table/nishiki-table-prod-db/stream/2024-01-01T00:00:00.000",
            ),
        );
        serde_json::to_vec(&event).expect("serialize")
    }

    /// Bytes -> decode -> route -> decide, as the stream function does:
    /// each record typed as the event is read (Nishiki's
    /// [`nishiki_worker::worker::Reader`]).
    pub(crate) fn decide(&self, bytes: &[u8]) -> Summary {
        let mut s = Summary::default();
        for record in nishiki_worker::worker::decode_event(bytes).expect("a stream event") {
            let raw = record.expect("a well-formed record");
            assert!(raw.typed.is_some(), "typed as the event is read");
            s.records += 1;
            let change = Change::of(&raw).expect("decodes");
            self.route(&change, &mut s);
        }
        s
    }

    /// [`Fixture::decide`] through the items: each image built into an
    /// item, then typed ([`Change::from_stream`]), as the function decodes
    /// an event its reader does not take.
    pub(crate) fn decide_from_items(&self, bytes: &[u8]) -> Summary {
        let mut s = Summary::default();
        for record in decode_event_bytes(bytes).expect("a stream event") {
            let raw = record.expect("a well-formed record");
            s.records += 1;
            let change = Change::from_stream(&raw).expect("decodes");
            self.route(&change, &mut s);
        }
        s
    }

    /// One change routed like `worker::Router` does (loop guard, the
    /// handlers that want the item kind), each job's decision counted.
    fn route(&self, change: &Change, s: &mut Summary) {
        let kind = change.key.kind();
        if kind.is_worker_owned() {
            s.worker_owned += 1;
            return;
        }
        for h in self.handlers.iter().filter(|h| h.wants(kind)) {
            match h.name() {
                "relationships" => self.relationships(change, s),
                "expiry" => self.expiry(change, s),
                "invitations" => {
                    if let (
                        ChangeKind::Insert | ChangeKind::Modify,
                        Some(Entity::InvitationLink(l)),
                    ) = (change.kind, &change.new)
                        && ttl_to_stamp(l).is_some()
                    {
                        s.ttl_stamps += 1;
                    }
                }
                other => panic!("unknown handler {other}"),
            }
        }
    }

    fn relationships(&self, change: &Change, s: &mut Summary) {
        let what = match relationships::plan_stream_change(change) {
            StreamCascade::LeftToAudit => {
                s.left_to_audit += 1;
                return;
            }
            StreamCascade::Group(_) => "group",
            StreamCascade::User(_) => "user",
            StreamCascade::Container(_) => "container",
            StreamCascade::Membership { .. } => "membership",
            StreamCascade::NotRelationship => "none",
        };
        *s.cascades.entry(what).or_default() += 1;
    }

    fn expiry(&self, change: &Change, s: &mut Summary) {
        // Each record as if alone in its batch (BatchFacts::default()): the
        // fixture's checked counts are the per-record decisions.
        match expiry::plan_stream_change(change, self.now, &self.rules, &BatchFacts::default()) {
            StreamPlan::Container { id, plans, .. } => {
                if plans.is_empty() {
                    s.containers_unchanged += 1;
                    return;
                }
                s.containers_replanned += 1;
                s.food_plans += plans.len();
                let groups = self.groups.get(&id).map(Vec::as_slice).unwrap_or(&[]);
                s.expiry_writes +=
                    expiry::container_ops(&plans, groups, self.now, &self.rules).len();
            }
            StreamPlan::PlaceFlags { .. } => s.place_flags += 1,
            StreamPlan::RemoveFlags { .. } => s.remove_flags += 1,
            StreamPlan::Nothing(_) => {}
        }
    }

    /// The decisions match the event's composition.
    pub(crate) fn check(&self, s: &Summary) {
        let c = |what: &str| self.counts[what];
        assert_eq!(s.records, self.records());
        assert_eq!(s.worker_owned, 0);
        assert_eq!(
            s.cascades.get("group").copied().unwrap_or(0),
            c("group remove")
        );
        assert_eq!(
            s.cascades.get("user").copied().unwrap_or(0),
            c("user remove")
        );
        assert_eq!(
            s.cascades.get("container").copied().unwrap_or(0),
            c("container remove")
        );
        assert_eq!(
            s.cascades.get("membership").copied().unwrap_or(0),
            c("membership remove")
        );
        assert_eq!(
            s.left_to_audit,
            c("container modify, expiry edits")
                + c("container modify, rename and quantities")
                + c("container insert")
                + c("membership insert")
                + c("group modify")
                + c("group insert")
                + c("user modify")
        );
        assert_eq!(
            s.containers_replanned,
            c("container modify, expiry edits") + c("container insert") + c("container remove")
        );
        assert_eq!(
            s.containers_unchanged,
            c("container modify, rename and quantities")
        );
        assert!(s.food_plans >= 2 * c("container modify, expiry edits"));
        assert!(s.expiry_writes >= s.food_plans);
        assert_eq!(s.place_flags, c("link insert"));
        assert_eq!(s.remove_flags, c("link remove"));
        // Inserts and modifies of invitation links get their TTL stamped.
        assert_eq!(s.ttl_stamps, c("invitation insert/modify/remove") * 3 / 4);
    }
}

const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/nishiki-table-prod-db/stream/2024-01-01T00:00:00.000";

fn event_bytes(changes: &[StreamChange]) -> Vec<u8> {
    serde_json::to_vec(&encode_event(changes, Some(STREAM_ARN))).expect("serialize")
}

/// `records` small records (memberships, links, groups, users: one to two
/// short images each) as one Lambda event: at 10,000 records, Lambda's
/// largest batch of a DynamoDB stream.
pub(crate) fn small_records_event(records: usize) -> Vec<u8> {
    let changes: Vec<StreamChange> = (0..records)
        .map(|n| {
            let g = GroupId(id(1, n / 10));
            let membership = Entity::Membership(Membership {
                user: UserId(id(2, n)),
                group: g,
                extra: Item::new(),
            });
            let link = Entity::ContainerLink(ContainerLink {
                group: g,
                container: ContainerId(id(3, n)),
                extra: Item::new(),
            });
            let group = |name: &str| {
                Entity::Group(Group {
                    id: g,
                    group_name: name.into(),
                    extra: Item::new(),
                })
            };
            match n % 5 {
                0 => change(n, ChangeKind::Insert, None, Some(membership)),
                1 => change(n, ChangeKind::Remove, Some(membership), None),
                2 => change(n, ChangeKind::Insert, None, Some(link)),
                3 => change(
                    n,
                    ChangeKind::Modify,
                    Some(group("Home")),
                    Some(group("Flat")),
                ),
                _ => change(n, ChangeKind::Remove, Some(link), None),
            }
        })
        .collect();
    event_bytes(&changes)
}

/// `records` changes of containers of 20 foods as one Lambda event: inserts
/// and removes (one image each) and, every fourth, an expiry edit (two).
pub(crate) fn container_records_event(records: usize) -> Vec<u8> {
    let changes: Vec<StreamChange> = (0..records)
        .map(|n| {
            let c = container(n);
            match n % 4 {
                0 | 2 => change(n, ChangeKind::Insert, None, Some(Entity::Container(c))),
                1 => change(n, ChangeKind::Remove, Some(Entity::Container(c)), None),
                _ => {
                    let mut new = c.clone();
                    for f in [1, 7] {
                        new.foods[f].expiry =
                            Some(new.foods[f].expiry.expect("has expiry") + TimeDelta::days(7));
                    }
                    change(
                        n,
                        ChangeKind::Modify,
                        Some(Entity::Container(c)),
                        Some(Entity::Container(new)),
                    )
                }
            }
        })
        .collect();
    event_bytes(&changes)
}

fn criterion_dir() -> PathBuf {
    if let Ok(home) = std::env::var("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("criterion")
}

/// criterion's (mean, median) estimates of one benchmark, in ns.
fn estimates(group: &str, function: &str) -> Option<(f64, f64)> {
    let path = criterion_dir()
        .join(group)
        .join(function)
        .join("new/estimates.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    Some((
        v["mean"]["point_estimate"].as_f64()?,
        v["median"]["point_estimate"].as_f64()?,
    ))
}

/// Print each path's time over its floors' (each path: its name, its
/// `Value` floor's and its `IgnoredAny` floor's, on the same bytes), from
/// the estimates criterion last wrote (means; a path or floor without one
/// is left out): one row per path, `name ms /Value
/// /IgnoredAny`, which `scripts/bench-cpu` puts side by side for two
/// profiles. Nishiki's floors get a row of their own.
pub(crate) fn print_ratio(paths: &[(String, String, String)]) {
    println!();
    println!(
        "decide, 1,000 records, means: {:<24} {:>9} {:>7} {:>11}",
        "path", "ms", "/Value", "/IgnoredAny"
    );
    let floors = ["floor_serde_json_value", "floor_ignored_any"]
        .map(|f| (f.to_owned(), paths[0].1.clone(), paths[0].2.clone()));
    for (name, value, validate) in floors.iter().chain(paths) {
        let (Some((mean, _)), Some((value, _)), Some((validate, _))) = (
            estimates("decide", name),
            estimates("decide", value),
            estimates("decide", validate),
        ) else {
            continue;
        };
        println!(
            "decide: {name:<24} {:>9.3} {:>6.2}x {:>10.2}x",
            mean / 1e6,
            mean / value,
            mean / validate
        );
    }
}
