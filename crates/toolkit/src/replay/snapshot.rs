//! Table snapshots: a JSON array of items in DynamoDB JSON, the same as the
//! `Items` of a Scan. Written sorted by partition then sort key, one item
//! per line (key attributes first), so that a changed snapshot reads well
//! in a review. Read strictly: a malformed item is an error naming the file,
//! the item's position and key, and the attribute, never a value.
//!
//! A snapshot of several tables (an app whose worker serves several,
//! [`crate::cli::tables`]) is one JSON object: each table's array under its
//! name, the names sorted ([`tables_text`]). Read with the tables it may
//! hold ([`parse_tables`]): every name must be one of them, and a plain
//! array (or a Scan output) is the first of them, the target table. A
//! snapshot of one table is always the plain array.

use std::path::Path;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use indicatif::ProgressBar;
use serde_json::Value;

use super::ddbjson::{item_from_json, item_to_line, key_text, sort_items};
use worker_engine::item::{Item, redact_quoted};
use worker_engine::store::{
    BatchWriteReport, BatchWriter, QueryStore, ScanSpec, StoreError, WriteOp,
};

/// Why a snapshot cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file cannot be read.
    #[error("{file}: cannot read: {reason}")]
    Read {
        /// The snapshot's path, as given.
        file: String,
        /// The I/O error.
        reason: String,
    },
    /// The file is not JSON.
    #[error("{file}: not JSON: {reason}")]
    NotJson {
        /// The snapshot's path, as given.
        file: String,
        /// The parser's error, quoted values redacted.
        reason: String,
    },
    /// The file is JSON but neither an array of items nor a Scan output.
    #[error(
        "{file}: not a snapshot: expected a JSON array of items in DynamoDB JSON (or a Scan output with \"Items\"), found {found}"
    )]
    NotSnapshot {
        /// The snapshot's path, as given.
        file: String,
        /// What the file holds instead (`null`, `a JSON scalar`, ...).
        found: &'static str,
    },
    /// One item is not an item in DynamoDB JSON, or lacks a key attribute.
    #[error("{file}: {table}item #{index}{key}: {reason}")]
    BadItem {
        /// The snapshot's path, as given.
        file: String,
        /// `Customers ` (the table, a space) in a snapshot of several tables,
        /// else empty.
        table: String,
        /// The item's position in its table's array, from 0.
        index: usize,
        /// ` (PK/SK)` when the key could be read.
        key: String,
        /// What is wrong, naming the attribute, never a value.
        reason: String,
    },
    /// The file cannot be written (or its directory created).
    #[error("{file}: cannot write: {reason}")]
    Write {
        /// The snapshot's path, as given.
        file: String,
        /// The I/O error.
        reason: String,
    },
    /// A snapshot of several tables names a table the app does not have.
    #[error("{file}: {table:?} is not a table of this app: expected {expected}")]
    UnknownTable {
        /// The snapshot's path, as given.
        file: String,
        /// The name the file holds.
        table: String,
        /// The names expected, quoted, comma-separated.
        expected: String,
    },
    /// A snapshot of several tables holds something other than an array
    /// under a table's name.
    #[error("{file}: {table:?}: expected a JSON array of the table's items, found {found}")]
    NotTableItems {
        /// The snapshot's path, as given.
        file: String,
        /// The table's name.
        table: String,
        /// What it holds instead (`null`, `a JSON scalar`, `an object`).
        found: &'static str,
    },
}

/// A table a snapshot may hold: its name and key attribute names (an empty
/// sort key name: the table has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotTable<'a> {
    /// The table's name, as a snapshot of several tables names it.
    pub name: &'a str,
    /// Its partition and sort key attribute names (`""`: no sort key).
    pub keys: (&'a str, &'a str),
}

/// The items of each table a snapshot file holds, in the order of the
/// tables it was read with: `(name, items)`. A table the file does not
/// name is absent.
pub type TableItems = Vec<(String, Vec<Item>)>;

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) | Value::Number(_) | Value::String(_) => "a JSON scalar",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parse the snapshot text of an app's `tables` (the first is the target
/// table). One table: [`parse_snapshot`]. Several: an array (or a Scan
/// output, an object with `"Items"` when no table is named `Items`) is the
/// target table's items; any other object names its tables, each key one
/// of `tables` and each value the array of its items.
pub fn parse_tables(
    file: &str,
    text: &str,
    tables: &[SnapshotTable<'_>],
) -> Result<TableItems, SnapshotError> {
    let Some(target) = tables.first() else {
        return Ok(Vec::new());
    };
    let v: Value = serde_json::from_str(text).map_err(|e| SnapshotError::NotJson {
        file: file.to_owned(),
        reason: redact_quoted(&e.to_string()),
    })?;
    let named = match &v {
        Value::Object(o)
            if tables.len() > 1
                && !(o.contains_key("Items") && tables.iter().all(|t| t.name != "Items")) =>
        {
            o
        }
        _ => {
            let items = parse_value(file, "", &v, target.keys)?;
            return Ok(vec![(target.name.to_owned(), items)]);
        }
    };
    let mut out = Vec::new();
    for name in named.keys() {
        if !tables.iter().any(|t| t.name == name) {
            return Err(SnapshotError::UnknownTable {
                file: file.to_owned(),
                table: name.clone(),
                expected: tables
                    .iter()
                    .map(|t| format!("{:?}", t.name))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    for t in tables {
        let Some(raw) = named.get(t.name) else {
            continue;
        };
        let Value::Array(raw_items) = raw else {
            return Err(SnapshotError::NotTableItems {
                file: file.to_owned(),
                table: t.name.to_owned(),
                found: json_kind(raw),
            });
        };
        let label = format!("{} ", t.name);
        let items = raw_items
            .iter()
            .enumerate()
            .map(|(index, raw)| parse_item(file, &label, index, raw, t.keys))
            .collect::<Result<_, _>>()?;
        out.push((t.name.to_owned(), items));
    }
    Ok(out)
}

/// Read the snapshot file of an app's `tables` ([`parse_tables`]).
pub fn read_tables(path: &Path, tables: &[SnapshotTable<'_>]) -> Result<TableItems, SnapshotError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SnapshotError::Read {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    parse_tables(&file, &text, tables)
}

/// The snapshot text of an app's tables, each with its items. One table:
/// [`snapshot_text`]. Several: one JSON object, the names sorted, each
/// table's items sorted and one a line under its name:
///
/// ```text
/// {
/// "Customers": [
///   {"PK":{"S":"CUSTOMER#c1"},"SK":{"S":"PROFILE"}}
/// ],
/// "Orders": []
/// }
/// ```
pub fn tables_text(tables: &[(SnapshotTable<'_>, &[Item])]) -> String {
    if let [(t, items)] = tables {
        return snapshot_text(items, t.keys);
    }
    named_tables_text(tables)
}

/// The snapshot text of tables that are each named, however many: one
/// JSON object of arrays by table name, the names sorted (a snapshot of
/// one table of an app of several: loaded back into that table).
pub fn named_tables_text(tables: &[(SnapshotTable<'_>, &[Item])]) -> String {
    let mut sorted: Vec<&(SnapshotTable<'_>, &[Item])> = tables.iter().collect();
    sorted.sort_by(|a, b| a.0.name.cmp(b.0.name));
    let parts: Vec<String> = sorted
        .into_iter()
        .map(|(t, items)| {
            format!(
                "{}: {}",
                Value::from(t.name),
                snapshot_text(items, t.keys).trim_end()
            )
        })
        .collect();
    format!("{{\n{}\n}}\n", parts.join(",\n"))
}

/// Write the snapshot file of an app's tables ([`tables_text`]; with
/// `named`, [`named_tables_text`]).
pub fn write_tables(
    path: &Path,
    tables: &[(SnapshotTable<'_>, &[Item])],
    named: bool,
) -> Result<(), SnapshotError> {
    let text = if named {
        named_tables_text(tables)
    } else {
        tables_text(tables)
    };
    write_text(path, &text)
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
    parse_value(file, "", &v, key_attributes)
}

/// The items of one table: an array, or a Scan output.
fn parse_value(
    file: &str,
    table: &str,
    v: &Value,
    key_attributes: (&str, &str),
) -> Result<Vec<Item>, SnapshotError> {
    let not_snapshot = |found| SnapshotError::NotSnapshot {
        file: file.to_owned(),
        found,
    };
    let raw_items = match v {
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
        .map(|(index, raw)| parse_item(file, table, index, raw, key_attributes))
        .collect()
}

fn parse_item(
    file: &str,
    table: &str,
    index: usize,
    raw: &Value,
    (pk, sk): (&str, &str),
) -> Result<Item, SnapshotError> {
    let bad = |key: String, reason: String| SnapshotError::BadItem {
        file: file.to_owned(),
        table: table.to_owned(),
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
                    (Some(p), _) if sk.is_empty() => format!(" ({p})"),
                    (Some(p), Some(s)) => format!(" ({p}/{s})"),
                    _ => String::new(),
                }
            })
            .unwrap_or_default();
        bad(key, reason)
    })?;
    for name in [pk, sk] {
        if !name.is_empty() && !item.contains_key(name) {
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
    write_text(path, &snapshot_text(items, key_attributes))
}

/// Write `text` to `path` (and its folder).
fn write_text(path: &Path, text: &str) -> Result<(), SnapshotError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| SnapshotError::Write {
            file: path.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    std::fs::write(path, text).map_err(|e| SnapshotError::Write {
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

    const TABLES: [SnapshotTable<'static>; 3] = [
        SnapshotTable {
            name: "Requests",
            keys: KEYS,
        },
        SnapshotTable {
            name: "Users",
            keys: ("PK", ""),
        },
        SnapshotTable {
            name: "Chats",
            keys: KEYS,
        },
    ];

    #[test]
    fn several_tables_are_one_object_of_sorted_names() {
        let text = r#"{"Users": [{"Id": {"S": "u1"}, "PK": {"S": "USER#u1"}}],
          "Requests": [{"SK": {"S": "b"}, "PK": {"S": "a"}}, {"PK": {"S": "a"}, "SK": {"S": "a"}}]}"#;
        let read = parse_tables("t.json", text, &TABLES).unwrap();
        let names: Vec<&str> = read.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Requests", "Users"], "in the tables' order");
        let of = |name: &str| {
            read.iter()
                .find(|(n, _)| n == name)
                .map_or(&[][..], |(_, items)| items.as_slice())
        };
        let out = tables_text(&[
            (TABLES[0], of("Requests")),
            (TABLES[1], of("Users")),
            (TABLES[2], of("Chats")),
        ]);
        assert_eq!(
            out,
            "{\n\"Chats\": [],\n\"Requests\": [\n  {\"PK\":{\"S\":\"a\"},\"SK\":{\"S\":\"a\"}},\n  {\"PK\":{\"S\":\"a\"},\"SK\":{\"S\":\"b\"}}\n],\n\"Users\": [\n  {\"PK\":{\"S\":\"USER#u1\"},\"Id\":{\"S\":\"u1\"}}\n]\n}\n"
        );
        let back = parse_tables("t.json", &out, &TABLES).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(
            tables_text(&[
                (TABLES[0], &back[0].1),
                (TABLES[1], &back[1].1),
                (TABLES[2], &back[2].1)
            ]),
            out
        );
    }

    #[test]
    fn one_table_keeps_the_plain_array() {
        let items =
            parse_snapshot("t.json", r#"[{"PK": {"S": "a"}, "SK": {"S": "b"}}]"#, KEYS).unwrap();
        assert_eq!(
            tables_text(&[(TABLES[0], &items)]),
            snapshot_text(&items, KEYS)
        );
        // An object is a Scan output, as before.
        let e = parse_tables("t.json", r#"{"Requests": []}"#, &TABLES[..1]).unwrap_err();
        assert!(e.to_string().contains("not a snapshot"), "{e}");
    }

    #[test]
    fn one_table_of_several_is_named() {
        let items =
            parse_snapshot("t.json", r#"[{"PK": {"S": "a"}, "SK": {"S": "b"}}]"#, KEYS).unwrap();
        let out = named_tables_text(&[(TABLES[1], &items)]);
        assert!(out.starts_with("{\n\"Users\": ["), "{out}");
        let back = parse_tables("t.json", &out, &TABLES).unwrap();
        let names: Vec<&str> = back.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Users"], "loaded back into that table alone");
    }

    #[test]
    fn a_plain_array_or_scan_output_is_the_target_table() {
        let read = parse_tables(
            "t.json",
            r#"[{"PK": {"S": "a"}, "SK": {"S": "b"}}]"#,
            &TABLES,
        )
        .unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!((read[0].0.as_str(), read[0].1.len()), ("Requests", 1));
        let read = parse_tables(
            "t.json",
            r#"{"Items": [{"PK": {"S": "a"}, "SK": {"S": "b"}}], "Count": 1}"#,
            &TABLES,
        )
        .unwrap();
        assert_eq!((read[0].0.as_str(), read[0].1.len()), ("Requests", 1));
    }

    #[test]
    fn an_unknown_table_or_a_bad_item_is_named() {
        let e = parse_tables("t.json", r#"{"Requests": [], "Rooms": []}"#, &TABLES)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            r#"t.json: "Rooms" is not a table of this app: expected "Requests", "Users", "Chats""#
        );
        let e = parse_tables("t.json", r#"{"Users": {}}"#, &TABLES)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            r#"t.json: "Users": expected a JSON array of the table's items, found an object"#
        );
        let e = parse_tables(
            "t.json",
            r#"{"Chats": [{"PK": {"S": "c"}, "SK": {"S": "m"}, "Email": "bob@example.com"}]}"#,
            &TABLES,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("t.json: Chats item #0 (c/m): attribute Email"),
            "{e}"
        );
        assert!(!e.contains("bob@"), "{e}");
        let e = parse_tables("t.json", r#"{"Users": [{"Id": {"S": "u"}}]}"#, &TABLES)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t.json: Users item #0: missing key attribute PK");
    }
}
