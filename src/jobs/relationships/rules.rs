//! The pure rules of the relationship job: what the graph of a scan is,
//! which invariant an item violates, when a suspect is due, whether a
//! re-check still shows a violation, how it is repaired, and the audit's
//! checkpoint and suspect records. No I/O here (see the module docs of
//! [`super`] for the whole job).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, NaiveDate, Utc};

use super::{EmptyGroupPolicy, RelationshipSettings};
use crate::datetime;
use crate::items::{Item, attr};
use crate::keys::{ContainerId, FoodId, GroupId, ItemKey, ItemKind, Job, PK, UserId, Violation};
use worker_engine::store::{Expr, Key};

/// Suspect attribute: when the violation was first seen (canonical datetime).
pub const FIRST_SEEN: &str = "FirstSeen";
/// Suspect attribute (orphan worker items): the orphan keys, a list of
/// `{PK, SK}` maps.
pub const ORPHAN_ITEMS: &str = "Items";
/// At most this many orphan keys are listed in one suspect record (the rest
/// are found again by a later pass).
pub const MAX_LISTED_ORPHANS: usize = 500;
/// Checkpoint attribute: when the pass started (canonical datetime).
pub const PASS_STARTED_AT: &str = "PassStartedAt";
/// Checkpoint attribute: the pass's scan segments (a Number).
pub const TOTAL_SEGMENTS: &str = "TotalSegments";
/// Checkpoint attribute: each segment's [`Position`], in segment order
/// (`NULL` to start, the last evaluated key, or `done`).
pub const POSITIONS: &str = "Positions";
/// Checkpoint attribute: ticks spent on the pass so far (a Number).
pub const TICKS: &str = "Ticks";
const DONE: &str = "done";

/// The relationship graph of the items one tick read (keys only).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    /// Users whose `User` item was read.
    pub users: BTreeSet<UserId>,
    /// Groups whose `Group` item was read.
    pub groups: BTreeSet<GroupId>,
    /// Containers whose `Container` item was read.
    pub containers: BTreeSet<ContainerId>,
    /// Memberships read, as `(user, group)` from their keys.
    pub memberships: BTreeSet<(UserId, GroupId)>,
    /// Container links read, as `(group, container)`.
    pub links: BTreeSet<(GroupId, ContainerId)>,
    /// Groups whose invitation link was read.
    pub invitations: BTreeSet<GroupId>,
    /// Expiry flags read, as `(group, container, food)`.
    pub flags: BTreeSet<(GroupId, ContainerId, FoodId)>,
    /// Expiry reminders read, as `(date, container, food)`.
    pub reminders: BTreeSet<(NaiveDate, ContainerId, FoodId)>,
    /// Items read (every kind).
    pub items: u64,
    /// Items whose key is not a key of this table (reported, never touched).
    pub unreadable_keys: u64,
    /// Memberships/links whose `GroupId`/`ContainerId` disagrees with the
    /// sort key (the service's index answers are then wrong; reported).
    pub index_attribute_mismatches: u64,
}

impl Graph {
    /// Add one scanned item (its key and relationship attributes).
    pub fn add_item(&mut self, item: &Item) {
        self.items += 1;
        let Ok(key) = ItemKey::from_attributes(item) else {
            self.unreadable_keys += 1;
            return;
        };
        let attr_is = |name: &str, want: String| match item.get(name) {
            Some(AttributeValue::S(s)) => *s == want,
            _ => false,
        };
        let mismatch = match &key {
            ItemKey::Membership { group, .. } => !attr_is(attr::GROUP_ID, group.to_string()),
            ItemKey::ContainerLink { container, .. } => {
                !attr_is(attr::CONTAINER_ID, container.to_string())
            }
            _ => false,
        };
        if mismatch {
            self.index_attribute_mismatches += 1;
        }
        self.add_key(key);
    }

    /// Add one key.
    pub fn add_key(&mut self, key: ItemKey) {
        match key {
            ItemKey::User(u) => {
                self.users.insert(u);
            }
            ItemKey::Group(g) => {
                self.groups.insert(g);
            }
            ItemKey::Container(c) => {
                self.containers.insert(c);
            }
            ItemKey::Membership { user, group } => {
                self.memberships.insert((user, group));
            }
            ItemKey::ContainerLink { group, container } => {
                self.links.insert((group, container));
            }
            ItemKey::InvitationLink(g) => {
                self.invitations.insert(g);
            }
            ItemKey::ExpiringFood {
                group,
                container,
                food,
            } => {
                self.flags.insert((group, container, food));
            }
            ItemKey::ExpiryReminder {
                date,
                container,
                food,
            } => {
                self.reminders.insert((date, container, food));
            }
            // Not part of any relationship.
            ItemKey::Category | ItemKey::AuditSuspect { .. } | ItemKey::Checkpoint(_) => {}
        }
    }

    fn has_node(&self, key: &ItemKey) -> bool {
        match key {
            ItemKey::User(u) => self.users.contains(u),
            ItemKey::Group(g) => self.groups.contains(g),
            ItemKey::Container(c) => self.containers.contains(c),
            _ => false,
        }
    }
}

/// Answers about items outside the graph (targeted lookups of a partial pass).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lookups {
    /// Items outside the graph a lookup found.
    pub present: BTreeSet<ItemKey>,
    /// Items outside the graph a lookup found missing.
    pub absent: BTreeSet<ItemKey>,
    /// Every membership of a group (from the index).
    pub members: BTreeMap<GroupId, Vec<UserId>>,
    /// Every group linking a container (from the index).
    pub linked_by: BTreeMap<ContainerId, Vec<GroupId>>,
}

/// What a partial pass must look up to judge the items it read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Needed {
    /// Parents to GetItem.
    pub gets: BTreeSet<ItemKey>,
    /// Groups read without any membership: query their members.
    pub members_of: BTreeSet<GroupId>,
    /// Containers read without any link: query their links.
    pub links_of: BTreeSet<ContainerId>,
}

impl Needed {
    /// Whether nothing needs looking up.
    pub fn is_empty(&self) -> bool {
        self.gets.is_empty() && self.members_of.is_empty() && self.links_of.is_empty()
    }
}

/// The lookups a tick that did not read the whole table needs.
pub fn lookups_needed(graph: &Graph) -> Needed {
    let mut n = Needed::default();
    let mut need = |k: ItemKey| {
        if !graph.has_node(&k) {
            n.gets.insert(k);
        }
    };
    for &(u, g) in &graph.memberships {
        need(ItemKey::User(u));
        need(ItemKey::Group(g));
    }
    for &(g, c) in &graph.links {
        need(ItemKey::Group(g));
        need(ItemKey::Container(c));
    }
    for &g in &graph.invitations {
        need(ItemKey::Group(g));
    }
    for &(g, c, _) in &graph.flags {
        need(ItemKey::Group(g));
        need(ItemKey::Container(c));
    }
    for &(_, c, _) in &graph.reminders {
        need(ItemKey::Container(c));
    }
    let with_members: BTreeSet<GroupId> = graph.memberships.iter().map(|&(_, g)| g).collect();
    let with_links: BTreeSet<ContainerId> = graph.links.iter().map(|&(_, c)| c).collect();
    n.members_of = graph.groups.difference(&with_members).copied().collect();
    n.links_of = graph.containers.difference(&with_links).copied().collect();
    n
}

/// What is known when judging a graph: the graph itself, whether it is the
/// whole table (then absence is absence), and lookups.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// What the tick read.
    pub graph: &'a Graph,
    /// Whether the graph is the whole table: an item not in it is absent.
    /// Otherwise only [`Facts::lookups`] say what is absent.
    pub whole_table: bool,
    /// What the targeted lookups answered (empty for a whole-table pass).
    pub lookups: &'a Lookups,
}

impl Facts<'_> {
    /// `Some(true)` present, `Some(false)` absent, `None` unknown.
    pub fn exists(&self, key: &ItemKey) -> Option<bool> {
        if self.graph.has_node(key) || self.lookups.present.contains(key) {
            Some(true)
        } else if self.whole_table || self.lookups.absent.contains(key) {
            Some(false)
        } else {
            None
        }
    }

    /// Whether `key` is known to be absent (unknown is not absent).
    fn absent(&self, key: ItemKey) -> bool {
        self.exists(&key) == Some(false)
    }
}

/// One violation found by a scan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// The invariant broken.
    pub violation: Violation,
    /// The offending item; for [`Violation::OrphanWorkerItem`], the missing
    /// owner (a Group or a Container).
    pub subject: ItemKey,
    /// The orphan worker items (only for `OrphanWorkerItem`).
    pub items: Vec<ItemKey>,
}

impl Found {
    /// A violation about `subject`, with no orphan worker items.
    pub fn new(violation: Violation, subject: ItemKey) -> Self {
        Found {
            violation,
            subject,
            items: Vec::new(),
        }
    }

    /// The key of this violation's suspect record.
    pub fn suspect_key(&self) -> ItemKey {
        suspect_key(self.violation, &self.subject)
    }
}

/// The key of a suspect record.
pub fn suspect_key(violation: Violation, subject: &ItemKey) -> ItemKey {
    ItemKey::AuditSuspect {
        violation,
        subject: Box::new(subject.clone()),
    }
}

/// Every violation of the invariants in a graph, sorted. Unknown facts are
/// never violations.
pub fn find_violations(facts: &Facts<'_>) -> Vec<Found> {
    let mut out = parent_violations(facts);
    out.extend(empty_groups(facts));
    out.extend(container_violations(facts));
    out.extend(orphan_worker_items(facts));
    out.sort();
    out
}

/// Invariants 1, 2 and 4: memberships, container links and invitations
/// whose parent is absent.
fn parent_violations(facts: &Facts<'_>) -> Vec<Found> {
    let g = facts.graph;
    let mut out = Vec::new();
    for &(user, group) in &g.memberships {
        let subject = ItemKey::Membership { user, group };
        if facts.absent(ItemKey::User(user)) {
            out.push(Found::new(Violation::MembershipWithoutUser, subject));
        } else if facts.absent(ItemKey::Group(group)) {
            out.push(Found::new(Violation::MembershipWithoutGroup, subject));
        }
    }
    for &(group, container) in &g.links {
        let subject = ItemKey::ContainerLink { group, container };
        if facts.absent(ItemKey::Group(group)) {
            out.push(Found::new(Violation::LinkWithoutGroup, subject));
        } else if facts.absent(ItemKey::Container(container)) {
            out.push(Found::new(Violation::LinkWithoutContainer, subject));
        }
    }
    for &group in &g.invitations {
        if facts.absent(ItemKey::Group(group)) {
            out.push(Found::new(
                Violation::InvitationWithoutGroup,
                ItemKey::InvitationLink(group),
            ));
        }
    }
    out
}

/// Invariant 5: groups whose complete member list has no live user.
fn empty_groups(facts: &Facts<'_>) -> Vec<Found> {
    let mut members: BTreeMap<GroupId, Vec<UserId>> = BTreeMap::new();
    for &(u, grp) in &facts.graph.memberships {
        members.entry(grp).or_default().push(u);
    }
    let mut out = Vec::new();
    for &group in &facts.graph.groups {
        let (list, complete) = reverse(
            members.get(&group),
            facts.lookups.members.get(&group),
            facts.whole_table,
        );
        let live = list
            .iter()
            .filter(|&&u| !facts.absent(ItemKey::User(u)))
            .count();
        if complete && live == 0 {
            out.push(Found::new(Violation::EmptyGroup, ItemKey::Group(group)));
        }
    }
    out
}

/// Invariant 3: containers no live group links (when the list of links is
/// complete), and containers two surely live groups link.
fn container_violations(facts: &Facts<'_>) -> Vec<Found> {
    let mut linked_by: BTreeMap<ContainerId, Vec<GroupId>> = BTreeMap::new();
    for &(grp, c) in &facts.graph.links {
        linked_by.entry(c).or_default().push(grp);
    }
    let mut out = Vec::new();
    for &container in &facts.graph.containers {
        let (list, complete) = reverse(
            linked_by.get(&container),
            facts.lookups.linked_by.get(&container),
            facts.whole_table,
        );
        let list: BTreeSet<GroupId> = list.into_iter().collect();
        let possibly_live = list
            .iter()
            .filter(|&&grp| !facts.absent(ItemKey::Group(grp)))
            .count();
        let surely_live = list
            .iter()
            .filter(|&&grp| facts.exists(&ItemKey::Group(grp)) == Some(true))
            .count();
        let subject = ItemKey::Container(container);
        if complete && possibly_live == 0 {
            out.push(Found::new(Violation::OrphanContainer, subject));
        } else if surely_live >= 2 {
            out.push(Found::new(Violation::MultiplyLinkedContainer, subject));
        }
    }
    out
}

/// Invariant 6: worker-owned items (flags, reminders) whose group or
/// container is absent, one violation per missing owner listing at most
/// [`MAX_LISTED_ORPHANS`] of them.
fn orphan_worker_items(facts: &Facts<'_>) -> Vec<Found> {
    let mut orphans: BTreeMap<ItemKey, Vec<ItemKey>> = BTreeMap::new();
    for &(group, container, food) in &facts.graph.flags {
        let owner = if facts.absent(ItemKey::Group(group)) {
            ItemKey::Group(group)
        } else if facts.absent(ItemKey::Container(container)) {
            ItemKey::Container(container)
        } else {
            continue;
        };
        orphans
            .entry(owner)
            .or_default()
            .push(ItemKey::ExpiringFood {
                group,
                container,
                food,
            });
    }
    for &(date, container, food) in &facts.graph.reminders {
        if facts.absent(ItemKey::Container(container)) {
            orphans
                .entry(ItemKey::Container(container))
                .or_default()
                .push(ItemKey::ExpiryReminder {
                    date,
                    container,
                    food,
                });
        }
    }
    orphans
        .into_iter()
        .map(|(owner, mut items)| {
            items.truncate(MAX_LISTED_ORPHANS);
            Found {
                violation: Violation::OrphanWorkerItem,
                subject: owner,
                items,
            }
        })
        .collect()
}

/// Merge a reverse relationship seen in the graph with an index lookup;
/// the list is complete when the graph is the whole table or the index was
/// asked.
fn reverse<T: Copy + Ord>(
    in_graph: Option<&Vec<T>>,
    looked_up: Option<&Vec<T>>,
    whole_table: bool,
) -> (Vec<T>, bool) {
    let mut list: Vec<T> = in_graph.cloned().unwrap_or_default();
    list.extend(looked_up.into_iter().flatten().copied());
    list.sort();
    list.dedup();
    (list, whole_table || looked_up.is_some())
}

/// Whether a suspect's subject has the kind its violation is about.
pub fn subject_fits(violation: Violation, subject: &ItemKey) -> bool {
    use ItemKind as K;
    let kind = subject.kind();
    match violation {
        Violation::MembershipWithoutUser | Violation::MembershipWithoutGroup => {
            kind == K::Membership
        }
        Violation::LinkWithoutGroup | Violation::LinkWithoutContainer => kind == K::ContainerLink,
        Violation::OrphanContainer | Violation::MultiplyLinkedContainer => kind == K::Container,
        Violation::InvitationWithoutGroup => kind == K::InvitationLink,
        Violation::EmptyGroup => kind == K::Group,
        Violation::OrphanWorkerItem => matches!(kind, K::Group | K::Container),
    }
}

/// The parent whose absence is the violation (for the "X without Y" kinds).
pub fn missing_parent(violation: Violation, subject: &ItemKey) -> Option<ItemKey> {
    match (violation, subject) {
        (Violation::MembershipWithoutUser, ItemKey::Membership { user, .. }) => {
            Some(ItemKey::User(*user))
        }
        (Violation::MembershipWithoutGroup, ItemKey::Membership { group, .. })
        | (Violation::LinkWithoutGroup, ItemKey::ContainerLink { group, .. })
        | (Violation::InvitationWithoutGroup, ItemKey::InvitationLink(group)) => {
            Some(ItemKey::Group(*group))
        }
        (Violation::LinkWithoutContainer, ItemKey::ContainerLink { container, .. }) => {
            Some(ItemKey::Container(*container))
        }
        _ => None,
    }
}

/// How long a violation must persist before it is repaired.
pub fn grace(violation: Violation, config: &RelationshipSettings) -> chrono::Duration {
    let d = match violation {
        Violation::EmptyGroup => config.empty_group_grace,
        _ => config.audit_grace,
    };
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// A recorded suspect.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspect {
    /// The invariant the subject seemed to break.
    pub violation: Violation,
    /// The item it is about (for `OrphanWorkerItem`, the missing owner).
    pub subject: ItemKey,
    /// When a scan first found it: the grace period counts from here.
    pub first_seen: DateTime<Utc>,
    /// Orphan worker items (only for `OrphanWorkerItem`).
    pub items: Vec<ItemKey>,
}

impl Suspect {
    /// The suspect of `found`, first seen `now`.
    pub fn new(found: &Found, now: DateTime<Utc>) -> Self {
        Suspect {
            violation: found.violation,
            subject: found.subject.clone(),
            first_seen: now,
            items: found.items.clone(),
        }
    }

    /// The key of its record (`PK=AuditSuspect`).
    pub fn key(&self) -> ItemKey {
        suspect_key(self.violation, &self.subject)
    }

    /// Whether the grace period has passed.
    pub fn is_due(&self, now: DateTime<Utc>, config: &RelationshipSettings) -> bool {
        now.signed_duration_since(self.first_seen) >= grace(self.violation, config)
    }

    /// The record as an item (no indexed attribute, by construction).
    pub fn to_item(&self) -> Item {
        let mut item = self.key().to_attributes();
        item.insert(
            FIRST_SEEN.into(),
            AttributeValue::S(datetime::format(self.first_seen)),
        );
        if !self.items.is_empty() {
            let list = self
                .items
                .iter()
                .map(|k| AttributeValue::M(k.to_attributes()))
                .collect();
            item.insert(ORPHAN_ITEMS.into(), AttributeValue::L(list));
        }
        item
    }

    /// Read a record back; `Err` says why it is unusable.
    pub fn from_item(item: &Item) -> Result<Suspect, String> {
        let key = ItemKey::from_attributes(item).map_err(|e| e.to_string())?;
        let ItemKey::AuditSuspect { violation, subject } = key else {
            return Err("not an audit suspect key".into());
        };
        if !subject_fits(violation, &subject) {
            return Err(format!(
                "{violation} cannot be about a {:?}",
                subject.kind()
            ));
        }
        let first_seen = match item.get(FIRST_SEEN) {
            Some(AttributeValue::S(s)) => datetime::parse(s).map_err(|e| e.to_string())?,
            _ => return Err(format!("missing {FIRST_SEEN}")),
        };
        let items = match item.get(ORPHAN_ITEMS) {
            Some(AttributeValue::L(list)) => list
                .iter()
                .filter_map(|v| match v {
                    AttributeValue::M(m) => ItemKey::from_attributes(m).ok(),
                    _ => None,
                })
                .filter(|k| matches!(k.kind(), ItemKind::ExpiringFood | ItemKind::ExpiryReminder))
                .collect(),
            _ => Vec::new(),
        };
        Ok(Suspect {
            violation,
            subject: *subject,
            first_seen,
            items,
        })
    }
}

/// What a consistent re-check read about a suspect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The subject item (for `OrphanWorkerItem`: the owner), read consistently.
    pub subject: Option<Item>,
    /// Whether the missing parent ([`missing_parent`]) exists now.
    pub parent_present: bool,
    /// Links to the container whose group is live (link and group read consistently).
    pub live_links: usize,
    /// Memberships of the group whose user is live (read consistently).
    pub live_members: usize,
    /// Orphan worker items that still exist.
    pub orphans_left: Vec<ItemKey>,
    /// The absences the verdict rests on: the missing parent; for each dead
    /// link or membership the index shows, its missing link, group,
    /// membership or user; the missing owner of orphans. A repair is written
    /// only while every one of them still holds (a `ConditionCheck` each,
    /// in the repair's transaction).
    pub absent: Vec<ItemKey>,
}

/// Whether a suspect is still a violation after the re-check.
pub fn still_violates(violation: Violation, o: &Observed) -> bool {
    let there = o.subject.is_some();
    match violation {
        Violation::MembershipWithoutUser
        | Violation::MembershipWithoutGroup
        | Violation::LinkWithoutGroup
        | Violation::LinkWithoutContainer
        | Violation::InvitationWithoutGroup => there && !o.parent_present,
        Violation::OrphanContainer => there && o.live_links == 0,
        Violation::MultiplyLinkedContainer => there && o.live_links >= 2,
        Violation::EmptyGroup => there && o.live_members == 0,
        Violation::OrphanWorkerItem => !there && !o.orphans_left.is_empty(),
    }
}

/// How a confirmed violation is repaired.
#[derive(Debug, Clone, PartialEq)]
pub enum Repair {
    /// Delete the subject, while its parent is still gone (the service
    /// writes a Group or User item again when it updates one being deleted).
    DeleteSubject,
    /// Delete the subject only if it is still exactly what was read.
    DeleteSubjectIf(Expr),
    /// Delete the group item on this condition, then everything hanging off it.
    DeleteGroup(Expr),
    /// Delete these orphan worker items.
    DeleteItems(Vec<ItemKey>),
    /// Never repaired automatically: only reported.
    ReportOnly,
}

/// The repair of a confirmed violation.
pub fn plan_repair(violation: Violation, o: &Observed, policy: EmptyGroupPolicy) -> Repair {
    match violation {
        Violation::MembershipWithoutUser
        | Violation::MembershipWithoutGroup
        | Violation::LinkWithoutGroup
        | Violation::LinkWithoutContainer
        | Violation::OrphanContainer => Repair::DeleteSubject,
        // A renewal moves the expiry: the renewed link is kept.
        Violation::InvitationWithoutGroup => Repair::DeleteSubjectIf(unchanged(
            o.subject.as_ref(),
            &[attr::INVITATION_LINK_HASH, attr::LINK_EXPIRY_DATETIME],
        )),
        Violation::EmptyGroup => match policy {
            EmptyGroupPolicy::Report => Repair::ReportOnly,
            EmptyGroupPolicy::Delete => {
                Repair::DeleteGroup(unchanged(o.subject.as_ref(), &["GroupName"]))
            }
        },
        // Which group owns it is a human decision.
        Violation::MultiplyLinkedContainer => Repair::ReportOnly,
        Violation::OrphanWorkerItem => Repair::DeleteItems(o.orphans_left.clone()),
    }
}

/// A condition: the item exists and these attributes still hold the raw
/// values read.
pub fn unchanged(item: Option<&Item>, attributes: &[&str]) -> Expr {
    let mut e = Expr::exists(PK);
    for (i, name) in attributes.iter().enumerate() {
        if let Some(v) = item.and_then(|it| it.get(*name)) {
            let (n, val) = (format!("#u{i}"), format!(":u{i}"));
            e = e.and(
                Expr::new(format!("{n} = {val}"))
                    .name(&n, name)
                    .value(&val, v.clone()),
            );
        }
    }
    e
}

/// Where one scan segment is.
#[derive(Debug, Clone, PartialEq)]
pub enum Position {
    /// Not read yet in this pass (stored as `NULL`).
    Start,
    /// Read up to this key: the next page starts after it (the Scan's
    /// last evaluated key).
    At(Key),
    /// Read to its end (stored as `done`).
    Done,
}

/// The audit's resumable pass (`WorkerCheckpoint`/`audit`).
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// When the pass's first tick ran.
    pub pass_started: DateTime<Utc>,
    /// Each scan segment's position, one per segment.
    pub positions: Vec<Position>,
    /// Ticks spent on this pass so far.
    pub ticks: u64,
}

impl Checkpoint {
    /// A fresh pass starting `now`, with `segments` segments (at least 1).
    pub fn new(now: DateTime<Utc>, segments: u32) -> Self {
        Checkpoint {
            pass_started: now,
            positions: vec![Position::Start; segments.max(1) as usize],
            ticks: 0,
        }
    }

    /// Where it is stored: `WorkerCheckpoint`/`audit`.
    pub fn key() -> ItemKey {
        ItemKey::Checkpoint(Job::Audit)
    }

    /// Whether no segment has been read yet.
    pub fn is_fresh(&self) -> bool {
        self.positions.iter().all(|p| *p == Position::Start)
    }

    /// Whether every segment has been read to its end: the pass is over.
    pub fn is_done(&self) -> bool {
        self.positions.iter().all(|p| *p == Position::Done)
    }

    /// The checkpoint as its stored item (key and attributes).
    pub fn to_item(&self) -> Item {
        let mut item = Self::key().to_attributes();
        item.insert(
            PASS_STARTED_AT.into(),
            AttributeValue::S(datetime::format(self.pass_started)),
        );
        item.insert(
            TOTAL_SEGMENTS.into(),
            AttributeValue::N(self.positions.len().to_string()),
        );
        item.insert(TICKS.into(), AttributeValue::N(self.ticks.to_string()));
        let list = self
            .positions
            .iter()
            .map(|p| match p {
                Position::Start => AttributeValue::Null(true),
                Position::At(k) => AttributeValue::M(k.clone()),
                Position::Done => AttributeValue::S(DONE.into()),
            })
            .collect();
        item.insert(POSITIONS.into(), AttributeValue::L(list));
        item
    }

    /// Read a checkpoint back; `None` when it is unusable (a new pass starts).
    pub fn from_item(item: &Item) -> Option<Checkpoint> {
        let pass_started = match item.get(PASS_STARTED_AT) {
            Some(AttributeValue::S(s)) => datetime::parse(s).ok()?,
            _ => return None,
        };
        let ticks = match item.get(TICKS) {
            Some(AttributeValue::N(n)) => n.parse().ok()?,
            _ => 0,
        };
        let Some(AttributeValue::L(list)) = item.get(POSITIONS) else {
            return None;
        };
        let positions = list
            .iter()
            .map(|v| match v {
                AttributeValue::Null(_) => Some(Position::Start),
                AttributeValue::M(k) if !k.is_empty() => Some(Position::At(k.clone())),
                AttributeValue::S(s) if s == DONE => Some(Position::Done),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        if positions.is_empty() {
            return None;
        }
        Some(Checkpoint {
            pass_started,
            positions,
            ticks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::SK;
    use std::time::Duration;

    fn uid(n: u128) -> UserId {
        UserId(uuid::Uuid::from_u128(n))
    }
    fn gid(n: u128) -> GroupId {
        GroupId(uuid::Uuid::from_u128(0x1000 + n))
    }
    fn cid(n: u128) -> ContainerId {
        ContainerId(uuid::Uuid::from_u128(0x2000 + n))
    }
    fn fid(n: u128) -> FoodId {
        FoodId(uuid::Uuid::from_u128(0x3000 + n))
    }

    fn graph(keys: &[ItemKey]) -> Graph {
        let mut g = Graph::default();
        for k in keys {
            g.add_key(k.clone());
        }
        g
    }

    fn whole(g: &Graph) -> Vec<(Violation, ItemKey)> {
        let l = Lookups::default();
        find_violations(&Facts {
            graph: g,
            whole_table: true,
            lookups: &l,
        })
        .into_iter()
        .map(|f| (f.violation, f.subject))
        .collect()
    }

    /// A consistent family: user 1 in group 1 with container 1, invitation.
    fn family() -> Vec<ItemKey> {
        vec![
            ItemKey::User(uid(1)),
            ItemKey::Group(gid(1)),
            ItemKey::Membership {
                user: uid(1),
                group: gid(1),
            },
            ItemKey::Container(cid(1)),
            ItemKey::ContainerLink {
                group: gid(1),
                container: cid(1),
            },
            ItemKey::InvitationLink(gid(1)),
            ItemKey::ExpiringFood {
                group: gid(1),
                container: cid(1),
                food: fid(1),
            },
            ItemKey::ExpiryReminder {
                date: NaiveDate::from_ymd_opt(2024, 3, 28).unwrap(),
                container: cid(1),
                food: fid(1),
            },
            ItemKey::Category,
        ]
    }

    #[test]
    fn consistent_table_has_no_violation() {
        assert_eq!(whole(&graph(&family())), vec![]);
    }

    #[test]
    fn every_leftover_pattern_is_found() {
        let mut keys = family();
        // Deleted group 2: memberships and links left behind.
        keys.push(ItemKey::User(uid(2)));
        keys.push(ItemKey::Membership {
            user: uid(2),
            group: gid(2),
        });
        keys.push(ItemKey::ContainerLink {
            group: gid(2),
            container: cid(2),
        });
        keys.push(ItemKey::InvitationLink(gid(2)));
        keys.push(ItemKey::ExpiringFood {
            group: gid(2),
            container: cid(2),
            food: fid(2),
        });
        // Deleted user 3: membership of group 1 left.
        keys.push(ItemKey::Membership {
            user: uid(3),
            group: gid(1),
        });
        // Dangling link: container 4 deleted.
        keys.push(ItemKey::ContainerLink {
            group: gid(1),
            container: cid(4),
        });
        // Orphan container 5; empty group 6.
        keys.push(ItemKey::Container(cid(5)));
        keys.push(ItemKey::Group(gid(6)));
        // Reminder of a deleted container 7.
        let reminder = ItemKey::ExpiryReminder {
            date: NaiveDate::from_ymd_opt(2024, 4, 1).unwrap(),
            container: cid(7),
            food: fid(7),
        };
        keys.push(reminder.clone());
        let found = whole(&graph(&keys));
        let expect = vec![
            (
                Violation::MembershipWithoutUser,
                ItemKey::Membership {
                    user: uid(3),
                    group: gid(1),
                },
            ),
            (
                Violation::MembershipWithoutGroup,
                ItemKey::Membership {
                    user: uid(2),
                    group: gid(2),
                },
            ),
            (
                Violation::LinkWithoutGroup,
                ItemKey::ContainerLink {
                    group: gid(2),
                    container: cid(2),
                },
            ),
            (
                Violation::LinkWithoutContainer,
                ItemKey::ContainerLink {
                    group: gid(1),
                    container: cid(4),
                },
            ),
            (Violation::OrphanContainer, ItemKey::Container(cid(5))),
            (
                Violation::InvitationWithoutGroup,
                ItemKey::InvitationLink(gid(2)),
            ),
            (Violation::EmptyGroup, ItemKey::Group(gid(6))),
            (Violation::OrphanWorkerItem, ItemKey::Group(gid(2))),
            (Violation::OrphanWorkerItem, ItemKey::Container(cid(7))),
        ];
        let mut expect = expect;
        expect.sort();
        assert_eq!(found, expect);
        let full = find_violations(&Facts {
            graph: &graph(&keys),
            whole_table: true,
            lookups: &Lookups::default(),
        });
        let orphan = full
            .iter()
            .find(|f| f.subject == ItemKey::Container(cid(7)))
            .unwrap();
        assert_eq!(orphan.items, vec![reminder]);
    }

    #[test]
    fn container_rules_need_live_groups() {
        let mut keys = family();
        // Container 1 also linked by a live group 2 (with a member).
        keys.extend([
            ItemKey::Group(gid(2)),
            ItemKey::Membership {
                user: uid(1),
                group: gid(2),
            },
            ItemKey::ContainerLink {
                group: gid(2),
                container: cid(1),
            },
        ]);
        assert_eq!(
            whole(&graph(&keys)),
            vec![(
                Violation::MultiplyLinkedContainer,
                ItemKey::Container(cid(1))
            )]
        );
        // Container 3 linked only by a deleted group: orphan (and a dead link).
        let mut keys = family();
        keys.extend([
            ItemKey::Container(cid(3)),
            ItemKey::ContainerLink {
                group: gid(9),
                container: cid(3),
            },
        ]);
        let found = whole(&graph(&keys));
        assert!(found.contains(&(Violation::OrphanContainer, ItemKey::Container(cid(3)))));
        assert!(found.contains(&(
            Violation::LinkWithoutGroup,
            ItemKey::ContainerLink {
                group: gid(9),
                container: cid(3)
            }
        )));
    }

    #[test]
    fn group_whose_only_member_is_a_deleted_user_is_empty() {
        let keys = vec![
            ItemKey::Group(gid(1)),
            ItemKey::Membership {
                user: uid(1),
                group: gid(1),
            },
        ];
        let found = whole(&graph(&keys));
        assert!(found.contains(&(Violation::EmptyGroup, ItemKey::Group(gid(1)))));
    }

    #[test]
    fn partial_pass_judges_only_what_is_known() {
        // A tick that read only a membership and a group (no whole table).
        let keys = vec![
            ItemKey::Membership {
                user: uid(1),
                group: gid(1),
            },
            ItemKey::Group(gid(2)),
            ItemKey::Container(cid(3)),
        ];
        let g = graph(&keys);
        let needed = lookups_needed(&g);
        assert_eq!(
            needed.gets,
            BTreeSet::from([ItemKey::User(uid(1)), ItemKey::Group(gid(1))])
        );
        assert_eq!(needed.members_of, BTreeSet::from([gid(2)]));
        assert_eq!(needed.links_of, BTreeSet::from([cid(3)]));
        // Without answers nothing is a violation.
        let none = Lookups::default();
        let facts = Facts {
            graph: &g,
            whole_table: false,
            lookups: &none,
        };
        assert_eq!(find_violations(&facts), vec![]);
        // With answers: user present, group 1 absent; group 2 has a member
        // elsewhere; container 3 has no link.
        let l = Lookups {
            present: BTreeSet::from([ItemKey::User(uid(1))]),
            absent: BTreeSet::from([ItemKey::Group(gid(1))]),
            members: BTreeMap::from([(gid(2), vec![uid(5)])]),
            linked_by: BTreeMap::from([(cid(3), vec![])]),
        };
        let facts = Facts {
            graph: &g,
            whole_table: false,
            lookups: &l,
        };
        let found: Vec<_> = find_violations(&facts)
            .into_iter()
            .map(|f| (f.violation, f.subject))
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    Violation::MembershipWithoutGroup,
                    ItemKey::Membership {
                        user: uid(1),
                        group: gid(1)
                    }
                ),
                (Violation::OrphanContainer, ItemKey::Container(cid(3))),
            ]
        );
    }

    #[test]
    fn index_attribute_mismatch_is_counted() {
        let m = ItemKey::Membership {
            user: uid(1),
            group: gid(1),
        };
        let mut item = m.to_attributes();
        item.insert(attr::GROUP_ID.into(), AttributeValue::S(gid(2).to_string()));
        let mut g = Graph::default();
        g.add_item(&item);
        item.insert(attr::GROUP_ID.into(), AttributeValue::S(gid(1).to_string()));
        g.add_item(&item);
        let mut bad = Item::new();
        bad.insert(PK.into(), AttributeValue::S("x".into()));
        bad.insert(SK.into(), AttributeValue::S("Nope".into()));
        g.add_item(&bad);
        assert_eq!(
            (g.items, g.index_attribute_mismatches, g.unreadable_keys),
            (3, 1, 1)
        );
    }

    fn config() -> RelationshipSettings {
        RelationshipSettings {
            audit_grace: Duration::from_secs(3600),
            empty_group_grace: Duration::from_secs(86_400),
            ..RelationshipSettings::default()
        }
    }

    #[test]
    fn grace_per_kind() {
        let t0: DateTime<Utc> = "2024-03-25T00:00:00Z".parse().unwrap();
        let s = Suspect {
            violation: Violation::LinkWithoutGroup,
            subject: ItemKey::ContainerLink {
                group: gid(1),
                container: cid(1),
            },
            first_seen: t0,
            items: vec![],
        };
        let c = config();
        assert!(!s.is_due(t0 + chrono::Duration::minutes(59), &c));
        assert!(s.is_due(t0 + chrono::Duration::minutes(60), &c));
        let e = Suspect {
            violation: Violation::EmptyGroup,
            subject: ItemKey::Group(gid(1)),
            ..s
        };
        assert!(!e.is_due(t0 + chrono::Duration::hours(23), &c));
        assert!(e.is_due(t0 + chrono::Duration::hours(24), &c));
    }

    #[test]
    fn suspect_records_round_trip_without_indexed_attributes() {
        let t0: DateTime<Utc> = "2024-03-25T00:00:00.123Z".parse().unwrap();
        let s = Suspect {
            violation: Violation::OrphanWorkerItem,
            subject: ItemKey::Container(cid(1)),
            first_seen: t0,
            items: vec![ItemKey::ExpiryReminder {
                date: NaiveDate::from_ymd_opt(2024, 4, 1).unwrap(),
                container: cid(1),
                food: fid(1),
            }],
        };
        let item = s.to_item();
        for name in attr::INDEXED {
            assert!(!item.contains_key(name), "{name}");
        }
        assert_eq!(Suspect::from_item(&item), Ok(s));
        // A subject of the wrong kind is unusable.
        let bad = suspect_key(Violation::EmptyGroup, &ItemKey::Container(cid(1)));
        let mut item = bad.to_attributes();
        item.insert(
            FIRST_SEEN.into(),
            AttributeValue::S("2024-03-25T00:00:00Z".into()),
        );
        assert!(Suspect::from_item(&item).is_err());
    }

    #[test]
    fn rechecks_decide_heal_or_repair() {
        let present = Some(Item::new());
        let parent_back = Observed {
            subject: present.clone(),
            parent_present: true,
            ..Default::default()
        };
        let parent_gone = Observed {
            subject: present.clone(),
            ..Default::default()
        };
        let subject_gone = Observed::default();
        for v in [
            Violation::MembershipWithoutUser,
            Violation::MembershipWithoutGroup,
            Violation::LinkWithoutGroup,
            Violation::LinkWithoutContainer,
            Violation::InvitationWithoutGroup,
        ] {
            assert!(!still_violates(v, &parent_back), "{v}");
            assert!(still_violates(v, &parent_gone), "{v}");
            assert!(!still_violates(v, &subject_gone), "{v}");
        }
        let relinked = Observed {
            subject: present.clone(),
            live_links: 1,
            ..Default::default()
        };
        assert!(!still_violates(Violation::OrphanContainer, &relinked));
        assert!(still_violates(Violation::OrphanContainer, &parent_gone));
        assert!(!still_violates(
            Violation::MultiplyLinkedContainer,
            &relinked
        ));
        let joined = Observed {
            subject: present.clone(),
            live_members: 1,
            ..Default::default()
        };
        assert!(!still_violates(Violation::EmptyGroup, &joined));
        assert!(still_violates(Violation::EmptyGroup, &parent_gone));
        let orphans = Observed {
            orphans_left: vec![ItemKey::Group(gid(1))],
            ..Default::default()
        };
        assert!(still_violates(Violation::OrphanWorkerItem, &orphans));
        let owner_back = Observed {
            subject: present,
            ..orphans.clone()
        };
        assert!(!still_violates(Violation::OrphanWorkerItem, &owner_back));
        assert!(!still_violates(
            Violation::OrphanWorkerItem,
            &Observed::default()
        ));
    }

    #[test]
    fn repairs_are_conditional_where_a_write_could_race() {
        let mut inv = ItemKey::InvitationLink(gid(1)).to_attributes();
        inv.insert(
            attr::INVITATION_LINK_HASH.into(),
            AttributeValue::S("0123456789abcdef0123456789abcdef".into()),
        );
        inv.insert(
            attr::LINK_EXPIRY_DATETIME.into(),
            AttributeValue::S("2024-03-22T22:03:33.123Z".into()),
        );
        let o = Observed {
            subject: Some(inv),
            ..Default::default()
        };
        let Repair::DeleteSubjectIf(cond) = plan_repair(
            Violation::InvitationWithoutGroup,
            &o,
            EmptyGroupPolicy::Delete,
        ) else {
            panic!("invitation deletes must be conditional")
        };
        assert_eq!(cond.values.len(), 2);
        assert!(cond.names.values().any(|n| n == attr::LINK_EXPIRY_DATETIME));
        assert!(matches!(
            plan_repair(Violation::EmptyGroup, &o, EmptyGroupPolicy::Delete),
            Repair::DeleteGroup(_)
        ));
        assert_eq!(
            plan_repair(Violation::EmptyGroup, &o, EmptyGroupPolicy::Report),
            Repair::ReportOnly
        );
        assert_eq!(
            plan_repair(
                Violation::MultiplyLinkedContainer,
                &o,
                EmptyGroupPolicy::Delete
            ),
            Repair::ReportOnly
        );
        assert_eq!(
            plan_repair(Violation::LinkWithoutGroup, &o, EmptyGroupPolicy::Delete),
            Repair::DeleteSubject
        );
    }

    #[test]
    fn subjects_fit_their_violation() {
        for v in Violation::ALL {
            let fits: Vec<ItemKind> = family()
                .iter()
                .filter(|k| subject_fits(v, k))
                .map(ItemKey::kind)
                .collect();
            assert!(!fits.is_empty(), "{v}");
        }
        assert_eq!(
            missing_parent(
                Violation::LinkWithoutContainer,
                &ItemKey::ContainerLink {
                    group: gid(1),
                    container: cid(2)
                }
            ),
            Some(ItemKey::Container(cid(2)))
        );
        assert_eq!(
            missing_parent(Violation::EmptyGroup, &ItemKey::Group(gid(1))),
            None
        );
    }

    #[test]
    fn checkpoint_round_trips() {
        let t0: DateTime<Utc> = "2024-03-25T00:00:00Z".parse().unwrap();
        let mut c = Checkpoint::new(t0, 3);
        assert!(c.is_fresh() && !c.is_done());
        c.positions[0] = Position::Done;
        c.positions[1] = Position::At(ItemKey::Group(gid(1)).to_attributes());
        c.ticks = 2;
        let item = c.to_item();
        for name in attr::INDEXED {
            assert!(!item.contains_key(name), "{name}");
        }
        assert_eq!(Checkpoint::from_item(&item), Some(c));
        let mut broken = item.clone();
        broken.insert(
            POSITIONS.into(),
            AttributeValue::L(vec![AttributeValue::N("1".into())]),
        );
        assert_eq!(Checkpoint::from_item(&broken), None);
    }
}

/// What a stream change asks of the relationship job: the pure part of
/// [`super::RelationshipHandler`]'s decision (the handler then confirms with
/// consistent reads and performs the lookups and deletes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCascade {
    /// An insert or a modify: left to the audit (a parent may not be
    /// written yet).
    LeftToAudit,
    /// A removed group: cascade its memberships, links and invitation.
    Group(GroupId),
    /// A removed user: delete the user's memberships.
    User(UserId),
    /// A removed container: delete the links to it.
    Container(ContainerId),
    /// A removed membership: the group may now be empty.
    Membership {
        /// The user who left.
        user: UserId,
        /// The group they left.
        group: GroupId,
    },
    /// A removal of an item no relationship rule concerns.
    NotRelationship,
}

/// The relationship job's decision for one stream change (no I/O).
pub fn plan_stream_change(change: &crate::worker::Change) -> StreamCascade {
    if !change.is_removal() {
        return StreamCascade::LeftToAudit;
    }
    match change.key {
        ItemKey::Group(g) => StreamCascade::Group(g),
        ItemKey::User(u) => StreamCascade::User(u),
        ItemKey::Container(c) => StreamCascade::Container(c),
        ItemKey::Membership { user, group } => StreamCascade::Membership { user, group },
        _ => StreamCascade::NotRelationship,
    }
}
