//! Which references of a product name nothing, and the flag write (pure).
//!
//! A product's `brand_id` and `category_id` must name an existing brand
//! and category. The worker flags a product whose reference names none
//! with `worker_missing_refs` (a string set of the fields, e.g.
//! `{"brand_id"}`; no index reads it) and removes the flag once both
//! exist. An absent reference is not flagged (it names nothing to miss).

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::store::{Expr, Store, StoreError};
use worker_engine::store::{Guard, GuardedOp, GuardedReport};

use crate::items::ProductRefs;
use crate::keys::{self, Id, ItemKey};

/// The fields of `p` whose reference is missing, sorted.
pub fn missing(p: &ProductRefs, brands: &BTreeSet<Id>, categories: &BTreeSet<Id>) -> Vec<String> {
    let mut out = Vec::new();
    if p.brand_id.as_ref().is_some_and(|b| !brands.contains(b)) {
        out.push(keys::BRAND_ID.to_owned());
    }
    if p.category_id
        .as_ref()
        .is_some_and(|c| !categories.contains(c))
    {
        out.push(keys::CATEGORY_ID.to_owned());
    }
    out
}

/// The condition that a product still has the references seen: it exists,
/// and `brand_id` / `category_id` are as read (or absent).
pub fn same_refs(p: &ProductRefs) -> Expr {
    let mut c = Expr::exists(keys::PK);
    for (i, (field, seen)) in [
        (keys::BRAND_ID, &p.brand_id),
        (keys::CATEGORY_ID, &p.category_id),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("#r{i}");
        c = c.and(match seen {
            Some(id) => Expr::new(format!("{name} = :r{i}"))
                .name(&name, field)
                .string(&format!(":r{i}"), id.as_str()),
            None => Expr::new(format!("attribute_not_exists({name})")).name(&name, field),
        });
    }
    c
}

/// Write `update` (a flag change) to `p`, only while `p` still names the
/// ids read ([`same_refs`]) and every guard on its references holds: one
/// `TransactWriteItems` (the store's guarded write). `applied`, `refused`
/// (the product changed) or `withheld` (a reference changed) is 1.
pub async fn write_flag(
    store: &dyn Store,
    guards: &[Guard],
    p: &ProductRefs,
    update: Expr,
) -> Result<GuardedReport, StoreError> {
    let op = GuardedOp::Update {
        key: p.key(),
        update,
        condition: Some(same_refs(p)),
    };
    store.write_guarded(guards, vec![op]).await
}

/// The facts a flag of `p` set to `missing` is decided from, as guards:
/// each reference of `p` is absent when `missing` names its field, and
/// exists otherwise. The flag's write lands only while all still hold, so
/// a brand created (or deleted) meanwhile never gets a stale flag written.
pub fn guards(p: &ProductRefs, missing: &[String]) -> Vec<Guard> {
    let mut out = Vec::new();
    for (field, id, key) in [
        (
            keys::BRAND_ID,
            &p.brand_id,
            ItemKey::Brand as fn(Id) -> ItemKey,
        ),
        (keys::CATEGORY_ID, &p.category_id, ItemKey::Category),
    ] {
        let Some(id) = id else { continue };
        let key = key(id.clone()).key();
        out.push(if missing.iter().any(|m| m == field) {
            Guard::absent(key, keys::PK)
        } else {
            Guard::present(key, keys::PK)
        });
    }
    out
}

/// The update setting the flag to `missing` (removing it when empty).
pub fn set_flag(missing: &[String]) -> Expr {
    let e = Expr::new(if missing.is_empty() {
        "REMOVE #m"
    } else {
        "SET #m = :m"
    })
    .name("#m", keys::MISSING_REFS);
    if missing.is_empty() {
        e
    } else {
        e.value(":m", AttributeValue::Ss(missing.to_vec()))
    }
}

/// The update adding one field to the flag (a deleted brand or category).
pub fn add_flag(field: &str) -> Expr {
    Expr::new("ADD #m :m")
        .name("#m", keys::MISSING_REFS)
        .value(":m", AttributeValue::Ss(vec![field.to_owned()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> Id {
        Id::at(1_719_000_000, [n; 16])
    }

    #[test]
    fn missing_references_are_named_by_field() {
        let brands = BTreeSet::from([id(1)]);
        let cats = BTreeSet::from([id(2)]);
        let mut p = ProductRefs {
            id: id(9),
            brand_id: Some(id(1)),
            category_id: Some(id(2)),
            missing: vec![],
        };
        assert!(missing(&p, &brands, &cats).is_empty());
        p.brand_id = Some(id(3));
        assert_eq!(missing(&p, &brands, &cats), ["brand_id"]);
        p.category_id = Some(id(4));
        assert_eq!(missing(&p, &brands, &cats), ["brand_id", "category_id"]);
        p.brand_id = None;
        assert_eq!(
            missing(&p, &brands, &cats),
            ["category_id"],
            "absent: not missing"
        );
        let c = same_refs(&p);
        assert!(c.text.contains("attribute_not_exists(#r0)"), "{}", c.text);
        assert!(c.text.contains("#r1 = :r1"), "{}", c.text);
        assert_eq!(set_flag(&[]).text, "REMOVE #m");
        assert_eq!(
            set_flag(&["brand_id".into()]).values[":m"],
            AttributeValue::Ss(vec!["brand_id".into()])
        );
    }
}
