//! Every key string and attribute name of the shop table, and the only
//! code that builds or parses its keys.
//!
//! | entity | `PK` | `SK` | derived by the worker |
//! |---|---|---|---|
//! | Category | `CAT` | `CAT#<id>` | `SKU = CAT#NAME#<name>` |
//! | Brand | `BRAND` | `BRAND#<id>` | `SKU = BRAND#NAME#<name>` |
//! | Product | `PROD` | `PRO#<id>` | `GSI1PK = BRAND#<brand_id>`, `GSI1SK = CAT#<category_id>#AT#<created_at>`, `GSI2PK = CAT#<category_id>`, `GSI2SK = BRAND#<brand_id>#AT#<created_at>` |
//! | User | `USER` | `USER#<id>` | `SKU = EMAIL#<email>` |
//! | Order | `USER#<user_id>` | `ORDER#<id>` | `GSI1PK = ORDER#STATUS#<status>`, `GSI1SK = AT#<updated_at>` |
//! | the worker's checkpoint of a job | `WORKER` | `CHECKPOINT#<job>` | |
//!
//! Ids are KSUIDs (27 base62 characters, [`Id`]); times are epoch seconds
//! written `AT#<seconds>` ([`At`]: ten digits, so that the strings sort
//! as the times do). Errors ([`KeyError`]) name the part and the reason,
//! never the malformed value: a `SKU = EMAIL#...` is personal data, and a
//! malformed key may hold anything a writer put there.

use std::fmt;
use std::str::FromStr;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use svix_ksuid::{Ksuid, KsuidLike};
use worker_engine::item::Item;
use worker_engine::keys::{AttributeError, string_of};
use worker_engine::schedule::JobName;
use worker_engine::store::Key;

use crate::items::Fields;

/// The partition key attribute (S).
pub const PK: &str = "PK";
/// The sort key attribute (S).
pub const SK: &str = "SK";
/// The local index's sort key (names, e-mail addresses).
pub const SKU: &str = "SKU";
/// `GSI1`'s partition key (S): `BRAND#<brand_id>` of a product,
/// `ORDER#STATUS#<status>` of an order. Derived by the worker.
pub const GSI1PK: &str = "GSI1PK";
/// `GSI1`'s sort key (S): `CAT#<category_id>#AT#<created_at>` of a product,
/// `AT#<updated_at>` of an order. Derived by the worker.
pub const GSI1SK: &str = "GSI1SK";
/// `GSI2`'s partition key (S): `CAT#<category_id>` of a product. Derived by
/// the worker.
pub const GSI2PK: &str = "GSI2PK";
/// `GSI2`'s sort key (S): `BRAND#<brand_id>#AT#<created_at>` of a product.
/// Derived by the worker.
pub const GSI2SK: &str = "GSI2SK";

/// Index names; this one the local index, a partition's items by [`SKU`].
pub const LSI: &str = "LSI";
/// The global index of a brand's products and of the orders in a status
/// ([`GSI1PK`], [`GSI1SK`]).
pub const GSI1: &str = "GSI1";
/// The global index of a category's products ([`GSI2PK`], [`GSI2SK`]).
pub const GSI2: &str = "GSI2";

/// The entities' fields (the seed's entity diagram); this one the name of a
/// category, brand, product or user (S).
pub const NAME: &str = "name";
/// User: the e-mail address (S); personal data, never logged.
pub const EMAIL: &str = "email";
/// Product: the brand's id (S, KSUID).
pub const BRAND_ID: &str = "brand_id";
/// Product: the category's id (S, KSUID).
pub const CATEGORY_ID: &str = "category_id";
/// Order: the ordering user's id (S, KSUID).
pub const USER_ID: &str = "user_id";
/// Order: its status (S), e.g. `PENDING`, `PAID`.
pub const STATUS: &str = "status";
/// Product: its price (N).
pub const PRICE: &str = "price";
/// Product: units in stock (N).
pub const STOCK: &str = "stock";
/// Order: its total (N).
pub const TOTAL_PRICE: &str = "total_price";
/// Every entity: when it was created, epoch seconds (N).
pub const CREATED_AT: &str = "created_at";
/// Every entity: when it was last changed, epoch seconds (N).
pub const UPDATED_AT: &str = "updated_at";

/// Product, worker-owned: the references (`brand_id`, `category_id`) that
/// name no existing item (SS). No index reads it.
pub const MISSING_REFS: &str = "worker_missing_refs";

/// Checkpoint attributes (worker-owned items only); this one where the
/// pass resumes (M, the Scan's or Query's last key).
pub const POSITION: &str = "position";
/// Checkpoint: when the pass started, epoch seconds (N).
pub const PASS_STARTED: &str = "pass_started";
/// Checkpoint: the ticks the pass has taken so far (N).
pub const TICKS: &str = "ticks";
/// Checkpoint: the pass's running totals by name (M of N).
pub const TOTALS: &str = "totals";

const CAT: &str = "CAT";
const BRAND: &str = "BRAND";
const PROD: &str = "PROD";
const USER: &str = "USER";
const WORKER: &str = "WORKER";
const CAT_PREFIX: &str = "CAT#";
const BRAND_PREFIX: &str = "BRAND#";
const PRO_PREFIX: &str = "PRO#";
const USER_PREFIX: &str = "USER#";
const ORDER_PREFIX: &str = "ORDER#";
const CHECKPOINT_PREFIX: &str = "CHECKPOINT#";
const CAT_NAME_PREFIX: &str = "CAT#NAME#";
const BRAND_NAME_PREFIX: &str = "BRAND#NAME#";
const EMAIL_PREFIX: &str = "EMAIL#";
const ORDER_STATUS_PREFIX: &str = "ORDER#STATUS#";
const AT_PREFIX: &str = "AT#";
const AT_INFIX: &str = "#AT#";

worker_engine::job_names! {
    /// The scheduled jobs of the shop worker (also the checkpoint keys).
    pub enum Job {
        /// Flags products whose brand or category does not exist.
        Audit = "audit",
        /// Reports orders stuck in a status.
        StuckOrders = "stuck-orders",
        /// Derives the index attributes of every item (on demand).
        Backfill = "backfill",
    }
}

/// A key or key part that does not read. Texts carry ids and fixed words
/// only, never the malformed value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key attribute is missing or not a string.
    #[error(transparent)]
    Attribute(#[from] AttributeError),
    /// Not an item of the shop table's design (left alone).
    #[error("PK is not a partition of the shop table")]
    Foreign,
    /// The value is not quoted: a malformed key may hold anything a
    /// writer put there, an e-mail address included.
    #[error("{what} is malformed: {reason}")]
    Malformed {
        /// What was read (`SK`, `category id`, `GSI1SK`, ...).
        what: &'static str,
        /// Why it does not read.
        reason: &'static str,
    },
}

impl KeyError {
    /// Whether the item is simply not one of this design's.
    pub fn is_foreign(&self) -> bool {
        matches!(self, KeyError::Foreign)
    }

    fn malformed(what: &'static str, reason: &'static str) -> Self {
        KeyError::Malformed { what, reason }
    }
}

/// The largest KSUID (2¹⁶⁰ - 1), in base62.
const MAX_KSUID: &str = "aWgEPTl1tmebfsQzFP4bxwgy80V";

/// A KSUID id: 27 base62 characters, canonical (what it parses from is
/// what it writes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Id(String);

impl Id {
    /// Parse an id; `what` names it in the error.
    pub fn parse_as(what: &'static str, s: &str) -> Result<Id, KeyError> {
        let bad = |reason| KeyError::malformed(what, reason);
        if s.len() != 27 || !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(bad("not a KSUID (27 base62 characters)"));
        }
        // Base62 digits sort as their ASCII bytes, so a text of 27 of them
        // up to the largest KSUID's is a KSUID, and its canonical text (the
        // strict reading below, decoded and encoded again, gives back every
        // such text: the tests hold the two side by side). One comparison
        // instead of a big-number decode and encode per id.
        if s <= MAX_KSUID {
            return Ok(Id(s.to_owned()));
        }
        Id::parse_strict(what, s)
    }

    /// [`Id::parse_as`] by decoding the KSUID and encoding it again: the
    /// reason for a text over the largest KSUID.
    fn parse_strict(what: &'static str, s: &str) -> Result<Id, KeyError> {
        let bad = |reason| KeyError::malformed(what, reason);
        let k = Ksuid::from_str(s).map_err(|_| bad("not a KSUID"))?;
        if k.to_string() != s {
            return Err(bad("not a canonical KSUID"));
        }
        Ok(Id(s.to_owned()))
    }

    /// The id of a KSUID.
    pub fn of(k: Ksuid) -> Id {
        Id(k.to_string())
    }

    /// A new id stamped `secs` (epoch seconds) with this payload (tests,
    /// fixtures: reproducible ids).
    pub fn at(secs: i64, payload: [u8; 16]) -> Id {
        Id::of(Ksuid::from_seconds(Some(secs), Some(&payload)))
    }

    /// The id's text (27 characters).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The epoch seconds the id was made at.
    pub fn timestamp(&self) -> i64 {
        Ksuid::from_str(&self.0)
            .map(|k| i64::from(k.timestamp_raw()) + svix_ksuid::KSUID_EPOCH)
            .unwrap_or_default()
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A time in a key: epoch seconds of ten digits (2001-09-09 to 2286-11-20),
/// so that `AT#<seconds>` strings sort as the times do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct At(i64);

impl At {
    /// The first time of ten digits: 2001-09-09T01:46:40Z.
    pub const MIN: i64 = 1_000_000_000;
    /// The last time of ten digits: 2286-11-20T17:46:39Z.
    pub const MAX: i64 = 9_999_999_999;

    /// The time of `secs`; `what` names the field in the error.
    pub fn new(what: &'static str, secs: i64) -> Result<At, KeyError> {
        if (At::MIN..=At::MAX).contains(&secs) {
            Ok(At(secs))
        } else {
            Err(KeyError::malformed(
                what,
                "not epoch seconds of ten digits (2001 to 2286)",
            ))
        }
    }

    /// Epoch seconds.
    pub fn secs(self) -> i64 {
        self.0
    }

    /// `AT#<seconds>`.
    pub fn key(self) -> String {
        [AT_PREFIX, self.digits().as_str()].concat()
    }

    /// The seconds' ten digits, as keys write them.
    fn digits(self) -> Digits {
        let mut digits = [b'0'; 10];
        let mut n = self.0.unsigned_abs();
        for d in digits.iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        Digits(digits)
    }

    /// Parse `AT#<seconds>`.
    pub fn parse(s: &str) -> Result<At, KeyError> {
        let bad = |reason| KeyError::malformed("AT key", reason);
        let digits = s
            .strip_prefix(AT_PREFIX)
            .ok_or_else(|| bad("no AT# prefix"))?;
        if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("expected ten digits"));
        }
        At::new("AT key", digits.parse().map_err(|_| bad("not a number"))?)
    }
}

/// An [`At`]'s ten digits, written without the formatting machinery.
struct Digits([u8; 10]);

impl Digits {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("ASCII digits")
    }
}

/// An order status in a key: non-empty, without `#`.
pub fn check_status(status: &str) -> Result<(), KeyError> {
    if status.is_empty() || status.contains('#') || status.len() > 64 {
        return Err(KeyError::malformed(
            "order status",
            "empty, longer than 64 or containing #",
        ));
    }
    Ok(())
}

/// Any item of the table, by its `PK` and `SK`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ItemKey {
    /// A category: `CAT` / `CAT#<id>`.
    Category(Id),
    /// A brand: `BRAND` / `BRAND#<id>`.
    Brand(Id),
    /// A product: `PROD` / `PRO#<id>`.
    Product(Id),
    /// A user: `USER` / `USER#<id>`.
    User(Id),
    /// An order: `USER#<user>` / `ORDER#<order>`.
    Order {
        /// The ordering user's id.
        user: Id,
        /// The order's id.
        order: Id,
    },
    /// The worker's checkpoint of a job: `WORKER` / `CHECKPOINT#<job>`.
    Checkpoint(Job),
}

impl ItemKey {
    /// `(PK, SK)`.
    pub fn parts(&self) -> (String, String) {
        match self {
            ItemKey::Category(id) => (CAT.into(), [CAT_PREFIX, id.as_str()].concat()),
            ItemKey::Brand(id) => (BRAND.into(), [BRAND_PREFIX, id.as_str()].concat()),
            ItemKey::Product(id) => (PROD.into(), [PRO_PREFIX, id.as_str()].concat()),
            ItemKey::User(id) => (USER.into(), [USER_PREFIX, id.as_str()].concat()),
            ItemKey::Order { user, order } => (
                [USER_PREFIX, user.as_str()].concat(),
                [ORDER_PREFIX, order.as_str()].concat(),
            ),
            ItemKey::Checkpoint(job) => (WORKER.into(), format!("{CHECKPOINT_PREFIX}{job}")),
        }
    }

    /// The item's key.
    pub fn key(&self) -> Key {
        let (pk, sk) = self.parts();
        key_of(pk, sk)
    }

    /// Parse `PK` and `SK`.
    pub fn parse(pk: &str, sk: &str) -> Result<ItemKey, KeyError> {
        let id = |prefix: &str, what: &'static str| {
            let rest = sk
                .strip_prefix(prefix)
                .ok_or_else(|| KeyError::malformed("SK", "does not match its PK"))?;
            Id::parse_as(what, rest)
        };
        match pk {
            CAT => id(CAT_PREFIX, "category id").map(ItemKey::Category),
            BRAND => id(BRAND_PREFIX, "brand id").map(ItemKey::Brand),
            PROD => id(PRO_PREFIX, "product id").map(ItemKey::Product),
            USER => id(USER_PREFIX, "user id").map(ItemKey::User),
            WORKER => {
                let job = sk
                    .strip_prefix(CHECKPOINT_PREFIX)
                    .and_then(Job::parse)
                    .ok_or_else(|| KeyError::malformed("checkpoint SK", "not a job"))?;
                Ok(ItemKey::Checkpoint(job))
            }
            _ => match pk.strip_prefix(USER_PREFIX) {
                Some(user) => Ok(ItemKey::Order {
                    user: Id::parse_as("order's user id", user)?,
                    order: id(ORDER_PREFIX, "order id")?,
                }),
                None => Err(KeyError::Foreign),
            },
        }
    }

    /// Read an item's (or a stream record's) key.
    pub fn from_item(item: &Item) -> Result<ItemKey, KeyError> {
        ItemKey::from_fields(item)
    }

    /// [`ItemKey::from_item`] of any item's attributes (an [`Item`], or
    /// what the stream function keeps of an image).
    pub fn from_fields(item: &(impl Fields + ?Sized)) -> Result<ItemKey, KeyError> {
        ItemKey::parse(
            string_of(item.field(PK), PK)?,
            string_of(item.field(SK), SK)?,
        )
    }
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pk, sk) = self.parts();
        write!(f, "{pk}/{sk}")
    }
}

/// The partition of a kind of item, for listing them (`PK = CAT`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `PK = CAT`.
    Categories,
    /// `PK = BRAND`.
    Brands,
    /// `PK = PROD`.
    Products,
    /// `PK = USER`.
    Users,
}

impl Listing {
    /// The partition's `PK`.
    pub fn pk(self) -> &'static str {
        match self {
            Listing::Categories => CAT,
            Listing::Brands => BRAND,
            Listing::Products => PROD,
            Listing::Users => USER,
        }
    }
}

/// The partition of a user's orders, and the prefix of their `SK`.
pub fn orders_of(user: &Id) -> (String, &'static str) {
    (format!("{USER_PREFIX}{user}"), ORDER_PREFIX)
}

/// A local index sort key (`SKU`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Sku {
    /// A category's: `CAT#NAME#<name>`.
    CategoryName(String),
    /// A brand's: `BRAND#NAME#<name>`.
    BrandName(String),
    /// Personal data: never in a log line (its `Debug` hides it).
    Email(String),
}

impl fmt::Debug for Sku {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sku::CategoryName(n) => write!(f, "CategoryName({n:?})"),
            Sku::BrandName(n) => write!(f, "BrandName({n:?})"),
            Sku::Email(_) => f.write_str("Email(…)"),
        }
    }
}

impl Sku {
    /// The `SKU` value.
    pub fn value(&self) -> String {
        match self {
            Sku::CategoryName(n) => format!("{CAT_NAME_PREFIX}{n}"),
            Sku::BrandName(n) => format!("{BRAND_NAME_PREFIX}{n}"),
            Sku::Email(e) => format!("{EMAIL_PREFIX}{e}"),
        }
    }

    /// Parse a `SKU` value (names and addresses: any non-empty text).
    pub fn parse(s: &str) -> Result<Sku, KeyError> {
        let non_empty = |rest: &str, what| {
            if rest.is_empty() {
                Err(KeyError::malformed(what, "empty"))
            } else {
                Ok(rest.to_owned())
            }
        };
        if let Some(rest) = s.strip_prefix(CAT_NAME_PREFIX) {
            non_empty(rest, "category name").map(Sku::CategoryName)
        } else if let Some(rest) = s.strip_prefix(BRAND_NAME_PREFIX) {
            non_empty(rest, "brand name").map(Sku::BrandName)
        } else if let Some(rest) = s.strip_prefix(EMAIL_PREFIX) {
            non_empty(rest, "e-mail address").map(Sku::Email)
        } else {
            Err(KeyError::malformed(
                "SKU",
                "not CAT#NAME#, BRAND#NAME# or EMAIL#",
            ))
        }
    }

    /// The prefix of names starting with `prefix` in a partition's `SKU`s.
    pub fn category_name_prefix(prefix: &str) -> String {
        format!("{CAT_NAME_PREFIX}{prefix}")
    }
    /// The same for brand names: `BRAND#NAME#<prefix>`.
    pub fn brand_name_prefix(prefix: &str) -> String {
        format!("{BRAND_NAME_PREFIX}{prefix}")
    }
}

/// A `GSI1` key (`GSI1PK`, `GSI1SK`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Gsi1 {
    /// A product under its brand: `BRAND#<brand>`, `CAT#<category>#AT#<created>`.
    ProductByBrand {
        /// The product's `brand_id`.
        brand: Id,
        /// The product's `category_id`.
        category: Id,
        /// The product's `created_at`.
        created: At,
    },
    /// An order under its status: `ORDER#STATUS#<status>`, `AT#<updated>`.
    OrderByStatus {
        /// The order's `status`.
        status: String,
        /// The order's `updated_at`.
        updated: At,
    },
}

impl Gsi1 {
    /// An order's key under `status`; an error when the status cannot be in a
    /// key (see [`check_status`]).
    pub fn order_by_status(status: &str, updated: At) -> Result<Gsi1, KeyError> {
        check_status(status)?;
        Ok(Gsi1::OrderByStatus {
            status: status.to_owned(),
            updated,
        })
    }

    /// `(GSI1PK, GSI1SK)`.
    pub fn parts(&self) -> (String, String) {
        match self {
            Gsi1::ProductByBrand {
                brand,
                category,
                created,
            } => (
                brand_partition(brand),
                [
                    CAT_PREFIX,
                    category.as_str(),
                    AT_INFIX,
                    created.digits().as_str(),
                ]
                .concat(),
            ),
            Gsi1::OrderByStatus { status, updated } => (status_partition(status), updated.key()),
        }
    }

    /// Parse `GSI1PK` and `GSI1SK`: an order's when the partition is
    /// `ORDER#STATUS#`, else a product's.
    pub fn parse(pk: &str, sk: &str) -> Result<Gsi1, KeyError> {
        if let Some(status) = pk.strip_prefix(ORDER_STATUS_PREFIX) {
            check_status(status)?;
            return Ok(Gsi1::OrderByStatus {
                status: status.to_owned(),
                updated: At::parse(sk)?,
            });
        }
        let brand = pk
            .strip_prefix(BRAND_PREFIX)
            .ok_or_else(|| KeyError::malformed("GSI1PK", "not BRAND# or ORDER#STATUS#"))?;
        let (category, created) = id_at(sk, CAT_PREFIX, "GSI1SK", "category id")?;
        Ok(Gsi1::ProductByBrand {
            brand: Id::parse_as("brand id", brand)?,
            category,
            created,
        })
    }
}

/// A `GSI2` key: a product under its category, `CAT#<category>`,
/// `BRAND#<brand>#AT#<created>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Gsi2 {
    /// The product's `category_id`.
    pub category: Id,
    /// The product's `brand_id`.
    pub brand: Id,
    /// The product's `created_at`.
    pub created: At,
}

impl Gsi2 {
    /// `(GSI2PK, GSI2SK)`.
    pub fn parts(&self) -> (String, String) {
        (
            category_partition(&self.category),
            [
                BRAND_PREFIX,
                self.brand.as_str(),
                AT_INFIX,
                self.created.digits().as_str(),
            ]
            .concat(),
        )
    }

    /// Parse `GSI2PK` and `GSI2SK`.
    pub fn parse(pk: &str, sk: &str) -> Result<Gsi2, KeyError> {
        let category = pk
            .strip_prefix(CAT_PREFIX)
            .ok_or_else(|| KeyError::malformed("GSI2PK", "not CAT#"))?;
        let (brand, created) = id_at(sk, BRAND_PREFIX, "GSI2SK", "brand id")?;
        Ok(Gsi2 {
            category: Id::parse_as("category id", category)?,
            brand,
            created,
        })
    }
}

/// `<prefix><id>#AT#<seconds>`.
fn id_at(
    s: &str,
    prefix: &str,
    what: &'static str,
    id: &'static str,
) -> Result<(Id, At), KeyError> {
    let rest = s
        .strip_prefix(prefix)
        .ok_or_else(|| KeyError::malformed(what, "wrong prefix"))?;
    let (raw_id, at) = rest
        .split_once(AT_INFIX)
        .ok_or_else(|| KeyError::malformed(what, "no #AT#"))?;
    Ok((
        Id::parse_as(id, raw_id)?,
        At::parse(&format!("{AT_PREFIX}{at}"))?,
    ))
}

/// `GSI1PK` of a brand's products.
pub fn brand_partition(brand: &Id) -> String {
    [BRAND_PREFIX, brand.as_str()].concat()
}

/// `GSI2PK` of a category's products, and the `GSI1SK` prefix of a
/// brand's products of that category.
pub fn category_partition(category: &Id) -> String {
    [CAT_PREFIX, category.as_str()].concat()
}

/// `GSI1PK` of the orders in a status.
pub fn status_partition(status: &str) -> String {
    [ORDER_STATUS_PREFIX, status].concat()
}

/// The `GSI1SK` prefix of a brand's products in a category: `CAT#<id>#`.
pub fn category_prefix(category: &Id) -> String {
    format!("{CAT_PREFIX}{category}#")
}
/// The `GSI2SK` prefix of a category's products of a brand: `BRAND#<id>#`.
pub fn brand_prefix(brand: &Id) -> String {
    format!("{BRAND_PREFIX}{brand}#")
}

/// The key of a job's checkpoint.
pub fn checkpoint(job: Job) -> Key {
    ItemKey::Checkpoint(job).key()
}

/// A `PK`/`SK` key.
pub fn key_of(pk: impl Into<String>, sk: impl Into<String>) -> Key {
    worker_engine::keys::strings([(PK, pk.into()), (SK, sk.into())])
}

/// A number attribute.
pub fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u8) -> Id {
        Id::at(1_700_000_000 + i64::from(n), [n; 16])
    }

    #[test]
    fn every_key_of_the_table() {
        let (u, o) = (id(1), id(2));
        let cases = [
            (ItemKey::Category(u.clone()), "CAT", format!("CAT#{u}")),
            (ItemKey::Brand(u.clone()), "BRAND", format!("BRAND#{u}")),
            (ItemKey::Product(u.clone()), "PROD", format!("PRO#{u}")),
            (ItemKey::User(u.clone()), "USER", format!("USER#{u}")),
            (
                ItemKey::Order {
                    user: u.clone(),
                    order: o.clone(),
                },
                &*format!("USER#{u}"),
                format!("ORDER#{o}"),
            ),
        ]
        .map(|(k, pk, sk)| (k, pk.to_owned(), sk));
        for (key, pk, sk) in cases {
            assert_eq!(key.parts(), (pk.clone(), sk.clone()));
            assert_eq!(ItemKey::parse(&pk, &sk), Ok(key));
        }
        assert_eq!(
            ItemKey::parse("WORKER", "CHECKPOINT#stuck-orders"),
            Ok(ItemKey::Checkpoint(Job::StuckOrders))
        );
        let at = At::new("t", 1_719_473_962).unwrap();
        let p = Gsi1::ProductByBrand {
            brand: u.clone(),
            category: o.clone(),
            created: at,
        };
        assert_eq!(
            p.parts(),
            (format!("BRAND#{u}"), format!("CAT#{o}#AT#1719473962"))
        );
        let s = Gsi1::order_by_status("DELIVERED", at).unwrap();
        assert_eq!(
            s.parts(),
            ("ORDER#STATUS#DELIVERED".into(), "AT#1719473962".into())
        );
        let g2 = Gsi2 {
            category: o.clone(),
            brand: u.clone(),
            created: at,
        };
        assert_eq!(
            g2.parts(),
            (format!("CAT#{o}"), format!("BRAND#{u}#AT#1719473962"))
        );
        assert_eq!(Sku::Email("a@b.c".into()).value(), "EMAIL#a@b.c");
        assert_eq!(
            Sku::parse("CAT#NAME#Tea #1"),
            Ok(Sku::CategoryName("Tea #1".into()))
        );
        assert_eq!(format!("{:?}", Sku::Email("a@b.c".into())), "Email(…)");
    }

    #[test]
    fn malformed_keys_are_typed_errors_without_personal_data() {
        let u = id(3);
        assert!(ItemKey::parse("ORDERS", "x").unwrap_err().is_foreign());
        assert!(matches!(
            ItemKey::parse("CAT", "CAT#123"),
            Err(KeyError::Malformed {
                what: "category id",
                ..
            })
        ));
        assert!(matches!(
            ItemKey::parse("CAT", &format!("BRAND#{u}")),
            Err(KeyError::Malformed { what: "SK", .. })
        ));
        assert!(matches!(
            ItemKey::parse(&format!("USER#{u}"), "ORDER#x"),
            Err(KeyError::Malformed {
                what: "order id",
                ..
            })
        ));
        let mut item = Item::new();
        let missing = ItemKey::from_item(&item).unwrap_err();
        assert_eq!(missing, AttributeError::Missing("PK").into());
        assert_eq!(missing.to_string(), "the key has no PK attribute");
        item.insert(PK.into(), n(1));
        let not_string = ItemKey::from_item(&item).unwrap_err();
        assert_eq!(not_string, AttributeError::NotString("PK").into());
        assert_eq!(not_string.to_string(), "PK is not a string");
        // Lowercase or padded: not canonical base62 KSUIDs.
        assert!(Id::parse_as("id", &"0".repeat(26)).is_err());
        assert!(
            Id::parse_as("id", "zzzzzzzzzzzzzzzzzzzzzzzzzzz").is_err(),
            "overflows 160 bits"
        );
        let e = Sku::parse("EMAIL#").unwrap_err().to_string();
        assert!(!e.contains('@'));
        let e = Sku::parse("MAIL#bob@x.io").unwrap_err().to_string();
        assert!(!e.contains("bob"), "{e}");
        let e = ItemKey::parse("USER", "USER#bob@x.io")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "user id is malformed: not a KSUID (27 base62 characters)"
        );
        assert!(At::parse("AT#999999999").is_err(), "nine digits");
        assert!(At::parse("AT#17194739620").is_err());
        assert!(At::new("created_at", -1).is_err());
        assert!(Gsi1::parse("ORDER#STATUS#", "AT#1719473962").is_err());
        assert!(Gsi1::parse(&format!("BRAND#{u}"), &format!("CAT#{u}")).is_err());
        assert!(Gsi2::parse("BRAND#x", "y").is_err());
        assert!(check_status("A#B").is_err());
    }

    #[test]
    fn ids_carry_their_time() {
        let i = Id::at(1_719_473_962, [7; 16]);
        assert_eq!(i.timestamp(), 1_719_473_962);
        assert_eq!(Id::parse_as("id", i.as_str()), Ok(i.clone()));
        assert!(Id::at(1_719_473_963, [0; 16]) > Id::at(1_719_473_962, [255; 16]));
    }

    fn arb_id() -> impl Strategy<Value = Id> {
        (1_400_000_000..5_000_000_000i64, any::<[u8; 16]>()).prop_map(|(t, p)| Id::at(t, p))
    }
    fn arb_at() -> impl Strategy<Value = At> {
        (At::MIN..=At::MAX).prop_map(|t| At::new("t", t).unwrap())
    }

    /// The strict reading alone: decode, encode again, compare.
    fn parse_strict_only(s: &str) -> Result<Id, KeyError> {
        if s.len() != 27 || !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(KeyError::malformed(
                "id",
                "not a KSUID (27 base62 characters)",
            ));
        }
        Id::parse_strict("id", s)
    }

    #[test]
    fn the_largest_ksuid_bounds_the_quick_check() {
        assert_eq!(Ksuid::from_bytes([0xff; 20]).to_string(), MAX_KSUID);
        let zero = "0".repeat(27);
        let over = "aWgEPTl1tmebfsQzFP4bxwgy80W";
        for s in [
            MAX_KSUID,
            zero.as_str(),
            over,
            "zzzzzzzzzzzzzzzzzzzzzzzzzzz",
            "b00000000000000000000000000",
        ] {
            assert_eq!(Id::parse_as("id", s), parse_strict_only(s), "{s}");
        }
        assert!(Id::parse_as("id", MAX_KSUID).is_ok());
        assert!(Id::parse_as("id", over).is_err());
    }

    proptest! {
        /// The quick check gives the strict reading's result, for any text
        /// of 27 base62 characters (around the largest KSUID's too).
        #[test]
        fn quick_check_reads_as_the_strict_one(
            s in "[0-9A-Za-z]{27}",
            near in "aWgE[0-9A-Za-z]{23}",
            zeros in (0usize..=27, "[0-9A-Za-z]{27}")
                .prop_map(|(k, s)| format!("{}{}", "0".repeat(k), &s[k..])),
        ) {
            for s in [s, near, zeros] {
                prop_assert_eq!(Id::parse_as("id", &s), parse_strict_only(&s), "{}", s);
            }
        }

        /// Every key string written without `format!` reads as it wrote
        /// it.
        #[test]
        fn keys_read_as_format_writes_them(
            a in arb_id(),
            b in arb_id(),
            secs in At::MIN..=At::MAX,
            status in "[A-Z_]{1,20}",
        ) {
            let at = At::new("t", secs).unwrap();
            prop_assert_eq!(at.key(), format!("AT#{secs}"));
            let keys = [
                (ItemKey::Category(a.clone()), format!("CAT#{a}")),
                (ItemKey::Brand(a.clone()), format!("BRAND#{a}")),
                (ItemKey::Product(a.clone()), format!("PRO#{a}")),
                (ItemKey::User(a.clone()), format!("USER#{a}")),
            ];
            for (key, sk) in keys {
                prop_assert_eq!(key.parts().1, sk);
            }
            let order = ItemKey::Order { user: a.clone(), order: b.clone() };
            prop_assert_eq!(order.parts(), (format!("USER#{a}"), format!("ORDER#{b}")));
            let by_brand = Gsi1::ProductByBrand {
                brand: a.clone(),
                category: b.clone(),
                created: at,
            };
            prop_assert_eq!(by_brand.parts(), (format!("BRAND#{a}"), format!("CAT#{b}#AT#{secs}")));
            let by_category = Gsi2 { category: b.clone(), brand: a.clone(), created: at };
            prop_assert_eq!(by_category.parts(), (format!("CAT#{b}"), format!("BRAND#{a}#AT#{secs}")));
            let by_status = Gsi1::order_by_status(&status, at).unwrap();
            prop_assert_eq!(by_status.parts(), (format!("ORDER#STATUS#{status}"), format!("AT#{secs}")));
        }

        #[test]
        fn item_keys_roundtrip(a in arb_id(), b in arb_id(), kind in 0..6u8) {
            let key = match kind {
                0 => ItemKey::Category(a),
                1 => ItemKey::Brand(a),
                2 => ItemKey::Product(a),
                3 => ItemKey::User(a),
                4 => ItemKey::Order { user: a, order: b },
                _ => ItemKey::Checkpoint(Job::Backfill),
            };
            let (pk, sk) = key.parts();
            prop_assert_eq!(ItemKey::parse(&pk, &sk), Ok(key.clone()));
            prop_assert_eq!(ItemKey::from_item(&key.key()), Ok(key));
        }

        #[test]
        fn index_keys_roundtrip(a in arb_id(), b in arb_id(), t in arb_at(), status in "[A-Z_]{1,12}", name in "\\PC{1,20}") {
            let p = Gsi1::ProductByBrand { brand: a.clone(), category: b.clone(), created: t };
            let (pk, sk) = p.parts();
            prop_assert_eq!(Gsi1::parse(&pk, &sk), Ok(p));
            let o = Gsi1::order_by_status(&status, t).unwrap();
            let (pk, sk) = o.parts();
            prop_assert_eq!(Gsi1::parse(&pk, &sk), Ok(o));
            let g = Gsi2 { category: a, brand: b, created: t };
            let (pk, sk) = g.parts();
            prop_assert_eq!(Gsi2::parse(&pk, &sk), Ok(g));
            for sku in [Sku::CategoryName(name.clone()), Sku::BrandName(name.clone()), Sku::Email(name)] {
                prop_assert_eq!(Sku::parse(&sku.value()), Ok(sku));
            }
        }

        #[test]
        fn at_keys_sort_as_times(a in arb_at(), b in arb_at()) {
            prop_assert_eq!(a.key().cmp(&b.key()), a.cmp(&b));
            prop_assert_eq!(At::parse(&a.key()), Ok(a));
        }
    }
}
