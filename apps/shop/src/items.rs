//! The shop's entities as typed items, read from and written to raw
//! [`Item`]s.
//!
//! Fields are named as in the seed's entity diagram (`name`, `email`,
//! `brand_id`, `category_id`, `status`, `price`, `stock`, `total_price`,
//! `created_at`, `updated_at`); times are epoch seconds (Number). Reading
//! is strict about the fields the worker derives from (an id is a KSUID, a
//! time a whole number of ten digits) and ignores the others. Errors
//! ([`FieldError`]) name the field and the reason, never its value.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use worker_engine::item::Item;
use worker_engine::store::Key;
use worker_engine::{Pass, PassAttributes};

use crate::keys::{self, At, Id, ItemKey, Job};

/// A field that does not read (its value is not quoted: it may be a name
/// or an e-mail address).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct FieldError {
    /// The field, as named in the item (`brand_id`, `created_at`, ...).
    pub field: &'static str,
    /// Why it does not read (`is not a KSUID`, ...): never the value.
    pub reason: String,
}

impl FieldError {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        FieldError {
            field,
            reason: reason.into(),
        }
    }
}

/// An item's attributes by name, as the fields below read them: an
/// [`Item`], or what the stream function keeps of an image
/// (`crate::images::Image`).
pub trait Fields {
    /// The attribute `name`, if the item has it.
    fn field(&self, name: &str) -> Option<&AttributeValue>;
}

impl Fields for Item {
    fn field(&self, name: &str) -> Option<&AttributeValue> {
        self.get(name)
    }
}

/// A string field; `None` when absent or empty.
pub fn text<'a, F: Fields + ?Sized>(
    item: &'a F,
    field: &'static str,
) -> Result<Option<&'a str>, FieldError> {
    match item.field(field) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(s)) if s.is_empty() => Ok(None),
        Some(AttributeValue::S(s)) => Ok(Some(s)),
        Some(_) => Err(FieldError::new(field, "is not a string")),
    }
}

/// A whole-number field; `None` when absent.
pub fn number<F: Fields + ?Sized>(
    item: &F,
    field: &'static str,
) -> Result<Option<i64>, FieldError> {
    match item.field(field) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(n)) => n
            .parse()
            .map(Some)
            .map_err(|_| FieldError::new(field, "is not a whole number")),
        Some(_) => Err(FieldError::new(field, "is not a number")),
    }
}

/// A KSUID field; `None` when absent.
pub fn id<F: Fields + ?Sized>(item: &F, field: &'static str) -> Result<Option<Id>, FieldError> {
    text(item, field)?
        .map(|s| Id::parse_as(field, s).map_err(|_| FieldError::new(field, "is not a KSUID")))
        .transpose()
}

/// An epoch-seconds field usable in a key; `None` when absent.
pub fn at<F: Fields + ?Sized>(item: &F, field: &'static str) -> Result<Option<At>, FieldError> {
    number(item, field)?
        .map(|t| {
            At::new(field, t)
                .map_err(|_| FieldError::new(field, "is not epoch seconds of ten digits"))
        })
        .transpose()
}

fn put_s(item: &mut Item, field: &str, v: Option<&str>) {
    if let Some(v) = v {
        item.insert(field.to_owned(), AttributeValue::S(v.to_owned()));
    }
}

fn put_n(item: &mut Item, field: &str, v: Option<String>) {
    if let Some(v) = v {
        item.insert(field.to_owned(), AttributeValue::N(v));
    }
}

/// Created and updated, epoch seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    /// `created_at`: when the entity was created, epoch seconds.
    pub created_at: i64,
    /// `updated_at`: when it was last changed, epoch seconds.
    pub updated_at: i64,
}

impl Stamps {
    fn put(self, item: &mut Item) {
        item.insert(keys::CREATED_AT.into(), keys::n(self.created_at));
        item.insert(keys::UPDATED_AT.into(), keys::n(self.updated_at));
    }
}

/// A category or a brand (the same fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// Its key: [`ItemKey::Category`] or [`ItemKey::Brand`].
    pub key: ItemKey,
    /// `name` (`None`: not written; the item then has no `SKU`).
    pub name: Option<String>,
    /// `created_at` and `updated_at`.
    pub stamps: Stamps,
}

impl Named {
    /// The item as a client writes it: key, `name`, times (no derived
    /// attributes).
    pub fn to_item(&self) -> Item {
        let mut item = self.key.key();
        put_s(&mut item, keys::NAME, self.name.as_deref());
        self.stamps.put(&mut item);
        item
    }
}

/// A user. Its `Debug` leaves the e-mail address out.
#[derive(Clone, PartialEq)]
pub struct User {
    /// The user's id (`SK = USER#<id>`).
    pub id: Id,
    /// `name` (`None`: not written).
    pub name: Option<String>,
    /// `email` (`None`: not written; the item then has no `SKU`). Personal
    /// data: never logged.
    pub email: Option<String>,
    /// `created_at` and `updated_at`.
    pub stamps: Stamps,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl User {
    /// The item as a client writes it: key, `name`, `email`, times (no
    /// derived attributes).
    pub fn to_item(&self) -> Item {
        let mut item = ItemKey::User(self.id.clone()).key();
        put_s(&mut item, keys::NAME, self.name.as_deref());
        put_s(&mut item, keys::EMAIL, self.email.as_deref());
        self.stamps.put(&mut item);
        item
    }
}

/// A product.
#[derive(Debug, Clone, PartialEq)]
pub struct Product {
    /// The product's id (`SK = PRO#<id>`).
    pub id: Id,
    /// `name` (`None`: not written).
    pub name: Option<String>,
    /// `price` (`None`: not written).
    pub price: Option<f64>,
    /// `stock`, units (`None`: not written).
    pub stock: Option<i64>,
    /// `brand_id`: the brand it references (`None`: not written; the product
    /// is then in neither global index).
    pub brand_id: Option<Id>,
    /// `category_id`: the category it references (`None`: not written; the
    /// product is then in neither global index).
    pub category_id: Option<Id>,
    /// `created_at` and `updated_at`.
    pub stamps: Stamps,
}

impl Product {
    /// The product's key (`PK = PROD`, `SK = PRO#<id>`).
    pub fn key(&self) -> Key {
        ItemKey::Product(self.id.clone()).key()
    }

    /// The item as a client writes it: key and the fields that are set (no
    /// derived attributes).
    pub fn to_item(&self) -> Item {
        let mut item = self.key();
        put_s(&mut item, keys::NAME, self.name.as_deref());
        put_n(&mut item, keys::PRICE, self.price.map(|p| p.to_string()));
        put_n(&mut item, keys::STOCK, self.stock.map(|s| s.to_string()));
        put_s(
            &mut item,
            keys::BRAND_ID,
            self.brand_id.as_ref().map(Id::as_str),
        );
        put_s(
            &mut item,
            keys::CATEGORY_ID,
            self.category_id.as_ref().map(Id::as_str),
        );
        self.stamps.put(&mut item);
        item
    }
}

/// What the worker reads of a product: its references.
#[derive(Debug, Clone, PartialEq)]
pub struct ProductRefs {
    /// The product's id.
    pub id: Id,
    /// `brand_id` (`None`: absent, empty or not a KSUID).
    pub brand_id: Option<Id>,
    /// `category_id` (`None`: absent, empty or not a KSUID).
    pub category_id: Option<Id>,
    /// The worker's flag: the references found missing (field names).
    pub missing: Vec<String>,
}

impl ProductRefs {
    /// `Ok(None)` when the item is not a product.
    pub fn from_item(item: &Item) -> Result<Option<ProductRefs>, FieldError> {
        let Ok(ItemKey::Product(id)) = ItemKey::from_item(item) else {
            return Ok(None);
        };
        let mut missing = match item.get(keys::MISSING_REFS) {
            Some(AttributeValue::Ss(s)) => s.clone(),
            _ => Vec::new(),
        };
        missing.sort();
        Ok(Some(ProductRefs {
            id,
            brand_id: id_lenient(item, keys::BRAND_ID),
            category_id: id_lenient(item, keys::CATEGORY_ID),
            missing,
        }))
    }
}

impl ProductRefs {
    /// The product's key.
    pub fn key(&self) -> Key {
        ItemKey::Product(self.id.clone()).key()
    }
}

/// A reference that is not a KSUID names nothing: read as absent (the
/// derive handler reports it as malformed).
fn id_lenient(item: &Item, field: &'static str) -> Option<Id> {
    id(item, field).ok().flatten()
}

/// An order.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    /// The ordering user's id (`PK = USER#<user>`, and `user_id`).
    pub user: Id,
    /// The order's id (`SK = ORDER#<id>`).
    pub id: Id,
    /// `status`, e.g. `PENDING` (`None`: not written; the order is then not in
    /// `GSI1`).
    pub status: Option<String>,
    /// `total_price` (`None`: not written).
    pub total_price: Option<f64>,
    /// `created_at` and `updated_at`.
    pub stamps: Stamps,
}

impl Order {
    /// The order's key.
    pub fn key(&self) -> Key {
        ItemKey::Order {
            user: self.user.clone(),
            order: self.id.clone(),
        }
        .key()
    }

    /// The item as a client writes it: key, `user_id`, the fields that are set
    /// (no derived attributes).
    pub fn to_item(&self) -> Item {
        let mut item = self.key();
        put_s(&mut item, keys::USER_ID, Some(self.user.as_str()));
        put_s(&mut item, keys::STATUS, self.status.as_deref());
        put_n(
            &mut item,
            keys::TOTAL_PRICE,
            self.total_price.map(|p| p.to_string()),
        );
        self.stamps.put(&mut item);
        item
    }
}

/// A job's checkpoint (`PK = WORKER`, `SK = CHECKPOINT#<job>`): where its
/// pass resumes, and the pass's running totals. Deleted when a pass
/// completes.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The job the checkpoint belongs to (`SK = CHECKPOINT#<job>`).
    pub job: Job,
    /// Where the pass resumes, its start, ticks and totals.
    pub pass: Pass,
}

/// The attributes a checkpoint stores its [`Pass`] under (numbers read
/// strictly: `N` only).
pub const PASS_ATTRIBUTES: PassAttributes = PassAttributes {
    position: keys::POSITION,
    pass_started: keys::PASS_STARTED,
    ticks: keys::TICKS,
    totals: keys::TOTALS,
    key: [keys::PK, keys::SK],
    number: |item, field| number(item, field).ok().flatten(),
};

impl Checkpoint {
    /// A new pass of `job`, started at `now`, from the table's start.
    pub fn new(job: Job, now: DateTime<Utc>) -> Self {
        Checkpoint {
            job,
            pass: Pass::new(now),
        }
    }

    /// Read a stored checkpoint; `Err` (a reason) when it does not decode,
    /// which the job takes as "start a new pass".
    pub fn from_item(job: Job, item: &Item) -> Result<Checkpoint, String> {
        if ItemKey::from_item(item) != Ok(ItemKey::Checkpoint(job)) {
            return Err("not this job's checkpoint".into());
        }
        Ok(Checkpoint {
            job,
            pass: Pass::from_item(item, &PASS_ATTRIBUTES)?,
        })
    }

    /// The item as stored under `WORKER` / `CHECKPOINT#<job>`: the [`Pass`]
    /// under [`PASS_ATTRIBUTES`].
    pub fn to_item(&self) -> Item {
        let mut item = keys::checkpoint(self.job);
        self.pass.put(&mut item, &PASS_ATTRIBUTES);
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps() -> Stamps {
        Stamps {
            created_at: 1_719_000_000,
            updated_at: 1_719_000_100,
        }
    }

    #[test]
    fn fields_read_strictly_and_errors_hold_no_values() {
        let u = User {
            id: Id::at(1_719_000_000, [1; 16]),
            name: Some("Bob".into()),
            email: Some("bob@example.com".into()),
            stamps: stamps(),
        };
        let mut item = u.to_item();
        assert_eq!(text(&item, keys::EMAIL), Ok(Some("bob@example.com")));
        assert_eq!(number(&item, keys::CREATED_AT), Ok(Some(1_719_000_000)));
        assert!(!format!("{u:?}").contains("bob@"));
        item.insert(keys::EMAIL.into(), keys::n(3));
        let e = text(&item, keys::EMAIL).unwrap_err().to_string();
        assert_eq!(e, "email is not a string");
        item.insert(keys::CREATED_AT.into(), AttributeValue::N("1.5".into()));
        assert!(number(&item, keys::CREATED_AT).is_err());
        item.insert(keys::CREATED_AT.into(), keys::n(17));
        assert!(at(&item, keys::CREATED_AT).is_err());
        item.insert(
            keys::BRAND_ID.into(),
            AttributeValue::S("bob@example.com".into()),
        );
        let e = id(&item, keys::BRAND_ID).unwrap_err();
        assert_eq!(e.field, keys::BRAND_ID);
        item.insert(keys::NAME.into(), AttributeValue::S(String::new()));
        assert_eq!(text(&item, keys::NAME), Ok(None), "empty reads as absent");
    }

    #[test]
    fn a_checkpoint_roundtrips() {
        let mut c = Checkpoint::new(Job::Backfill, "2024-06-27T00:00:00Z".parse().unwrap());
        c.pass.position = Some(keys::key_of("PROD", "PRO#x"));
        c.pass.ticks = 2;
        c.pass.add("scanned", 7);
        let item = c.to_item();
        assert_eq!(item[keys::PASS_STARTED], keys::n(1_719_446_400));
        assert_eq!(item[keys::TICKS], keys::n(2));
        assert_eq!(Checkpoint::from_item(Job::Backfill, &item), Ok(c));
        assert!(Checkpoint::from_item(Job::Audit, &item).is_err());
        let mut bad = item.clone();
        bad.insert(keys::POSITION.into(), AttributeValue::S("x".into()));
        assert_eq!(
            Checkpoint::from_item(Job::Backfill, &bad),
            Err("position is not a key".into())
        );
        bad.remove(keys::POSITION);
        bad.insert(keys::PASS_STARTED.into(), AttributeValue::S("7".into()));
        assert_eq!(
            Checkpoint::from_item(Job::Backfill, &bad),
            Err("no pass_started".into()),
            "numbers read strictly"
        );
    }
}
