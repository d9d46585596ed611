//! The shop table as data: what tests, the command line and templates
//! create (the seed's design, a contract).
//!
//! - `LSI` (local, sort key `SKU`): a partition's items by name or e-mail
//!   address (`PK = USER AND SKU = EMAIL#<email>`, `PK = CAT AND SKU
//!   begins_with CAT#NAME#<prefix>`);
//! - `GSI1` (`GSI1PK`, `GSI1SK`): a brand's products by category and
//!   creation, the orders in a status by last update;
//! - `GSI2` (`GSI2PK`, `GSI2SK`): a category's products by brand and
//!   creation.
//!
//! Each index projects the entity fields a listing shows ([`LISTED`]);
//! never the worker's own `worker_missing_refs`, and the e-mail address
//! only as the `SKU` it is keyed by.

use worker_engine::schema::{IndexSpec, KeySchema, TableSchema};

use crate::keys;

/// The fields a listing shows, projected into every index.
pub const LISTED: &[&str] = &[
    keys::NAME,
    keys::BRAND_ID,
    keys::CATEGORY_ID,
    keys::STATUS,
    keys::PRICE,
    keys::STOCK,
    keys::TOTAL_PRICE,
    keys::CREATED_AT,
    keys::UPDATED_AT,
];

/// `LSI`: a partition's items by `SKU` (names, e-mail addresses).
pub const LSI: IndexSpec = IndexSpec {
    name: keys::LSI,
    partition_key: keys::PK,
    sort_key: Some(keys::SKU),
    include: Some(LISTED),
};

/// `GSI1`: a brand's products by category and creation, the orders in a
/// status by last update.
pub const GSI1: IndexSpec = IndexSpec {
    name: keys::GSI1,
    partition_key: keys::GSI1PK,
    sort_key: Some(keys::GSI1SK),
    include: Some(LISTED),
};

/// `GSI2`: a category's products by brand and creation.
pub const GSI2: IndexSpec = IndexSpec {
    name: keys::GSI2,
    partition_key: keys::GSI2PK,
    sort_key: Some(keys::GSI2SK),
    include: Some(LISTED),
};

/// `PK`, `SK` (S), the local index and the two global ones, a
/// NEW_AND_OLD_IMAGES stream.
pub fn schema() -> TableSchema {
    TableSchema::new(KeySchema::composite(keys::PK, keys::SK))
        .with_local_index(LSI)
        .with_index(GSI1)
        .with_index(GSI2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_resource() {
        let t = &schema().to_cloudformation(json!("shop"))["Properties"];
        let names: Vec<&str> = t["AttributeDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["AttributeName"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK", "SKU"]
        );
        assert_eq!(t["LocalSecondaryIndexes"][0]["IndexName"], "LSI");
        assert_eq!(t["GlobalSecondaryIndexes"][1]["IndexName"], "GSI2");
        let projected = &t["GlobalSecondaryIndexes"][0]["Projection"]["NonKeyAttributes"];
        assert!(
            !projected
                .as_array()
                .unwrap()
                .contains(&json!(keys::MISSING_REFS))
        );
        assert!(!projected.as_array().unwrap().contains(&json!(keys::EMAIL)));
    }
}
