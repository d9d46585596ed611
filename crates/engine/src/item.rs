//! A raw DynamoDB item, and the one rule every error text follows: quoted
//! values (which may be personal data) never reach a log line.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

pub mod borrowed;

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
