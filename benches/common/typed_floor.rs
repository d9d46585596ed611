//! The typed floor of the `decide` CPU benchmark (`benches/codec.rs`): the
//! least a typed reader built on serde_json does with an app's event. Each
//! record is read into a struct serde derives, every string borrowed from
//! the event where JSON allows: the envelope's fields the engine keeps
//! (`eventID`, `eventName`, `eventSource`, `eventSourceARN`,
//! `userIdentity`, and of `dynamodb` the key, both images, the sequence
//! number, the time and the size), and of each image only the attributes
//! the app's handlers read, each as its DynamoDB JSON (`S`, `N`, `BOOL`,
//! `NULL`; other types skipped). Nothing is checked, no key parsed, no map
//! built, no string copied (the bench counts no allocation), no record kept
//! past its reading: what is left is serde_json's reading and serde's
//! matching of names.
//!
//! A path's time over this floor's says how much of the path is above
//! the reading itself; this floor's time over the `Value` floor's, the
//! least any serde_json path can come to on that event.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The attribute names an app's handlers read of an image.
pub(crate) trait Picks: 'static {
    const NAMES: &'static [&'static str];
}

/// Archive's: `images::Image` reads these three.
pub(crate) struct Archive;

impl Picks for Archive {
    const NAMES: &'static [&'static str] = {
        use archive_worker::keys::{IS_UNZIPPED, KEY_NAME, VAULT};
        &[KEY_NAME, IS_UNZIPPED, VAULT]
    };
}

/// Chat's: a request copy's attributes (`items::RequestCopy`) and
/// `NumMembers`.
pub(crate) struct Chat;

impl Picks for Chat {
    const NAMES: &'static [&'static str] = {
        use chat_worker::keys::{
            CHAT_ID, CREATED_AT, ID, JOINED_AT, NUM_MEMBERS, PENDING_ID, SEEN, STATUS,
            STATUS_REASON, USER_ID,
        };
        &[
            ID,
            USER_ID,
            CHAT_ID,
            CREATED_AT,
            STATUS,
            SEEN,
            PENDING_ID,
            STATUS_REASON,
            JOINED_AT,
            NUM_MEMBERS,
        ]
    };
}

/// Shop's: what a derivation reads (`derive::rules::READS`).
pub(crate) struct Shop;

impl Picks for Shop {
    const NAMES: &'static [&'static str] = shop_worker::derive::rules::READS;
}

/// The most names an image of [`Picks`] holds.
const MOST: usize = 16;

/// What the floor came to: records read, and image attributes picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Read {
    pub records: usize,
    pub picked: usize,
}

/// The typed floor of `P` on an event's bytes (a function of its own, which
/// a profiler names).
#[inline(never)]
pub(crate) fn read<P: Picks>(bytes: &[u8]) -> Read {
    assert!(P::NAMES.len() <= MOST, "at most {MOST} names");
    // As the engine's reader: UTF-8 checked once, the event read as a `str`.
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    let event: Event<P> = serde_json::from_str(text).expect("an event");
    event.records.0
}

#[derive(Deserialize)]
#[serde(bound = "")]
struct Event<P: Picks> {
    #[serde(rename = "Records")]
    records: Records<P>,
}

/// The records, each read, counted and dropped in turn (none is kept: a
/// list of them would be grown and copied as it is read).
struct Records<P>(Read, PhantomData<P>);

impl<'de, P: Picks> Deserialize<'de> for Records<P> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<P>(PhantomData<P>);
        impl<'de, P: Picks> Visitor<'de> for V<P> {
            type Value = Records<P>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("records")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut read = Read {
                    records: 0,
                    picked: 0,
                };
                while let Some(record) = seq.next_element::<Record<'de, P>>()? {
                    read.records += 1;
                    let ddb = &record.dynamodb;
                    read.picked += [&ddb.new_image, &ddb.old_image]
                        .into_iter()
                        .flatten()
                        .map(|image| image.0.iter().flatten().count())
                        .sum::<usize>();
                }
                Ok(Records(read, PhantomData))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(bound = "")]
#[allow(dead_code)] // read, and dropped: the reading is what is measured
struct Record<'a, P: Picks> {
    #[serde(rename = "eventID", borrow)]
    event_id: Cow<'a, str>,
    #[serde(rename = "eventName", borrow)]
    event_name: Cow<'a, str>,
    #[serde(rename = "eventSource", borrow)]
    event_source: Cow<'a, str>,
    #[serde(rename = "eventSourceARN", borrow, default)]
    arn: Option<Text<'a>>,
    #[serde(rename = "userIdentity", borrow, default)]
    identity: Option<Identity<'a>>,
    #[serde(borrow)]
    dynamodb: Ddb<'a, P>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Identity<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(rename = "principalId", borrow)]
    principal: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(bound = "")]
#[allow(dead_code)]
struct Ddb<'a, P: Picks> {
    #[serde(rename = "ApproximateCreationDateTime", default)]
    at: Option<f64>,
    #[serde(rename = "Keys", borrow)]
    keys: Keys<'a>,
    #[serde(rename = "NewImage", borrow, default)]
    new_image: Option<Image<'a, P>>,
    #[serde(rename = "OldImage", borrow, default)]
    old_image: Option<Image<'a, P>>,
    #[serde(rename = "SequenceNumber", borrow, default)]
    sequence_number: Option<Text<'a>>,
    #[serde(rename = "SizeBytes", default)]
    size_bytes: Option<i64>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Keys<'a> {
    #[serde(rename = "PK", borrow)]
    pk: Attr<'a>,
    #[serde(rename = "SK", borrow, default)]
    sk: Option<Attr<'a>>,
}

/// One attribute's DynamoDB JSON, of the types the handlers read.
#[derive(Deserialize)]
#[allow(dead_code, non_snake_case)]
struct Attr<'a> {
    #[serde(borrow, default)]
    S: Option<Text<'a>>,
    #[serde(borrow, default)]
    N: Option<Text<'a>>,
    #[serde(default)]
    BOOL: Option<bool>,
    #[serde(default)]
    NULL: Option<bool>,
}

/// An image's attributes named by `P`, each at its name's place; the
/// others skipped.
struct Image<'a, P>([Option<Attr<'a>>; MOST], PhantomData<P>);

impl<'de: 'a, 'a, P: Picks> Deserialize<'de> for Image<'a, P> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a, P>(PhantomData<(Image<'a, P>, P)>);
        impl<'de: 'a, 'a, P: Picks> Visitor<'de> for V<'a, P> {
            type Value = Image<'a, P>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an image")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut image = Image(Default::default(), PhantomData);
                while let Some(Text(name)) = map.next_key()? {
                    match P::NAMES.iter().position(|n| *n == name) {
                        Some(i) => image.0[i] = Some(map.next_value()?),
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(image)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// A string, borrowed from the event when it has no escape. (serde's
/// `#[serde(borrow)]` borrows a `Cow<str>` field, but not one inside an
/// `Option`: that one is copied.)
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<Text<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}
