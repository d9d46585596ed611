//! Replace personal values in captured records with stable placeholders:
//! the same original value always gets the same placeholder within one
//! [`Redactor`], so relationships stay visible while the data does not.
//! Only string values of the configured attribute names are replaced, at any
//! depth; keys and every other attribute are kept.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::item::Item;
use crate::stream::decode::StreamChange;

/// The shape of a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placeholder {
    /// `user-<n>@example.invalid`
    Email,
    /// `user-<n>`
    Name,
}

impl Placeholder {
    fn render(self, n: usize) -> String {
        match self {
            Placeholder::Email => format!("user-{n}@example.invalid"),
            Placeholder::Name => format!("user-{n}"),
        }
    }
}

/// Replaces the values of chosen attributes, numbering distinct values per
/// attribute in the order they are first seen.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    rules: Vec<(String, Placeholder)>,
    seen: HashMap<String, HashMap<String, usize>>,
}

impl Redactor {
    /// `rules`: attribute name → placeholder shape.
    pub fn new<'a>(rules: impl IntoIterator<Item = (&'a str, Placeholder)>) -> Self {
        Redactor {
            rules: rules.into_iter().map(|(n, p)| (n.to_owned(), p)).collect(),
            seen: HashMap::new(),
        }
    }

    /// How many distinct values were replaced so far.
    pub fn replaced(&self) -> usize {
        self.seen.values().map(HashMap::len).sum()
    }

    fn placeholder(&mut self, name: &str, shape: Placeholder, value: &str) -> String {
        let values = self.seen.entry(name.to_owned()).or_default();
        let next = values.len() + 1;
        let n = *values.entry(value.to_owned()).or_insert(next);
        shape.render(n)
    }

    /// Redact one item in place.
    pub fn redact_item(&mut self, item: &mut Item) {
        let mut names: Vec<String> = item.keys().cloned().collect();
        // Deterministic numbering whatever the map's order.
        names.sort();
        for name in names {
            if let Some(v) = item.get_mut(&name) {
                self.redact_value(&name, v);
            }
        }
    }

    fn redact_value(&mut self, name: &str, v: &mut AttributeValue) {
        let rule = self.rules.iter().find(|(n, _)| n == name).map(|(_, p)| *p);
        match (rule, v) {
            (Some(shape), AttributeValue::S(s)) => *s = self.placeholder(name, shape, s),
            (Some(shape), AttributeValue::Ss(ss)) => {
                for s in ss.iter_mut() {
                    *s = self.placeholder(name, shape, s);
                }
            }
            (_, AttributeValue::M(m)) => {
                let mut names: Vec<String> = m.keys().cloned().collect();
                names.sort();
                for n in names {
                    if let Some(inner) = m.get_mut(&n) {
                        self.redact_value(&n, inner);
                    }
                }
            }
            (_, AttributeValue::L(l)) => {
                for inner in l.iter_mut() {
                    // List elements carry the list's name.
                    self.redact_value(name, inner);
                }
            }
            _ => {}
        }
    }

    /// Redact the images (and keys) of a stream change in place.
    pub fn redact_change(&mut self, change: &mut StreamChange) {
        self.redact_item(&mut change.keys);
        if let Some(i) = change.old_image.as_mut() {
            self.redact_item(i);
        }
        if let Some(i) = change.new_image.as_mut() {
            self.redact_item(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str, name: &str, email: &str) -> Item {
        [
            ("PK".to_owned(), AttributeValue::S(id.into())),
            ("SK".to_owned(), AttributeValue::S("User".into())),
            ("DisplayName".to_owned(), AttributeValue::S(name.into())),
            ("ContactEmail".to_owned(), AttributeValue::S(email.into())),
        ]
        .into()
    }

    #[test]
    fn stable_placeholders_keep_ids() {
        let mut r = Redactor::new([
            ("ContactEmail", Placeholder::Email),
            ("DisplayName", Placeholder::Name),
        ]);
        let mut a = user("id-a", "Alice", "alice@example.com");
        let mut b = user("id-b", "Bob", "bob@example.com");
        let mut a2 = user("id-a", "Alice", "alice@example.com");
        r.redact_item(&mut a);
        r.redact_item(&mut b);
        r.redact_item(&mut a2);
        assert_eq!(a, a2, "same value, same placeholder");
        assert_eq!(
            a["ContactEmail"],
            AttributeValue::S("user-1@example.invalid".into())
        );
        assert_eq!(a["DisplayName"], AttributeValue::S("user-1".into()));
        assert_eq!(
            b["ContactEmail"],
            AttributeValue::S("user-2@example.invalid".into())
        );
        assert_eq!(b["PK"], AttributeValue::S("id-b".into()), "ids are kept");
        assert_eq!(r.replaced(), 4);
    }

    #[test]
    fn nested_values_are_redacted() {
        let mut r = Redactor::new([("DisplayName", Placeholder::Name)]);
        let mut item: Item = [(
            "Members".to_owned(),
            AttributeValue::L(vec![AttributeValue::M(
                [("DisplayName".to_owned(), AttributeValue::S("Carol".into()))].into(),
            )]),
        )]
        .into();
        r.redact_item(&mut item);
        let text = format!("{item:?}");
        assert!(!text.contains("Carol") && text.contains("user-1"), "{text}");
    }
}
