//! Building a key of strings and reading an item's key attributes: the part of an app's key parsing that
//! is the same whatever the table. What a key's strings mean (its
//! partitions, prefixes and ids) and how they are malformed stay the app's:
//! its own key error wraps [`AttributeError`].

use aws_sdk_dynamodb::types::AttributeValue;

use crate::item::Item;
use crate::store::Key;

/// A key attribute an item lacks, or holds as another type than a string.
/// Texts name the attribute, never a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AttributeError {
    /// The item has no attribute of this name.
    #[error("the key has no {0} attribute")]
    Missing(&'static str),
    /// The attribute of this name holds another type than a string.
    #[error("{0} is not a string")]
    NotString(&'static str),
}

/// The string attribute `name` of an item's key.
pub fn string<'a>(item: &'a Item, name: &'static str) -> Result<&'a str, AttributeError> {
    string_of(item.get(name), name)
}

/// [`string`] of the value found for `name` (in an item, or in an app's
/// view of one).
pub fn string_of<'a>(
    value: Option<&'a AttributeValue>,
    name: &'static str,
) -> Result<&'a str, AttributeError> {
    match value {
        Some(AttributeValue::S(s)) => Ok(s),
        Some(_) => Err(AttributeError::NotString(name)),
        None => Err(AttributeError::Missing(name)),
    }
}

/// A key of string attributes, from `(name, value)` pairs: what an app's
/// key module builds its keys with.
pub fn strings<const N: usize>(parts: [(&str, String); N]) -> Key {
    parts
        .into_iter()
        .map(|(name, value)| (name.to_owned(), AttributeValue::S(value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_attribute_is_a_string_or_an_error_naming_it() {
        let item = Item::from([
            ("P".to_owned(), AttributeValue::S("a#1".into())),
            ("S".to_owned(), AttributeValue::N("1".into())),
        ]);
        assert_eq!(string(&item, "P"), Ok("a#1"));
        let key = strings([("P", "a#1".into()), ("S", "b".into())]);
        assert_eq!(string(&key, "P"), Ok("a#1"));
        assert_eq!(key["S"], AttributeValue::S("b".into()));
        let not_string = string(&item, "S").unwrap_err();
        assert_eq!(not_string, AttributeError::NotString("S"));
        assert_eq!(not_string.to_string(), "S is not a string");
        let missing = string(&item, "Q").unwrap_err();
        assert_eq!(missing, AttributeError::Missing("Q"));
        assert_eq!(missing.to_string(), "the key has no Q attribute");
    }
}
