//! A raw DynamoDB item, and the one rule every error text follows: quoted
//! values (which may be personal data) never reach a log line.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub mod borrowed;
pub mod text;

/// A raw DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Serde error texts quote the offending value (`invalid type: string
/// "alice@example.com"`, serde_dynamo's `Failed to parse 'alice@example.com'
/// as a float`); a value may be personal data, so quoted text is dropped
/// before an error can reach a log line. A single quote opens a quotation
/// only at the start of a word (not in `doesn't`) and closes at the last
/// single quote that ends a word.
pub fn redact_quoted(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut inside = false;
    let mut rest = msg;
    while let Some(ch) = rest.chars().next() {
        rest = &rest[ch.len_utf8()..];
        if ch == '"' {
            if inside {
                out.push_str("…\"");
            } else {
                out.push('"');
            }
            inside = !inside;
        } else if inside {
            continue;
        } else if ch == '\''
            && out
                .chars()
                .last()
                .is_none_or(|c| c.is_whitespace() || c == '(')
            && let Some(end) = closing_single_quote(rest)
        {
            out.push_str("'…'");
            rest = &rest[end + 1..];
        } else {
            out.push(ch);
        }
    }
    out
}

/// A serde error's text without the values it quotes: [`redact_quoted`],
/// and the backquoted spans serde uses for an unknown enum value (`unknown
/// variant `x``), which may be anything a client wrote.
pub fn redact_serde(msg: &str) -> String {
    let mut out = String::new();
    for (i, part) in redact_quoted(msg).split('`').enumerate() {
        out.push_str(if i % 2 == 0 { part } else { "`…`" });
    }
    out
}

/// `T` from an item's attributes, as `serde_dynamo` reads them; the error
/// says `what` does not decode and why, no value in it ([`redact_serde`]).
///
/// Read in place ([`borrowed::read`]: no copy of the item); through
/// serde_dynamo, over a copy, only when that read gives up, for the error
/// text (or a value only serde_dynamo reads, such as a binary one).
pub fn decode<T: DeserializeOwned>(item: &Item, what: &str) -> Result<T, String> {
    if let Some(typed) = borrowed::read(item, |_| true) {
        return Ok(typed);
    }
    serde_dynamo::from_item(item.clone())
        .map_err(|e| format!("{what} does not decode: {}", redact_serde(&e.to_string())))
}

/// The item of a typed value: its attributes (`serde_dynamo`) and `key`'s.
///
/// # Panics
/// If `T` does not serialize as a map (a struct of plain fields does).
pub fn encode<T: Serialize>(typed: &T, key: Item) -> Item {
    let mut item: Item = serde_dynamo::to_item(typed).expect("a typed item serializes as a map");
    item.extend(key);
    item
}

/// The byte offset of the last `'` in `s` that ends a word (followed by the
/// end, whitespace or punctuation).
fn closing_single_quote(s: &str) -> Option<usize> {
    s.char_indices()
        .filter(|&(i, c)| {
            c == '\''
                && s[i + 1..]
                    .chars()
                    .next()
                    .is_none_or(|n| n.is_whitespace() || ",.;:)".contains(n))
        })
        .map(|(i, _)| i)
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Kind {
        Note,
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Typed {
        #[serde(rename = "Kind")]
        kind: Kind,
        #[serde(rename = "Size")]
        size: i64,
    }

    #[test]
    fn typed_items_decode_without_values_in_errors() {
        let key = Item::from([("PK".into(), AttributeValue::S("T#1".into()))]);
        let typed = Typed {
            kind: Kind::Note,
            size: 3,
        };
        let item = encode(&typed, key);
        assert_eq!(item["PK"], AttributeValue::S("T#1".into()));
        assert_eq!(decode::<Typed>(&item, "typed"), Ok(typed));
        let mut bad = item.clone();
        bad.insert("Kind".into(), AttributeValue::S("alice@example.com".into()));
        let err = decode::<Typed>(&bad, "typed").unwrap_err();
        assert!(err.starts_with("typed does not decode: "), "{err}");
        assert!(!err.contains("alice"), "{err}");
        bad.insert("Size".into(), AttributeValue::S("bob".into()));
        bad.insert("Kind".into(), AttributeValue::S("Note".into()));
        assert!(!decode::<Typed>(&bad, "typed").unwrap_err().contains("bob"));
    }

    #[test]
    fn single_quoted_values_are_redacted_too() {
        assert_eq!(
            redact_quoted("Failed to parse 'bob@x.io' as a float: invalid float literal"),
            "Failed to parse '…' as a float: invalid float literal"
        );
        assert_eq!(
            redact_quoted("Failed to parse 'it's bob' as a float"),
            "Failed to parse '…' as a float"
        );
        assert_eq!(redact_quoted("doesn't parse"), "doesn't parse");
        assert_eq!(redact_quoted("an 'open quote"), "an 'open quote");
    }

    #[test]
    fn redaction_keeps_structure() {
        assert_eq!(
            redact_quoted(r#"invalid type: string "bob@x.io", expected f64"#),
            r#"invalid type: string "…", expected f64"#
        );
    }
}
