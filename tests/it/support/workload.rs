//! A seeded, pure workload generator: a consistent Nishiki table (the
//! *population*) and a sequence of the live service's write calls against
//! it, including the leftovers the service is known to produce (see
//! `docs/NISHIKI-TABLE.md`, "How the service leaves the table inconsistent").
//!
//! No I/O here. The same [`WorkloadSpec`] (same seed) always gives the same
//! [`Workload`]: every id, hash, name and choice comes from one
//! `StdRng::seed_from_u64(seed)`, never from `random()`.
//!
//! Used by the end-to-end load driver (`benches/load.rs`), the fault
//! injection tests and `tests/it/workload.rs`.
//!
//! # The population
//! `users` users (`user-<n>`, `user-<n>@example.invalid`: no real-looking
//! personal data), `groups` groups with 1 to 4 members each (every
//! membership refers to a live user and a live group), `containers_per_group`
//! containers per group (each linked from exactly one group) holding
//! `foods_per_container` foods (about a quarter with an expiry within a few
//! days of `now`, a quarter without expiry, the rest far in the future), and
//! invitation links on `min(invitations, groups)` groups (half of them
//! already expired).
//!
//! # The calls
//! `operations` service operations, each a short list of unconditional
//! single Put/Delete calls ([`ServiceCall`]) that the service issues in
//! parallel (in any order); operations follow one another. The operations
//! mirror `tests/it/service.rs`:
//!
//! | operation | calls | what the service leaves behind |
//! |---|---|---|
//! | sign-up | Put User, Group, Membership, Container, Link | |
//! | create group | Put Group, Membership | |
//! | create container | Put Container, Link | |
//! | edit foods | Put Container (whole item rewritten) | |
//! | delete container | Delete Container, Delete Link | |
//! | delete group | Delete each Container, the InvitationLink and the Group | every membership and container link |
//! | delete user | delete group (above) for each group the user is the only member of, Delete User | the user's memberships |
//! | leave group | Delete Membership (the last member may leave) | an empty group |
//! | join | Put Membership (no check) | |
//! | create invitation | Put InvitationLink (new hash, now + 24 h) | |
//! | renew invitation | Put InvitationLink (same hash, now + 24 h) **and** Delete of the same key, at once | maybe no link at all |
//!
//! With probability `leftover_rate`, a multi-write deletion leaves out one
//! of its Deletes other than its primary (first) one — the Container delete
//! of a container deletion, the Group delete of a group deletion, the User
//! delete of a user deletion stay: e.g. a container deletion whose link
//! delete is lost (a dangling link), a group deletion that forgets a
//! container or its invitation link, a user deletion that forgets one of
//! the groups only they belonged to. Puts are never lost (the service's
//! creations are awaited). That is the drift the worker repairs, on top of
//! the leftovers every group and user deletion always leaves.
//!
//! Every Delete targets a key that was in the population or was put by an
//! earlier call, and every Put of a relationship (membership, link,
//! invitation) refers to a user/group/container the service still considers
//! live at that point.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use chrono::{DateTime, Duration, SubsecRound, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use nishiki_worker::items::{
    Container, ContainerLink, Entity, Food, Group, InvitationLink, Item, Membership, User,
};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, UserId};

/// One write call of the live service: a single unconditional Put or Delete.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ServiceCall {
    Put(Item),
    Delete(ItemKey),
}

impl ServiceCall {
    /// The key the call writes.
    pub(crate) fn key(&self) -> ItemKey {
        match self {
            ServiceCall::Put(item) => {
                ItemKey::from_attributes(item).expect("generated items have valid keys")
            }
            ServiceCall::Delete(key) => key.clone(),
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkloadSpec {
    pub seed: u64,
    pub users: usize,
    pub groups: usize,
    pub containers_per_group: usize,
    pub foods_per_container: usize,
    /// Groups with an invitation link (at most `groups`).
    pub invitations: usize,
    /// Service operations (each one or more calls).
    pub operations: usize,
    /// Probability that a multi-write deletion leaves out one of its Deletes.
    pub leftover_rate: f64,
    /// The service's clock for every operation; expiries are spread around it.
    pub now: DateTime<Utc>,
}

/// `2024-03-25T09:00:00Z`, the default `now` of [`WorkloadSpec`].
pub(crate) fn default_now() -> DateTime<Utc> {
    "2024-03-25T09:00:00Z".parse().expect("valid datetime")
}

impl WorkloadSpec {
    /// A small workload (tens of items and calls) for randomized tests.
    pub(crate) fn small(seed: u64) -> Self {
        WorkloadSpec {
            seed,
            users: 8,
            groups: 5,
            containers_per_group: 2,
            foods_per_container: 3,
            invitations: 3,
            operations: 20,
            leftover_rate: 0.2,
            now: default_now(),
        }
    }

    /// A workload scaled by its number of users: `3/4` groups per user, two
    /// containers of four foods per group, an invitation on a quarter of the
    /// groups, one operation per user, 10 % leftovers.
    pub(crate) fn sized(seed: u64, users: usize) -> Self {
        let users = users.max(1);
        let groups = (users * 3 / 4).max(1);
        WorkloadSpec {
            seed,
            users,
            groups,
            containers_per_group: 2,
            foods_per_container: 4,
            invitations: groups / 4,
            operations: users,
            leftover_rate: 0.1,
            now: default_now(),
        }
    }
}

/// What the service operation was (for reports and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum OpKind {
    SignUp,
    CreateGroup,
    CreateContainer,
    EditFoods,
    DeleteContainer,
    DeleteGroup,
    DeleteUser,
    LeaveGroup,
    Join,
    CreateInvitation,
    RenewInvitation,
}

/// One service operation: `calls[calls]` of [`Workload::calls`], issued in
/// parallel. Operations run one after the other.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Operation {
    pub kind: OpKind,
    /// Range into [`Workload::calls`].
    pub calls: Range<usize>,
    /// Whether the operation left out one of its Deletes.
    pub leftover: bool,
}

/// A generated population and the service's calls against it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Workload {
    /// A consistent table, to be written before the calls.
    pub population: Vec<Item>,
    /// Every call of every operation, in operation order.
    pub calls: Vec<ServiceCall>,
    /// The operations, in order; their call ranges cover `calls` exactly.
    pub operations: Vec<Operation>,
}

impl Workload {
    /// The calls of one operation.
    pub(crate) fn calls_of(&self, op: &Operation) -> &[ServiceCall] {
        &self.calls[op.calls.clone()]
    }
}

const CATEGORIES: [&str; 5] = ["vegetables", "dairy", "meat", "drinks", "unselected"];
const UNITS: [&str; 3] = ["pcs", "g", "ml"];

#[derive(Debug, Default)]
struct GroupState {
    members: BTreeSet<UserId>,
    containers: BTreeSet<ContainerId>,
    /// Hash and expiry of the link the service believes exists.
    invitation: Option<(String, DateTime<Utc>)>,
}

/// What the service believes is live (leftovers are not in here).
struct Model {
    users: BTreeMap<UserId, u64>,
    groups: BTreeMap<GroupId, GroupState>,
    containers: BTreeMap<ContainerId, Container>,
}

struct Gen {
    rng: StdRng,
    now: DateTime<Utc>,
    next_user: u64,
    next_group: u64,
    next_container: u64,
    next_food: u64,
    foods_per_container: usize,
}

impl Gen {
    fn uuid(&mut self) -> uuid::Uuid {
        uuid::Builder::from_random_bytes(self.rng.random()).into_uuid()
    }

    fn hash(&mut self) -> String {
        format!("{:032x}", self.rng.random::<u128>())
    }

    fn pick<T: Copy>(&mut self, set: impl IntoIterator<Item = T>) -> Option<T> {
        let all: Vec<T> = set.into_iter().collect();
        if all.is_empty() {
            None
        } else {
            Some(all[self.rng.random_range(0..all.len())])
        }
    }

    fn offset(&mut self, secs: Range<i64>) -> DateTime<Utc> {
        self.now + Duration::seconds(self.rng.random_range(secs))
    }

    fn user(&mut self) -> (UserId, u64, Item) {
        let id = UserId(self.uuid());
        let n = self.next_user;
        self.next_user += 1;
        let item = Entity::User(User {
            id,
            user_name: format!("user-{n}"),
            email_address: format!("user-{n}@example.invalid"),
            extra: Item::new(),
        })
        .to_item();
        (id, n, item)
    }

    fn group(&mut self) -> (GroupId, Item) {
        let id = GroupId(self.uuid());
        let n = self.next_group;
        self.next_group += 1;
        let item = Entity::Group(Group {
            id,
            group_name: format!("group-{n}"),
            extra: Item::new(),
        })
        .to_item();
        (id, item)
    }

    fn food(&mut self) -> Food {
        let n = self.next_food;
        self.next_food += 1;
        let expiry = match self.rng.random_range(0..4) {
            0 => None,
            // Near now: from two days ago to four days ahead.
            1 => Some(self.offset(-2 * 86_400..4 * 86_400)),
            _ => Some(self.offset(10 * 86_400..90 * 86_400)),
        };
        let unit = if self.rng.random_bool(0.5) {
            Some(UNITS[self.rng.random_range(0..UNITS.len())].to_owned())
        } else {
            None
        };
        Food {
            food_id: FoodId(self.uuid()),
            name: format!("food-{n}"),
            unit,
            quantity: Some(f64::from(self.rng.random_range(1..=12u32))),
            category: Some(CATEGORIES[self.rng.random_range(0..CATEGORIES.len())].to_owned()),
            expiry,
            created_at: self.offset(-60 * 86_400..0),
        }
    }

    fn container(&mut self) -> Container {
        let id = ContainerId(self.uuid());
        let n = self.next_container;
        self.next_container += 1;
        let foods = (0..self.foods_per_container).map(|_| self.food()).collect();
        Container {
            id,
            container_name: format!("container-{n}"),
            foods,
            extra: Item::new(),
        }
    }
}

/// A membership item as the service writes it (also used by tests).
pub(crate) fn membership(user: UserId, group: GroupId) -> Item {
    Entity::Membership(Membership {
        user,
        group,
        extra: Item::new(),
    })
    .to_item()
}

/// A container link item as the service writes it (also used by tests).
pub(crate) fn link(group: GroupId, container: ContainerId) -> Item {
    Entity::ContainerLink(ContainerLink {
        group,
        container,
        extra: Item::new(),
    })
    .to_item()
}

fn invitation(group: GroupId, hash: &str, expiry: DateTime<Utc>) -> Item {
    Entity::InvitationLink(InvitationLink {
        group,
        invitation_link_hash: hash.to_owned(),
        link_expiry_datetime: expiry,
        extra: Item::new(),
    })
    .to_item()
}

/// Generate the population and the calls of `spec`.
///
/// Panics if `spec.groups > 0` and `spec.users == 0` (a group needs a member).
pub(crate) fn generate(spec: &WorkloadSpec) -> Workload {
    assert!(
        spec.users > 0 || spec.groups == 0,
        "a group needs at least one user"
    );
    let mut g = Gen {
        rng: StdRng::seed_from_u64(spec.seed),
        // The service writes milliseconds; keep every generated instant on
        // whole seconds so items round-trip exactly.
        now: spec.now.trunc_subsecs(0),
        next_user: 0,
        next_group: 0,
        next_container: 0,
        next_food: 0,
        foods_per_container: spec.foods_per_container,
    };
    let mut model = Model {
        users: BTreeMap::new(),
        groups: BTreeMap::new(),
        containers: BTreeMap::new(),
    };
    let mut population = Vec::new();

    let mut user_ids = Vec::with_capacity(spec.users);
    for _ in 0..spec.users {
        let (id, n, item) = g.user();
        population.push(item);
        model.users.insert(id, n);
        user_ids.push(id);
    }
    let mut group_ids = Vec::with_capacity(spec.groups);
    for _ in 0..spec.groups {
        let (gid, item) = g.group();
        population.push(item);
        let mut state = GroupState::default();
        let size = g.rng.random_range(1..=4usize).min(user_ids.len());
        while state.members.len() < size {
            let u = user_ids[g.rng.random_range(0..user_ids.len())];
            state.members.insert(u);
        }
        for u in &state.members {
            population.push(membership(*u, gid));
        }
        for _ in 0..spec.containers_per_group {
            let c = g.container();
            population.push(link(gid, c.id));
            state.containers.insert(c.id);
            population.push(Entity::Container(c.clone()).to_item());
            model.containers.insert(c.id, c);
        }
        model.groups.insert(gid, state);
        group_ids.push(gid);
    }
    let invited = spec.invitations.min(group_ids.len());
    // Distinct groups: a partial Fisher-Yates shuffle of the group list.
    for i in 0..invited {
        let j = g.rng.random_range(i..group_ids.len());
        group_ids.swap(i, j);
        let gid = group_ids[i];
        let hash = g.hash();
        let expiry = if g.rng.random_bool(0.5) {
            g.offset(-72 * 3600..-3600)
        } else {
            g.offset(3600..24 * 3600)
        };
        population.push(invitation(gid, &hash, expiry));
        model.groups.get_mut(&gid).expect("group").invitation = Some((hash, expiry));
    }

    let mut calls = Vec::new();
    let mut operations = Vec::new();
    for _ in 0..spec.operations {
        let (kind, mut op_calls) = operation(&mut g, &mut model);
        // Leftover: one Delete other than the primary (first) call is lost.
        let losable: Vec<usize> = (1..op_calls.len())
            .filter(|i| matches!(op_calls[*i], ServiceCall::Delete(_)))
            .collect();
        let leftover = !losable.is_empty()
            && kind != OpKind::RenewInvitation
            && g.rng.random_bool(spec.leftover_rate.clamp(0.0, 1.0));
        if leftover {
            let lost = losable[g.rng.random_range(0..losable.len())];
            op_calls.remove(lost);
        }
        let start = calls.len();
        calls.extend(op_calls);
        operations.push(Operation {
            kind,
            calls: start..calls.len(),
            leftover,
        });
    }
    Workload {
        population,
        calls,
        operations,
    }
}

/// Choose and plan one operation, updating the model to what the service
/// believes afterwards. The first call is the operation's primary write
/// (for deletions, the one that is never lost).
fn operation(g: &mut Gen, m: &mut Model) -> (OpKind, Vec<ServiceCall>) {
    const WEIGHTS: [(OpKind, u32); 11] = [
        (OpKind::EditFoods, 30),
        (OpKind::CreateContainer, 10),
        (OpKind::DeleteContainer, 9),
        (OpKind::CreateGroup, 7),
        (OpKind::DeleteGroup, 8),
        (OpKind::DeleteUser, 4),
        (OpKind::LeaveGroup, 7),
        (OpKind::Join, 8),
        (OpKind::CreateInvitation, 4),
        (OpKind::RenewInvitation, 7),
        (OpKind::SignUp, 6),
    ];
    let total: u32 = WEIGHTS.iter().map(|(_, w)| w).sum();
    // Try a few draws; an operation without a target (e.g. no container to
    // edit) falls back to a sign-up, which is always possible.
    for _ in 0..8 {
        let mut r = g.rng.random_range(0..total);
        let kind = WEIGHTS
            .iter()
            .find(|(_, w)| {
                if r < *w {
                    true
                } else {
                    r -= w;
                    false
                }
            })
            .map(|(k, _)| *k)
            .expect("r < total");
        if let Some(calls) = plan(kind, g, m) {
            return (kind, calls);
        }
    }
    let calls = plan(OpKind::SignUp, g, m).expect("sign-up always possible");
    (OpKind::SignUp, calls)
}

fn plan(kind: OpKind, g: &mut Gen, m: &mut Model) -> Option<Vec<ServiceCall>> {
    use ServiceCall::{Delete, Put};
    Some(match kind {
        OpKind::SignUp => {
            let (u, n, user) = g.user();
            let (gid, group) = g.group();
            let c = g.container();
            m.users.insert(u, n);
            let mut state = GroupState::default();
            state.members.insert(u);
            state.containers.insert(c.id);
            m.groups.insert(gid, state);
            let calls = vec![
                Put(Entity::Container(c.clone()).to_item()),
                Put(user),
                Put(group),
                Put(membership(u, gid)),
                Put(link(gid, c.id)),
            ];
            m.containers.insert(c.id, c);
            calls
        }
        OpKind::CreateGroup => {
            let u = g.pick(m.users.keys().copied())?;
            let (gid, group) = g.group();
            let mut state = GroupState::default();
            state.members.insert(u);
            m.groups.insert(gid, state);
            vec![Put(group), Put(membership(u, gid))]
        }
        OpKind::CreateContainer => {
            let gid = g.pick(m.groups.keys().copied())?;
            let c = g.container();
            m.groups.get_mut(&gid)?.containers.insert(c.id);
            let calls = vec![
                Put(Entity::Container(c.clone()).to_item()),
                Put(link(gid, c.id)),
            ];
            m.containers.insert(c.id, c);
            calls
        }
        OpKind::EditFoods => {
            let cid = g.pick(m.containers.keys().copied())?;
            let mut c = m.containers.remove(&cid)?;
            match g.rng.random_range(0..4) {
                0 => c.foods.push(g.food()),
                1 if !c.foods.is_empty() => {
                    let i = g.rng.random_range(0..c.foods.len());
                    c.foods.remove(i);
                }
                2 if !c.foods.is_empty() => {
                    let i = g.rng.random_range(0..c.foods.len());
                    c.foods[i].expiry = Some(g.offset(-86_400..3 * 86_400));
                }
                _ if !c.foods.is_empty() => {
                    let i = g.rng.random_range(0..c.foods.len());
                    c.foods[i].quantity = Some(f64::from(g.rng.random_range(1..=12u32)));
                }
                _ => c.foods.push(g.food()),
            }
            let call = Put(Entity::Container(c.clone()).to_item());
            m.containers.insert(cid, c);
            vec![call]
        }
        OpKind::DeleteContainer => {
            let pairs: Vec<(GroupId, ContainerId)> = m
                .groups
                .iter()
                .flat_map(|(gid, s)| s.containers.iter().map(move |c| (*gid, *c)))
                .collect();
            let (gid, cid) = g.pick(pairs)?;
            m.groups.get_mut(&gid)?.containers.remove(&cid);
            m.containers.remove(&cid);
            vec![
                Delete(ItemKey::Container(cid)),
                Delete(ItemKey::ContainerLink {
                    group: gid,
                    container: cid,
                }),
            ]
        }
        OpKind::DeleteGroup => {
            let gid = g.pick(m.groups.keys().copied())?;
            delete_group_calls(m, gid)
        }
        OpKind::DeleteUser => {
            let u = g.pick(m.users.keys().copied())?;
            let sole: Vec<GroupId> = m
                .groups
                .iter()
                .filter(|(_, s)| s.members.len() == 1 && s.members.contains(&u))
                .map(|(gid, _)| *gid)
                .collect();
            let mut calls = vec![Delete(ItemKey::User(u))];
            for gid in sole {
                calls.extend(delete_group_calls(m, gid));
            }
            m.users.remove(&u);
            // The worker removes the user's memberships (cascade); the
            // service no longer sees the user in any group.
            for s in m.groups.values_mut() {
                s.members.remove(&u);
            }
            calls
        }
        OpKind::LeaveGroup => {
            let pairs: Vec<(GroupId, UserId)> = m
                .groups
                .iter()
                .flat_map(|(gid, s)| s.members.iter().map(move |u| (*gid, *u)))
                .collect();
            let (gid, u) = g.pick(pairs)?;
            m.groups.get_mut(&gid)?.members.remove(&u);
            vec![Delete(ItemKey::Membership {
                user: u,
                group: gid,
            })]
        }
        OpKind::Join => {
            let gid = g.pick(m.groups.keys().copied())?;
            let members = &m.groups.get(&gid)?.members;
            let u = g.pick(m.users.keys().copied().filter(|u| !members.contains(u)))?;
            m.groups.get_mut(&gid)?.members.insert(u);
            vec![Put(membership(u, gid))]
        }
        OpKind::CreateInvitation => {
            let gid = g.pick(
                m.groups
                    .iter()
                    .filter(|(_, s)| s.invitation.is_none())
                    .map(|(gid, _)| *gid),
            )?;
            let hash = g.hash();
            let expiry = g.now + Duration::hours(24);
            let call = Put(invitation(gid, &hash, expiry));
            m.groups.get_mut(&gid)?.invitation = Some((hash, expiry));
            vec![call]
        }
        OpKind::RenewInvitation => {
            let gid = g.pick(
                m.groups
                    .iter()
                    .filter(|(_, s)| s.invitation.is_some())
                    .map(|(gid, _)| *gid),
            )?;
            let state = m.groups.get_mut(&gid)?;
            let (hash, _) = state.invitation.clone()?;
            let expiry = g.now + Duration::hours(24);
            state.invitation = Some((hash.clone(), expiry));
            vec![
                Put(invitation(gid, &hash, expiry)),
                Delete(ItemKey::InvitationLink(gid)),
            ]
        }
    })
}

/// A group deletion as the service does it: the Group item first (primary),
/// then its containers and its invitation link. Memberships and container
/// links stay behind (the worker's cascade removes them).
fn delete_group_calls(m: &mut Model, gid: GroupId) -> Vec<ServiceCall> {
    let state = m.groups.remove(&gid).unwrap_or_default();
    let mut calls = vec![ServiceCall::Delete(ItemKey::Group(gid))];
    for c in &state.containers {
        m.containers.remove(c);
        calls.push(ServiceCall::Delete(ItemKey::Container(*c)));
    }
    if state.invitation.is_some() {
        calls.push(ServiceCall::Delete(ItemKey::InvitationLink(gid)));
    }
    calls
}

/// One group with many dependents, for the bulk-delete bound: `members`
/// users with their memberships, `containers` linked containers (each with
/// `foods_per_container` foods) and an invitation link.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BigGroup {
    pub group: GroupId,
    /// The Group item and everything that hangs off it (users included).
    pub items: Vec<Item>,
    /// What a group cascade deletes once the Group item is gone:
    /// memberships, container links, containers and the invitation link.
    pub dependents: usize,
}

/// A [`BigGroup`] generated from `seed` (same seed, same items).
pub(crate) fn big_group(
    seed: u64,
    members: usize,
    containers: usize,
    now: DateTime<Utc>,
) -> BigGroup {
    let mut g = Gen {
        rng: StdRng::seed_from_u64(seed),
        now: now.trunc_subsecs(0),
        next_user: 0,
        next_group: 0,
        next_container: 0,
        next_food: 0,
        foods_per_container: 2,
    };
    let (gid, group) = g.group();
    let mut items = vec![group];
    for _ in 0..members {
        let (u, _, user) = g.user();
        items.push(user);
        items.push(membership(u, gid));
    }
    for _ in 0..containers {
        let c = g.container();
        items.push(link(gid, c.id));
        items.push(Entity::Container(c).to_item());
    }
    let hash = g.hash();
    let expiry = g.offset(3600..24 * 3600);
    items.push(invitation(gid, &hash, expiry));
    BigGroup {
        group: gid,
        items,
        dependents: members + 2 * containers + 1,
    }
}
