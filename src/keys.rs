//! The shared key encoding: the only place that builds or parses `PK`/`SK`
//! strings.
//!
//! Every item of the Nishiki table (as the live service writes it, see
//! `docs/NISHIKI-TABLE.md`) and every item the worker owns has a typed key
//! here. [`ItemKey::encode`] turns a key into its `(PK, SK)` strings and
//! [`ItemKey::decode`] parses them back, with a typed [`KeyError`] for every
//! malformed case. Literals are exactly the service's: `User`, `Group`,
//! `Container`, `InvitationLinkHash`, `Group#<uuid>`, `Container#<uuid>`.
//!
//! Worker-owned keys (the service never reads them):
//!
//! | item | PK | SK |
//! |---|---|---|
//! | expiring-food flag | `<groupId>` | `ExpiringFood#<containerId>#<foodId>` |
//! | expiry reminder | `ExpiryReminder#<YYYY-MM-DD>` | `<containerId>#<foodId>` |
//! | audit suspect | `AuditSuspect` | `<Violation>#<subject PK>#<subject SK>` |
//! | job checkpoint | `WorkerCheckpoint` | `<job>` |
//!
//! None of them carries `GroupId`, `ContainerId`, `InvitationLinkHash`,
//! `LinkExpiryDatetime` or `EMailAddress`, so they never show up in the
//! service's indexes.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{Datelike, NaiveDate};
use uuid::Uuid;

/// Partition key attribute name.
pub const PK: &str = "PK";
/// Sort key attribute name.
pub const SK: &str = "SK";

const USER: &str = "User";
const GROUP: &str = "Group";
const CONTAINER: &str = "Container";
const INVITATION: &str = "InvitationLinkHash";
const CATEGORY: &str = "Category";
const MEMBERSHIP_PREFIX: &str = "Group#";
const LINK_PREFIX: &str = "Container#";
const FLAG_PREFIX: &str = "ExpiringFood#";
const REMINDER_PREFIX: &str = "ExpiryReminder#";
const SUSPECT_PK: &str = "AuditSuspect";
const CHECKPOINT_PK: &str = "WorkerCheckpoint";

/// Why a `(PK, SK)` pair is not a key of this table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// `PK`, `SK` or an id inside one is the empty string; names which
    /// (`PK`, `SK`, `group id`, ...).
    #[error("empty {0}")]
    Empty(&'static str),
    /// The sort key is none this partition can hold (or a reminder's or
    /// suspect's sort key lacks its `#` parts).
    #[error("unknown sort key {sk:?} for partition {pk:?}")]
    UnknownSortKey {
        /// The partition key as read.
        pk: String,
        /// The sort key as read.
        sk: String,
    },
    /// The sort key is a literal of the table in another case (`user`
    /// for `User`): the service writes them exactly.
    #[error("sort key {found:?} has the wrong case; the service writes {expected:?}")]
    WrongCase {
        /// The sort key as read.
        found: String,
        /// The literal (or prefix, e.g. `Group#`) it was meant to be.
        expected: &'static str,
    },
    /// An id is not a UUID as the service writes it: 36 characters,
    /// lowercase, hyphenated.
    #[error("{what} {value:?} is not a lowercase hyphenated UUID")]
    BadUuid {
        /// Which id (`user id`, `group id`, `container id`, `food id`).
        what: &'static str,
        /// The text as read.
        value: String,
    },
    /// A `#` where the key has none (an id with a `#`, or an audit
    /// suspect about a worker-owned item other than a flag).
    #[error("stray '#' in {what} {value:?}")]
    StrayHash {
        /// Which part (an id, or `audit suspect subject`).
        what: &'static str,
        /// The text as read.
        value: String,
    },
    /// A reminder's date is not `YYYY-MM-DD`.
    #[error("{what} {value:?} is not a YYYY-MM-DD date")]
    BadDate {
        /// Which date (`reminder date`).
        what: &'static str,
        /// The text as read.
        value: String,
    },
    /// A name that is none of its kind's (a job, a violation).
    #[error("unknown {what} {value:?}")]
    Unknown {
        /// Which kind of name (`job`, `violation`).
        what: &'static str,
        /// The text as read.
        value: String,
    },
    /// An item lacks a key attribute, or holds it as a non-string; names
    /// which (`PK`, `SK`).
    #[error("missing or non-string key attribute {0}")]
    MissingAttribute(&'static str),
}

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident, $what:literal) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh random (v4) id.
            pub fn random() -> Self {
                Self(Uuid::new_v4())
            }
            fn parse_field(s: &str) -> Result<Self, KeyError> {
                parse_uuid($what, s).map(Self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        impl FromStr for $name {
            type Err = KeyError;
            fn from_str(s: &str) -> Result<Self, KeyError> {
                Self::parse_field(s)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // Parsed from the borrowed text: no copy of it.
                struct Text;
                impl serde::de::Visitor<'_> for Text {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<$name, E> {
                        s.parse().map_err(E::custom)
                    }
                }
                d.deserialize_string(Text)
            }
        }
    };
}

id_type!(
    /// A user's id (exists only in `PK`).
    UserId,
    "user id"
);
id_type!(
    /// A group's id.
    GroupId,
    "group id"
);
id_type!(
    /// A container's id.
    ContainerId,
    "container id"
);
id_type!(
    /// A food's id (inside a container's `Foods`).
    FoodId,
    "food id"
);

/// Parse an id exactly as the service writes it: lowercase, hyphenated.
fn parse_uuid(what: &'static str, s: &str) -> Result<Uuid, KeyError> {
    if s.is_empty() {
        return Err(KeyError::Empty(what));
    }
    if let Some(id) = canonical_uuid(s) {
        return Ok(id);
    }
    // The canonical form holds no `#`: look for one only to say why not.
    let value = s.to_owned();
    Err(if s.contains('#') {
        KeyError::StrayHash { what, value }
    } else {
        KeyError::BadUuid { what, value }
    })
}

/// The value of each lowercase hex digit, 16 for any other byte.
const HEX: [u8; 256] = {
    let mut table = [16; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// The id in `s` when `s` is its canonical form: hyphens at 8, 13, 18 and
/// 23, lowercase hex digits elsewhere (what parsing, then writing the id
/// again and comparing, accepted: the tests hold the two side by side),
/// read in the same pass, a table lookup per digit.
fn canonical_uuid(s: &str) -> Option<Uuid> {
    let b: &[u8; 36] = s.as_bytes().try_into().ok()?;
    if [b[8], b[13], b[18], b[23]] != [b'-'; 4] {
        return None;
    }
    let hex = |digits: &[u8], acc: u64| {
        digits.iter().try_fold(acc, |acc, &c| {
            let digit = HEX[usize::from(c)];
            (digit < 16).then_some(acc << 4 | u64::from(digit))
        })
    };
    let high = hex(&b[14..18], hex(&b[9..13], hex(&b[..8], 0)?)?)?;
    let low = hex(&b[24..], hex(&b[19..23], 0)?)?;
    Some(Uuid::from_u64_pair(high, low))
}

worker_engine::job_names! {
    /// A worker job, as named in checkpoints and on the command line.
    pub enum Job {
        /// Deletes expired invitation links (every 15 minutes).
        SweepInvitations = "sweep-invitations",
        /// The relationship audit: finds and repairs drift (daily).
        Audit = "audit",
        /// The daily expiry tick: re-decides the foods of the reminders
        /// due, puts or deletes their flags, announces the new ones.
        FlagExpiring = "flag-expiring",
        /// Writes the flags and reminders the stream would have written
        /// for every existing container (on demand, resumable: enabling a
        /// stream replays no existing item).
        Backfill = "backfill",
    }
}

impl FromStr for Job {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        <Job as worker_engine::schedule::JobName>::parse(s).ok_or_else(|| KeyError::Unknown {
            what: "job",
            value: s.to_owned(),
        })
    }
}

/// The invariant an audit suspect record is about (see the relationship job).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Violation {
    /// A membership whose user item is gone.
    MembershipWithoutUser,
    /// A membership whose group item is gone.
    MembershipWithoutGroup,
    /// A container link whose group item is gone.
    LinkWithoutGroup,
    /// A container link whose container item is gone.
    LinkWithoutContainer,
    /// A container no live group links to.
    OrphanContainer,
    /// A container linked from more than one live group.
    MultiplyLinkedContainer,
    /// An invitation link whose group is gone.
    InvitationWithoutGroup,
    /// A group without members.
    EmptyGroup,
    /// A worker-owned item whose owner is gone.
    OrphanWorkerItem,
}

impl Violation {
    /// Every violation, in declaration order (the audit's report lists
    /// each, zeros included).
    pub const ALL: [Violation; 9] = [
        Violation::MembershipWithoutUser,
        Violation::MembershipWithoutGroup,
        Violation::LinkWithoutGroup,
        Violation::LinkWithoutContainer,
        Violation::OrphanContainer,
        Violation::MultiplyLinkedContainer,
        Violation::InvitationWithoutGroup,
        Violation::EmptyGroup,
        Violation::OrphanWorkerItem,
    ];

    /// The violation's name as stored in a suspect's `SK` and reported
    /// (the variant's name, e.g. `EmptyGroup`).
    pub fn as_str(self) -> &'static str {
        match self {
            Violation::MembershipWithoutUser => "MembershipWithoutUser",
            Violation::MembershipWithoutGroup => "MembershipWithoutGroup",
            Violation::LinkWithoutGroup => "LinkWithoutGroup",
            Violation::LinkWithoutContainer => "LinkWithoutContainer",
            Violation::OrphanContainer => "OrphanContainer",
            Violation::MultiplyLinkedContainer => "MultiplyLinkedContainer",
            Violation::InvitationWithoutGroup => "InvitationWithoutGroup",
            Violation::EmptyGroup => "EmptyGroup",
            Violation::OrphanWorkerItem => "OrphanWorkerItem",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Violation {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Violation::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| KeyError::Unknown {
                what: "violation",
                value: s.to_owned(),
            })
    }
}

/// What kind of item a key addresses; handlers register by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ItemKind {
    /// A user item ([`ItemKey::User`]).
    User,
    /// A user's membership of a group ([`ItemKey::Membership`]).
    Membership,
    /// A group item ([`ItemKey::Group`]).
    Group,
    /// A group's link to a container ([`ItemKey::ContainerLink`]).
    ContainerLink,
    /// A group's invitation link ([`ItemKey::InvitationLink`]).
    InvitationLink,
    /// A container item, with its foods ([`ItemKey::Container`]).
    Container,
    /// The category list ([`ItemKey::Category`]).
    Category,
    /// Worker-owned: an expiring-food flag ([`ItemKey::ExpiringFood`]).
    ExpiringFood,
    /// Worker-owned: an expiry reminder ([`ItemKey::ExpiryReminder`]).
    ExpiryReminder,
    /// Worker-owned: an audit suspect ([`ItemKey::AuditSuspect`]).
    AuditSuspect,
    /// Worker-owned: a job's checkpoint ([`ItemKey::Checkpoint`]).
    Checkpoint,
}

impl ItemKind {
    /// Items the worker itself writes. Stream changes of these are ignored
    /// (loop guard).
    pub fn is_worker_owned(self) -> bool {
        matches!(
            self,
            ItemKind::ExpiringFood
                | ItemKind::ExpiryReminder
                | ItemKind::AuditSuspect
                | ItemKind::Checkpoint
        )
    }
}

/// The typed key of every item in the table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ItemKey {
    /// `PK=<userId>`, `SK=User`.
    User(UserId),
    /// `PK=<userId>`, `SK=Group#<groupId>`.
    Membership {
        /// The member (the partition).
        user: UserId,
        /// The group they belong to.
        group: GroupId,
    },
    /// `PK=<groupId>`, `SK=Group`.
    Group(GroupId),
    /// `PK=<groupId>`, `SK=Container#<containerId>`.
    ContainerLink {
        /// The group that owns the container (the partition).
        group: GroupId,
        /// The linked container.
        container: ContainerId,
    },
    /// `PK=<groupId>`, `SK=InvitationLinkHash`.
    InvitationLink(GroupId),
    /// `PK=<containerId>`, `SK=Container`.
    Container(ContainerId),
    /// `PK=Category`, `SK=Category`.
    Category,
    /// Worker-owned flag of a food nearing or past expiry, in the group's
    /// partition: `PK=<groupId>`, `SK=ExpiringFood#<containerId>#<foodId>`.
    ExpiringFood {
        /// The group that owns the container (the partition).
        group: GroupId,
        /// The food's container.
        container: ContainerId,
        /// The food, in its container's `Foods`.
        food: FoodId,
    },
    /// Worker-owned reminder to look at a food on a given day:
    /// `PK=ExpiryReminder#<YYYY-MM-DD>`, `SK=<containerId>#<foodId>`.
    ExpiryReminder {
        /// The day the food is looked at (in `EXPIRY_TIME_ZONE`).
        date: NaiveDate,
        /// The food's container.
        container: ContainerId,
        /// The food, in its container's `Foods`.
        food: FoodId,
    },
    /// Worker-owned record of a suspected invariant violation:
    /// `PK=AuditSuspect`, `SK=<Violation>#<subject PK>#<subject SK>`.
    AuditSuspect {
        /// The invariant the subject seemed to break.
        violation: Violation,
        /// The key of the item the suspect is about.
        subject: Box<ItemKey>,
    },
    /// Worker-owned checkpoint of a job: `PK=WorkerCheckpoint`, `SK=<job>`.
    Checkpoint(Job),
}

impl ItemKey {
    /// The kind of item this key addresses.
    pub fn kind(&self) -> ItemKind {
        match self {
            ItemKey::User(_) => ItemKind::User,
            ItemKey::Membership { .. } => ItemKind::Membership,
            ItemKey::Group(_) => ItemKind::Group,
            ItemKey::ContainerLink { .. } => ItemKind::ContainerLink,
            ItemKey::InvitationLink(_) => ItemKind::InvitationLink,
            ItemKey::Container(_) => ItemKind::Container,
            ItemKey::Category => ItemKind::Category,
            ItemKey::ExpiringFood { .. } => ItemKind::ExpiringFood,
            ItemKey::ExpiryReminder { .. } => ItemKind::ExpiryReminder,
            ItemKey::AuditSuspect { .. } => ItemKind::AuditSuspect,
            ItemKey::Checkpoint(_) => ItemKind::Checkpoint,
        }
    }

    /// The `(PK, SK)` strings of this key.
    pub fn encode(&self) -> (String, String) {
        use Part::{Id, Text};
        match self {
            ItemKey::User(u) => (key_text(&[Id(u.0)]), USER.to_owned()),
            ItemKey::Membership { user, group } => (
                key_text(&[Id(user.0)]),
                key_text(&[Text(MEMBERSHIP_PREFIX), Id(group.0)]),
            ),
            ItemKey::Group(g) => (key_text(&[Id(g.0)]), GROUP.to_owned()),
            ItemKey::ContainerLink { group, container } => (
                key_text(&[Id(group.0)]),
                key_text(&[Text(LINK_PREFIX), Id(container.0)]),
            ),
            ItemKey::InvitationLink(g) => (key_text(&[Id(g.0)]), INVITATION.to_owned()),
            ItemKey::Container(c) => (key_text(&[Id(c.0)]), CONTAINER.to_owned()),
            ItemKey::Category => (CATEGORY.to_owned(), CATEGORY.to_owned()),
            ItemKey::ExpiringFood {
                group,
                container,
                food,
            } => (
                key_text(&[Id(group.0)]),
                key_text(&[Text(FLAG_PREFIX), Id(container.0), Text("#"), Id(food.0)]),
            ),
            ItemKey::ExpiryReminder {
                date,
                container,
                food,
            } => (
                Self::reminder_partition(*date),
                key_text(&[Id(container.0), Text("#"), Id(food.0)]),
            ),
            ItemKey::AuditSuspect { violation, subject } => {
                let (spk, ssk) = subject.encode();
                (SUSPECT_PK.to_owned(), format!("{violation}#{spk}#{ssk}"))
            }
            ItemKey::Checkpoint(job) => (CHECKPOINT_PK.to_owned(), job.as_str().to_owned()),
        }
    }

    /// Parse a `(PK, SK)` pair.
    pub fn decode(pk: &str, sk: &str) -> Result<ItemKey, KeyError> {
        if pk.is_empty() {
            return Err(KeyError::Empty("PK"));
        }
        if sk.is_empty() {
            return Err(KeyError::Empty("SK"));
        }
        match pk {
            CATEGORY => {
                return if sk == CATEGORY {
                    Ok(ItemKey::Category)
                } else {
                    Err(unknown_or_wrong_case(pk, sk, &[CATEGORY]))
                };
            }
            SUSPECT_PK => return decode_suspect(sk),
            CHECKPOINT_PK => {
                return sk.parse().map(ItemKey::Checkpoint);
            }
            _ => {}
        }
        if let Some(date) = pk.strip_prefix(REMINDER_PREFIX) {
            return decode_reminder(date, sk);
        }
        if let Some(rest) = sk.strip_prefix(MEMBERSHIP_PREFIX) {
            return Ok(ItemKey::Membership {
                user: UserId::parse_field(pk)?,
                group: GroupId::parse_field(rest)?,
            });
        }
        if let Some(rest) = sk.strip_prefix(LINK_PREFIX) {
            return Ok(ItemKey::ContainerLink {
                group: GroupId::parse_field(pk)?,
                container: ContainerId::parse_field(rest)?,
            });
        }
        if let Some(rest) = sk.strip_prefix(FLAG_PREFIX) {
            let (c, f) = rest
                .split_once('#')
                .ok_or_else(|| KeyError::UnknownSortKey {
                    pk: pk.to_owned(),
                    sk: sk.to_owned(),
                })?;
            return Ok(ItemKey::ExpiringFood {
                group: GroupId::parse_field(pk)?,
                container: ContainerId::parse_field(c)?,
                food: FoodId::parse_field(f)?,
            });
        }
        match sk {
            USER => Ok(ItemKey::User(UserId::parse_field(pk)?)),
            GROUP => Ok(ItemKey::Group(GroupId::parse_field(pk)?)),
            CONTAINER => Ok(ItemKey::Container(ContainerId::parse_field(pk)?)),
            INVITATION => Ok(ItemKey::InvitationLink(GroupId::parse_field(pk)?)),
            _ => Err(unknown_or_wrong_case(
                pk,
                sk,
                &[
                    USER,
                    GROUP,
                    CONTAINER,
                    INVITATION,
                    MEMBERSHIP_PREFIX,
                    LINK_PREFIX,
                    FLAG_PREFIX,
                ],
            )),
        }
    }

    /// The key as the `PK`/`SK` attributes of a DynamoDB item.
    pub fn to_attributes(&self) -> HashMap<String, AttributeValue> {
        let (pk, sk) = self.encode();
        HashMap::from([
            (PK.to_owned(), AttributeValue::S(pk)),
            (SK.to_owned(), AttributeValue::S(sk)),
        ])
    }

    /// Read the key from the `PK`/`SK` attributes of an item (or a stream
    /// record's `Keys`).
    pub fn from_attributes(item: &HashMap<String, AttributeValue>) -> Result<ItemKey, KeyError> {
        let pk = string_attr(item, PK)?;
        let sk = string_attr(item, SK)?;
        ItemKey::decode(pk, sk)
    }

    /// `SK` of every invitation link (the partition value of the sparse
    /// `InvitationLinkExpiry` index).
    pub fn invitation_sort_key() -> &'static str {
        INVITATION
    }

    /// `PK` shared by every [`ItemKey::ExpiryReminder`] due on `date` (the
    /// partition the daily expiry tick queries).
    pub fn reminder_partition(date: NaiveDate) -> String {
        key_text(&[Part::Text(REMINDER_PREFIX), Part::Date(date)])
    }
}

/// A part of a key string.
enum Part<'a> {
    Text(&'a str),
    /// An id as the service writes it: lowercase, hyphenated.
    Id(Uuid),
    /// A date as `YYYY-MM-DD` ([`push_date`]).
    Date(NaiveDate),
}

/// The key string of `parts` in one allocation of its length: the text
/// `format!` gives, without its formatting machinery, which took a
/// twentieth of the stream path.
fn key_text(parts: &[Part]) -> String {
    let len = parts
        .iter()
        .map(|part| match part {
            Part::Text(text) => text.len(),
            Part::Id(_) => uuid::fmt::Hyphenated::LENGTH,
            Part::Date(_) => "YYYY-MM-DD".len(),
        })
        .sum();
    let mut text = String::with_capacity(len);
    for part in parts {
        match part {
            Part::Text(t) => text.push_str(t),
            Part::Id(id) => text.push_str(id.hyphenated().encode_lower(&mut Uuid::encode_buffer())),
            Part::Date(date) => push_date(&mut text, *date),
        }
    }
    text
}

/// `date` as chrono's `%Y-%m-%d` writes it: a year of four digits written
/// here, any other through chrono.
fn push_date(text: &mut String, date: NaiveDate) {
    let year = date.year();
    if !(0..=9999).contains(&year) {
        use fmt::Write;
        let _ = write!(text, "{}", date.format("%Y-%m-%d"));
        return;
    }
    for (i, (n, width)) in [(year as u32, 4), (date.month(), 2), (date.day(), 2)]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            text.push('-');
        }
        for place in (0..width).rev() {
            text.push(char::from(b'0' + (n / 10u32.pow(place) % 10) as u8));
        }
    }
}

fn string_attr<'a>(
    item: &'a HashMap<String, AttributeValue>,
    name: &'static str,
) -> Result<&'a str, KeyError> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Ok(s),
        _ => Err(KeyError::MissingAttribute(name)),
    }
}

fn unknown_or_wrong_case(pk: &str, sk: &str, literals: &[&'static str]) -> KeyError {
    for lit in literals {
        let n = lit.len();
        let same_prefix = sk.len() >= n
            && sk.is_char_boundary(n)
            && sk[..n].eq_ignore_ascii_case(lit)
            && (lit.ends_with('#') || sk.len() == n);
        if same_prefix {
            return KeyError::WrongCase {
                found: sk.to_owned(),
                expected: lit,
            };
        }
    }
    KeyError::UnknownSortKey {
        pk: pk.to_owned(),
        sk: sk.to_owned(),
    }
}

fn decode_reminder(date: &str, sk: &str) -> Result<ItemKey, KeyError> {
    let bad_date = || KeyError::BadDate {
        what: "reminder date",
        value: date.to_owned(),
    };
    if date.len() != 10 {
        return Err(bad_date());
    }
    let date = NaiveDate::parse_from_str(date, "%Y-%m-%d").map_err(|_| bad_date())?;
    let (c, f) = sk.split_once('#').ok_or_else(|| KeyError::UnknownSortKey {
        pk: format!("{REMINDER_PREFIX}{date}"),
        sk: sk.to_owned(),
    })?;
    Ok(ItemKey::ExpiryReminder {
        date,
        container: ContainerId::parse_field(c)?,
        food: FoodId::parse_field(f)?,
    })
}

fn decode_suspect(sk: &str) -> Result<ItemKey, KeyError> {
    let mut parts = sk.splitn(3, '#');
    let (Some(v), Some(spk), Some(ssk)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(KeyError::UnknownSortKey {
            pk: SUSPECT_PK.to_owned(),
            sk: sk.to_owned(),
        });
    };
    let violation: Violation = v.parse()?;
    let subject = ItemKey::decode(spk, ssk)?;
    if subject.kind().is_worker_owned() && subject.kind() != ItemKind::ExpiringFood {
        // Suspects are about table items, and the subject PK must not hold '#'.
        return Err(KeyError::StrayHash {
            what: "audit suspect subject",
            value: sk.to_owned(),
        });
    }
    Ok(ItemKey::AuditSuspect {
        violation,
        subject: Box::new(subject),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const U: &str = "3f1c2b4e-8a9d-4c6e-b1f2-0a1b2c3d4e5f";
    const G: &str = "9b2e7c1a-4d3f-4a8b-9c0d-1e2f3a4b5c6d";
    const C: &str = "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d";

    fn id() -> impl Strategy<Value = Uuid> {
        any::<u128>().prop_map(Uuid::from_u128)
    }

    fn date() -> impl Strategy<Value = NaiveDate> {
        (1i32..=9999, 1u32..=366)
            .prop_filter_map("valid day", |(y, d)| NaiveDate::from_yo_opt(y, d))
    }

    fn service_key() -> impl Strategy<Value = ItemKey> {
        prop_oneof![
            id().prop_map(|u| ItemKey::User(UserId(u))),
            (id(), id()).prop_map(|(u, g)| ItemKey::Membership {
                user: UserId(u),
                group: GroupId(g)
            }),
            id().prop_map(|g| ItemKey::Group(GroupId(g))),
            (id(), id()).prop_map(|(g, c)| ItemKey::ContainerLink {
                group: GroupId(g),
                container: ContainerId(c)
            }),
            id().prop_map(|g| ItemKey::InvitationLink(GroupId(g))),
            id().prop_map(|c| ItemKey::Container(ContainerId(c))),
            Just(ItemKey::Category),
            (id(), id(), id()).prop_map(|(g, c, f)| ItemKey::ExpiringFood {
                group: GroupId(g),
                container: ContainerId(c),
                food: FoodId(f)
            }),
        ]
    }

    /// [`ItemKey::encode`] as `format!` writes it: what [`key_text`] must
    /// write.
    fn encode_by_format(key: &ItemKey) -> (String, String) {
        match key {
            ItemKey::User(u) => (u.to_string(), USER.to_owned()),
            ItemKey::Membership { user, group } => {
                (user.to_string(), format!("{MEMBERSHIP_PREFIX}{group}"))
            }
            ItemKey::Group(g) => (g.to_string(), GROUP.to_owned()),
            ItemKey::ContainerLink { group, container } => {
                (group.to_string(), format!("{LINK_PREFIX}{container}"))
            }
            ItemKey::InvitationLink(g) => (g.to_string(), INVITATION.to_owned()),
            ItemKey::Container(c) => (c.to_string(), CONTAINER.to_owned()),
            ItemKey::Category => (CATEGORY.to_owned(), CATEGORY.to_owned()),
            ItemKey::ExpiringFood {
                group,
                container,
                food,
            } => (
                group.to_string(),
                format!("{FLAG_PREFIX}{container}#{food}"),
            ),
            ItemKey::ExpiryReminder {
                date,
                container,
                food,
            } => (
                format!("{REMINDER_PREFIX}{}", date.format("%Y-%m-%d")),
                format!("{container}#{food}"),
            ),
            ItemKey::AuditSuspect { violation, subject } => {
                let (spk, ssk) = encode_by_format(subject);
                (SUSPECT_PK.to_owned(), format!("{violation}#{spk}#{ssk}"))
            }
            ItemKey::Checkpoint(job) => (CHECKPOINT_PK.to_owned(), job.as_str().to_owned()),
        }
    }

    fn any_key() -> impl Strategy<Value = ItemKey> {
        prop_oneof![
            4 => service_key(),
            1 => (date(), id(), id()).prop_map(|(date, c, f)| ItemKey::ExpiryReminder {
                date,
                container: ContainerId(c),
                food: FoodId(f)
            }),
            1 => (0..Violation::ALL.len(), service_key()).prop_map(|(i, s)| ItemKey::AuditSuspect {
                violation: Violation::ALL[i],
                subject: Box::new(s)
            }),
            1 => (0..Job::ALL.len()).prop_map(|i| ItemKey::Checkpoint(Job::ALL[i])),
        ]
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(key in any_key()) {
            let (pk, sk) = key.encode();
            prop_assert_eq!(ItemKey::decode(&pk, &sk), Ok(key.clone()));
            prop_assert_eq!(ItemKey::from_attributes(&key.to_attributes()), Ok(key));
        }

        #[test]
        fn encode_inverts_decode_on_valid_pairs(pk in "[0-9a-fA-F#-]{0,40}|Category|AuditSuspect|WorkerCheckpoint|ExpiryReminder#[0-9-]{10}",
                                                sk in "(User|Group|Container|InvitationLinkHash|Category|Group#|Container#|ExpiringFood#|audit|backfill|user)[0-9a-fA-F#-]{0,80}") {
            if let Ok(key) = ItemKey::decode(&pk, &sk) {
                prop_assert_eq!(key.encode(), (pk, sk));
            }
        }

        #[test]
        fn encode_inverts_decode_on_generated_valid_pairs(key in any_key()) {
            // Valid pairs are exactly the encodings of keys; check the other direction from them.
            let (pk, sk) = key.encode();
            let decoded = ItemKey::decode(&pk, &sk).unwrap();
            prop_assert_eq!(decoded.encode(), (pk, sk));
        }

        #[test]
        fn encode_writes_what_format_writes(key in any_key()) {
            prop_assert_eq!(key.encode(), encode_by_format(&key));
        }

        #[test]
        fn a_date_reads_as_chrono_writes_it(day in -95_000_000i32..95_000_000) {
            let date = NaiveDate::from_num_days_from_ce_opt(day).unwrap();
            let mut text = String::new();
            push_date(&mut text, date);
            prop_assert_eq!(text, date.format("%Y-%m-%d").to_string());
        }

        #[test]
        fn arbitrary_strings_never_panic(pk in ".{0,60}", sk in ".{0,60}") {
            let _ = ItemKey::decode(&pk, &sk);
        }

        /// The one-pass reading of an id gives what parsing it, writing it
        /// again and comparing gave: ids, ids in capitals, ids with a
        /// character changed, any text of their length.
        #[test]
        fn ids_read_as_parsing_and_writing_again(
            u in any::<u128>(), at in 0usize..36, c in any::<char>(), text in ".{36}|[0-9a-fA-F-]{36}"
        ) {
            let canonical = Uuid::from_u128(u).hyphenated().to_string();
            let mut changed: Vec<char> = canonical.chars().collect();
            changed[at] = c;
            let changed: String = changed.into_iter().collect();
            for s in [canonical.clone(), canonical.to_uppercase(), changed, text] {
                prop_assert_eq!(parse_uuid("id", &s), parse_uuid_twice("id", &s), "{}", s);
            }
        }
    }

    /// The reading [`parse_uuid`] replaced: parse, write again, compare.
    fn parse_uuid_twice(what: &'static str, s: &str) -> Result<Uuid, KeyError> {
        if s.is_empty() {
            return Err(KeyError::Empty(what));
        }
        if s.contains('#') {
            return Err(KeyError::StrayHash {
                what,
                value: s.to_owned(),
            });
        }
        let bad = || KeyError::BadUuid {
            what,
            value: s.to_owned(),
        };
        if s.len() != 36 {
            return Err(bad());
        }
        let uuid = Uuid::parse_str(s).map_err(|_| bad())?;
        let mut buf = Uuid::encode_buffer();
        if uuid.hyphenated().encode_lower(&mut buf) != s {
            return Err(bad());
        }
        Ok(uuid)
    }

    proptest! {
        #[test]
        fn partition_reads_find_the_keys_they_look_for(
            date in date(), g in id(), c in id(), f in id()
        ) {
            let (group, container, food) = (GroupId(g), ContainerId(c), FoodId(f));
            let reminder = ItemKey::ExpiryReminder { date, container, food };
            prop_assert_eq!(ItemKey::reminder_partition(date), reminder.encode().0);
            // A link removal reads the group's partition for the link and
            // the container's flags in that group.
            let group_pk = ItemKey::Group(group).encode().0;
            let flag = ItemKey::ExpiringFood { group, container, food };
            let link = ItemKey::ContainerLink { group, container };
            prop_assert_eq!(&flag.encode().0, &group_pk);
            prop_assert_eq!(&link.encode().0, &group_pk);
            prop_assert_ne!(flag.encode().1, link.encode().1);
        }
    }

    #[test]
    fn service_literals_are_exact() {
        let u: UserId = U.parse().unwrap();
        let g: GroupId = G.parse().unwrap();
        let c: ContainerId = C.parse().unwrap();
        assert_eq!(ItemKey::User(u).encode(), (U.into(), "User".into()));
        assert_eq!(
            ItemKey::Membership { user: u, group: g }.encode(),
            (U.into(), format!("Group#{G}"))
        );
        assert_eq!(ItemKey::Group(g).encode(), (G.into(), "Group".into()));
        assert_eq!(
            ItemKey::ContainerLink {
                group: g,
                container: c
            }
            .encode(),
            (G.into(), format!("Container#{C}"))
        );
        assert_eq!(
            ItemKey::InvitationLink(g).encode(),
            (G.into(), "InvitationLinkHash".into())
        );
        assert_eq!(
            ItemKey::Container(c).encode(),
            (C.into(), "Container".into())
        );
        assert_eq!(
            ItemKey::invitation_sort_key(),
            ItemKey::InvitationLink(g).encode().1
        );
        assert_eq!(
            ItemKey::Category.encode(),
            ("Category".into(), "Category".into())
        );
    }

    #[test]
    fn worker_keys_are_documented_shapes() {
        let g: GroupId = G.parse().unwrap();
        let c: ContainerId = C.parse().unwrap();
        let f: FoodId = U.parse().unwrap();
        let flag = ItemKey::ExpiringFood {
            group: g,
            container: c,
            food: f,
        };
        assert_eq!(flag.encode(), (G.into(), format!("ExpiringFood#{C}#{U}")));
        let rem = ItemKey::ExpiryReminder {
            date: NaiveDate::from_ymd_opt(2024, 3, 28).unwrap(),
            container: c,
            food: f,
        };
        assert_eq!(
            rem.encode(),
            ("ExpiryReminder#2024-03-28".into(), format!("{C}#{U}"))
        );
        let sus = ItemKey::AuditSuspect {
            violation: Violation::MembershipWithoutGroup,
            subject: Box::new(ItemKey::Membership {
                user: UserId(f.0),
                group: g,
            }),
        };
        assert_eq!(
            sus.encode(),
            (
                "AuditSuspect".into(),
                format!("MembershipWithoutGroup#{U}#Group#{G}")
            )
        );
        assert_eq!(
            ItemKey::Checkpoint(Job::Audit).encode(),
            ("WorkerCheckpoint".into(), "audit".into())
        );
        for k in [flag, rem, sus, ItemKey::Checkpoint(Job::Backfill)] {
            assert!(k.kind().is_worker_owned());
        }
    }

    #[test]
    fn malformed_keys_get_typed_errors() {
        assert_eq!(ItemKey::decode("", "User"), Err(KeyError::Empty("PK")));
        assert_eq!(ItemKey::decode(U, ""), Err(KeyError::Empty("SK")));
        assert!(matches!(
            ItemKey::decode(U, "Profile"),
            Err(KeyError::UnknownSortKey { .. })
        ));
        assert!(matches!(
            ItemKey::decode(U, "USER"),
            Err(KeyError::WrongCase {
                expected: "User",
                ..
            })
        ));
        assert!(matches!(
            ItemKey::decode(U, &format!("group#{G}")),
            Err(KeyError::WrongCase {
                expected: "Group#",
                ..
            })
        ));
        assert!(matches!(
            ItemKey::decode(G, "invitationlinkhash"),
            Err(KeyError::WrongCase { .. })
        ));
        assert!(matches!(
            ItemKey::decode(&U.to_uppercase(), "User"),
            Err(KeyError::BadUuid { .. })
        ));
        assert!(matches!(
            ItemKey::decode("not-a-uuid", "Group"),
            Err(KeyError::BadUuid { .. })
        ));
        assert!(matches!(
            ItemKey::decode(&U.replace('-', ""), "User"),
            Err(KeyError::BadUuid { .. })
        ));
        assert_eq!(
            ItemKey::decode(U, "Group#"),
            Err(KeyError::Empty("group id"))
        );
        assert_eq!(
            ItemKey::decode(G, "Container#"),
            Err(KeyError::Empty("container id"))
        );
        assert!(matches!(
            ItemKey::decode(U, &format!("Group#{G}#")),
            Err(KeyError::StrayHash { .. })
        ));
        assert!(matches!(
            ItemKey::decode(G, &format!("Container#{C}#x")),
            Err(KeyError::StrayHash { .. })
        ));
        assert!(matches!(
            ItemKey::decode(&format!("{U}#"), "User"),
            Err(KeyError::StrayHash { .. })
        ));
        assert!(matches!(
            ItemKey::decode("ExpiryReminder#2024-13-01", &format!("{C}#{U}")),
            Err(KeyError::BadDate { .. })
        ));
        assert!(matches!(
            ItemKey::decode("AuditSuspect", "Nonsense#x#y"),
            Err(KeyError::Unknown { .. })
        ));
        assert!(matches!(
            ItemKey::decode("WorkerCheckpoint", "nope"),
            Err(KeyError::Unknown { .. })
        ));
        assert!(matches!(
            ItemKey::decode("Category", "category"),
            Err(KeyError::WrongCase { .. })
        ));
        let no_sk = HashMap::from([(PK.to_owned(), AttributeValue::S(U.into()))]);
        assert_eq!(
            ItemKey::from_attributes(&no_sk),
            Err(KeyError::MissingAttribute("SK"))
        );
    }
}
