//! Perform the writes a stream batch describes, in order, as the writer of
//! the table did: a put of `NewImage` for INSERT and MODIFY, a delete of
//! `Keys` for REMOVE. A captured stream applied this way to an empty table
//! rebuilds the table it came from.
//!
//! [`plan`] is pure (which write each record stands for, and which records
//! cannot be applied, with the reason); [`apply`] performs a plan.

use worker_engine::item::Item;
use worker_engine::store::{ItemWriter, StoreError, WriteOp};
use worker_engine::stream::{ChangeKind, RecordError, StreamChange};

/// The write one record stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordWrite {
    /// Position of the record in its batch.
    pub index: usize,
    /// The write: a put of `NewImage` (with the key attributes of `Keys`)
    /// for INSERT and MODIFY, a delete of `Keys` for REMOVE.
    pub op: WriteOp,
}

/// A record that stands for no write, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct NotApplied {
    /// Position of the record in its batch.
    pub index: usize,
    /// Why: a malformed record, or an INSERT or MODIFY without
    /// `NewImage` (a stream that carries no new images).
    pub reason: String,
}

/// The writes of a batch, in record order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WritePlan {
    /// The records that stand for a write, in record order.
    pub writes: Vec<RecordWrite>,
    /// The records that stand for none, in record order.
    pub not_applied: Vec<NotApplied>,
}

/// Which write each record of a decoded batch stands for.
pub fn plan(records: &[Result<StreamChange, RecordError>]) -> WritePlan {
    let mut out = WritePlan::default();
    for (index, record) in records.iter().enumerate() {
        match record {
            Err(e) => out.not_applied.push(NotApplied {
                index,
                reason: format!("malformed record: {}", e.reason),
            }),
            Ok(change) => match write_of(change) {
                Ok(op) => out.writes.push(RecordWrite { index, op }),
                Err(reason) => out.not_applied.push(NotApplied { index, reason }),
            },
        }
    }
    out
}

/// The write one change stands for.
pub fn write_of(change: &StreamChange) -> Result<WriteOp, String> {
    match change.kind {
        ChangeKind::Insert | ChangeKind::Modify => match &change.new_image {
            Some(image) => Ok(WriteOp::Put(with_keys(image, &change.keys))),
            None => Err(format!(
                "{} without NewImage: the stream must be NEW_IMAGE or NEW_AND_OLD_IMAGES",
                change.kind.event_name()
            )),
        },
        ChangeKind::Remove | ChangeKind::TtlRemove => Ok(WriteOp::Delete(change.keys.clone())),
    }
}

/// The image, with the key attributes from `Keys` where the image lacks them.
fn with_keys(image: &Item, keys: &Item) -> Item {
    let mut item = image.clone();
    for (k, v) in keys {
        item.entry(k.clone()).or_insert_with(|| v.clone());
    }
    item
}

/// Perform the writes one by one, in order, unconditionally. Returns how
/// many were performed.
pub async fn apply(store: &dyn ItemWriter, plan: &WritePlan) -> Result<usize, StoreError> {
    for w in &plan.writes {
        match &w.op {
            WriteOp::Put(item) => store.put(item.clone(), None).await?,
            WriteOp::Delete(key) => store.delete(key, None).await?,
        };
    }
    Ok(plan.writes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use worker_engine::stream::{decode_event, encode_event};

    fn change(kind: ChangeKind, pk: &str, new: bool) -> StreamChange {
        let keys: Item = [
            ("PK".to_owned(), AttributeValue::S(pk.into())),
            ("SK".to_owned(), AttributeValue::S("Group".into())),
        ]
        .into();
        let mut image = keys.clone();
        image.insert("GroupName".into(), AttributeValue::S("Home".into()));
        StreamChange {
            event_id: format!("e-{pk}"),
            kind,
            sequence_number: None,
            approximate_creation: None,
            keys,
            old_image: None,
            new_image: new.then_some(image),
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        }
    }

    #[test]
    fn puts_new_images_and_deletes_keys_in_order() {
        let changes = vec![
            change(ChangeKind::Insert, "a", true),
            change(ChangeKind::Modify, "b", true),
            change(ChangeKind::Remove, "a", false),
            change(ChangeKind::TtlRemove, "c", false),
            change(ChangeKind::Modify, "d", false),
        ];
        let mut event = encode_event(&changes, None);
        event["Records"][1]["eventName"] = "UPSERT".into();
        let p = plan(&decode_event(&event).unwrap());
        let kinds: Vec<(usize, &str)> = p
            .writes
            .iter()
            .map(|w| {
                (
                    w.index,
                    match w.op {
                        WriteOp::Put(_) => "put",
                        WriteOp::Delete(_) => "delete",
                    },
                )
            })
            .collect();
        assert_eq!(kinds, [(0, "put"), (2, "delete"), (3, "delete")]);
        let WriteOp::Put(item) = &p.writes[0].op else {
            panic!()
        };
        assert_eq!(item.len(), 3);
        let WriteOp::Delete(key) = &p.writes[1].op else {
            panic!()
        };
        assert_eq!(key.len(), 2);
        assert_eq!(p.not_applied.len(), 2);
        assert_eq!(p.not_applied[0].index, 1);
        assert!(p.not_applied[0].reason.starts_with("malformed record"));
        assert!(p.not_applied[1].reason.contains("without NewImage"));
    }
}
