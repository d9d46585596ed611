//! Rendering shared by the subcommands: planned writes of a dry run, table
//! diffs, progress bars and spinners (drawn only when stderr is a
//! terminal).

use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::tables::TableWrites;
use crate::layers::{MadeWrite, PlannedWrite, WriteResult};
use crate::replay::ddbjson::{item_to_json, key_text, readable_attributes};
use crate::replay::diff::{TableDiff, TablesDiff};
use worker_engine::store::DynamoStore;

/// `PUT PK/SK {attrs} [if cond]`, `DELETE PK/SK [if cond]`,
/// `UPDATE PK/SK <expr> [if cond]`.
pub fn planned_line(w: &PlannedWrite, keys: (&str, &str)) -> String {
    let cond = |c: &Option<String>| c.as_ref().map(|c| format!(" if {c}")).unwrap_or_default();
    match w {
        PlannedWrite::Put { item, condition } => format!(
            "PUT {} {}{}",
            key_text(item, keys),
            readable_attributes(item, keys),
            cond(condition)
        ),
        PlannedWrite::Delete { key, condition } => {
            format!("DELETE {}{}", key_text(key, keys), cond(condition))
        }
        PlannedWrite::Update {
            key,
            update,
            condition,
        } => format!("UPDATE {} {update}{}", key_text(key, keys), cond(condition)),
    }
}

/// The same as JSON: `{"op", "key", "item"|"update", "condition"}`.
pub fn planned_json(w: &PlannedWrite, keys: (&str, &str)) -> Value {
    match w {
        PlannedWrite::Put { item, condition } => json!({
            "op": "PUT", "key": key_text(item, keys), "item": item_to_json(item), "condition": condition,
        }),
        PlannedWrite::Delete { key, condition } => json!({
            "op": "DELETE", "key": key_text(key, keys), "condition": condition,
        }),
        PlannedWrite::Update {
            key,
            update,
            condition,
        } => json!({
            "op": "UPDATE", "key": key_text(key, keys), "update": update, "condition": condition,
        }),
    }
}

/// A write made, as [`planned_line`] with its outcome when it was not
/// applied (`... -> condition failed`).
pub fn made_line(w: &MadeWrite, keys: (&str, &str)) -> String {
    let line = planned_line(&w.write, keys);
    match w.result {
        WriteResult::Applied => line,
        WriteResult::ConditionFailed => format!("{line} -> condition failed, nothing changed"),
        WriteResult::Failed => format!("{line} -> request failed"),
    }
}

/// The same as JSON: [`planned_json`] with `"result"`.
pub fn made_json(w: &MadeWrite, keys: (&str, &str)) -> Value {
    let mut v = planned_json(&w.write, keys);
    v["result"] = json!(w.result);
    v
}

/// How many writes of every table.
pub fn write_count<W>(writes: &[TableWrites<W>]) -> usize {
    writes.iter().map(|t| t.writes.len()).sum()
}

/// The writes of every table of a command, one line each as `line`
/// renders them, indented. One table: its lines. Several: per table with
/// writes a line `Table (N):` and its writes below it.
pub fn writes_block<W>(
    writes: &[TableWrites<W>],
    indent: &str,
    line: impl Fn(&W, (&str, &str)) -> String,
) -> Vec<String> {
    if let [one] = writes {
        return one
            .writes
            .iter()
            .map(|w| format!("{indent}{}", line(w, one.keys)))
            .collect();
    }
    let mut out = Vec::new();
    for t in writes.iter().filter(|t| !t.writes.is_empty()) {
        out.push(format!("{indent}{} ({}):", t.table, t.writes.len()));
        out.extend(
            t.writes
                .iter()
                .map(|w| format!("{indent}  {}", line(w, t.keys))),
        );
    }
    out
}

/// The same as JSON, as `json` renders each write; of several tables,
/// each with its `"table"`.
pub fn writes_json<W>(
    writes: &[TableWrites<W>],
    json: impl Fn(&W, (&str, &str)) -> Value,
) -> Vec<Value> {
    let several = writes.len() > 1;
    writes
        .iter()
        .flat_map(|t| {
            t.writes.iter().map(|w| {
                let mut v = json(w, t.keys);
                if several {
                    v["table"] = Value::from(t.table.clone());
                }
                v
            })
        })
        .collect()
}

/// The diff's lines, indented, or `(no changes)`.
pub fn diff_block(diff: &TableDiff, keys: (&str, &str), indent: &str) -> Vec<String> {
    if diff.is_empty() {
        return vec![format!("{indent}(no changes)")];
    }
    diff.lines(keys)
        .into_iter()
        .map(|l| format!("{indent}{l}"))
        .collect()
}

/// The diff of every table of a command, indented. One table: its
/// [`diff_block`]. Several: `(no changes)`, or per table that changed a
/// line `Table: N added, N changed, N removed` and its changes below it.
pub fn tables_diff_block(diff: &TablesDiff, indent: &str) -> Vec<String> {
    if let [one] = diff.tables.as_slice() {
        return diff_block(&one.diff, one.keys, indent);
    }
    if diff.is_empty() {
        return vec![format!("{indent}(no changes)")];
    }
    let mut out = Vec::new();
    for t in diff.tables.iter().filter(|t| !t.diff.is_empty()) {
        out.push(format!("{indent}{}: {}", t.table, t.diff.summary()));
        out.extend(diff_block(&t.diff, t.keys, &format!("{indent}  ")));
    }
    out
}

/// A progress bar over `len` items.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

/// A spinner counting items.
pub fn counter(what: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg}: {pos} items ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(what.to_owned());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// A spinner that shows the requests and read capacity a running job
/// has used so far (the job's own scans report nothing else while they
/// run). Stop it with `finish_and_clear`.
pub fn job_spinner(
    job: &str,
    store: Arc<DynamoStore>,
) -> (ProgressBar, tokio::task::JoinHandle<()>) {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.enable_steady_tick(Duration::from_millis(120));
    let start = store.metrics().snapshot();
    let job = job.to_owned();
    let p = pb.clone();
    let task = tokio::spawn(async move {
        loop {
            let m = store.metrics().snapshot().since(&start);
            p.set_message(format!(
                "{job}: {} scan pages, {} queries, {} reads, {} writes, {:.1} RCU, {:.1} WCU",
                m.scan,
                m.query,
                m.get_item + m.batch_get_item,
                m.write_requests(),
                m.read_capacity,
                m.write_capacity
            ));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    (pb, task)
}

/// Print a JSON value on stdout, pretty.
pub fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;

    const KEYS: (&str, &str) = ("PK", "SK");

    #[test]
    fn planned_writes_read_well() {
        let key: worker_engine::store::Key = [
            ("PK".to_owned(), AttributeValue::S("u".into())),
            ("SK".to_owned(), AttributeValue::S("Member#m".into())),
        ]
        .into();
        let d = PlannedWrite::Delete {
            key: key.clone(),
            condition: Some("attribute_exists(#cond_k)".into()),
        };
        assert_eq!(
            planned_line(&d, KEYS),
            "DELETE u/Member#m if attribute_exists(#cond_k)"
        );
        let mut item = key.clone();
        item.insert("Status".into(), AttributeValue::S("x".into()));
        let p = PlannedWrite::Put {
            item,
            condition: None,
        };
        assert_eq!(planned_line(&p, KEYS), r#"PUT u/Member#m {Status: "x"}"#);
        assert_eq!(planned_json(&p, KEYS)["op"], "PUT");
    }

    #[test]
    fn writes_of_several_tables_are_listed_by_table() {
        let key: worker_engine::store::Key = [
            ("PK".to_owned(), AttributeValue::S("c".into())),
            ("SK".to_owned(), AttributeValue::S("c".into())),
        ]
        .into();
        let delete = PlannedWrite::Delete {
            key,
            condition: None,
        };
        let of = |table: &str, writes: Vec<PlannedWrite>| TableWrites {
            table: table.into(),
            keys: KEYS,
            writes,
        };
        let one = [of("Requests", vec![delete.clone()])];
        assert_eq!(writes_block(&one, "  ", planned_line), ["  DELETE c/c"]);
        assert_eq!(
            writes_json(&one, planned_json),
            [planned_json(&delete, KEYS)]
        );
        let several = [of("Requests", vec![]), of("Chats", vec![delete.clone()])];
        assert_eq!(write_count(&several), 1);
        assert_eq!(
            writes_block(&several, "  ", planned_line),
            ["  Chats (1):", "    DELETE c/c"]
        );
        assert_eq!(writes_json(&several, planned_json)[0]["table"], "Chats");
    }

    #[test]
    fn a_diff_of_several_tables_says_which_changed() {
        use crate::replay::diff::{NamedDiff, diff_tables};
        let item = |v: serde_json::Value| crate::replay::ddbjson::item_from_json(&v).unwrap();
        let named = |table: &str, keys, after: Vec<worker_engine::item::Item>| NamedDiff {
            table: table.into(),
            keys,
            diff: diff_tables(&[], &after, keys),
        };
        let d = TablesDiff {
            tables: vec![
                named("Requests", KEYS, vec![]),
                named(
                    "Users",
                    ("PK", ""),
                    vec![item(json!({"PK": {"S": "u"}, "Id": {"S": "u"}}))],
                ),
            ],
        };
        assert_eq!(
            tables_diff_block(&d, "  "),
            [
                "  Users: 1 added, 0 changed, 0 removed",
                r#"    + u {Id: "u"}"#
            ]
        );
        let one = TablesDiff {
            tables: d.tables[1..].to_vec(),
        };
        assert_eq!(
            tables_diff_block(&one, "  "),
            diff_block(&one.tables[0].diff, ("PK", ""), "  ")
        );
        let none = TablesDiff {
            tables: d.tables[..1].to_vec(),
        };
        assert_eq!(tables_diff_block(&none, "  "), ["  (no changes)"]);
        let unchanged = TablesDiff {
            tables: vec![named("A", KEYS, vec![]), named("B", KEYS, vec![])],
        };
        assert_eq!(tables_diff_block(&unchanged, "  "), ["  (no changes)"]);
    }
}
