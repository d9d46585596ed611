//! Replace personal values in captured records with stable placeholders:
//! the same original value always gets the same placeholder within one
//! [`Redactor`], so relationships stay visible while the data does not.
//! String values of the configured attribute names are replaced, at any
//! depth; a redacted value that also appears in a key string (a whole
//! `#`-separated part of a key attribute) is replaced there by the same
//! placeholder ([`Redactor::redact_changes`]). Every other value is kept.
//!
//! Two numbering modes: by default values are numbered per attribute in
//! the order they are first seen (`user-1`, `user-2`); with a key
//! ([`Redactor::keyed`]) a placeholder is a keyed hash of the value
//! (HMAC-SHA256, first 12 hex digits), the same in every capture and every
//! attribute made with the same key, so fixtures redacted separately by a
//! team still join.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use hmac::{KeyInit, Mac};

use worker_engine::item::Item;
use worker_engine::stream::StreamChange;

/// The shape of a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placeholder {
    /// `user-<n>@example.invalid`
    Email,
    /// `user-<n>`
    Name,
    /// `<label>-<n>`, e.g. `group-3` (names of things, hashes, ids).
    Label(&'static str),
}

impl Placeholder {
    fn render(self, n: &str) -> String {
        match self {
            Placeholder::Email => format!("user-{n}@example.invalid"),
            Placeholder::Name => format!("user-{n}"),
            Placeholder::Label(label) => format!("{label}-{n}"),
        }
    }
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Replaces the values of chosen attributes, numbering distinct values per
/// attribute in the order they are first seen, or by a keyed hash.
#[derive(Clone, Default)]
pub struct Redactor {
    rules: Vec<(String, Placeholder)>,
    seen: HashMap<String, HashMap<String, usize>>,
    /// Every value replaced, with its placeholder (for key strings).
    by_value: HashMap<String, String>,
    key: Option<Vec<u8>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the key nor the values replaced.
        f.debug_struct("Redactor")
            .field("rules", &self.rules)
            .field("keyed", &self.key.is_some())
            .field("replaced", &self.replaced())
            .finish()
    }
}

impl Redactor {
    /// `rules`: attribute name → placeholder shape.
    pub fn new<'a>(rules: impl IntoIterator<Item = (&'a str, Placeholder)>) -> Self {
        Redactor {
            rules: rules.into_iter().map(|(n, p)| (n.to_owned(), p)).collect(),
            ..Default::default()
        }
    }

    /// Placeholders made from a keyed hash of the value (HMAC-SHA256 with
    /// `key`): the same value gets the same placeholder in every run.
    pub fn keyed<'a>(rules: impl IntoIterator<Item = (&'a str, Placeholder)>, key: &[u8]) -> Self {
        Redactor {
            key: Some(key.to_vec()),
            ..Redactor::new(rules)
        }
    }

    /// Also replace the values of `name` with `shape`.
    pub fn with_rule(mut self, name: &str, shape: Placeholder) -> Self {
        self.rules.push((name.to_owned(), shape));
        self
    }

    /// How many distinct values were replaced so far.
    pub fn replaced(&self) -> usize {
        self.seen.values().map(HashMap::len).sum()
    }

    fn placeholder(&mut self, name: &str, shape: Placeholder, value: &str) -> String {
        let values = self.seen.entry(name.to_owned()).or_default();
        let next = values.len() + 1;
        let n = *values.entry(value.to_owned()).or_insert(next);
        let out = match &self.key {
            Some(key) => {
                let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
                mac.update(value.as_bytes());
                let digest = mac.finalize().into_bytes();
                let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
                shape.render(&hex)
            }
            None => shape.render(&n.to_string()),
        };
        self.by_value.insert(value.to_owned(), out.clone());
        out
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

    /// Redact every change, then replace the values redacted anywhere
    /// where they appear in a key string (`Team#<id>` when the id's
    /// attribute is redacted), in the keys and the images' key attributes.
    pub fn redact_changes(&mut self, changes: &mut [StreamChange]) {
        for c in changes.iter_mut() {
            self.redact_change(c);
        }
        if self.by_value.is_empty() {
            return;
        }
        for c in changes.iter_mut() {
            let names: Vec<String> = c.keys.keys().cloned().collect();
            for name in &names {
                for item in [
                    Some(&mut c.keys),
                    c.old_image.as_mut(),
                    c.new_image.as_mut(),
                ]
                .into_iter()
                .flatten()
                {
                    if let Some(AttributeValue::S(s)) = item.get_mut(name) {
                        *s = self.in_key(s);
                    }
                }
            }
        }
    }

    /// A key string with its redacted parts replaced.
    fn in_key(&self, key: &str) -> String {
        key.split('#')
            .map(|part| self.by_value.get(part).map_or(part, String::as_str))
            .collect::<Vec<_>>()
            .join("#")
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
        let mut g: Item = [("GroupName".to_owned(), AttributeValue::S("Home".into()))].into();
        let mut r = r.with_rule("GroupName", Placeholder::Label("group"));
        r.redact_item(&mut g);
        assert_eq!(g["GroupName"], AttributeValue::S("group-1".into()));
        assert_eq!(
            b["ContactEmail"],
            AttributeValue::S("user-2@example.invalid".into())
        );
        assert_eq!(b["PK"], AttributeValue::S("id-b".into()), "ids are kept");
        assert_eq!(r.replaced(), 5, "two e-mails, two names, one group name");
    }

    #[test]
    fn keyed_placeholders_are_stable_and_keep_relationships() {
        let rules = [
            ("DisplayName", Placeholder::Name),
            ("Ref", Placeholder::Label("ref")),
        ];
        let change = |pk: &str, sk: &str, name: &str, r: &str| StreamChange {
            event_id: "e".into(),
            kind: worker_engine::stream::ChangeKind::Insert,
            sequence_number: None,
            approximate_creation: None,
            keys: [
                ("PK".to_owned(), AttributeValue::S(pk.into())),
                ("SK".to_owned(), AttributeValue::S(sk.into())),
            ]
            .into(),
            old_image: None,
            new_image: Some(
                [
                    ("PK".to_owned(), AttributeValue::S(pk.into())),
                    ("SK".to_owned(), AttributeValue::S(sk.into())),
                    ("DisplayName".to_owned(), AttributeValue::S(name.into())),
                    ("Ref".to_owned(), AttributeValue::S(r.into())),
                ]
                .into(),
            ),
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        };
        let capture = || {
            vec![
                change("g1", "Group", "Alice", "g1"),
                change("u1", "Team#g1", "Bob", "g1"),
            ]
        };
        let (mut a, mut b) = (capture(), capture());
        Redactor::keyed(rules, b"team key").redact_changes(&mut a);
        Redactor::keyed(rules, b"team key").redact_changes(&mut b);
        assert_eq!(a, b, "same key, same placeholders in every run");
        let s = |c: &StreamChange, n: &str| match &c.new_image.as_ref().unwrap()[n] {
            AttributeValue::S(s) => s.clone(),
            other => panic!("{other:?}"),
        };
        let placeholder = s(&a[0], "Ref");
        assert!(
            placeholder.starts_with("ref-") && placeholder.len() == 16,
            "{placeholder}"
        );
        assert_eq!(
            s(&a[0], "PK"),
            placeholder,
            "the id in a key, replaced alike"
        );
        assert_eq!(s(&a[1], "SK"), format!("Team#{placeholder}"));
        assert_eq!(
            a[1].keys["SK"],
            AttributeValue::S(format!("Team#{placeholder}"))
        );
        assert_eq!(s(&a[1], "PK"), "u1", "values not redacted are kept");
        assert!(!format!("{a:?}").contains("Alice"));
        let mut other = capture();
        Redactor::keyed(rules, b"other key").redact_changes(&mut other);
        assert_ne!(
            s(&other[0], "Ref"),
            placeholder,
            "another key, other placeholders"
        );
        let mut numbered = capture();
        Redactor::new(rules).redact_changes(&mut numbered);
        assert_eq!(s(&numbered[1], "SK"), "Team#ref-1");
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
