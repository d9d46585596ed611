//! The archive table as data: what tests, the command line and templates
//! create.
//!
//! **The index.** The unzip lifecycle must find, from a `KeyName`, the
//! archived file carrying it (to set `IsUnzipped`) and the `Unzipping`
//! items of it (to remove them), without a scan. [`BY_KEY_NAME`] is keyed
//! on `KeyName` (sort key `SK`, keys only):
//!
//! - it is sparse: only items with a `KeyName` are in it, so the date
//!   lookup (the bulk of the writes besides files) and the worker's
//!   checkpoints never cost an index write;
//! - it holds the files *and* the `Unzipped` / `Unzipping` items: they
//!   carry `KeyName` too, under the same name (the table's contract, not
//!   ours to change). That is what the lifecycle wants: one Query
//!   `KeyName = :k` returns the file, its unzipped and its unzipping items,
//!   told apart by their `PK` (projected with every index). Those two
//!   kinds are few (in flight, or unzipped within the retention), so
//!   indexing them costs little;
//! - the alternative, a worker-owned copy of `KeyName` written on files
//!   only, would cost a write (and a stream record) per archived file and
//!   a backfill, to save a few index entries;
//! - keys only: the index is a pointer. Decisions are taken on consistent
//!   reads of the table items it points to (index reads are eventually
//!   consistent), so no attribute needs projecting;
//! - `SK` as sort key orders a `KeyName`'s items by time (a `KeyName`
//!   archived twice has two files) and costs nothing: it is a key
//!   attribute already.

use worker_engine::schema::{IndexSpec, KeySchema, TableSchema};

use crate::keys;

/// Files, unzipped and unzipping items by `KeyName`.
pub const BY_KEY_NAME: IndexSpec = IndexSpec {
    name: keys::BY_KEY_NAME_INDEX,
    partition_key: keys::KEY_NAME,
    sort_key: Some(keys::SK),
    include: None,
};

/// `PK` (S), `SK` (N), the `KeyName` index, a NEW_AND_OLD_IMAGES stream.
pub fn schema() -> TableSchema {
    TableSchema::new(KeySchema::composite(keys::PK, keys::SK))
        .with_numbers(&[keys::SK])
        .with_index(BY_KEY_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_resource() {
        let t = &schema().to_cloudformation(json!("archive"))["Properties"];
        assert_eq!(
            t["AttributeDefinitions"],
            json!([
                {"AttributeName": "PK", "AttributeType": "S"},
                {"AttributeName": "SK", "AttributeType": "N"},
                {"AttributeName": "KeyName", "AttributeType": "S"},
            ])
        );
        assert_eq!(
            t["GlobalSecondaryIndexes"][0]["Projection"],
            json!({"ProjectionType": "KEYS_ONLY"})
        );
    }
}
