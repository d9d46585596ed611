//! What an item's index attributes must be, from its own fields only
//! (pure; the stream handler and `backfill` both decide here).
//!
//! | entity | derived | from |
//! |---|---|---|
//! | Category, Brand | `SKU = CAT#NAME#<name>` / `BRAND#NAME#<name>` | `name` |
//! | User | `SKU = EMAIL#<email>` | `email` |
//! | Product | `GSI1PK`, `GSI1SK`, `GSI2PK`, `GSI2SK` | `brand_id`, `category_id`, `created_at` |
//! | Order | `GSI1PK`, `GSI1SK` | `status`, `updated_at` |
//!
//! A missing source field (absent or empty) means the derived attributes
//! are absent too: the item leaves the index rather than stay listed under
//! stale keys. A malformed one (an id that is not a KSUID, a time that is
//! not ten digits of epoch seconds, a status with `#`) is an error naming
//! the item's key and the field, never the value.

use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::item::Item;
use worker_engine::store::Expr;

use crate::items::{self, FieldError, Fields};
use crate::keys::{self, Gsi1, Gsi2, ItemKey, KeyError, Sku};

/// Why an item's attributes cannot be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeriveError {
    /// The item's `PK`/`SK` does not read.
    #[error("malformed key: {0}")]
    Key(#[from] KeyError),
    /// A source field does not read (not a string, not a KSUID, not ten
    /// digits of epoch seconds, a status with `#`).
    #[error("{key}: {error}")]
    Field {
        /// The item's key, as `PK/SK` (ids and fixed words only).
        key: String,
        /// The field and why it does not read.
        error: FieldError,
    },
}

/// Every attribute besides the key that [`Derivation::of`] and
/// [`Derivation::satisfied_by`] read: an item holding its key and these
/// derives as the whole item does (what the stream function reads of an
/// image, `crate::images`).
pub const READS: &[&str] = &[
    keys::NAME,
    keys::EMAIL,
    keys::BRAND_ID,
    keys::CATEGORY_ID,
    keys::CREATED_AT,
    keys::STATUS,
    keys::UPDATED_AT,
    keys::SKU,
    keys::GSI1PK,
    keys::GSI1SK,
    keys::GSI2PK,
    keys::GSI2SK,
];

/// The derived attributes an item's fields call for, and the fields (with
/// the values seen) they were derived from.
#[derive(Debug, Clone, PartialEq)]
pub struct Derivation {
    /// The item's key.
    pub key: ItemKey,
    /// Each source field and the value seen (`None`: absent).
    pub sources: Vec<(&'static str, Option<AttributeValue>)>,
    /// Each derived attribute and its value (`None`: must be absent).
    pub derived: Vec<(&'static str, Option<String>)>,
}

impl Derivation {
    /// The derivation of `item`; `Ok(None)` for items the worker derives
    /// nothing for (checkpoints, other designs' items).
    pub fn of<F: Fields + ?Sized>(item: &F) -> Result<Option<Derivation>, DeriveError> {
        let key = match ItemKey::from_fields(item) {
            Ok(ItemKey::Checkpoint(_)) => return Ok(None),
            Ok(k) => k,
            Err(e) if e.is_foreign() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let field = |e: FieldError| DeriveError::Field {
            key: key.to_string(),
            error: e,
        };
        let (sources, derived): (&[&'static str], Vec<(&'static str, Option<String>)>) = match &key
        {
            ItemKey::Category(_) | ItemKey::Brand(_) => {
                let name = items::text(item, keys::NAME).map_err(field)?;
                let sku = name.map(|n| match key {
                    ItemKey::Category(_) => Sku::CategoryName(n.to_owned()),
                    _ => Sku::BrandName(n.to_owned()),
                });
                (&[keys::NAME], vec![(keys::SKU, sku.map(|s| s.value()))])
            }
            ItemKey::User(_) => {
                let email = items::text(item, keys::EMAIL).map_err(field)?;
                let sku = email.map(|e| Sku::Email(e.to_owned()).value());
                (&[keys::EMAIL], vec![(keys::SKU, sku)])
            }
            ItemKey::Product(_) => {
                let brand = items::id(item, keys::BRAND_ID).map_err(field)?;
                let category = items::id(item, keys::CATEGORY_ID).map_err(field)?;
                let created = items::at(item, keys::CREATED_AT).map_err(field)?;
                let (g1, g2) = match (brand, category, created) {
                    (Some(brand), Some(category), Some(created)) => {
                        let g1 = Gsi1::ProductByBrand {
                            brand: brand.clone(),
                            category: category.clone(),
                            created,
                        };
                        let g2 = Gsi2 {
                            category,
                            brand,
                            created,
                        };
                        (Some(g1.parts()), Some(g2.parts()))
                    }
                    _ => (None, None),
                };
                (
                    &[keys::BRAND_ID, keys::CATEGORY_ID, keys::CREATED_AT],
                    vec![
                        (keys::GSI1PK, g1.as_ref().map(|g| g.0.clone())),
                        (keys::GSI1SK, g1.map(|g| g.1)),
                        (keys::GSI2PK, g2.as_ref().map(|g| g.0.clone())),
                        (keys::GSI2SK, g2.map(|g| g.1)),
                    ],
                )
            }
            ItemKey::Order { .. } => {
                let status = items::text(item, keys::STATUS).map_err(field)?;
                let updated = items::at(item, keys::UPDATED_AT).map_err(field)?;
                let g1 = match (status, updated) {
                    (Some(s), Some(t)) => Some(
                        Gsi1::order_by_status(s, t)
                            .map_err(|_| {
                                field(FieldError {
                                    field: keys::STATUS,
                                    reason: "is empty, longer than 64 or contains #".into(),
                                })
                            })?
                            .parts(),
                    ),
                    _ => None,
                };
                (
                    &[keys::STATUS, keys::UPDATED_AT],
                    vec![
                        (keys::GSI1PK, g1.as_ref().map(|g| g.0.clone())),
                        (keys::GSI1SK, g1.map(|g| g.1)),
                    ],
                )
            }
            ItemKey::Checkpoint(_) => unreachable!("returned above"),
        };
        Ok(Some(Derivation {
            sources: sources
                .iter()
                .map(|f| (*f, item.field(f).cloned()))
                .collect(),
            derived,
            key,
        }))
    }

    /// Whether `item` carries exactly the derived attributes.
    pub fn satisfied_by<F: Fields + ?Sized>(&self, item: &F) -> bool {
        self.derived
            .iter()
            .all(|(attr, want)| match (item.field(attr), want) {
                (None, None) => true,
                (Some(AttributeValue::S(have)), Some(want)) => have == want,
                _ => false,
            })
    }

    /// The UpdateItem: SET (or REMOVE) every derived attribute, on the
    /// condition that the item exists and its source fields still hold
    /// the values derived from.
    pub fn update(&self) -> (Expr, Expr) {
        // Written out rather than joined from `format!`s and `Expr::and`:
        // the shop stream function builds one per product or order it
        // writes, and those took 30% of its CPU path. The texts are what
        // `Expr::and` of each clause gives (the tests hold them).
        let mut update = Expr::default();
        update.names.reserve(self.derived.len());
        // Each text sized for its clauses, so that none grows as it is
        // written: 13 bytes for `#d10 = :d10, `, 35 for a source's `(` and
        // `) AND (attribute_not_exists(#s10))`.
        let clauses = 13 * self.derived.len();
        let (mut set, mut remove) = (
            String::with_capacity(clauses),
            String::with_capacity(clauses),
        );
        for (i, (attr, want)) in self.derived.iter().enumerate() {
            let name = numbered("#d", i);
            let list = if want.is_some() {
                &mut set
            } else {
                &mut remove
            };
            if !list.is_empty() {
                list.push_str(", ");
            }
            list.push_str(&name);
            if let Some(v) = want {
                let value = numbered(":d", i);
                set.push_str(" = ");
                set.push_str(&value);
                update.values.insert(value, AttributeValue::S(v.clone()));
            }
            update.names.insert(name, (*attr).to_owned());
        }
        update
            .text
            .reserve("SET  REMOVE ".len() + set.len() + remove.len());
        if !set.is_empty() {
            update.text.push_str("SET ");
            update.text.push_str(&set);
        }
        if !remove.is_empty() {
            if !update.text.is_empty() {
                update.text.push(' ');
            }
            update.text.push_str("REMOVE ");
            update.text.push_str(&remove);
        }
        // `(((exists) AND (s0)) AND (s1)) AND (s2)`, as `Expr::and` nests.
        let exists = Expr::exists(keys::PK);
        let mut text = String::with_capacity(exists.text.len() + 35 * self.sources.len());
        text.extend(self.sources.iter().map(|_| '('));
        let mut condition = Expr {
            text,
            names: exists.names,
            values: Default::default(),
        };
        condition.text.push_str(&exists.text);
        condition.names.reserve(self.sources.len());
        for (i, (field, seen)) in self.sources.iter().enumerate() {
            let name = numbered("#s", i);
            condition.text.push_str(") AND (");
            match seen {
                Some(v) => {
                    let value = numbered(":s", i);
                    condition.text.push_str(&name);
                    condition.text.push_str(" = ");
                    condition.text.push_str(&value);
                    condition.values.insert(value, v.clone());
                }
                None => {
                    condition.text.push_str("attribute_not_exists(");
                    condition.text.push_str(&name);
                    condition.text.push(')');
                }
            }
            condition.text.push(')');
            condition.names.insert(name, (*field).to_owned());
        }
        (update, condition)
    }

    /// The item with its derived attributes applied (what the update
    /// leaves, when its condition holds).
    pub fn apply(&self, item: &Item) -> Item {
        let mut out = item.clone();
        for (attr, want) in &self.derived {
            match want {
                Some(v) => out.insert((*attr).to_owned(), AttributeValue::S(v.clone())),
                None => out.remove(*attr),
            };
        }
        out
    }
}

/// `prefix` followed by `i` (`#d0`, `:s2`).
fn numbered(prefix: &str, i: usize) -> String {
    let mut s = String::with_capacity(prefix.len() + 2);
    s.push_str(prefix);
    if i < 10 {
        s.push(char::from(b'0' + i as u8));
    } else {
        s.push_str(&i.to_string());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::items::{Named, Order, Product, Stamps, User};
    use crate::keys::Id;

    const T: i64 = 1_719_473_962;

    fn id(n: u8) -> Id {
        Id::at(T - 1000 + i64::from(n), [n; 16])
    }

    fn stamps() -> Stamps {
        Stamps {
            created_at: T,
            updated_at: T + 5,
        }
    }

    fn product(brand: Option<Id>) -> Product {
        Product {
            id: id(1),
            name: Some("Tea".into()),
            price: Some(3.5),
            stock: Some(4),
            brand_id: brand,
            category_id: Some(id(3)),
            stamps: stamps(),
        }
    }

    fn derived(item: &Item) -> Vec<(&'static str, Option<String>)> {
        Derivation::of(item).unwrap().unwrap().derived
    }

    #[test]
    fn each_entity_derives_its_index_keys() {
        let cat = Named {
            key: ItemKey::Category(id(3)),
            name: Some("Drinks".into()),
            stamps: stamps(),
        };
        assert_eq!(
            derived(&cat.to_item()),
            [("SKU", Some("CAT#NAME#Drinks".into()))]
        );
        let brand = Named {
            key: ItemKey::Brand(id(2)),
            ..cat
        };
        assert_eq!(
            derived(&brand.to_item()),
            [("SKU", Some("BRAND#NAME#Drinks".into()))]
        );
        let user = User {
            id: id(4),
            name: None,
            email: Some("a@b.c".into()),
            stamps: stamps(),
        };
        assert_eq!(
            derived(&user.to_item()),
            [("SKU", Some("EMAIL#a@b.c".into()))]
        );
        let p = product(Some(id(2)));
        assert_eq!(
            derived(&p.to_item()),
            [
                ("GSI1PK", Some(format!("BRAND#{}", id(2)))),
                ("GSI1SK", Some(format!("CAT#{}#AT#{T}", id(3)))),
                ("GSI2PK", Some(format!("CAT#{}", id(3)))),
                ("GSI2SK", Some(format!("BRAND#{}#AT#{T}", id(2)))),
            ]
        );
        let o = Order {
            user: id(4),
            id: id(5),
            status: Some("PAID".into()),
            total_price: Some(10.0),
            stamps: stamps(),
        };
        assert_eq!(
            derived(&o.to_item()),
            [
                ("GSI1PK", Some("ORDER#STATUS#PAID".into())),
                ("GSI1SK", Some(format!("AT#{}", T + 5))),
            ]
        );
        assert_eq!(
            Derivation::of(&keys::checkpoint(keys::Job::Audit)),
            Ok(None)
        );
        assert_eq!(Derivation::of(&keys::key_of("OTHER", "x")), Ok(None));
    }

    #[test]
    fn a_missing_source_removes_and_a_malformed_one_is_an_error() {
        let item = product(None).to_item();
        let d = Derivation::of(&item).unwrap().unwrap();
        assert!(d.derived.iter().all(|(_, v)| v.is_none()));
        assert!(d.satisfied_by(&item), "nothing to remove");
        let (update, condition) = d.update();
        assert_eq!(update.text, "REMOVE #d0, #d1, #d2, #d3");
        assert!(
            condition.text.contains("attribute_not_exists(#s0)"),
            "{}",
            condition.text
        );

        let mut bad = item.clone();
        bad.insert(
            keys::BRAND_ID.into(),
            AttributeValue::S("bob@example.com".into()),
        );
        let e = Derivation::of(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("PROD/PRO#{}: brand_id", id(1))),
            "{e}"
        );
        assert!(!e.contains("bob"), "{e}");
        let mut bad = item;
        bad.insert(keys::CREATED_AT.into(), keys::n(12));
        assert!(Derivation::of(&bad).is_err());
        assert!(Derivation::of(&keys::key_of("CAT", "CAT#1")).is_err());
    }

    #[test]
    fn the_update_is_conditional_on_the_sources_seen() {
        let item = product(Some(id(2))).to_item();
        let d = Derivation::of(&item).unwrap().unwrap();
        assert!(!d.satisfied_by(&item));
        let done = d.apply(&item);
        assert!(d.satisfied_by(&done));
        assert_eq!(
            Derivation::of(&done).unwrap().unwrap(),
            d,
            "derived from the fields only"
        );
        let (update, condition) = d.update();
        assert_eq!(
            update.text,
            "SET #d0 = :d0, #d1 = :d1, #d2 = :d2, #d3 = :d3"
        );
        assert_eq!(
            condition.text,
            "(((attribute_exists(#cond_k)) AND (#s0 = :s0)) AND (#s1 = :s1)) AND (#s2 = :s2)"
        );
        assert_eq!(condition.names["#s2"], "created_at");
        assert_eq!(
            condition.values[":s0"],
            AttributeValue::S(id(2).to_string())
        );
        let mut stale = done.clone();
        stale.insert(keys::GSI1SK.into(), AttributeValue::S("AT#1".into()));
        assert!(!d.satisfied_by(&stale));
    }

    #[test]
    fn the_update_reads_as_its_clauses_joined() {
        let d = Derivation {
            key: ItemKey::from_item(&product(None).to_item()).unwrap(),
            sources: vec![
                (keys::BRAND_ID, Some(AttributeValue::S("b".into()))),
                (keys::CATEGORY_ID, None),
                (keys::CREATED_AT, Some(keys::n(12))),
            ],
            derived: vec![
                (keys::GSI1PK, Some("P".into())),
                (keys::GSI1SK, None),
                (keys::GSI2PK, Some("Q".into())),
            ],
        };
        let (update, condition) = d.update();
        let expected = Expr::new("SET #d0 = :d0, #d2 = :d2 REMOVE #d1")
            .name("#d0", keys::GSI1PK)
            .name("#d1", keys::GSI1SK)
            .name("#d2", keys::GSI2PK)
            .string(":d0", "P")
            .string(":d2", "Q");
        assert_eq!(update, expected);
        let expected = Expr::exists(keys::PK)
            .and(
                Expr::new("#s0 = :s0")
                    .name("#s0", keys::BRAND_ID)
                    .string(":s0", "b"),
            )
            .and(Expr::new("attribute_not_exists(#s1)").name("#s1", keys::CATEGORY_ID))
            .and(
                Expr::new("#s2 = :s2")
                    .name("#s2", keys::CREATED_AT)
                    .value(":s2", keys::n(12)),
            );
        assert_eq!(condition, expected);

        let none = Derivation {
            sources: Vec::new(),
            derived: vec![(keys::SKU, Some("S".into()))],
            ..d
        };
        let (update, condition) = none.update();
        assert_eq!(update.text, "SET #d0 = :d0");
        assert_eq!(condition, Expr::exists(keys::PK));
        assert_eq!(numbered("#s", 12), "#s12");
    }
}
