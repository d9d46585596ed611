//! Typed values read from a borrowed [`Item`], without copying it first.
//!
//! `serde_dynamo::from_item` takes the item by value: a caller holding a
//! stream image by reference clones every attribute it keeps (deeply: a
//! list of maps), and serde_dynamo converts the SDK's values into its own
//! before reading them. [`read`] walks the borrowed values instead, and
//! allocates only what the target type keeps (its strings and lists).
//!
//! It reads what serde_dynamo reads, the same way (numbers parsed from
//! their text; `NULL` as `None` and unit; a list or a map as a struct;
//! a string as a unit enum variant), and gives up (`None`) on anything it
//! does not: an error of any kind, binary values, map-shaped enums, number
//! map keys. The caller then reads the item through serde_dynamo, which
//! gives the error text. The tests hold the two side by side.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::value::{BorrowedStrDeserializer, Error};
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

use super::Item;

/// `T` from the attributes of `item` whose name `keep` accepts, as
/// `serde_dynamo::from_item` would read them; `None` when that read fails
/// or takes a value this reader leaves to serde_dynamo.
pub fn read<T: DeserializeOwned>(item: &Item, keep: impl Fn(&str) -> bool) -> Option<T> {
    let entries = item.iter().filter(|(name, _)| keep(name));
    T::deserialize(MapDeserializer { entries }).ok()
}

/// The attributes of an item as a map (what `from_item` reads).
struct MapDeserializer<I> {
    entries: I,
}

impl<'de, I> de::Deserializer<'de> for MapDeserializer<I>
where
    I: Iterator<Item = (&'de String, &'de AttributeValue)>,
{
    type Error = Error;
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Entries {
            entries: self.entries,
            value: None,
        })
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// A map's entries; keys are read as strings.
struct Entries<'de, I> {
    entries: I,
    value: Option<&'de AttributeValue>,
}

impl<'de, I> MapAccess<'de> for Entries<'de, I>
where
    I: Iterator<Item = (&'de String, &'de AttributeValue)>,
{
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((name, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(BorrowedStrDeserializer::new(name))
            .map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("no value"))?;
        seed.deserialize(Value(value))
    }
    fn size_hint(&self) -> Option<usize> {
        exact_len(&self.entries)
    }
}

/// A list's values.
struct Values<I>(I);

impl<'de, I: Iterator<Item = &'de AttributeValue>> SeqAccess<'de> for Values<I> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|v| seed.deserialize(Value(v)))
            .transpose()
    }
    fn size_hint(&self) -> Option<usize> {
        exact_len(&self.0)
    }
}

/// The strings of an `SS` or the numbers of an `NS`.
struct Texts<I> {
    texts: I,
    numbers: bool,
}

impl<'de, I: Iterator<Item = &'de String>> SeqAccess<'de> for Texts<I> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(text) = self.texts.next() else {
            return Ok(None);
        };
        if self.numbers {
            seed.deserialize(Number(text)).map(Some)
        } else {
            seed.deserialize(BorrowedStrDeserializer::<Error>::new(text))
                .map(Some)
        }
    }
    fn size_hint(&self) -> Option<usize> {
        exact_len(&self.texts)
    }
}

/// The number of items left, when the iterator knows it exactly: a list's
/// reader gives it as its size hint, so a `Vec` is allocated once at its
/// size instead of growing (a container's 20 foods took four reallocations,
/// and glibc consolidates its free lists on each one over 1 KiB).
fn exact_len(items: &impl Iterator) -> Option<usize> {
    match items.size_hint() {
        (low, Some(high)) if low == high => Some(low),
        _ => None,
    }
}

fn expected<T>(what: &str) -> Result<T, Error> {
    Err(de::Error::custom(what))
}

/// The text of an `N` value.
pub(super) struct Number<'de>(pub(super) &'de str);

impl<'de> Number<'de> {
    fn parse<T: std::str::FromStr>(&self) -> Result<T, Error> {
        self.0
            .parse()
            .map_err(|_| de::Error::custom("not a number of that type"))
    }
}

macro_rules! parse_number {
    ($($method:ident => $visit:ident: $ty:ty),*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.$visit(self.parse::<$ty>()?)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Number<'de> {
    type Error = Error;
    /// serde_dynamo's order: an `i64`, else a `u64`, else an `f64`.
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if let Ok(i) = self.0.parse::<i64>() {
            visitor.visit_i64(i)
        } else if let Ok(u) = self.0.parse::<u64>() {
            visitor.visit_u64(u)
        } else {
            visitor.visit_f64(self.parse::<f64>()?)
        }
    }
    parse_number!(
        deserialize_i8 => visit_i8: i8, deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32, deserialize_i64 => visit_i64: i64,
        deserialize_u8 => visit_u8: u8, deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32, deserialize_u64 => visit_u64: u64,
        deserialize_f32 => visit_f32: f32, deserialize_f64 => visit_f64: f64
    );
    fn deserialize_option<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        expected("left to serde_dynamo")
    }
    serde::forward_to_deserialize_any! {
        bool i128 u128 char str string bytes byte_buf unit unit_struct newtype_struct
        seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// Number methods of [`Value`]: an `N` read as [`Number`] reads it.
macro_rules! number_from_n {
    ($($method:ident),*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.number()?.$method(visitor)
        })*
    };
}

/// One attribute value, borrowed.
struct Value<'de>(&'de AttributeValue);

impl<'de> de::Deserializer<'de> for Value<'de> {
    type Error = Error;
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::N(n) => Number(n).deserialize_any(visitor),
            AttributeValue::S(s) => visitor.visit_str(s),
            AttributeValue::Bool(b) => visitor.visit_bool(*b),
            AttributeValue::Null(_) => self.deserialize_unit(visitor),
            AttributeValue::M(_) => self.deserialize_map(visitor),
            AttributeValue::L(_) | AttributeValue::Ss(_) | AttributeValue::Ns(_) => {
                self.deserialize_seq(visitor)
            }
            _ => expected("left to serde_dynamo"),
        }
    }
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::Bool(b) => visitor.visit_bool(*b),
            _ => expected("a BOOL"),
        }
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::S(s) => visitor.visit_str(s),
            _ => expected("an S"),
        }
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::L(l) => visitor.visit_seq(Values(l.iter())),
            AttributeValue::Ss(ss) => visitor.visit_seq(Texts {
                texts: ss.iter(),
                numbers: false,
            }),
            AttributeValue::Ns(ns) => visitor.visit_seq(Texts {
                texts: ns.iter(),
                numbers: true,
            }),
            _ => expected("a list"),
        }
    }
    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::M(m) => visitor.visit_map(Entries {
                entries: m.iter(),
                value: None,
            }),
            _ => expected("an M"),
        }
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::L(_) => self.deserialize_seq(visitor),
            _ => self.deserialize_map(visitor),
        }
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::Null(true) => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::Null(true) => visitor.visit_unit(),
            _ => expected("NULL"),
        }
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            AttributeValue::S(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => expected("left to serde_dynamo"),
        }
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }
    serde::forward_to_deserialize_any! {
        i128 u128 char bytes byte_buf
    }
    number_from_n!(
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_f32,
        deserialize_f64
    );
}

impl<'de> Value<'de> {
    fn number(&self) -> Result<Number<'de>, Error> {
        match self.0 {
            AttributeValue::N(n) => Ok(Number(n)),
            _ => expected("an N"),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::{BTreeMap, HashMap};

    use aws_sdk_dynamodb::primitives::Blob;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    pub(crate) enum Unit {
        Fresh,
        Frozen,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct Inner {
        name: String,
        quantity: Option<f64>,
        count: Option<u32>,
        state: Option<Unit>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct Outer {
        title: String,
        flag: bool,
        #[serde(default)]
        inners: Vec<Inner>,
        tags: Option<Vec<String>>,
        numbers: Option<Vec<i64>>,
        extra: Option<BTreeMap<String, String>>,
        any: Option<serde_json::Value>,
        pair: Option<(String, i64)>,
        note: Option<String>,
    }

    pub(crate) fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }
    pub(crate) fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.into())
    }
    pub(crate) fn m(entries: &[(&str, AttributeValue)]) -> AttributeValue {
        AttributeValue::M(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    /// What serde_dynamo reads from `item`, after the same filter.
    pub(crate) fn reference<T: DeserializeOwned>(
        item: &Item,
        keep: impl Fn(&str) -> bool,
    ) -> Option<T> {
        let kept: HashMap<String, serde_dynamo::AttributeValue> = item
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, v)| (k.clone(), serde_dynamo::AttributeValue::from(v.clone())))
            .collect();
        serde_dynamo::from_item(kept).ok()
    }

    pub(crate) fn base() -> Item {
        let AttributeValue::M(item) = m(&[
            ("Title", s("t")),
            ("Flag", AttributeValue::Bool(true)),
            (
                "Inners",
                AttributeValue::L(vec![
                    m(&[
                        ("Name", s("a \"quoted\" é")),
                        ("Quantity", n("1.5")),
                        ("Count", n("3")),
                        ("State", s("Frozen")),
                    ]),
                    m(&[("Name", s("b")), ("Quantity", AttributeValue::Null(true))]),
                ]),
            ),
            ("Tags", AttributeValue::Ss(vec!["x".into(), "y".into()])),
            ("Numbers", AttributeValue::Ns(vec!["-4".into(), "7".into()])),
            ("Extra", m(&[("k", s("v"))])),
            (
                "Any",
                m(&[
                    ("n", n("-2")),
                    ("f", n("2.5")),
                    (
                        "l",
                        AttributeValue::L(vec![s("q"), AttributeValue::Bool(false)]),
                    ),
                    ("null", AttributeValue::Null(true)),
                ]),
            ),
            ("Pair", AttributeValue::L(vec![s("p"), n("9")])),
            ("Unknown", m(&[("deep", AttributeValue::L(vec![n("1")]))])),
            ("PK", s("key")),
        ]) else {
            unreachable!()
        };
        item
    }

    #[test]
    fn reads_what_serde_dynamo_reads() {
        let keep = |name: &str| name != "PK";
        let item = base();
        let ours: Option<Outer> = read(&item, keep);
        assert!(ours.is_some());
        assert_eq!(ours, reference::<Outer>(&item, keep));
        assert_eq!(ours.unwrap().inners[0].state, Some(Unit::Frozen));
    }

    /// Attributes that make [`base`] fail to read as [`Outer`] (but for
    /// the binary one, which serde_dynamo reads).
    pub(crate) fn unreadable() -> Vec<(&'static str, AttributeValue)> {
        vec![
            ("Title", n("5")),
            ("Flag", s("true")),
            ("Inners", s("not a list")),
            ("Inners", AttributeValue::L(vec![s("not a map")])),
            (
                "Inners",
                AttributeValue::L(vec![m(&[("Name", s("a")), ("Quantity", n("x"))])]),
            ),
            (
                "Inners",
                AttributeValue::L(vec![m(&[("Name", s("a")), ("Count", n("-1"))])]),
            ),
            (
                "Inners",
                AttributeValue::L(vec![m(&[("Name", s("a")), ("State", s("Thawed"))])]),
            ),
            ("Numbers", AttributeValue::Ns(vec!["1.5".into()])),
            ("Any", AttributeValue::B(Blob::new(vec![1]))),
            ("Note", AttributeValue::Null(false)),
        ]
    }

    #[test]
    fn gives_up_where_serde_dynamo_fails_or_reads_binary() {
        let keep = |_: &str| true;
        for (name, value) in unreadable() {
            let mut item = base();
            item.insert(name.into(), value.clone());
            let ours: Option<Outer> = read(&item, keep);
            let theirs: Option<Outer> = reference(&item, keep);
            assert_eq!(ours, None, "{name} = {value:?}");
            if theirs.is_some() {
                // Only binary values are left to serde_dynamo while it reads them.
                assert!(matches!(value, AttributeValue::B(_)), "{name} = {value:?}");
            }
        }
        // A missing required attribute.
        let mut item = base();
        item.remove("Title");
        assert_eq!(read::<Outer>(&item, keep), None);
        assert_eq!(reference::<Outer>(&item, keep), None);
    }

    /// What a list's or a map's reader gives as its size hint.
    #[derive(Debug, PartialEq)]
    struct Hint(Option<usize>);

    impl<'de> Deserialize<'de> for Hint {
        fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Hint, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Hint;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a list or a map")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Hint, A::Error> {
                    let hint = seq.size_hint();
                    while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                    Ok(Hint(hint))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Hint, A::Error> {
                    let hint = map.size_hint();
                    while map
                        .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                        .is_some()
                    {}
                    Ok(Hint(hint))
                }
            }
            d.deserialize_any(V)
        }
    }

    #[test]
    fn lists_sets_and_maps_tell_their_length() {
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Hints {
            inners: Hint,
            tags: Hint,
            numbers: Hint,
            extra: Hint,
        }
        let keep = |name: &str| ["Inners", "Tags", "Numbers", "Extra"].contains(&name);
        assert_eq!(
            read::<Hints>(&base(), keep),
            Some(Hints {
                inners: Hint(Some(2)),
                tags: Hint(Some(2)),
                numbers: Hint(Some(2)),
                extra: Hint(Some(1)),
            })
        );
        // The item itself, read through a filter, does not know how many
        // attributes it keeps.
        assert_eq!(read::<Hint>(&base(), keep), Some(Hint(None)));
    }
}
