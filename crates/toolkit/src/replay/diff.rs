//! The difference between two states of a table: items added, changed (the
//! attributes that changed, down to list elements and map entries) and
//! removed. Pure: it works on two lists of items.

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};

use super::ddbjson::{
    attribute_to_json, by_key, item_to_json, key_of, key_text, key_values, readable,
    readable_attributes, sort_items,
};
use worker_engine::item::Item;

/// One changed value inside an item: a top-level attribute (`Name`), a map
/// entry (`Meta.Owner`) or a list element (`Parts[2].Expiry`).
#[derive(Debug, Clone, PartialEq)]
pub struct AttributeChange {
    /// Where the value is: `Name`, `Meta.Owner`, `Parts[2].Expiry`.
    pub path: String,
    /// `None`: the value was absent.
    pub old: Option<AttributeValue>,
    /// `None`: the value is gone.
    pub new: Option<AttributeValue>,
}

/// An item present before and after, with different attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemChange {
    /// The whole item before.
    pub before: Item,
    /// The whole item after.
    pub after: Item,
    /// The values that differ, by path, sorted by attribute name.
    pub changes: Vec<AttributeChange>,
}

/// What changed in a table, each list sorted by key.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableDiff {
    /// Items present only after.
    pub added: Vec<Item>,
    /// Items present before and after, with different attributes.
    pub changed: Vec<ItemChange>,
    /// Items present only before.
    pub removed: Vec<Item>,
}

/// What changed in one table among the tables of a command.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedDiff {
    /// The table's name at the endpoint (`--table`, its variable or the
    /// app's default).
    pub table: String,
    /// The table's key attribute names (an empty sort key: it has none).
    pub keys: (&'static str, &'static str),
    /// What changed in it.
    pub diff: TableDiff,
}

/// What changed in every table a command works on, the target table
/// first, then the app's other tables. Of one table it reads exactly as
/// that table's [`TableDiff`]; of several, every change is labelled with
/// its table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TablesDiff {
    /// One entry per table compared, the target table first.
    pub tables: Vec<NamedDiff>,
}

/// The diff of a command that compared no table.
static NO_CHANGES: TableDiff = TableDiff {
    added: Vec::new(),
    changed: Vec::new(),
    removed: Vec::new(),
};

impl TablesDiff {
    /// The target table's diff.
    pub fn target(&self) -> &TableDiff {
        self.tables.first().map_or(&NO_CHANGES, |t| &t.diff)
    }

    /// The diff of the table named `table`, if it was compared.
    pub fn of(&self, table: &str) -> Option<&TableDiff> {
        self.tables
            .iter()
            .find(|t| t.table == table)
            .map(|t| &t.diff)
    }

    /// Whether no table changed at all.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|t| t.diff.is_empty())
    }

    /// `N added, N changed, N removed`, over every table.
    pub fn summary(&self) -> String {
        let count =
            |f: fn(&TableDiff) -> usize| self.tables.iter().map(|t| f(&t.diff)).sum::<usize>();
        format!(
            "{} added, {} changed, {} removed",
            count(|d| d.added.len()),
            count(|d| d.changed.len()),
            count(|d| d.removed.len())
        )
    }

    /// As JSON: one table, [`TableDiff::to_json`]; several, the same three
    /// lists over every table, each entry with its `"table"`, the target
    /// table's entries first.
    pub fn to_json(&self) -> Value {
        if let [one] = self.tables.as_slice() {
            return one.diff.to_json(one.keys);
        }
        let mut out = json!({"added": [], "changed": [], "removed": []});
        for t in &self.tables {
            let one = t.diff.to_json(t.keys);
            for list in ["added", "changed", "removed"] {
                for mut entry in one[list].as_array().cloned().unwrap_or_default() {
                    entry["table"] = Value::from(t.table.clone());
                    if let Some(l) = out[list].as_array_mut() {
                        l.push(entry);
                    }
                }
            }
        }
        out
    }
}

/// Compare two states of a table.
pub fn diff_tables(before: &[Item], after: &[Item], key_attributes: (&str, &str)) -> TableDiff {
    let old = by_key(before, key_attributes);
    let new = by_key(after, key_attributes);
    let mut diff = TableDiff::default();
    for item in after {
        match old.get(&key_values(item, key_attributes)) {
            None => diff.added.push(item.clone()),
            Some(prev) if prev != item => diff.changed.push(ItemChange {
                before: prev.clone(),
                after: item.clone(),
                changes: diff_items(prev, item),
            }),
            Some(_) => {}
        }
    }
    for item in before {
        if !new.contains_key(&key_values(item, key_attributes)) {
            diff.removed.push(item.clone());
        }
    }
    sort_items(&mut diff.added, key_attributes);
    sort_items(&mut diff.removed, key_attributes);
    diff.changed.sort_by(|a, b| {
        key_values(&a.after, key_attributes).cmp(&key_values(&b.after, key_attributes))
    });
    diff
}

/// The changed values of one item, by path, sorted by attribute name.
pub fn diff_items(before: &Item, after: &Item) -> Vec<AttributeChange> {
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        diff_values(name, before.get(name), after.get(name), &mut out);
    }
    out
}

fn diff_values(
    path: &str,
    old: Option<&AttributeValue>,
    new: Option<&AttributeValue>,
    out: &mut Vec<AttributeChange>,
) {
    match (old, new) {
        (Some(a), Some(b)) if a == b => {}
        (Some(AttributeValue::M(a)), Some(AttributeValue::M(b))) => {
            let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
            names.sort();
            names.dedup();
            for n in names {
                diff_values(&format!("{path}.{n}"), a.get(n), b.get(n), out);
            }
        }
        (Some(AttributeValue::L(a)), Some(AttributeValue::L(b))) => {
            for i in 0..a.len().max(b.len()) {
                diff_values(&format!("{path}[{i}]"), a.get(i), b.get(i), out);
            }
        }
        (old, new) => out.push(AttributeChange {
            path: path.to_owned(),
            old: old.cloned(),
            new: new.cloned(),
        }),
    }
}

impl TableDiff {
    /// Whether nothing was added, changed or removed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// `N added, N changed, N removed`.
    pub fn summary(&self) -> String {
        format!(
            "{} added, {} changed, {} removed",
            self.added.len(),
            self.changed.len(),
            self.removed.len()
        )
    }

    /// Readable lines: `+ PK/SK {attrs}`, `~ PK/SK: Attr: old → new`,
    /// `- PK/SK`.
    pub fn lines(&self, key_attributes: (&str, &str)) -> Vec<String> {
        let mut lines = Vec::new();
        for item in &self.added {
            lines.push(format!(
                "+ {} {}",
                key_text(item, key_attributes),
                readable_attributes(item, key_attributes)
            ));
        }
        for c in &self.changed {
            let key = key_text(&c.after, key_attributes);
            for ch in &c.changes {
                let show = |v: &Option<AttributeValue>| {
                    v.as_ref().map_or_else(|| "(absent)".to_owned(), readable)
                };
                lines.push(format!(
                    "~ {key}: {}: {} → {}",
                    ch.path,
                    show(&ch.old),
                    show(&ch.new)
                ));
            }
        }
        for item in &self.removed {
            lines.push(format!("- {}", key_text(item, key_attributes)));
        }
        lines
    }

    /// The same as JSON: `{"added": [{"key", "item"}], "changed": [{"key",
    /// "changes": [{"path", "old", "new"}]}], "removed": [{"key", "item"}]}`;
    /// values in DynamoDB JSON, absent values `null`.
    pub fn to_json(&self, key_attributes: (&str, &str)) -> Value {
        let key = |i: &Item| item_to_json(&key_of(i, key_attributes));
        let whole = |items: &[Item]| -> Vec<Value> {
            items
                .iter()
                .map(|i| json!({"key": key(i), "item": item_to_json(i)}))
                .collect()
        };
        let opt = |v: &Option<AttributeValue>| v.as_ref().map_or(Value::Null, attribute_to_json);
        let changed: Vec<Value> = self
            .changed
            .iter()
            .map(|c| {
                json!({
                    "key": key(&c.after),
                    "changes": c.changes.iter().map(|ch| json!({
                        "path": ch.path, "old": opt(&ch.old), "new": opt(&ch.new)
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "added": whole(&self.added),
            "changed": changed,
            "removed": whole(&self.removed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ddbjson::item_from_json;
    use serde_json::json;

    const KEYS: (&str, &str) = ("PK", "SK");

    fn item(v: Value) -> Item {
        item_from_json(&v).unwrap()
    }

    #[test]
    fn added_changed_removed() {
        let before = vec![
            item(json!({"PK": {"S": "g"}, "SK": {"S": "Group"}, "GroupName": {"S": "Home"}})),
            item(json!({"PK": {"S": "u"}, "SK": {"S": "Member#g"}, "TeamId": {"S": "g"}})),
            item(
                json!({"PK": {"S": "c"}, "SK": {"S": "Container"}, "Parts": {"L": [
                    {"M": {"Name": {"S": "Milk"}, "Quantity": {"N": "1"}}}
                ]}}),
            ),
        ];
        let after = vec![
            item(
                json!({"PK": {"S": "g"}, "SK": {"S": "Group"}, "GroupName": {"S": "Flat"}, "X": {"N": "1"}}),
            ),
            item(
                json!({"PK": {"S": "c"}, "SK": {"S": "Container"}, "Parts": {"L": [
                    {"M": {"Name": {"S": "Milk"}, "Quantity": {"N": "2"}}},
                    {"M": {"Name": {"S": "Eggs"}}}
                ]}}),
            ),
            item(json!({"PK": {"S": "a"}, "SK": {"S": "User"}, "DisplayName": {"S": "Ann"}})),
        ];
        let d = diff_tables(&before, &after, KEYS);
        assert_eq!(d.summary(), "1 added, 2 changed, 1 removed");
        assert_eq!(
            d.lines(KEYS),
            [
                r#"+ a/User {DisplayName: "Ann"}"#,
                "~ c/Container: Parts[0].Quantity: 1 → 2",
                r#"~ c/Container: Parts[1]: (absent) → {Name: "Eggs"}"#,
                r#"~ g/Group: GroupName: "Home" → "Flat""#,
                "~ g/Group: X: (absent) → 1",
                "- u/Member#g",
            ]
        );
        let j = d.to_json(KEYS);
        assert_eq!(
            j["removed"][0]["key"],
            json!({"PK": {"S": "u"}, "SK": {"S": "Member#g"}})
        );
        assert_eq!(
            j["changed"][1]["changes"][1],
            json!({"path": "X", "old": null, "new": {"N": "1"}})
        );
        assert_eq!(j["added"][0]["item"]["DisplayName"], json!({"S": "Ann"}));
    }

    #[test]
    fn several_tables_label_each_change() {
        let of = |table: &str, keys, before: Vec<Item>, after: Vec<Item>| NamedDiff {
            table: table.into(),
            keys,
            diff: diff_tables(&before, &after, keys),
        };
        let chat = item(json!({"PK": {"S": "c"}, "SK": {"S": "c"}, "N": {"N": "0"}}));
        let counted = item(json!({"PK": {"S": "c"}, "SK": {"S": "c"}, "N": {"N": "1"}}));
        let user = item(json!({"PK": {"S": "u"}}));
        let d = TablesDiff {
            tables: vec![
                of("Requests", KEYS, vec![], vec![]),
                of("Chats", KEYS, vec![chat], vec![counted]),
                of("Users", ("PK", ""), vec![], vec![user]),
            ],
        };
        assert!(d.target().is_empty() && !d.is_empty());
        assert_eq!(d.summary(), "1 added, 1 changed, 0 removed");
        assert_eq!(d.of("Users").map(|u| u.added.len()), Some(1));
        let j = d.to_json();
        assert_eq!(
            j["changed"],
            json!([{"table": "Chats", "key": {"PK": {"S": "c"}, "SK": {"S": "c"}},
                "changes": [{"path": "N", "old": {"N": "0"}, "new": {"N": "1"}}]}])
        );
        assert_eq!(j["added"][0]["table"], "Users");
        assert_eq!(j["added"][0]["key"], json!({"PK": {"S": "u"}}));
        // One table: its own diff, unlabelled.
        let one = TablesDiff {
            tables: d.tables[1..2].to_vec(),
        };
        assert_eq!(one.to_json(), d.tables[1].diff.to_json(KEYS));
        assert!(TablesDiff::default().target().is_empty());
    }

    #[test]
    fn same_tables_have_no_diff() {
        let t = vec![item(json!({"PK": {"S": "g"}, "SK": {"S": "Group"}}))];
        let d = diff_tables(&t, &t, KEYS);
        assert!(d.is_empty());
        assert!(d.lines(KEYS).is_empty());
    }

    #[test]
    fn type_change_is_one_change() {
        let a = item(json!({"PK": {"S": "g"}, "SK": {"S": "G"}, "Parts": {"L": []}}));
        let b = item(json!({"PK": {"S": "g"}, "SK": {"S": "G"}, "Parts": {"NULL": true}}));
        let changes = diff_items(&a, &b);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "Parts");
    }
}
