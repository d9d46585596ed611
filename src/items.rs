//! Typed items of the Nishiki table, read and written with `serde_dynamo`.
//!
//! Reading is lenient where the live data varies (datetimes, untagged empty
//! lists); writing produces exactly the attributes the service writes: absent
//! food fields are `NULL`, never missing, and datetimes are canonical.
//! Attributes this code does not know are kept in `extra` and written back
//! unchanged, so rewriting an item never drops data.
//!
//! `Debug` of items never shows a user name or an e-mail address.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::datetime;
use crate::keys::{ContainerId, FoodId, GroupId, ItemKey, KeyError, PK, SK, UserId};

pub use worker_engine::item::{Item, redact_quoted};

/// Attribute names the service's indexes are keyed on. Worker-owned items
/// must never carry any of them.
pub mod attr {
    /// A membership's group id (index `UserAndGroupRelationship`).
    pub const GROUP_ID: &str = "GroupId";
    /// A container link's container id (index
    /// `GroupAndContainerRelationship`).
    pub const CONTAINER_ID: &str = "ContainerId";
    /// An invitation link's hash (the service's lookup of a link).
    pub const INVITATION_LINK_HASH: &str = "InvitationLinkHash";
    /// An invitation link's expiry (sparse index `InvitationLinkExpiry`).
    pub const LINK_EXPIRY_DATETIME: &str = "LinkExpiryDatetime";
    /// A user's e-mail address (User items; personal data, indexed by the
    /// service).
    pub const EMAIL_ADDRESS: &str = "EMailAddress";
    /// A user's name (User items; personal data, not indexed).
    pub const USER_NAME: &str = "UserName";
    /// A group's name (Group items; written by people, not indexed).
    pub const GROUP_NAME: &str = "GroupName";
    /// A container's name (Container items).
    pub const CONTAINER_NAME: &str = "ContainerName";
    /// A container's foods (a list; Container items).
    pub const FOODS: &str = "Foods";
    /// A food's name (in a container's `Foods`, and on expiry flags).
    pub const FOOD_NAME: &str = "Name";
    /// Every attribute a service index is keyed on.
    pub const INDEXED: [&str; 5] = [
        GROUP_ID,
        CONTAINER_ID,
        INVITATION_LINK_HASH,
        LINK_EXPIRY_DATETIME,
        EMAIL_ADDRESS,
    ];
}

/// Why an item does not decode.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ItemError {
    /// `PK`/`SK` are not a key of this table.
    #[error("bad key: {0}")]
    Key(#[from] KeyError),
    /// The key is fine, the other attributes are not what its kind holds
    /// (missing, wrong type, or an id that disagrees with the key).
    #[error("item {pk}/{sk}: {reason}")]
    Attributes {
        /// The item's `PK`.
        pk: String,
        /// The item's `SK`.
        sk: String,
        /// What is wrong, quoted values redacted ([`redact_quoted`]): no
        /// personal data reaches a log through it.
        reason: String,
    },
}

impl ItemError {
    fn attrs(key: &ItemKey, reason: impl fmt::Display) -> Self {
        let (pk, sk) = key.encode();
        ItemError::Attributes {
            pk,
            sk,
            reason: redact_quoted(&reason.to_string()),
        }
    }
}

/// `User` item: `PK=<userId>`, `SK=User`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct User {
    /// The user's id, from `PK`.
    #[serde(skip)]
    pub id: UserId,
    /// `UserName`: personal data, never logged (`Debug` redacts it).
    pub user_name: String,
    /// `EMailAddress`: personal data, never logged (`Debug` redacts it).
    #[serde(rename = "EMailAddress")]
    pub email_address: String,
    /// Every other attribute, as read (`PK`, `SK` and the fields above
    /// excepted): written back unchanged.
    #[serde(skip)]
    pub extra: Item,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .field("user_name", &"<redacted>")
            .field("email_address", &"<redacted>")
            .field("extra", &self.extra.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Membership item: `PK=<userId>`, `SK=Group#<groupId>`, `GroupId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Membership {
    /// The member, from `PK`.
    #[serde(skip)]
    pub user: UserId,
    /// `GroupId`: the group, equal to the one in `SK` (an item where they
    /// differ does not decode).
    #[serde(rename = "GroupId")]
    pub group: GroupId,
    /// Every other attribute, as read (`PK`, `SK` and the fields above
    /// excepted): written back unchanged.
    #[serde(skip)]
    pub extra: Item,
}

/// `Group` item: `PK=<groupId>`, `SK=Group`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Group {
    /// The group's id, from `PK`.
    #[serde(skip)]
    pub id: GroupId,
    /// `GroupName`, as people wrote it.
    pub group_name: String,
    /// Every other attribute, as read (`PK`, `SK` and the fields above
    /// excepted): written back unchanged.
    #[serde(skip)]
    pub extra: Item,
}

/// Container link: `PK=<groupId>`, `SK=Container#<containerId>`, `ContainerId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerLink {
    /// The owning group, from `PK`.
    #[serde(skip)]
    pub group: GroupId,
    /// `ContainerId`: the container, equal to the one in `SK` (an item
    /// where they differ does not decode).
    #[serde(rename = "ContainerId")]
    pub container: ContainerId,
    /// Every other attribute, as read (`PK`, `SK` and the fields above
    /// excepted): written back unchanged.
    #[serde(skip)]
    pub extra: Item,
}

/// Invitation link: `PK=<groupId>`, `SK=InvitationLinkHash`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InvitationLink {
    /// The group the link invites to, from `PK`.
    #[serde(skip)]
    pub group: GroupId,
    /// 32 lowercase hex characters; opaque (a renewal keeps it).
    pub invitation_link_hash: String,
    /// `LinkExpiryDatetime`: the link is expired once this instant has
    /// passed (read in any stored form, written canonically).
    #[serde(with = "datetime::serde_lenient")]
    pub link_expiry_datetime: DateTime<Utc>,
    /// Every other attribute, as read (`PK`, `SK` and the fields above
    /// excepted): written back unchanged.
    #[serde(skip)]
    pub extra: Item,
}

/// `Container` item: `PK=<containerId>`, `SK=Container`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Container {
    /// The container's id, from `PK`.
    #[serde(skip)]
    pub id: ContainerId,
    /// `ContainerName`, as people wrote it.
    pub container_name: String,
    /// `Foods`, in stored order (absent or an empty untagged list reads as
    /// none).
    #[serde(default, deserialize_with = "lenient_list")]
    pub foods: Vec<Food>,
    /// Every other attribute, as read (`PK`, `SK` and the fields above
    /// excepted): written back unchanged.
    #[serde(skip)]
    pub extra: Item,
}

/// A food inside a container's `Foods`. Absent values are stored as NULL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Food {
    /// `FoodId`: the food's id within its container (a list that repeats
    /// one counts the first).
    pub food_id: FoodId,
    /// `Name` (1 to 30 characters in the app); copied onto its expiry
    /// flag.
    pub name: String,
    /// `Unit` of the quantity, free text; `None` is stored as `NULL`.
    pub unit: Option<String>,
    /// `Quantity`, in `unit`; `None` is stored as `NULL`.
    pub quantity: Option<f64>,
    /// Free text; the app uses keys such as `vegetables` or `unselected`.
    pub category: Option<String>,
    /// `Expiry`: when the food expires; `None` (stored `NULL`) is never
    /// flagged.
    #[serde(with = "datetime::serde_lenient_opt")]
    pub expiry: Option<DateTime<Utc>>,
    /// `CreatedAt`: when the food was added.
    #[serde(with = "datetime::serde_lenient")]
    pub created_at: DateTime<Utc>,
}

/// `Category` item (design notes only): `PK=Category`, `SK=Category`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CategoryList {
    /// The `Category` attribute's entries, in stored order.
    #[serde(rename = "Category", default, deserialize_with = "lenient_list")]
    pub categories: Vec<CategoryName>,
    /// Every other attribute, as read (`PK`, `SK` and the fields above
    /// excepted): written back unchanged.
    #[serde(skip)]
    pub extra: Item,
}

/// One entry of the category list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryName {
    /// The category's `name` key (e.g. `vegetables`).
    pub name: String,
}

/// Any item of the table, typed by its key.
#[derive(Debug, Clone, PartialEq)]
pub enum Entity {
    /// A `User` item.
    User(User),
    /// A membership (`SK=Group#<groupId>`).
    Membership(Membership),
    /// A `Group` item.
    Group(Group),
    /// A container link (`SK=Container#<containerId>`).
    ContainerLink(ContainerLink),
    /// An invitation link (`SK=InvitationLinkHash`).
    InvitationLink(InvitationLink),
    /// A `Container` item with its foods.
    Container(Container),
    /// The `Category` item.
    Category(CategoryList),
    /// An item the worker owns; its job module gives it a type.
    Worker(ItemKey, Item),
}

impl Entity {
    /// Decode a raw item (key first, then attributes).
    pub fn from_item(item: Item) -> Result<Entity, ItemError> {
        let key = ItemKey::from_attributes(&item)?;
        Entity::from_keyed_item(key, item)
    }

    /// Decode a raw item whose key is already decoded.
    pub fn from_keyed_item(key: ItemKey, item: Item) -> Result<Entity, ItemError> {
        Entity::from_keyed_item_ref(key, &item)
    }

    /// [`Entity::from_keyed_item`] from a borrowed item: copies only the
    /// attributes the entity keeps, once.
    pub fn from_keyed_item_ref(key: ItemKey, item: &Item) -> Result<Entity, ItemError> {
        Entity::from_source(key, item)
    }

    /// The entity of `key` whose image `d` deserializes (DynamoDB JSON, a
    /// stream image as the event is read), its key attributes checked equal
    /// to `keys` (the record's): what [`Entity::from_keyed_item_ref`] reads
    /// from that image's item, or an error where it would fail, or where the
    /// text reader leaves the image to it
    /// ([`worker_engine::item::text::read_image_from`]).
    pub fn read_image<'de, D: Deserializer<'de>>(
        key: ItemKey,
        keys: &Item,
        d: D,
    ) -> Result<Entity, D::Error> {
        let (Some(pk), Some(sk)) = (keys.get(PK), keys.get(SK)) else {
            return Err(serde::de::Error::custom("no key"));
        };
        Entity::from_source(
            key,
            ImageText {
                d,
                key: [(PK, pk), (SK, sk)],
                de: std::marker::PhantomData,
            },
        )
    }

    /// The entity of `key` from its attributes in `source`: the one place
    /// that says which type each kind of item is read as.
    fn from_source<S: Source>(key: ItemKey, source: S) -> Result<Entity, S::Error> {
        Ok(match &key {
            ItemKey::User(id) => {
                let (mut u, extra) = source.split::<User>(&key)?;
                u.id = *id;
                u.extra = extra;
                Entity::User(u)
            }
            ItemKey::Membership { user, group } => {
                let (mut m, extra) = source.split::<Membership>(&key)?;
                if m.group != *group {
                    return Err(S::disagrees(&key, "GroupId disagrees with the sort key"));
                }
                m.user = *user;
                m.extra = extra;
                Entity::Membership(m)
            }
            ItemKey::Group(id) => {
                let (mut g, extra) = source.split::<Group>(&key)?;
                g.id = *id;
                g.extra = extra;
                Entity::Group(g)
            }
            ItemKey::ContainerLink { group, container } => {
                let (mut l, extra) = source.split::<ContainerLink>(&key)?;
                if l.container != *container {
                    return Err(S::disagrees(
                        &key,
                        "ContainerId disagrees with the sort key",
                    ));
                }
                l.group = *group;
                l.extra = extra;
                Entity::ContainerLink(l)
            }
            ItemKey::InvitationLink(group) => {
                let (mut l, extra) = source.split::<InvitationLink>(&key)?;
                l.group = *group;
                l.extra = extra;
                Entity::InvitationLink(l)
            }
            ItemKey::Container(id) => {
                let (mut c, extra) = source.split::<Container>(&key)?;
                c.id = *id;
                c.extra = extra;
                Entity::Container(c)
            }
            ItemKey::Category => {
                let (mut c, extra) = source.split::<CategoryList>(&key)?;
                c.extra = extra;
                Entity::Category(c)
            }
            _ => {
                let (NoAttributes {}, item) = source.split::<NoAttributes>(&key)?;
                Entity::Worker(key, item)
            }
        })
    }

    /// The item's key.
    pub fn key(&self) -> ItemKey {
        match self {
            Entity::User(u) => ItemKey::User(u.id),
            Entity::Membership(m) => ItemKey::Membership {
                user: m.user,
                group: m.group,
            },
            Entity::Group(g) => ItemKey::Group(g.id),
            Entity::ContainerLink(l) => ItemKey::ContainerLink {
                group: l.group,
                container: l.container,
            },
            Entity::InvitationLink(l) => ItemKey::InvitationLink(l.group),
            Entity::Container(c) => ItemKey::Container(c.id),
            Entity::Category(_) => ItemKey::Category,
            Entity::Worker(k, _) => k.clone(),
        }
    }

    /// The raw item, exactly as the service writes it (plus kept extras).
    pub fn to_item(&self) -> Item {
        let key = self.key();
        match self {
            Entity::User(x) => join(&key, x, &x.extra),
            Entity::Membership(x) => join(&key, x, &x.extra),
            Entity::Group(x) => join(&key, x, &x.extra),
            Entity::ContainerLink(x) => join(&key, x, &x.extra),
            Entity::InvitationLink(x) => join(&key, x, &x.extra),
            Entity::Container(x) => join(&key, x, &x.extra),
            Entity::Category(x) => join(&key, x, &x.extra),
            Entity::Worker(_, extra) => join(&key, &Empty {}, extra),
        }
    }
}

#[derive(Serialize)]
struct Empty {}

/// The attributes a typed item writes (every one, always: none of them is
/// skipped when empty), so the rest of a raw item is its `extra`. A test
/// keeps each list equal to what the type serializes.
trait Attributes {
    const ATTRIBUTES: &'static [&'static str];
}

macro_rules! attributes {
    ($($t:ty => [$($name:literal),*];)*) => {
        $(impl Attributes for $t {
            const ATTRIBUTES: &'static [&'static str] = &[$($name),*];
        })*
    };
}

attributes! {
    User => ["UserName", "EMailAddress"];
    Membership => ["GroupId"];
    Group => ["GroupName"];
    ContainerLink => ["ContainerId"];
    InvitationLink => ["InvitationLinkHash", "LinkExpiryDatetime"];
    Container => ["ContainerName", "Foods"];
    CategoryList => ["Category"];
}

/// A worker-owned item's typed part: none (every attribute but the key is
/// its `extra`).
#[derive(Deserialize)]
struct NoAttributes {}

impl Attributes for NoAttributes {
    const ATTRIBUTES: &'static [&'static str] = &[];
}

/// Where an entity's attributes are read from: an item, or an image's text.
trait Source {
    type Error;
    /// The known attributes as `T`; everything else but the key is `extra`.
    fn split<T: DeserializeOwned + Attributes>(
        self,
        key: &ItemKey,
    ) -> Result<(T, Item), Self::Error>;
    /// The attributes read, but they disagree with the key.
    fn disagrees(key: &ItemKey, reason: &str) -> Self::Error;
}

impl Source for &Item {
    type Error = ItemError;
    fn split<T: DeserializeOwned + Attributes>(
        self,
        key: &ItemKey,
    ) -> Result<(T, Item), ItemError> {
        split(key, self)
    }
    fn disagrees(key: &ItemKey, reason: &str) -> ItemError {
        ItemError::attrs(key, reason)
    }
}

/// An image's text, with the record's key attributes.
struct ImageText<'k, 'de, D> {
    d: D,
    key: [(&'static str, &'k aws_sdk_dynamodb::types::AttributeValue); 2],
    de: std::marker::PhantomData<&'de ()>,
}

impl<'de, D: Deserializer<'de>> Source for ImageText<'_, 'de, D> {
    type Error = D::Error;
    fn split<T: DeserializeOwned + Attributes>(self, _: &ItemKey) -> Result<(T, Item), D::Error> {
        let known = |name: &str| T::ATTRIBUTES.contains(&name);
        worker_engine::item::text::read_image_from(self.d, &self.key, known)
    }
    fn disagrees(_: &ItemKey, reason: &str) -> D::Error {
        serde::de::Error::custom(reason)
    }
}

/// Deserialize the known attributes; everything else but the key is `extra`.
fn split<T: DeserializeOwned + Attributes>(
    key: &ItemKey,
    item: &Item,
) -> Result<(T, Item), ItemError> {
    let extra: Item = item
        .iter()
        .filter(|(name, _)| {
            name.as_str() != PK && name.as_str() != SK && !T::ATTRIBUTES.contains(&name.as_str())
        })
        .map(|(name, v)| (name.clone(), v.clone()))
        .collect();
    // Read in place; through serde_dynamo (a copy) only when that fails,
    // for the error text.
    let keep = |name: &str| T::ATTRIBUTES.contains(&name);
    let typed = match worker_engine::item::borrowed::read::<T>(item, keep) {
        Some(typed) => typed,
        None => known_through_serde_dynamo(key, item)?,
    };
    Ok((typed, extra))
}

/// The known attributes of `item` as `T`, read by serde_dynamo.
fn known_through_serde_dynamo<T: DeserializeOwned + Attributes>(
    key: &ItemKey,
    item: &Item,
) -> Result<T, ItemError> {
    // Unknown attributes never take part in deserializing (none of the
    // types denies or flattens them): set them apart first.
    let known = || {
        item.iter()
            .filter(|(name, _)| T::ATTRIBUTES.contains(&name.as_str()))
            .map(|(name, v)| (name.clone(), v.clone()))
            .collect::<Item>()
    };
    serde_dynamo::from_item(known()).map_err(|e| ItemError::attrs(key, locate::<T>(&known(), e)))
}

/// serde_dynamo's errors do not say where they are (`Expected map`): name
/// the attribute whose removal changes the error, if one does.
fn locate<T: DeserializeOwned>(item: &Item, e: serde_dynamo::Error) -> String {
    let msg = e.to_string();
    let mut names: Vec<&String> = item.keys().collect();
    names.sort();
    for name in names {
        let mut without = item.clone();
        without.remove(name);
        let other = serde_dynamo::from_item::<_, T>(without).err();
        if other.is_none_or(|o| o.to_string() != msg) {
            return format!("attribute {name}: {msg}");
        }
    }
    msg
}

fn join<T: Serialize>(key: &ItemKey, typed: &T, extra: &Item) -> Item {
    // Serializing these plain structs cannot fail: every field is a string,
    // number, list, map or option of those.
    let mut item: Item = serde_dynamo::to_item(typed).expect("item types always serialize");
    for (name, value) in extra {
        item.entry(name.clone()).or_insert_with(|| value.clone());
    }
    item.extend(key.to_attributes());
    item
}

/// Accept a list, an untagged empty map (DynamoDB Local drops the type tag
/// on empty lists) or NULL, as a list.
fn lenient_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ListVisitor<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list (L)")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            loop {
                match seq.next_element() {
                    Ok(Some(x)) => out.push(x),
                    Ok(None) => return Ok(out),
                    Err(e) => {
                        return Err(serde::de::Error::custom(format_args!(
                            "entry #{}: {e}",
                            out.len()
                        )));
                    }
                }
            }
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<T>, A::Error> {
            if map.next_key::<String>()?.is_some() {
                return Err(serde::de::Error::custom(
                    "expected a list, found a non-empty map",
                ));
            }
            Ok(Vec::new())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<T>, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Vec<T>, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(ListVisitor(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde_json::json;

    const U: &str = "3f1c2b4e-8a9d-4c6e-b1f2-0a1b2c3d4e5f";
    const G: &str = "9b2e7c1a-4d3f-4a8b-9c0d-1e2f3a4b5c6d";
    const C: &str = "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d";
    const F: &str = "0e1d2c3b-4a59-4867-9f8e-7d6c5b4a3f2e";

    /// Parse DynamoDB JSON (as in a Scan or a stream image) into an item.
    fn ddb(v: serde_json::Value) -> Item {
        let item: serde_dynamo::Item = serde_json::from_value(v).unwrap();
        item.into()
    }

    fn container_json(foods: serde_json::Value) -> serde_json::Value {
        json!({
            "PK": {"S": C}, "SK": {"S": "Container"},
            "ContainerName": {"S": "Fridge"},
            "Foods": foods,
        })
    }

    /// The in-place read gives what serde_dynamo gives, for every type and
    /// the shapes the tests below use (null, missing and untagged fields).
    #[test]
    fn the_in_place_read_agrees_with_serde_dynamo() {
        fn same<T: DeserializeOwned + Attributes + PartialEq + fmt::Debug>(item: &Item) {
            let key = ItemKey::from_attributes(item).unwrap();
            let keep = |name: &str| T::ATTRIBUTES.contains(&name);
            let ours = worker_engine::item::borrowed::read::<T>(item, keep);
            let theirs = known_through_serde_dynamo::<T>(&key, item);
            assert!(ours.is_some(), "read in place: {theirs:?}");
            assert_eq!(ours, theirs.ok());
        }
        let foods = json!({"L": [
            {"M": {"FoodId": {"S": F}, "Name": {"S": "Milk \"2%\""}, "Unit": {"NULL": true},
                   "Quantity": {"N": "1.5"}, "Category": {"S": "dairy"},
                   "Expiry": {"S": "2024-04-01T00:00:00.000Z"},
                   "CreatedAt": {"S": "2024-03-01T10:00:00.000Z"}}},
            {"M": {"FoodId": {"S": F}, "Name": {"S": "Eggs"}, "Quantity": {"NULL": true},
                   "Expiry": {"NULL": true}, "CreatedAt": {"S": "2024-03-01T10:00:00.000Z"}}}
        ]});
        same::<Container>(&ddb(container_json(foods)));
        same::<Container>(&ddb(container_json(json!({"M": {}}))));
        same::<Container>(&ddb(container_json(json!({"L": []}))));
        same::<Container>(&ddb(container_json(json!({"NULL": true}))));
        same::<User>(&ddb(json!({"PK": {"S": U}, "SK": {"S": "User"},
            "UserName": {"S": "someone"}, "EMailAddress": {"S": "a@example.invalid"}})));
        same::<Group>(&ddb(json!({"PK": {"S": G}, "SK": {"S": "Group"},
            "GroupName": {"S": "Home"}, "Other": {"N": "1"}})));
    }

    #[test]
    fn container_round_trips_with_null_food_fields() {
        let raw = ddb(container_json(json!({"L": [{"M": {
            "FoodId": {"S": F}, "Name": {"S": "Milk"},
            "Unit": {"NULL": true}, "Quantity": {"NULL": true},
            "Category": {"S": "dairy"}, "Expiry": {"NULL": true},
            "CreatedAt": {"S": "2024-03-22T22:03:33.123Z"}
        }}]})));
        let e = Entity::from_item(raw.clone()).unwrap();
        let Entity::Container(c) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(c.foods.len(), 1);
        assert_eq!(c.foods[0].unit, None);
        assert_eq!(c.foods[0].expiry, None);
        assert_eq!(
            e.to_item(),
            raw,
            "rewrite must produce exactly the stored attributes"
        );
    }

    #[test]
    fn food_values_and_canonical_datetimes() {
        let raw = ddb(container_json(json!({"L": [{"M": {
            "FoodId": {"S": F}, "Name": {"S": "Eggs"},
            "Unit": {"S": "pcs"}, "Quantity": {"N": "6"},
            "Category": {"S": "unselected"}, "Expiry": {"S": "3023-12-23T12:21:10.10"},
            "CreatedAt": {"S": "2024-03-22T22:03:33"}
        }}]})));
        let e = Entity::from_item(raw).unwrap();
        let item = e.to_item();
        let Some(AttributeValue::L(foods)) = item.get("Foods") else {
            panic!()
        };
        let AttributeValue::M(food) = &foods[0] else {
            panic!()
        };
        assert_eq!(
            food["Expiry"],
            AttributeValue::S("3023-12-23T12:21:10.100Z".into())
        );
        assert_eq!(
            food["CreatedAt"],
            AttributeValue::S("2024-03-22T22:03:33.000Z".into())
        );
        assert_eq!(food["Quantity"], AttributeValue::N("6".into()));
        assert_eq!(food["Unit"], AttributeValue::S("pcs".into()));
    }

    #[test]
    fn untagged_empty_foods_read_as_empty_list() {
        for foods in [json!({"L": []}), json!({"M": {}}), json!({"NULL": true})] {
            let e = Entity::from_item(ddb(container_json(foods.clone()))).unwrap();
            let Entity::Container(c) = e else { panic!() };
            assert!(c.foods.is_empty(), "{foods}");
        }
    }

    #[test]
    fn garbage_datetime_is_a_clear_error_without_personal_data() {
        let raw = ddb(json!({
            "PK": {"S": G}, "SK": {"S": "InvitationLinkHash"},
            "InvitationLinkHash": {"S": "0123456789abcdef0123456789abcdef"},
            "LinkExpiryDatetime": {"S": "next tuesday"}
        }));
        let err = Entity::from_item(raw).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(G) && msg.contains("ISO 8601"), "{msg}");

        let user = ddb(json!({
            "PK": {"S": U}, "SK": {"S": "User"},
            "UserName": {"N": "5"}, "EMailAddress": {"S": "alice@example.com"}
        }));
        let msg = Entity::from_item(user).unwrap_err().to_string();
        assert!(!msg.contains("alice"), "{msg}");
    }

    #[test]
    fn user_debug_redacts_personal_data() {
        let raw = ddb(json!({
            "PK": {"S": U}, "SK": {"S": "User"},
            "UserName": {"S": "Alice"}, "EMailAddress": {"S": "alice@example.com"}
        }));
        let e = Entity::from_item(raw.clone()).unwrap();
        let dbg = format!("{e:?}");
        assert!(!dbg.contains("Alice") && !dbg.contains("alice@"), "{dbg}");
        assert_eq!(e.to_item(), raw);
    }

    #[test]
    fn unknown_attributes_survive_a_rewrite() {
        let raw = ddb(json!({
            "PK": {"S": G}, "SK": {"S": "Group"},
            "GroupName": {"S": "Home"},
            "Users": {"L": [{"S": U}]},
            "Tags": {"SS": ["a", "b"]},
            "Blob": {"B": "AAEC"}
        }));
        let e = Entity::from_item(raw.clone()).unwrap();
        let Entity::Group(g) = &e else { panic!() };
        assert_eq!(g.extra.len(), 3);
        assert_eq!(e.to_item(), raw);
    }

    #[test]
    fn every_service_kind_round_trips() {
        let items = [
            json!({"PK": {"S": U}, "SK": {"S": format!("Group#{G}")}, "GroupId": {"S": G}}),
            json!({"PK": {"S": G}, "SK": {"S": format!("Container#{C}")}, "ContainerId": {"S": C}}),
            json!({"PK": {"S": G}, "SK": {"S": "InvitationLinkHash"},
                   "InvitationLinkHash": {"S": "0123456789abcdef0123456789abcdef"},
                   "LinkExpiryDatetime": {"S": "2024-03-22T22:03:33.123Z"}}),
            json!({"PK": {"S": "Category"}, "SK": {"S": "Category"},
                   "Category": {"L": [{"M": {"name": {"S": "dairy"}}}]}}),
            json!({"PK": {"S": G}, "SK": {"S": format!("ExpiringFood#{C}#{F}")}, "Status": {"S": "nearing"}}),
        ];
        for v in items {
            let raw = ddb(v);
            let e = Entity::from_item(raw.clone()).unwrap();
            assert_eq!(e.to_item(), raw, "{e:?}");
        }
    }

    #[test]
    fn inconsistent_relationship_attribute_is_rejected() {
        let raw =
            ddb(json!({"PK": {"S": U}, "SK": {"S": format!("Group#{G}")}, "GroupId": {"S": C}}));
        assert!(matches!(
            Entity::from_item(raw),
            Err(ItemError::Attributes { .. })
        ));
    }

    #[test]
    fn single_quoted_values_are_redacted_in_item_errors() {
        let raw = ddb(container_json(json!({"L": [{"M": {
            "FoodId": {"S": F}, "Name": {"S": "Milk"},
            "Unit": {"NULL": true}, "Quantity": {"N": "carol@example.com"},
            "Category": {"NULL": true}, "Expiry": {"NULL": true},
            "CreatedAt": {"S": "2024-03-22T22:03:33.123Z"}
        }}]})));
        let msg = Entity::from_item(raw).unwrap_err().to_string();
        assert!(!msg.contains("carol"), "{msg}");
        assert!(msg.contains("attribute Foods: entry #0"), "{msg}");
    }

    /// `split` sets apart exactly the attributes a type does not write.
    #[test]
    fn attribute_lists_match_what_each_type_writes() {
        fn names<T: Serialize + Attributes>(x: &T) {
            let item: Item = serde_dynamo::to_item(x).unwrap();
            let mut written: Vec<&str> = item.keys().map(String::as_str).collect();
            written.sort_unstable();
            let mut listed = T::ATTRIBUTES.to_vec();
            listed.sort_unstable();
            assert_eq!(written, listed, "{}", std::any::type_name::<T>());
        }
        let at: DateTime<Utc> = "2024-03-22T22:03:33.123Z".parse().unwrap();
        let (user, group) = (UserId::random(), GroupId::random());
        names(&User {
            id: user,
            user_name: "u".into(),
            email_address: "e".into(),
            extra: Item::new(),
        });
        names(&Membership {
            user,
            group,
            extra: Item::new(),
        });
        names(&Group {
            id: group,
            group_name: "g".into(),
            extra: Item::new(),
        });
        names(&ContainerLink {
            group,
            container: ContainerId::random(),
            extra: Item::new(),
        });
        names(&InvitationLink {
            group,
            invitation_link_hash: "h".into(),
            link_expiry_datetime: at,
            extra: Item::new(),
        });
        names(&Container {
            id: ContainerId::random(),
            container_name: "c".into(),
            foods: Vec::new(),
            extra: Item::new(),
        });
        names(&CategoryList {
            categories: Vec::new(),
            extra: Item::new(),
        });
    }

    #[test]
    fn unknown_attributes_are_kept_as_extra() {
        let mut raw = ddb(container_json(json!({"L": []})));
        raw.insert("Colour".into(), AttributeValue::S("blue".into()));
        let Entity::Container(c) = Entity::from_item(raw.clone()).unwrap() else {
            panic!("a container");
        };
        assert_eq!(c.extra.keys().collect::<Vec<_>>(), ["Colour"]);
        assert_eq!(Entity::Container(c).to_item(), raw);
    }
}
