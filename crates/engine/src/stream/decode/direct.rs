//! The byte-level path of [`super::decode_event_bytes`]: a stream event read
//! straight from its bytes into [`StreamChange`]s, in one pass, without the
//! `serde_json::Value` of the whole event and its copy of every string.
//!
//! It is strict: it accepts only the common shape of a well-formed record
//! (the fields and DynamoDB JSON types of [`super::decode_object`]'s reading,
//! untagged empty lists and maps included) and fails on anything else: a
//! duplicate field, a binary (`B`, `BS`) value, an `EventSource` field, a
//! malformed record. The caller then decodes the event through the `Value`
//! path, which gives every reason and error text. So for every event this
//! path reads, the result is the `Value` path's (the tests hold the two side
//! by side), and an event it does not read costs one more parse.
//!
//! Strings are read borrowed from the bytes where JSON allows (no escape)
//! and copied once, into the owned [`Item`]s; the fields nobody reads
//! (`awsRegion`, `eventVersion`, `StreamViewType`...) are skipped unparsed.

use std::fmt;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use std::borrow::Cow;

use super::{
    ChangeKind, ChangeReader, MAX_ITEM_BYTES, STREAM_SOURCE, SequenceNumber, StreamChange,
    TTL_PRINCIPAL, Typed, epoch_millis, non_empty, parse_epoch_text,
};
use crate::item::Item;
use crate::item::text::Str;

/// The event's records, or `None` when this path does not read the event
/// (then the `Value` path decides).
pub(super) fn decode(bytes: &[u8]) -> Option<Vec<StreamChange>> {
    decode_with::<NoReader>(bytes, None)
}

/// [`decode`], each record typed by `reader` when there is one (see
/// [`super::decode_event_bytes_with`]); `None` also when the reader does
/// not take the whole event.
pub(super) fn decode_with<R: ChangeReader>(
    bytes: &[u8],
    reader: Option<&R>,
) -> Option<Vec<StreamChange>> {
    // UTF-8 checked once, over the whole event (ASCII at a time), instead
    // of string by string as the reader of bytes does; an event that is not
    // UTF-8 is not JSON, left to the `Value` path, which says so.
    let text = std::str::from_utf8(bytes).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut state = State {
        scratch: Scratch::new(),
        reader,
        text,
        image_at: None,
        arn: None,
    };
    let records = de.deserialize_map(EventVisitor(&mut state)).ok()?;
    de.end().ok()?;
    // The last image read spans at most to the end of the event.
    state.image_ends::<de::value::Error>(text.len()).ok()?;
    records
}

/// No reader: images are built into items.
enum NoReader {}

impl ChangeReader for NoReader {
    type Image = std::convert::Infallible;
    type Change = ();
    fn image<'de, D: Deserializer<'de>>(&self, _: &Item, _: D) -> Result<Self::Image, D::Error> {
        match *self {}
    }
    fn change(
        &self,
        _: &StreamChange,
        _: Option<Self::Image>,
        _: Option<Self::Image>,
    ) -> Option<()> {
        match *self {}
    }
}

/// An image read by a reader is not measured (no item of it is built), so
/// the 400 KB rule bounds its text instead: an item's size is at most twice
/// its DynamoDB JSON text. (Each value's text holds at least its size in
/// bytes, quotes and a type tag aside, but for DynamoDB Local's untagged
/// `[]` and `{}`: 2 characters for the 3 bytes of an empty list or map, and
/// a list's or a map's 3 bytes and 1 per member are outweighed by its
/// `{"L":[` and commas.) An image whose text may be longer than this, by
/// the distance from its field name to the next field name of the
/// envelope, leaves the event to the item maps, which measure it.
const MAX_READ_IMAGE_TEXT: usize = MAX_ITEM_BYTES / 2;

/// What the decoding of one event keeps from record to record.
struct State<'r, R> {
    scratch: Scratch,
    reader: Option<&'r R>,
    /// The event: field names read borrowed point into it.
    text: &'r str,
    /// Where the field name of the image last read by the reader starts,
    /// until the next field name of the envelope bounds its text.
    image_at: Option<usize>,
    /// The last `eventSourceARN` read: the records of one stream's batch
    /// all carry the same, and share one copy.
    arn: Option<Arc<str>>,
}

impl<R> State<'_, R> {
    /// `arn`, as the last record's copy when it is the same.
    fn share_arn(&mut self, arn: &str) -> Arc<str> {
        match &self.arn {
            Some(last) if **last == *arn => last.clone(),
            _ => self.arn.insert(Arc::from(arn)).clone(),
        }
    }

    /// Where `name`, a field name of the envelope, starts in the event: it
    /// ends the text of the image read last. `None` without a reader (no
    /// image is bounded so).
    fn mark<E: de::Error>(&mut self, name: &Str) -> Result<Option<usize>, E> {
        if self.reader.is_none() {
            return Ok(None);
        }
        // Escaped, a name is copied: its place is unknown.
        let Cow::Borrowed(name) = name.0 else {
            return fail("an escaped field name");
        };
        let at = name.as_ptr() as usize - self.text.as_ptr() as usize;
        self.image_ends(at)?;
        Ok(Some(at))
    }

    /// The image read last ends before `at`: check its bound.
    fn image_ends<E: de::Error>(&mut self, at: usize) -> Result<(), E> {
        match self.image_at.take() {
            Some(start) if at - start > MAX_READ_IMAGE_TEXT => {
                fail("an image that may be over the item limit")
            }
            _ => Ok(()),
        }
    }
}

fn fail<T, E: de::Error>(what: &str) -> Result<T, E> {
    Err(E::custom(what))
}

/// Set a field once; a second occurrence is a duplicate (the `Value` path
/// keeps the last one; this path leaves such an event to it).
fn once<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return fail("duplicate field");
    }
    Ok(())
}

/// `{"Records": [...]}`; other top-level fields are skipped.
struct EventVisitor<'s, 'r, R>(&'s mut State<'r, R>);

impl<'de, R: ChangeReader> Visitor<'de> for EventVisitor<'_, '_, R> {
    type Value = Option<Vec<StreamChange>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a stream event")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut records = None;
        while let Some(key) = map.next_key::<Str>()? {
            if key.0 == "Records" {
                once(
                    &mut records,
                    map.next_value_seed(RecordsSeed(&mut *self.0))?,
                )?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(records)
    }
}

struct RecordsSeed<'s, 'r, R>(&'s mut State<'r, R>);

impl<'de, R: ChangeReader> DeserializeSeed<'de> for RecordsSeed<'_, '_, R> {
    type Value = Vec<StreamChange>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, R: ChangeReader> Visitor<'de> for RecordsSeed<'_, '_, R> {
    type Value = Vec<StreamChange>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of records")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(record) = seq.next_element_seed(RecordVisitor(&mut *self.0))? {
            out.push(record);
        }
        Ok(out)
    }
}

/// One record: the fields [`super::decode_object`] reads.
struct RecordVisitor<'s, 'r, R>(&'s mut State<'r, R>);

impl<'de, R: ChangeReader> DeserializeSeed<'de> for RecordVisitor<'_, '_, R> {
    type Value = StreamChange;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, R: ChangeReader> Visitor<'de> for RecordVisitor<'_, '_, R> {
    type Value = StreamChange;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a stream record")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StreamChange, A::Error> {
        let mut event_id: Option<String> = None;
        let mut kind = None;
        let mut source_checked = false;
        let mut arn: Option<Option<Arc<str>>> = None;
        let mut ttl = None;
        let mut ddb: Option<Ddb<R::Image>> = None;
        while let Some(key) = map.next_key::<Str>()? {
            self.0.mark(&key)?;
            match key.0.as_ref() {
                "eventID" => {
                    let id = map.next_value::<Str>()?.0;
                    if id.is_empty() {
                        return fail("empty eventID");
                    }
                    once(&mut event_id, id.into_owned())?;
                }
                "eventName" => {
                    let name = map.next_value::<Str>()?.0;
                    let k = match name.as_ref() {
                        "INSERT" => ChangeKind::Insert,
                        "MODIFY" => ChangeKind::Modify,
                        "REMOVE" => ChangeKind::Remove,
                        _ => return fail("unknown eventName"),
                    };
                    once(&mut kind, k)?;
                }
                "eventSource" => {
                    if source_checked || map.next_value::<Str>()?.0 != STREAM_SOURCE {
                        return fail("another eventSource");
                    }
                    source_checked = true;
                }
                // Only the other-source check reads it.
                "EventSource" => return fail("EventSource"),
                "eventSourceARN" => {
                    let value = map.next_value::<Option<Str>>()?;
                    once(&mut arn, value.map(|s| self.0.share_arn(&s.0)))?;
                }
                "userIdentity" => once(&mut ttl, map.next_value_seed(IdentitySeed)?)?,
                "dynamodb" => once(&mut ddb, map.next_value_seed(DdbSeed(&mut *self.0))?)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let (Some(event_id), Some(kind), Some(ddb)) = (event_id, kind, ddb) else {
            return fail("a field is missing");
        };
        let kind = match kind {
            ChangeKind::Remove if ttl == Some(true) => ChangeKind::TtlRemove,
            kind => kind,
        };
        let Some((keys, _)) = ddb.keys.filter(|(k, _)| !k.is_empty()) else {
            return fail("no Keys");
        };
        let (new_image, new_size) = ddb.new_image.unwrap_or_default();
        let (old_image, old_size) = ddb.old_image.unwrap_or_default();
        if new_size.max(old_size) > MAX_ITEM_BYTES {
            return fail("image over the item limit");
        }
        let mut change = StreamChange {
            event_id,
            kind,
            sequence_number: ddb.sequence_number.flatten(),
            approximate_creation: ddb.approximate_creation.flatten(),
            keys,
            old_image: non_empty(old_image),
            new_image: non_empty(new_image),
            event_source_arn: arn.flatten(),
            size_bytes: ddb.size_bytes.flatten(),
            typed: None,
        };
        if let Some(reader) = self.0.reader {
            let Some(typed) = reader.change(&change, ddb.old_typed, ddb.new_typed) else {
                return fail("a record the reader refuses");
            };
            change.typed = Some(Typed::new(typed));
        }
        Ok(change)
    }
}

/// Whether `userIdentity` is the TTL process's.
struct IdentitySeed;

impl<'de> DeserializeSeed<'de> for IdentitySeed {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for IdentitySeed {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a userIdentity object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let (mut kind, mut principal) = (None, None);
        while let Some(key) = map.next_key::<Str>()? {
            match key.0.as_ref() {
                "type" => once(&mut kind, map.next_value::<Str>()?.0 == "Service")?,
                "principalId" => once(&mut principal, map.next_value::<Str>()?.0 == TTL_PRINCIPAL)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(kind == Some(true) && principal == Some(true))
    }
}

/// The `dynamodb` object; with a reader, its images are `I`s.
struct Ddb<I> {
    keys: Option<Sized<Item>>,
    new_image: Option<Sized<Item>>,
    old_image: Option<Sized<Item>>,
    new_typed: Option<I>,
    old_typed: Option<I>,
    /// The outer `Option`: whether the field was there (`null` is `None`
    /// inside).
    sequence_number: Option<Option<SequenceNumber>>,
    approximate_creation: Option<Option<DateTime<Utc>>>,
    size_bytes: Option<Option<i64>>,
}

struct DdbSeed<'s, 'r, R>(&'s mut State<'r, R>);

impl<'de, R: ChangeReader> DeserializeSeed<'de> for DdbSeed<'_, '_, R> {
    type Value = Ddb<R::Image>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, R: ChangeReader> Visitor<'de> for DdbSeed<'_, '_, R> {
    type Value = Ddb<R::Image>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a dynamodb object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut ddb = Ddb {
            keys: None,
            new_image: None,
            old_image: None,
            new_typed: None,
            old_typed: None,
            sequence_number: None,
            approximate_creation: None,
            size_bytes: None,
        };
        let state = self.0;
        while let Some(key) = map.next_key::<Str>()? {
            let at = state.mark(&key)?;
            match key.0.as_ref() {
                "Keys" => once(
                    &mut ddb.keys,
                    map.next_value_seed(Section(&mut state.scratch))?,
                )?,
                image @ ("NewImage" | "OldImage") => {
                    let new = image == "NewImage";
                    if let (Some(reader), Some(at)) = (state.reader, at) {
                        // The reader needs the key first.
                        let Some((keys, _)) = &ddb.keys else {
                            return fail("an image before Keys");
                        };
                        let typed = map.next_value_seed(ReadImage { reader, keys })?;
                        state.image_at = Some(at);
                        let slot = if new {
                            &mut ddb.new_typed
                        } else {
                            &mut ddb.old_typed
                        };
                        once(slot, typed)?;
                    } else {
                        let slot = if new {
                            &mut ddb.new_image
                        } else {
                            &mut ddb.old_image
                        };
                        once(slot, map.next_value_seed(Section(&mut state.scratch))?)?;
                    }
                }
                "SequenceNumber" => {
                    once(&mut ddb.sequence_number, map.next_value_seed(SequenceSeed)?)?
                }
                "ApproximateCreationDateTime" => {
                    let at = map.next_value_seed(EpochSeed)?;
                    once(&mut ddb.approximate_creation, at)?;
                }
                "SizeBytes" => once(&mut ddb.size_bytes, map.next_value::<Option<i64>>()?)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ddb)
    }
}

/// An image, read by the reader.
struct ReadImage<'a, R> {
    reader: &'a R,
    keys: &'a Item,
}

impl<'de, R: ChangeReader> DeserializeSeed<'de> for ReadImage<'_, R> {
    type Value = R::Image;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<R::Image, D::Error> {
        self.reader.image(self.keys, d)
    }
}

/// `SequenceNumber`: a string of digits or an integer; `null` is none.
struct SequenceSeed;

impl<'de> DeserializeSeed<'de> for SequenceSeed {
    type Value = Option<SequenceNumber>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SequenceSeed {
    type Value = Option<SequenceNumber>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence number")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        s.parse().map(Some).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Some(SequenceNumber::from_digits(&n.to_string())))
    }
}

/// `ApproximateCreationDateTime`, read as [`parse_epoch_text`] reads its
/// text (a number as `serde_json` prints it, a string trimmed): a whole
/// number of seconds without that text; `null` is none.
struct EpochSeed;

impl<'de> DeserializeSeed<'de> for EpochSeed {
    type Value = Option<DateTime<Utc>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl EpochSeed {
    fn parsed<E: de::Error>(at: Option<DateTime<Utc>>) -> Result<Option<DateTime<Utc>>, E> {
        match at {
            Some(at) => Ok(Some(at)),
            None => fail("bad ApproximateCreationDateTime"),
        }
    }
}

impl<'de> Visitor<'de> for EpochSeed {
    type Value = Option<DateTime<Utc>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an epoch time")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Self::parsed(parse_epoch_text(s.trim()))
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        // The text's reading takes the seconds as an `i64`.
        Self::parsed(i64::try_from(n).ok().and_then(|s| epoch_millis(s, 0)))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        // A negative number's text has a sign: not an epoch time.
        Self::parsed((n >= 0).then(|| epoch_millis(n, 0)).flatten())
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        match serde_json::Number::from_f64(n) {
            Some(n) => Self::parsed(parse_epoch_text(&n.to_string())),
            None => fail("not a finite number"),
        }
    }
}

/// A value and its size as [`super::item_size`] and
/// [`super::attribute_size`] count it, added up while reading.
type Sized<T> = (T, usize);

/// A section's attributes, gathered before its map is built: one buffer
/// for the whole event.
type Scratch = Vec<(String, AttributeValue)>;

/// A section (`Keys`, `NewImage`, `OldImage`): attribute name to value;
/// `null` is an empty section. JSON gives no size, so the attributes are
/// gathered first and the map is built once, at its size: grown one insert
/// at a time, an image was rehashed at 3, 7, 14 and 28 attributes (8% of
/// chat's decide profile).
struct Section<'s>(&'s mut Scratch);

impl<'de> DeserializeSeed<'de> for Section<'_> {
    type Value = Sized<Item>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Sized<Item>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Section<'_> {
    type Value = Sized<Item>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("attributes")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Sized<Item>, E> {
        Ok((Item::new(), 0))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Sized<Item>, A::Error> {
        let attributes = self.0;
        attributes.clear();
        let size = read_attributes(map, |name, value| {
            attributes.push((name, value));
            Ok(())
        })?;
        let mut item = Item::with_capacity(attributes.len());
        for (name, value) in attributes.drain(..) {
            insert(&mut item, name, value)?;
        }
        Ok((item, size))
    }
}

/// An `M` value (`null` is not one), into a map with room for seven
/// attributes to start with: a nested map is typically a record of several
/// attributes (a food, an address), so it is not rehashed on the way.
struct MapSeed;

impl<'de> DeserializeSeed<'de> for MapSeed {
    type Value = Sized<Item>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Sized<Item>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MapSeed {
    type Value = Sized<Item>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Sized<Item>, A::Error> {
        let mut item = Item::with_capacity(map.size_hint().unwrap_or(7));
        let size = read_attributes(map, |name, value| insert(&mut item, name, value))?;
        Ok((item, size))
    }
}

/// Each attribute of a section or an `M` value, given to `each` as it is
/// read; their size as [`super::item_size`] counts it.
fn read_attributes<'de, A: MapAccess<'de>>(
    mut map: A,
    mut each: impl FnMut(String, AttributeValue) -> Result<(), A::Error>,
) -> Result<usize, A::Error> {
    let mut size = 0;
    while let Some(name) = map.next_key::<String>()? {
        let (value, value_size) = map.next_value_seed(AttributeSeed)?;
        size += name.len() + value_size;
        each(name, value)?;
    }
    Ok(size)
}

/// `item` with one more attribute; a repeated name fails (the `Value` path
/// keeps the last one). Inlined, as it was before it was shared: called
/// once per attribute, it cost 0.6% more instructions on the decide
/// benchmark's main path (`scripts/bench-instructions`).
#[inline(always)]
fn insert<E: de::Error>(item: &mut Item, name: String, value: AttributeValue) -> Result<(), E> {
    match item.insert(name, value) {
        Some(_) => fail("duplicate attribute"),
        None => Ok(()),
    }
}

/// The size of a number, from its digits.
fn number_size(n: &str) -> usize {
    n.len().div_ceil(2) + 1
}

/// One DynamoDB JSON value: `{"S": ...}` and the other tags but the binary
/// ones; an untagged `[]` is an empty `L` and `{}` an empty `M`.
pub(crate) struct AttributeSeed;

impl<'de> DeserializeSeed<'de> for AttributeSeed {
    type Value = Sized<AttributeValue>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AttributeSeed {
    type Value = Sized<AttributeValue>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a DynamoDB JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        match seq.next_element::<IgnoredAny>()? {
            None => Ok((AttributeValue::L(Vec::new()), 3)),
            Some(_) => fail("an untagged list"),
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some(tag) = map.next_key::<Str>()? else {
            return Ok((AttributeValue::M(Item::new()), 3));
        };
        let value = match tag.0.as_ref() {
            "S" => {
                let s: String = map.next_value()?;
                let size = s.len();
                (AttributeValue::S(s), size)
            }
            "N" => {
                let n: String = map.next_value()?;
                let size = number_size(&n);
                (AttributeValue::N(n), size)
            }
            "BOOL" => (AttributeValue::Bool(map.next_value()?), 1),
            "NULL" => (AttributeValue::Null(map.next_value()?), 1),
            "M" => {
                let (m, size) = map.next_value_seed(MapSeed)?;
                let size = 3 + m.len() + size;
                (AttributeValue::M(m), size)
            }
            "L" => {
                let (l, size) = map.next_value_seed(ListSeed)?;
                (AttributeValue::L(l), 3 + size)
            }
            "SS" => {
                let ss: Vec<String> = map.next_value()?;
                let size = ss.iter().map(String::len).sum();
                (AttributeValue::Ss(ss), size)
            }
            "NS" => {
                let ns: Vec<String> = map.next_value()?;
                let size = ns.iter().map(|n| number_size(n)).sum();
                (AttributeValue::Ns(ns), size)
            }
            _ => return fail("another type tag"),
        };
        if map.next_key::<IgnoredAny>()?.is_some() {
            return fail("more than one type tag");
        }
        Ok(value)
    }
}

/// An `L` value.
struct ListSeed;

impl<'de> DeserializeSeed<'de> for ListSeed {
    type Value = Sized<Vec<AttributeValue>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ListSeed {
    type Value = Sized<Vec<AttributeValue>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(4));
        let mut size = 0;
        while let Some((v, v_size)) = seq.next_element_seed(AttributeSeed)? {
            size += 1 + v_size;
            out.push(v);
        }
        Ok((out, size))
    }
}
