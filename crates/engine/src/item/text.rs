//! Typed values read straight from an item's DynamoDB JSON text (a stream
//! image as the event carries it: `{"Name": {"S": "Milk"}, ...}`), without
//! building its [`Item`] first.
//!
//! Building an item allocates every attribute's name and value and hashes
//! each name into a map; a typed read then copies what it keeps out of it,
//! and both are dropped. [`read_image_from`] walks the text once instead
//! and allocates only what the target type keeps (and the attributes it
//! does not know, kept as they are); [`read_image`] reads a view of it
//! that keeps nothing else.
//!
//! It reads what [`borrowed::read`](super::borrowed::read) reads from the
//! item the text decodes to, the same way (numbers parsed from their text;
//! `NULL` as `None` and unit; a list or a map as a struct; a string as a
//! unit enum variant), and gives up (`None`) on anything else: an error of
//! any kind, and the shapes it leaves to the item readers (binary values,
//! a number written with escapes, DynamoDB Local's untagged
//! empty `[]` and `{}`). The caller then builds the item and reads that.
//! The tests hold the two readers side by side.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize as _;
use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};

use aws_sdk_dynamodb::types::AttributeValue;

use super::Item;
use super::borrowed::Number;
use crate::stream::decode::AttributeSeed;

/// A whole image, read as a typed item of an app reads it from its
/// [`Item`]: `T` from the attributes `known` accepts (as
/// [`borrowed::read`](super::borrowed::read) reads them from the item);
/// each attribute of `key` (name and value: the record's
/// `Keys`) checked present once and equal; every other attribute read as
/// the engine's stream decoder reads it, into the returned item (the
/// `extra` a typed item keeps and writes back). An error also stands for a
/// key attribute missing, repeated or different, and for a name given
/// twice: the caller then builds the item and reads that, which says why.
pub fn read_image_from<'de, T: de::Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
    key: &[(&str, &AttributeValue)],
    known: impl Fn(&str) -> bool,
) -> Result<(T, Item), D::Error> {
    read_image_into(d, key, known, Item::new())
}

/// A typed value that reads no attribute: as [`read_image_from`]'s or
/// [`read_image_into`]'s `T`, every attribute `known` names is checked and
/// skipped, and the others are kept.
#[derive(Debug, serde::Deserialize)]
pub struct Unread {}

/// Where [`read_image_into`] keeps the attributes that `T` does not read.
pub trait Kept {
    /// Keep `value` of the attribute `name`; `false` to refuse it (a name
    /// given twice, or one this cannot keep): the image is then read from
    /// its item.
    fn keep(&mut self, name: Cow<'_, str>, value: AttributeValue) -> bool;
}

impl Kept for Item {
    fn keep(&mut self, name: Cow<'_, str>, value: AttributeValue) -> bool {
        self.insert(name.into_owned(), value).is_none()
    }
}

/// [`read_image_from`], the attributes `T` does not read kept in `kept`
/// rather than an item: for a view that keeps a few attributes as they
/// are, in its own shape.
pub fn read_image_into<'de, T: de::Deserialize<'de>, D: Deserializer<'de>, K: Kept>(
    d: D,
    key: &[(&str, &AttributeValue)],
    known: impl Fn(&str) -> bool,
    kept: K,
) -> Result<(T, K), D::Error> {
    if key.len() > 32 {
        return give_up();
    }
    let mut rest = Rest {
        key,
        seen: 0,
        extra: kept,
    };
    let typed = T::deserialize(Image {
        d,
        keep: &known,
        unkept: &mut rest,
    })?;
    if rest.seen.count_ones() as usize != key.len() {
        return give_up();
    }
    Ok((typed, rest.extra))
}

/// What `T` reads of a whole image: [`read_image_from`] with every
/// attribute but the key's given to `T`, which reads those it knows and
/// skips the others, checked as it checks any value (a type it reads, one
/// type tag, a `NULL` that is `true`). For a typed view of an image that
/// keeps nothing else. A name twice is an error only where `T` reads it,
/// or a key attribute's: the items keep the last of a name given twice, so
/// a view that does not read the name is the same either way.
pub fn read_image<'de, T: de::Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
    key: &[(&str, &AttributeValue)],
) -> Result<T, D::Error> {
    read_image_from(d, key, |name| key.iter().all(|(k, _)| *k != name)).map(|(typed, _)| typed)
}

/// What becomes of an attribute of an image that the target type does
/// not keep.
trait Unkept<'de> {
    /// Read the value of the attribute `name`, next in `map`.
    fn value<A: MapAccess<'de>>(
        &mut self,
        name: Cow<'de, str>,
        map: &mut A,
    ) -> Result<(), A::Error>;
}

/// Skipped unread: the unkept attributes of a nested map, where every
/// attribute is kept (so there are none).
struct Skip;

impl<'de> Unkept<'de> for Skip {
    fn value<A: MapAccess<'de>>(&mut self, _: Cow<'de, str>, map: &mut A) -> Result<(), A::Error> {
        map.next_value::<IgnoredAny>().map(drop)
    }
}

/// [`read_image_into`]'s: a key attribute checked, any other kept.
struct Rest<'k, K> {
    key: &'k [(&'k str, &'k AttributeValue)],
    /// The key attributes met, a bit each.
    seen: u32,
    extra: K,
}

impl<'de, K: Kept> Unkept<'de> for &mut Rest<'_, K> {
    fn value<A: MapAccess<'de>>(
        &mut self,
        name: Cow<'de, str>,
        map: &mut A,
    ) -> Result<(), A::Error> {
        if let Some(i) = self.key.iter().position(|(key, _)| *key == name) {
            let bit = 1 << i;
            let same = match self.key[i].1 {
                AttributeValue::S(want) => map.next_value_seed(SameString(want))?,
                want => map.next_value_seed(AttributeSeed)?.0 == *want,
            };
            if self.seen & bit != 0 || !same {
                return give_up();
            }
            self.seen |= bit;
            return Ok(());
        }
        let (value, _) = map.next_value_seed(AttributeSeed)?;
        if !self.extra.keep(name, value) {
            return give_up();
        }
        Ok(())
    }
}

/// A key attribute's value compared with the record's string, read where
/// it stands rather than copied into an [`AttributeValue`]: `{"S": text}`
/// is the same when `text` is. Any other shape gives up, as it would
/// differ from a string or fail to decode.
struct SameString<'w>(&'w str);

impl<'de> DeserializeSeed<'de> for SameString<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SameString<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string attribute")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let same = match map.next_key::<Str<'de>>()? {
            Some(Str(tag)) if tag == "S" => map.next_value::<Str<'de>>()?.0 == self.0,
            _ => return give_up(),
        };
        if map.next_key::<IgnoredAny>()?.is_some() {
            return give_up();
        }
        Ok(same)
    }
}

/// What the target type asked the value for.
#[derive(Clone, Copy)]
enum Want {
    Any,
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    Str,
    Seq,
    Map,
    Struct,
    Option,
    Unit,
    Enum,
}

/// A string, borrowed from the input when it has no escape.
pub(crate) struct Str<'de>(pub(crate) Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

fn give_up<T, E: de::Error>() -> Result<T, E> {
    Err(de::Error::custom("left to the item readers"))
}

/// The top-level attribute map, its unkept attributes given to `unkept`.
struct Image<'k, D, F, U> {
    d: D,
    keep: &'k F,
    unkept: U,
}

impl<'de, D: Deserializer<'de>, F: Fn(&str) -> bool, U: Unkept<'de>> Deserializer<'de>
    for Image<'_, D, F, U>
{
    type Error = D::Error;
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        struct Top<'k, V, F, U> {
            visitor: V,
            keep: &'k F,
            unkept: U,
        }
        impl<'de, V: Visitor<'de>, F: Fn(&str) -> bool, U: Unkept<'de>> Visitor<'de> for Top<'_, V, F, U> {
            type Value = V::Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an item")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
                self.visitor.visit_map(Attributes {
                    map,
                    keep: Some(self.keep),
                    unkept: self.unkept,
                })
            }
        }
        self.d.deserialize_map(Top {
            visitor,
            keep: self.keep,
            unkept: self.unkept,
        })
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// A map's attributes: names as they are, values read as [`Attr`]; the
/// names `keep` refuses are given to `unkept`.
struct Attributes<'k, A, F, U> {
    map: A,
    keep: Option<&'k F>,
    unkept: U,
}

impl<'de, A: MapAccess<'de>, F: Fn(&str) -> bool, U: Unkept<'de>> MapAccess<'de>
    for Attributes<'_, A, F, U>
{
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(Str(name)) = self.map.next_key::<Str<'de>>()? else {
                return Ok(None);
            };
            if self.keep.is_some_and(|keep| !keep(&name)) {
                self.unkept.value(name, &mut self.map)?;
                continue;
            }
            return match name {
                Cow::Borrowed(s) => seed.deserialize(de::value::BorrowedStrDeserializer::new(s)),
                Cow::Owned(s) => seed.deserialize(s.into_deserializer()),
            }
            .map(Some);
        }
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(AttrSeed(seed))
    }
}

/// A list's values, each read as [`Attr`].
struct Values<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Values<A> {
    type Error = A::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(AttrSeed(seed))
    }
}

/// Reads what `S` reads, from an attribute value.
struct AttrSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for AttrSeed<S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Attr(d))
    }
}

/// Deserializer methods that each say what they want and hand it on.
macro_rules! wants {
    ($($method:ident => $want:ident),* $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.want(Want::$want, visitor)
        })*
    };
}

/// The rest of the Deserializer methods, each handed on with what it wants.
macro_rules! deserializer_methods {
    () => {
        wants! {
            deserialize_any => Any, deserialize_bool => Bool,
            deserialize_i8 => I8, deserialize_i16 => I16, deserialize_i32 => I32,
            deserialize_i64 => I64, deserialize_u8 => U8, deserialize_u16 => U16,
            deserialize_u32 => U32, deserialize_u64 => U64, deserialize_f32 => F32,
            deserialize_f64 => F64, deserialize_str => Str, deserialize_string => Str,
            deserialize_identifier => Str, deserialize_seq => Seq, deserialize_map => Map,
            deserialize_option => Option, deserialize_unit => Unit,
            deserialize_ignored_any => Any,
        }
        fn deserialize_unit_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.want(Want::Unit, visitor)
        }
        fn deserialize_tuple<V: Visitor<'de>>(
            self,
            _len: usize,
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.want(Want::Seq, visitor)
        }
        fn deserialize_tuple_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _len: usize,
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.want(Want::Seq, visitor)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.want(Want::Struct, visitor)
        }
        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _variants: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.want(Want::Enum, visitor)
        }
        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            visitor.visit_newtype_struct(self)
        }
        serde::forward_to_deserialize_any! { i128 u128 char bytes byte_buf }
    };
}

/// One attribute value (`{"<type>": <value>}`), its type not read yet.
struct Attr<D>(D);

impl<'de, D: Deserializer<'de>> Attr<D> {
    fn want<V: Visitor<'de>>(self, want: Want, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(Typed { want, visitor })
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Attr<D> {
    type Error = D::Error;
    deserializer_methods!();
}

/// Reads an attribute value's one type tag, then its value as `want`s.
struct Typed<V> {
    want: Want,
    visitor: V,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Typed<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an attribute value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V::Value, A::Error> {
        let Some(Str(tag)) = map.next_key::<Str<'de>>()? else {
            return give_up();
        };
        let value = Tagged {
            tag: &tag,
            map: &mut map,
        }
        .want(self.want, self.visitor)?;
        match map.next_key::<IgnoredAny>()? {
            None => Ok(value),
            Some(_) => give_up(),
        }
    }
}

/// An attribute value whose type tag is read; its value is next in `map`.
struct Tagged<'t, 'm, A> {
    tag: &'t str,
    map: &'m mut A,
}

impl<'de, A: MapAccess<'de>> Tagged<'_, '_, A> {
    fn want<V: Visitor<'de>>(self, want: Want, visitor: V) -> Result<V::Value, A::Error> {
        match (self.tag, want) {
            ("NULL", Want::Option) => {
                null(self.map)?;
                visitor.visit_none()
            }
            (_, Want::Option) => visitor.visit_some(self),
            ("NULL", Want::Unit | Want::Any) => {
                null(self.map)?;
                visitor.visit_unit()
            }
            ("S", Want::Any | Want::Str) => self.map.next_value_seed(Forward(visitor, Want::Str)),
            ("S", Want::Enum) => match self.map.next_value::<Str<'de>>()?.0 {
                Cow::Borrowed(s) => visitor.visit_enum(de::value::BorrowedStrDeserializer::new(s)),
                Cow::Owned(s) => visitor.visit_enum(s.into_deserializer()),
            },
            ("BOOL", Want::Any | Want::Bool) => {
                self.map.next_value_seed(Forward(visitor, Want::Bool))
            }
            ("N", Want::Any | Want::I8 | Want::I16 | Want::I32 | Want::I64)
            | ("N", Want::U8 | Want::U16 | Want::U32 | Want::U64 | Want::F32 | Want::F64) => {
                let Str(Cow::Borrowed(n)) = self.map.next_value::<Str<'de>>()? else {
                    return give_up();
                };
                number(Number(n), want, visitor).map_err(<A::Error as de::Error>::custom)
            }
            ("M", Want::Any | Want::Map | Want::Struct) => {
                self.map.next_value_seed(Forward(visitor, Want::Map))
            }
            ("L", Want::Any | Want::Seq | Want::Struct) => {
                self.map.next_value_seed(Forward(visitor, Want::Seq))
            }
            ("SS", Want::Any | Want::Seq) => self.map.next_value_seed(Strings(visitor)),
            ("NS", Want::Any | Want::Seq) => self.map.next_value_seed(Numbers(visitor)),
            _ => give_up(),
        }
    }
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for Tagged<'_, '_, A> {
    type Error = A::Error;
    deserializer_methods!();
}

/// A `NULL`'s value, which is `true`.
fn null<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    if map.next_value::<bool>()? {
        Ok(())
    } else {
        give_up()
    }
}

/// An `N` read as `want`s, as [`borrowed::read`](super::borrowed::read)
/// reads it.
fn number<'de, V: Visitor<'de>>(
    n: Number<'de>,
    want: Want,
    visitor: V,
) -> Result<V::Value, de::value::Error> {
    match want {
        Want::I8 => n.deserialize_i8(visitor),
        Want::I16 => n.deserialize_i16(visitor),
        Want::I32 => n.deserialize_i32(visitor),
        Want::I64 => n.deserialize_i64(visitor),
        Want::U8 => n.deserialize_u8(visitor),
        Want::U16 => n.deserialize_u16(visitor),
        Want::U32 => n.deserialize_u32(visitor),
        Want::U64 => n.deserialize_u64(visitor),
        Want::F32 => n.deserialize_f32(visitor),
        Want::F64 => n.deserialize_f64(visitor),
        _ => n.deserialize_any(visitor),
    }
}

/// Hands a tagged value's JSON to the visitor: a string or a bool as it
/// is, an `M`'s entries and an `L`'s values as attribute values.
struct Forward<V>(V, Want);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Forward<V> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let Forward(visitor, want) = self;
        match want {
            Want::Str => d.deserialize_str(visitor),
            Want::Bool => d.deserialize_bool(visitor),
            Want::Map => d.deserialize_map(Nested(visitor)),
            _ => d.deserialize_seq(Nested(visitor)),
        }
    }
}

/// An `M`'s or an `L`'s JSON, its members read as attribute values.
struct Nested<V>(V);

/// The keep filter of nested maps: none.
type KeepAll = fn(&str) -> bool;

impl<'de, V: Visitor<'de>> Visitor<'de> for Nested<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an M or an L")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Attributes::<A, KeepAll, Skip> {
            map,
            keep: None,
            unkept: Skip,
        })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Values(seq))
    }
}

/// An `SS`'s JSON: a list of strings, read as it is.
struct Strings<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Strings<V> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_seq(self.0)
    }
}

/// An `NS`'s JSON: a list of strings, each read as an `N`.
struct Numbers<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Numbers<V> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        struct List<V>(V);
        impl<'de, V: Visitor<'de>> Visitor<'de> for List<V> {
            type Value = V::Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an NS")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
                self.0.visit_seq(NumberValues(seq))
            }
        }
        d.deserialize_seq(List(self.0))
    }
}

/// An `NS`'s members, each read as an `N`.
struct NumberValues<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for NumberValues<A> {
    type Error = A::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        struct One<T>(T);
        impl<'de, T: DeserializeSeed<'de>> DeserializeSeed<'de> for One<T> {
            type Value = T::Value;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T::Value, D::Error> {
                let Str(Cow::Borrowed(n)) = Str::deserialize(d)? else {
                    return give_up();
                };
                self.0
                    .deserialize(Number(n))
                    .map_err(<D::Error as de::Error>::custom)
            }
        }
        self.0.next_element_seed(One(seed))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde::de::DeserializeOwned;

    use super::super::Item;
    use super::super::borrowed::{self, tests::*};
    use super::*;

    /// `T` from the attributes of the item written in `text` whose name
    /// `keep` accepts, the others skipped unread: the reader's typed part
    /// alone, held beside [`borrowed::read`].
    fn read<T: DeserializeOwned>(text: &str, keep: impl Fn(&str) -> bool) -> Option<T> {
        let mut json = serde_json::Deserializer::from_str(text);
        let typed = T::deserialize(Image {
            d: &mut json,
            keep: &keep,
            unkept: Skip,
        })
        .ok()?;
        json.end().ok()?;
        Some(typed)
    }

    /// The item as a stream image carries it.
    fn text_of(item: &Item) -> String {
        crate::stream::decode::item_json(item).to_string()
    }

    /// Both readers over `item`: the text reader's result, checked equal to
    /// the item reader's when the text reader reads it.
    fn both<T: DeserializeOwned + PartialEq + fmt::Debug>(
        item: &Item,
        keep: impl Fn(&str) -> bool + Copy,
    ) -> (Option<T>, Option<T>) {
        let ours = read::<T>(&text_of(item), keep);
        let theirs = borrowed::read::<T>(item, keep);
        (ours, theirs)
    }

    #[test]
    fn reads_what_the_item_reader_reads() {
        let keep = |name: &str| name != "PK";
        let (ours, theirs) = both::<Outer>(&base(), keep);
        assert!(ours.is_some());
        assert_eq!(ours, theirs);
        assert_eq!(ours, reference::<Outer>(&base(), keep));
    }

    #[test]
    fn reads_every_plain_shape_alike() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Loose {
            any: Option<serde_json::Value>,
            text: Option<String>,
            small: Option<i8>,
            big: Option<u64>,
            float: Option<f32>,
            unit: Option<()>,
            list: Option<Vec<Option<String>>>,
        }
        let keep = |_: &str| true;
        let values = [
            ("Text", s("")),
            ("Text", s("tab\t \"quote\" \\ é \u{1F600}")),
            ("Small", n("-128")),
            ("Big", n("18446744073709551615")),
            ("Float", n("1e3")),
            ("Float", n("-0.5")),
            ("Unit", AttributeValue::Null(true)),
            ("List", AttributeValue::L(vec![])),
            (
                "List",
                AttributeValue::L(vec![s("a"), AttributeValue::Null(true)]),
            ),
            ("Any", n("12")),
            ("Any", n("-7.25")),
            ("Any", AttributeValue::Ss(vec!["a".into()])),
            ("Any", AttributeValue::Ns(vec!["1".into(), "2.5".into()])),
            ("Any", m(&[("deep", AttributeValue::L(vec![m(&[])]))])),
            // Read alike, as failures.
            ("Small", n("128")),
            ("Small", n("1.5")),
            ("Big", n("-1")),
            ("Text", AttributeValue::Bool(true)),
            ("Unit", s("x")),
        ];
        for (name, value) in values {
            let item = Item::from([(name.to_owned(), value.clone())]);
            let (ours, theirs) = both::<Loose>(&item, keep);
            assert_eq!(ours, theirs, "{name} = {value:?}");
        }
    }

    #[test]
    fn gives_up_where_the_item_reader_does() {
        let keep = |_: &str| true;
        for (name, value) in unreadable() {
            let mut item = base();
            item.insert(name.into(), value.clone());
            let (ours, theirs) = both::<Outer>(&item, keep);
            assert_eq!(ours, None, "{name} = {value:?}");
            assert_eq!(theirs, None, "{name} = {value:?}");
        }
        let mut item = base();
        item.remove("Title");
        assert_eq!(both::<Outer>(&item, keep), (None, None));
    }

    #[test]
    fn unkept_attributes_are_skipped_unread() {
        // Not an attribute value at all, and refused by `keep`: skipped.
        let text = r#"{"Title": {"S": "t"}, "Flag": {"BOOL": false}, "Odd": [1, {"x": 2}]}"#;
        #[derive(Debug, PartialEq, serde::Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Two {
            title: String,
            flag: bool,
        }
        let two = Two {
            title: "t".into(),
            flag: false,
        };
        assert_eq!(read::<Two>(text, |name| name != "Odd"), Some(two));
        assert_eq!(read::<Two>(text, |_| true), None);
    }

    /// [`read_image_from`] over `item`, its key `PK`/`SK` (when it has
    /// them) and the attributes `Outer` reads.
    fn image(text: &str) -> Option<(Outer, Item)> {
        let pk = s("p");
        let sk = s("s");
        let key = [("PK", &pk), ("SK", &sk)];
        let known = |name: &str| !matches!(name, "PK" | "SK" | "Odd" | "Empty");
        let mut json = serde_json::Deserializer::from_str(text);
        let read = read_image_from(&mut json, &key, known).ok()?;
        json.end().ok()?;
        Some(read)
    }

    /// What an app reading the item itself gets: `Outer` from the known
    /// attributes, the others but the key as they are.
    fn image_from_item(item: &Item) -> Option<(Outer, Item)> {
        let known = |name: &str| !matches!(name, "PK" | "SK" | "Odd" | "Empty");
        let extra = item
            .iter()
            .filter(|(name, _)| !known(name) && !matches!(name.as_str(), "PK" | "SK"))
            .map(|(name, v)| (name.clone(), v.clone()))
            .collect();
        Some((borrowed::read(item, known)?, extra))
    }

    #[test]
    fn an_image_reads_as_its_item_with_the_rest_kept() {
        let mut item = base();
        item.insert("PK".into(), s("p"));
        item.insert("SK".into(), s("s"));
        item.insert(
            "Odd".into(),
            m(&[("deep", AttributeValue::L(vec![n("1"), m(&[])]))]),
        );
        item.insert("Empty".into(), AttributeValue::L(vec![]));
        let (outer, extra) = image(&text_of(&item)).expect("read");
        assert_eq!(Some((outer, extra.clone())), image_from_item(&item));
        assert_eq!(extra.len(), 2, "{extra:?}");
        // DynamoDB Local's untagged empties, in what is kept: as the
        // decoder reads them.
        let local = text_of(&item).replace(r#"{"L":[]}"#, "[]");
        assert!(local.contains(":[]"), "{local}");
        assert_eq!(image(&local), image_from_item(&item));
    }

    #[test]
    fn the_rest_goes_where_the_view_keeps_it() {
        /// Keeps `Odd` alone; any other name is refused.
        #[derive(Debug, Default, PartialEq)]
        struct OddOnly(Option<AttributeValue>);
        impl Kept for OddOnly {
            fn keep(&mut self, name: Cow<'_, str>, value: AttributeValue) -> bool {
                name == "Odd" && self.0.replace(value).is_none()
            }
        }
        let read = |text: &str| {
            let pk = s("p");
            let key = [("PK", &pk)];
            let mut json = serde_json::Deserializer::from_str(text);
            let (Outer { .. }, odd) = read_image_into(
                &mut json,
                &key,
                |name| !matches!(name, "PK" | "Odd" | "Empty"),
                OddOnly::default(),
            )
            .ok()?;
            Some(odd)
        };
        let mut item = base();
        item.insert("PK".into(), s("p"));
        item.insert("Odd".into(), n("7"));
        let text = text_of(&item);
        assert_eq!(read(&text), Some(OddOnly(Some(n("7")))));
        let twice = text.replacen('{', r#"{"Odd":{"N":"8"},"#, 1);
        assert_eq!(read(&twice), None, "a name given twice");
        item.insert("Empty".into(), AttributeValue::L(vec![]));
        assert_eq!(read(&text_of(&item)), None, "what the view refuses");
    }

    #[test]
    fn an_image_whose_key_is_not_the_records_is_left_to_the_item_readers() {
        let mut item = base();
        item.insert("PK".into(), s("p"));
        item.insert("SK".into(), s("s"));
        let text = text_of(&item);
        assert!(image(&text).is_some());
        for (name, value) in [("PK", Some(s("q"))), ("SK", None), ("SK", Some(n("1")))] {
            let mut other = item.clone();
            match value {
                Some(v) => other.insert(name.into(), v),
                None => other.remove(name),
            };
            assert_eq!(image(&text_of(&other)), None, "{name}");
        }
        // A name twice: a key attribute, a kept one, one of the rest.
        for dup in [
            r#""PK": {"S": "p"}"#,
            r#""Title": {"S": "t"}"#,
            r#""Odd": {"S": "o"}"#,
        ] {
            let text = text.replacen('{', &format!(r#"{{"Odd": {{"S": "o"}}, {dup}, "#), 1);
            let once = text.replacen(&format!("{dup}, "), "", 1);
            assert!(image(&once).is_some(), "{once}");
            assert_eq!(image(&text), None, "{text}");
        }
        // What the item readers leave, left here too.
        for (name, value) in unreadable() {
            let mut other = item.clone();
            other.insert(name.into(), value.clone());
            assert_eq!(image(&text_of(&other)), None, "{name} = {value:?}");
        }
        // A key read where it stands: the same string escaped is the same
        // key; a second type tag, or another tag, is not a string's.
        let without_pk = {
            let mut other = item.clone();
            other.remove("PK");
            text_of(&other)
        };
        let text_with = |value: &str| without_pk.replacen('{', &format!(r#"{{"PK": {value}, "#), 1);
        assert!(image(&text_with(r#"{"S": "p"}"#)).is_some());
        assert_eq!(
            image(&text_with(r#"{"S": "\u0070"}"#)),
            image(&text_with(r#"{"S": "p"}"#))
        );
        for value in [
            r#"{"S": "p", "N": "1"}"#,
            r#"{"SS": ["p"]}"#,
            r#"{}"#,
            r#""p""#,
        ] {
            assert_eq!(image(&text_with(value)), None, "{value}");
        }
    }

    #[test]
    fn a_view_reads_its_attributes_and_checks_the_rest() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct View {
            title: Option<String>,
        }
        let view = |text: &str| {
            let pk = s("p");
            let key = [("PK", &pk)];
            let mut json = serde_json::Deserializer::from_str(text);
            let read = read_image::<View, _>(&mut json, &key).ok()?;
            json.end().ok()?;
            Some(read)
        };
        let item = |rest: &str| format!(r#"{{"PK": {{"S": "p"}}, "Title": {{"S": "t"}}{rest}}}"#);
        let title = Some(View {
            title: Some("t".into()),
        });
        // The rest, any shape the item readers read, skipped; a name it
        // does not read given twice, too (the items keep the last).
        for rest in [
            "",
            r#", "Odd": {"M": {"deep": {"L": [{"N": "1"}, {"NULL": true}]}}}"#,
            r#", "Set": {"NS": ["1", "2.5"]}, "Flag": {"BOOL": false}"#,
            r#", "Odd": {"S": "o"}, "Odd": {"N": "1"}"#,
        ] {
            assert_eq!(view(&item(rest)), title, "{rest}");
        }
        // The key checked; what the item readers leave, left here too.
        for rest in [
            r#", "PK": {"S": "p"}"#,
            r#", "Title": {"S": "u"}"#,
            r#", "Odd": {"NULL": false}"#,
            r#", "Odd": {"B": "AQ=="}"#,
            r#", "Odd": {"S": "a", "N": "1"}"#,
            r#", "Odd": []"#,
            r#", "Odd": {"M": {"x": {}}}"#,
        ] {
            assert_eq!(view(&item(rest)), None, "{rest}");
        }
        assert_eq!(view(r#"{"PK": {"S": "q"}, "Title": {"S": "t"}}"#), None);
        assert_eq!(view(r#"{"Title": {"S": "t"}}"#), None);
    }

    #[test]
    fn leaves_other_shapes_to_the_item_readers() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct One {
            v: Option<serde_json::Value>,
        }
        let keep = |_: &str| true;
        for text in [
            // DynamoDB Local's untagged empty list and map.
            r#"{"v": []}"#,
            r#"{"v": {}}"#,
            // Two type tags, a binary value, a number written with escapes.
            r#"{"v": {"S": "a", "N": "1"}}"#,
            r#"{"v": {"B": "AQ=="}}"#,
            r#"{"v": {"N": "\u0031"}}"#,
            // Not an item, or more after it.
            r#"[]"#,
            r#"{"v": {"S": "a"}} {}"#,
            r#"{"v": {"S": "a"}"#,
        ] {
            assert_eq!(read::<One>(text, keep), None, "{text}");
        }
        assert_eq!(
            read::<One>(r#"{"v": {"S": "a"}}"#, keep),
            Some(One {
                v: Some(serde_json::Value::String("a".into()))
            })
        );
    }
}
