//! DynamoDB JSON (the format of a Scan's `Items`, of stream images and of
//! `aws dynamodb` output): strict parsing with precise, value-free errors,
//! deterministic writing, and a readable rendering for diffs.
//!
//! Every function here is generic: no table design is assumed beyond the
//! names of the two key attributes, passed in as `(partition, sort)`.

use std::cmp::Ordering;
use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value};

use worker_engine::item::Item;

/// The type tags of DynamoDB JSON.
const TAGS: [&str; 10] = ["S", "N", "B", "BOOL", "NULL", "L", "M", "SS", "NS", "BS"];

/// Parse one item (`{"Name": {"S": "x"}, ...}`). The error names the
/// attribute path and the problem, never a value.
pub fn item_from_json(v: &Value) -> Result<Item, String> {
    let Some(obj) = v.as_object() else {
        return Err(format!(
            "an item must be a JSON object of attributes, found {}",
            json_type(v)
        ));
    };
    obj.iter()
        .map(|(name, v)| Ok((name.clone(), attribute_from_json(v, name)?)))
        .collect()
}

/// Parse one attribute value; `path` names it in errors (`Parts[2].Name`).
pub fn attribute_from_json(v: &Value, path: &str) -> Result<AttributeValue, String> {
    Typed::of(v, path)?.value()
}

/// One attribute value of DynamoDB JSON: its type tag and what the tag
/// holds, with the attribute's path for errors.
struct Typed<'a> {
    path: &'a str,
    tag: &'a str,
    inner: &'a Value,
}

impl<'a> Typed<'a> {
    /// The one type tag of `v` and its value; an error when `v` is not an
    /// object of exactly one entry.
    fn of(v: &'a Value, path: &'a str) -> Result<Typed<'a>, String> {
        let bad = |what: String| format!("attribute {path}: {what}");
        let Some(obj) = v.as_object() else {
            return Err(bad(format!(
                "expected a typed value such as {{\"S\": ...}}, found {}",
                json_type(v)
            )));
        };
        if obj.len() != 1 {
            let tags: Vec<&str> = obj.keys().map(String::as_str).collect();
            return Err(bad(format!(
                "expected exactly one type tag ({}), found {}",
                TAGS.join(", "),
                if tags.is_empty() {
                    "none".to_owned()
                } else {
                    tags.join(", ")
                }
            )));
        }
        let (tag, inner) = obj.iter().next().expect("one entry");
        Ok(Typed { path, tag, inner })
    }

    /// `what` is wrong with the attribute.
    fn error(&self, what: &str) -> String {
        format!("attribute {}: {what}", self.path)
    }

    /// The attribute value the tag and its value make.
    fn value(&self) -> Result<AttributeValue, String> {
        let inner = self.inner;
        Ok(match self.tag {
            "S" => AttributeValue::S(self.string()?),
            "N" => AttributeValue::N(match inner {
                // Tolerate a bare JSON number.
                Value::Number(n) => n.to_string(),
                _ => self.number(&self.string()?)?,
            }),
            "B" => AttributeValue::B(self.blob(&self.string()?)?),
            "BOOL" => match inner {
                Value::Bool(b) => AttributeValue::Bool(*b),
                _ => return Err(self.error("BOOL value must be true or false")),
            },
            "NULL" => match inner {
                Value::Bool(true) => AttributeValue::Null(true),
                _ => return Err(self.error("NULL value must be true")),
            },
            "L" => AttributeValue::L(self.list()?),
            "M" => AttributeValue::M(self.map()?),
            "SS" => AttributeValue::Ss(self.strings()?),
            "NS" => AttributeValue::Ns(
                self.strings()?
                    .iter()
                    .map(|s| self.number(s))
                    .collect::<Result<_, _>>()?,
            ),
            "BS" => AttributeValue::Bs(
                self.strings()?
                    .iter()
                    .map(|s| self.blob(s))
                    .collect::<Result<_, _>>()?,
            ),
            other => {
                return Err(self.error(&format!(
                    "unknown type tag {other:?}: expected one of {}",
                    TAGS.join(", ")
                )));
            }
        })
    }

    /// The tag's value as a string.
    fn string(&self) -> Result<String, String> {
        self.inner
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| self.error(&format!("{} value must be a string", self.tag)))
    }

    /// `s`, a number of the tag's value.
    fn number(&self, s: &str) -> Result<String, String> {
        if is_number(s) {
            Ok(s.to_owned())
        } else {
            Err(self.error(&format!("{} value is not a number", self.tag)))
        }
    }

    /// `s`, a base64 binary of the tag's value.
    fn blob(&self, s: &str) -> Result<Blob, String> {
        aws_smithy_types::base64::decode(s)
            .map(Blob::new)
            .map_err(|_| self.error(&format!("{} value is not base64", self.tag)))
    }

    /// The tag's value as a set's members: a non-empty array of strings.
    fn strings(&self) -> Result<Vec<String>, String> {
        let not_strings = || self.error(&format!("{} value must be an array of strings", self.tag));
        let Some(arr) = self.inner.as_array() else {
            return Err(not_strings());
        };
        let out: Vec<String> = arr
            .iter()
            .map(|x| x.as_str().map(str::to_owned).ok_or_else(not_strings))
            .collect::<Result<_, _>>()?;
        if out.is_empty() {
            return Err(self.error(&format!("an empty {} set is not allowed", self.tag)));
        }
        Ok(out)
    }

    /// The elements of an `L` value (`path[i]` in errors).
    fn list(&self) -> Result<Vec<AttributeValue>, String> {
        let Value::Array(items) = self.inner else {
            return Err(self.error("L value must be an array"));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, x)| attribute_from_json(x, &format!("{}[{i}]", self.path)))
            .collect()
    }

    /// The attributes of an `M` value (`path.name` in errors).
    fn map(&self) -> Result<HashMap<String, AttributeValue>, String> {
        let Value::Object(attrs) = self.inner else {
            return Err(self.error("M value must be an object"));
        };
        attrs
            .iter()
            .map(|(k, x)| {
                Ok((
                    k.clone(),
                    attribute_from_json(x, &format!("{}.{k}", self.path))?,
                ))
            })
            .collect()
    }
}

/// Whether `s` is a DynamoDB number (decimal, optional sign and exponent).
fn is_number(s: &str) -> bool {
    let s = s.trim();
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |x: &str| x.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = !(int.is_empty() && frac.is_empty()) && digits(int) && digits(frac);
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One attribute value as DynamoDB JSON (maps with sorted names).
pub fn attribute_to_json(v: &AttributeValue) -> Value {
    let tagged = |tag: &str, inner: Value| {
        let mut m = Map::new();
        m.insert(tag.to_owned(), inner);
        Value::Object(m)
    };
    match v {
        AttributeValue::S(s) => tagged("S", Value::from(s.as_str())),
        AttributeValue::N(n) => tagged("N", Value::from(n.as_str())),
        AttributeValue::B(b) => tagged("B", Value::from(aws_smithy_types::base64::encode(b))),
        AttributeValue::Bool(b) => tagged("BOOL", Value::from(*b)),
        AttributeValue::Null(_) => tagged("NULL", Value::from(true)),
        AttributeValue::L(l) => {
            tagged("L", Value::Array(l.iter().map(attribute_to_json).collect()))
        }
        AttributeValue::M(m) => {
            let mut names: Vec<&String> = m.keys().collect();
            names.sort();
            let inner: Map<String, Value> = names
                .into_iter()
                .map(|k| (k.clone(), attribute_to_json(&m[k])))
                .collect();
            tagged("M", Value::Object(inner))
        }
        AttributeValue::Ss(ss) => tagged("SS", Value::from(ss.clone())),
        AttributeValue::Ns(ns) => tagged("NS", Value::from(ns.clone())),
        AttributeValue::Bs(bs) => tagged(
            "BS",
            Value::Array(
                bs.iter()
                    .map(|b| Value::from(aws_smithy_types::base64::encode(b)))
                    .collect(),
            ),
        ),
        _ => tagged("NULL", Value::from(true)),
    }
}

/// The names of an item's attributes: the key attributes first, then the
/// others sorted.
pub fn ordered_names<'a>(item: &'a Item, (pk, sk): (&str, &str)) -> Vec<&'a String> {
    let mut names: Vec<&String> = item.keys().collect();
    let rank = |n: &str| match n {
        n if n == pk => 0,
        n if n == sk => 1,
        _ => 2,
    };
    names.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    names
}

/// An item as DynamoDB JSON (attribute names sorted).
pub fn item_to_json(item: &Item) -> Value {
    let mut names: Vec<&String> = item.keys().collect();
    names.sort();
    Value::Object(
        names
            .into_iter()
            .map(|k| (k.clone(), attribute_to_json(&item[k])))
            .collect(),
    )
}

/// An item as one line of compact DynamoDB JSON, key attributes first, the
/// others sorted by name: the same item always gives the same text.
pub fn item_to_line(item: &Item, key_attributes: (&str, &str)) -> String {
    let fields: Vec<String> = ordered_names(item, key_attributes)
        .into_iter()
        .map(|name| {
            format!(
                "{}:{}",
                Value::from(name.as_str()),
                attribute_to_json(&item[name])
            )
        })
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// A key attribute's text (`S` and `N` as they are, others as DynamoDB JSON).
fn key_part(v: Option<&AttributeValue>) -> String {
    match v {
        Some(AttributeValue::S(s)) | Some(AttributeValue::N(s)) => s.clone(),
        Some(other) => attribute_to_json(other).to_string(),
        None => String::new(),
    }
}

/// The item's key as `PK/SK` (the partition value, a slash, the sort value);
/// of a table without a sort key (`sk` empty), the partition value alone.
pub fn key_text(item: &Item, (pk, sk): (&str, &str)) -> String {
    if sk.is_empty() {
        return key_part(item.get(pk));
    }
    format!("{}/{}", key_part(item.get(pk)), key_part(item.get(sk)))
}

/// The item's key values `(partition, sort)`, for sorting and matching.
pub fn key_values(item: &Item, (pk, sk): (&str, &str)) -> (String, String) {
    (key_part(item.get(pk)), key_part(item.get(sk)))
}

/// The key attributes of an item only.
pub fn key_of(item: &Item, (pk, sk): (&str, &str)) -> Item {
    item.iter()
        .filter(|(name, _)| name.as_str() == pk || name.as_str() == sk)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Sort items by partition key, then sort key.
pub fn sort_items(items: &mut [Item], key_attributes: (&str, &str)) {
    items.sort_by(|a, b| compare_keys(a, b, key_attributes));
}

fn compare_keys(a: &Item, b: &Item, key_attributes: (&str, &str)) -> Ordering {
    key_values(a, key_attributes).cmp(&key_values(b, key_attributes))
}

/// A readable rendering of a value: strings quoted, numbers bare, `null`,
/// lists `[..]`, maps `{Name: ..}` with sorted names, sets `SS[..]`.
pub fn readable(v: &AttributeValue) -> String {
    let quote = |s: &str| Value::from(s).to_string();
    match v {
        AttributeValue::S(s) => quote(s),
        AttributeValue::N(n) => n.clone(),
        AttributeValue::B(b) => format!("B({} bytes)", b.as_ref().len()),
        AttributeValue::Bool(b) => b.to_string(),
        AttributeValue::Null(_) => "null".into(),
        AttributeValue::L(l) => format!(
            "[{}]",
            l.iter().map(readable).collect::<Vec<_>>().join(", ")
        ),
        AttributeValue::M(m) => {
            let mut names: Vec<&String> = m.keys().collect();
            names.sort();
            let parts: Vec<String> = names
                .into_iter()
                .map(|k| format!("{k}: {}", readable(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        AttributeValue::Ss(ss) => format!(
            "SS[{}]",
            ss.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", ")
        ),
        AttributeValue::Ns(ns) => format!("NS[{}]", ns.join(", ")),
        AttributeValue::Bs(bs) => format!("BS[{} values]", bs.len()),
        _ => "?".into(),
    }
}

/// The attributes of an item other than its key, rendered readably:
/// `{Name: "x", Other: 1}`.
pub fn readable_attributes(item: &Item, key_attributes: (&str, &str)) -> String {
    let parts: Vec<String> = ordered_names(item, key_attributes)
        .into_iter()
        .filter(|n| n.as_str() != key_attributes.0 && n.as_str() != key_attributes.1)
        .map(|n| format!("{n}: {}", readable(&item[n])))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Items by key, for matching two sets of items.
pub fn by_key(items: &[Item], key_attributes: (&str, &str)) -> HashMap<(String, String), Item> {
    items
        .iter()
        .map(|i| (key_values(i, key_attributes), i.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEYS: (&str, &str) = ("PK", "SK");

    #[test]
    fn every_type_round_trips() {
        let v = json!({
            "PK": {"S": "p"}, "SK": {"S": "s"},
            "N": {"N": "-1.5e3"}, "B": {"B": "AAEC"}, "T": {"BOOL": true},
            "Z": {"NULL": true}, "L": {"L": [{"S": "a"}, {"M": {}}]},
            "M": {"M": {"b": {"N": "2"}, "a": {"L": []}}},
            "SS": {"SS": ["x", "y"]}, "NS": {"NS": ["1", "2"]}, "BS": {"BS": ["AAEC"]}
        });
        let item = item_from_json(&v).unwrap();
        assert_eq!(item_to_json(&item), v);
        assert_eq!(item_from_json(&item_to_json(&item)).unwrap(), item);
    }

    #[test]
    fn errors_name_the_path_never_the_value() {
        let cases = [
            (
                json!({"A": "alice@example.com"}),
                "attribute A: expected a typed value",
            ),
            (
                json!({"A": {"S": "alice@example.com", "N": "1"}}),
                "exactly one type tag",
            ),
            (json!({"A": {"X": "alice@example.com"}}), "unknown type tag"),
            (
                json!({"A": {"N": "alice@example.com"}}),
                "attribute A: N value is not a number",
            ),
            (
                json!({"Parts": {"L": [{"M": {"Name": {"S": 5}}}]}}),
                "attribute Parts[0].Name: S value must be a string",
            ),
            (json!({"A": {"SS": []}}), "empty SS set"),
            (json!({"A": {"NULL": false}}), "NULL value must be true"),
        ];
        for (v, expected) in cases {
            let e = item_from_json(&v).unwrap_err();
            assert!(e.contains(expected), "{e}");
            assert!(!e.contains("alice"), "{e}");
        }
        assert!(
            item_from_json(&json!([1]))
                .unwrap_err()
                .contains("an array")
        );
    }

    #[test]
    fn numbers() {
        for ok in ["0", "-1", "1.5", ".5", "5.", "1e10", "-2.5E-3", "+7"] {
            assert!(is_number(ok), "{ok}");
        }
        for bad in ["", "-", "1e", "x", "1.2.3", "1e1.5", "."] {
            assert!(!is_number(bad), "{bad}");
        }
    }

    #[test]
    fn line_puts_keys_first_and_is_stable() {
        let item = item_from_json(&json!({
            "Zed": {"S": "z"}, "SK": {"S": "User"}, "Alpha": {"N": "1"}, "PK": {"S": "u1"}
        }))
        .unwrap();
        assert_eq!(
            item_to_line(&item, KEYS),
            r#"{"PK":{"S":"u1"},"SK":{"S":"User"},"Alpha":{"N":"1"},"Zed":{"S":"z"}}"#
        );
        assert_eq!(key_text(&item, KEYS), "u1/User");
        assert_eq!(key_text(&item, ("PK", "")), "u1", "no sort key, no slash");
        assert_eq!(readable_attributes(&item, KEYS), r#"{Alpha: 1, Zed: "z"}"#);
    }

    #[test]
    fn readable_values() {
        let v = attribute_from_json(
            &json!({"L": [{"M": {"Unit": {"NULL": true}, "Name": {"S": "Milk"}, "Qty": {"N": "2"}}}]}),
            "Parts",
        )
        .unwrap();
        assert_eq!(readable(&v), r#"[{Name: "Milk", Qty: 2, Unit: null}]"#);
        assert_eq!(
            readable(&AttributeValue::Ss(vec!["a".into(), "b".into()])),
            r#"SS["a", "b"]"#
        );
    }

    #[test]
    fn sorting_by_key() {
        let mk = |pk: &str, sk: &str| {
            item_from_json(&json!({"PK": {"S": pk}, "SK": {"S": sk}})).unwrap()
        };
        let mut items = vec![mk("b", "A"), mk("a", "Z"), mk("a", "B")];
        sort_items(&mut items, KEYS);
        let keys: Vec<String> = items.iter().map(|i| key_text(i, KEYS)).collect();
        assert_eq!(keys, ["a/B", "a/Z", "b/A"]);
    }
}
