//! Table snapshots: a JSON array of items in DynamoDB JSON, the same as the
//! `Items` of a Scan. Written sorted by partition then sort key, one item
//! per line (key attributes first), so that a changed snapshot reads well
//! in a review. Read strictly: a malformed item is an error naming the file,
//! the item's position and key, and the attribute, never a value.

use std::path::Path;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use indicatif::ProgressBar;
use serde_json::Value;

use super::ddbjson::{item_from_json, item_to_line, key_text, sort_items};
use crate::item::{Item, redact_quoted};
use crate::store::{BatchWriteReport, BatchWriter, QueryStore, ScanSpec, StoreError, WriteOp};

/// Why a snapshot cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{file}: cannot read: {reason}")]
    Read { file: String, reason: String },
    #[error("{file}: not JSON: {reason}")]
    NotJson { file: String, reason: String },
    #[error(
        "{file}: not a snapshot: expected a JSON array of items in DynamoDB JSON (or a Scan output with \"Items\"), found {found}"
    )]
    NotSnapshot { file: String, found: &'static str },
    #[error("{file}: item #{index}{key}: {reason}")]
    BadItem {
        file: String,
        index: usize,
        /// ` (PK/SK)` when the key could be read.
        key: String,
        reason: String,
    },
    #[error("{file}: cannot write: {reason}")]
    Write { file: String, reason: String },
}

/// Parse snapshot text. `file` names the source in errors. Every item must
/// carry both key attributes.
pub fn parse_snapshot(
    file: &str,
    text: &str,
    key_attributes: (&str, &str),
) -> Result<Vec<Item>, SnapshotError> {
    let v: Value = serde_json::from_str(text).map_err(|e| SnapshotError::NotJson {
        file: file.to_owned(),
        reason: redact_quoted(&e.to_string()),
    })?;
    let not_snapshot = |found| SnapshotError::NotSnapshot {
        file: file.to_owned(),
        found,
    };
    let raw_items = match &v {
        Value::Array(items) => items,
        Value::Object(o) => match o.get("Items") {
            Some(Value::Array(items)) => items,
            _ => return Err(not_snapshot("an object without an \"Items\" array")),
        },
        Value::Null => return Err(not_snapshot("null")),
        _ => return Err(not_snapshot("a JSON scalar")),
    };
    raw_items
        .iter()
        .enumerate()
        .map(|(index, raw)| parse_item(file, index, raw, key_attributes))
        .collect()
}

fn parse_item(
    file: &str,
    index: usize,
    raw: &Value,
    (pk, sk): (&str, &str),
) -> Result<Item, SnapshotError> {
    let bad = |key: String, reason: String| SnapshotError::BadItem {
        file: file.to_owned(),
        index,
        key,
        reason,
    };
    let item = item_from_json(raw).map_err(|reason| {
        // Name the key when the key attributes themselves parse.
        let key = raw
            .as_object()
            .map(|o| {
                let part = |n: &str| o.get(n).and_then(|v| v.get("S")).and_then(Value::as_str);
                match (part(pk), part(sk)) {
                    (Some(p), Some(s)) => format!(" ({p}/{s})"),
                    _ => String::new(),
                }
            })
            .unwrap_or_default();
        bad(key, reason)
    })?;
    for name in [pk, sk] {
        if !item.contains_key(name) {
            return Err(bad(String::new(), format!("missing key attribute {name}")));
        }
    }
    Ok(item)
}

/// Read a snapshot file.
pub fn read_snapshot(
    path: &Path,
    key_attributes: (&str, &str),
) -> Result<Vec<Item>, SnapshotError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SnapshotError::Read {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    parse_snapshot(&file, &text, key_attributes)
}

/// The snapshot text of `items`: sorted by key, one item per line.
pub fn snapshot_text(items: &[Item], key_attributes: (&str, &str)) -> String {
    let mut sorted = items.to_vec();
    sort_items(&mut sorted, key_attributes);
    if sorted.is_empty() {
        return "[]\n".to_owned();
    }
    let lines: Vec<String> = sorted
        .iter()
        .map(|i| format!("  {}", item_to_line(i, key_attributes)))
        .collect();
    format!("[\n{}\n]\n", lines.join(",\n"))
}

/// Write a snapshot file (sorted, one item per line).
pub fn write_snapshot(
    path: &Path,
    items: &[Item],
    key_attributes: (&str, &str),
) -> Result<(), SnapshotError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| SnapshotError::Write {
            file: path.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    std::fs::write(path, snapshot_text(items, key_attributes)).map_err(|e| SnapshotError::Write {
        file: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Every item of the table (consistent reads), sorted by key. `progress`
/// counts the items read.
pub async fn scan_table(
    store: &dyn QueryStore,
    key_attributes: (&str, &str),
    progress: Option<&ProgressBar>,
) -> Result<Vec<Item>, StoreError> {
    let spec = ScanSpec {
        consistent: true,
        ..Default::default()
    };
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = store.scan_page(&spec, start).await?;
        if let Some(p) = progress {
            p.inc(page.items.len() as u64);
        }
        items.extend(page.items);
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    sort_items(&mut items, key_attributes);
    Ok(items)
}

/// Put every item with BatchWriteItem, `concurrency` chunks of 25 in
/// flight at once; `progress` counts the items written.
pub async fn load_items(
    store: Arc<dyn BatchWriter>,
    items: Vec<Item>,
    concurrency: usize,
    progress: Option<&ProgressBar>,
) -> Result<BatchWriteReport, StoreError> {
    let chunks: Vec<Vec<WriteOp>> = items
        .chunks(25)
        .map(|c| c.iter().cloned().map(WriteOp::Put).collect())
        .collect();
    let reports: Vec<BatchWriteReport> = futures::stream::iter(chunks)
        .map(|ops| {
            let store = store.clone();
            async move {
                let n = ops.len() as u64;
                let report = store.batch_write(ops).await?;
                if let Some(p) = progress {
                    p.inc(n);
                }
                Ok::<_, StoreError>(report)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    Ok(reports
        .into_iter()
        .fold(BatchWriteReport::default(), |mut acc, r| {
            acc.items += r.items;
            acc.requests += r.requests;
            acc.retried_items += r.retried_items;
            acc.consumed_capacity += r.consumed_capacity;
            acc
        }))
}

/// `PK/SK` of every item, in order (for messages and tests).
pub fn keys(items: &[Item], key_attributes: (&str, &str)) -> Vec<String> {
    items.iter().map(|i| key_text(i, key_attributes)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: (&str, &str) = ("PK", "SK");

    #[test]
    fn text_round_trips_sorted() {
        let text = r#"[
          {"SK": {"S": "User"}, "PK": {"S": "b"}, "DisplayName": {"S": "x"}},
          {"PK": {"S": "a"}, "SK": {"S": "Group"}}
        ]"#;
        let items = parse_snapshot("t.json", text, KEYS).unwrap();
        let out = snapshot_text(&items, KEYS);
        assert_eq!(
            out,
            "[\n  {\"PK\":{\"S\":\"a\"},\"SK\":{\"S\":\"Group\"}},\n  {\"PK\":{\"S\":\"b\"},\"SK\":{\"S\":\"User\"},\"DisplayName\":{\"S\":\"x\"}}\n]\n"
        );
        let back = parse_snapshot("t.json", &out, KEYS).unwrap();
        assert_eq!(snapshot_text(&back, KEYS), out);
        assert_eq!(snapshot_text(&[], KEYS), "[]\n");
    }

    #[test]
    fn scan_output_is_accepted() {
        let text = r#"{"Items": [{"PK": {"S": "a"}, "SK": {"S": "b"}}], "Count": 1}"#;
        assert_eq!(parse_snapshot("s.json", text, KEYS).unwrap().len(), 1);
    }

    #[test]
    fn errors_name_file_item_and_problem() {
        let e = parse_snapshot("s.json", "{not json", KEYS).unwrap_err();
        assert!(e.to_string().starts_with("s.json: not JSON"), "{e}");
        let e = parse_snapshot("s.json", r#"{"Records": []}"#, KEYS).unwrap_err();
        assert!(e.to_string().contains("not a snapshot"), "{e}");
        let e = parse_snapshot("s.json", "null", KEYS).unwrap_err();
        assert!(e.to_string().contains("not a snapshot"), "{e}");
        let e = parse_snapshot(
            "s.json",
            r#"[{"PK": {"S": "a"}, "SK": {"S": "b"}}, {"PK": {"S": "u"}, "SK": {"S": "User"}, "ContactEmail": "bob@example.com"}]"#,
            KEYS,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("s.json: item #1 (u/User): attribute ContactEmail"),
            "{e}"
        );
        assert!(!e.contains("bob@"), "{e}");
        let e = parse_snapshot("s.json", r#"[{"PK": {"S": "a"}}]"#, KEYS).unwrap_err();
        assert_eq!(e.to_string(), "s.json: item #0: missing key attribute SK");
    }
}
