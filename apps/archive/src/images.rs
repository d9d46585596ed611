//! What the stream handlers read of a record's images: each image as an
//! [`Image`] (a file, an unzip item, or any other item's `KeyName`).
//!
//! The stream function types them as it reads the Lambda event
//! ([`decode_event`], by [`Reader`]), without building an item of any
//! image; an event the reader does not take whole is decoded into items,
//! and [`Images::of`] reads the same [`Images`] from them. The reader takes
//! an image only where it reads what [`Image::from_item`] reads from its
//! item, and refuses the rest (a value of another type than the one the
//! service writes, which the items read leniently): the tests hold the two
//! side by side.

use std::borrow::Cow;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use worker_engine::item::Item;
use worker_engine::item::text::read_image;
use worker_engine::stream::{
    ChangeReader, EnvelopeError, RecordError, StreamChange, decode_event_bytes_with,
};

use crate::items::{self, ArchivedFile, Stage, UnzipItem};
use crate::keys::{self, ItemKey};

/// One image, as the stream handlers read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// An archived file.
    File(ArchivedFile),
    /// An `Unzipped` or `Unzipping` item.
    Unzip(UnzipItem),
    /// Any other item: its `KeyName`, if it has one.
    Other {
        /// `KeyName` (absent or empty: `None`).
        key_name: Option<String>,
    },
}

impl Image {
    /// The image of `item`, read leniently (as [`ArchivedFile::from_item`]
    /// and [`UnzipItem::from_item`] read it).
    pub fn from_item(item: &Item) -> Image {
        if let Some(file) = ArchivedFile::from_item(item) {
            Image::File(file)
        } else if let Some(unzip) = UnzipItem::from_item(item) {
            Image::Unzip(unzip)
        } else {
            Image::Other {
                key_name: items::key_name(item).map(str::to_owned),
            }
        }
    }

    /// The `KeyName` the item carries, whichever it is.
    pub fn key_name(&self) -> Option<&str> {
        match self {
            Image::File(f) => f.key_name.as_deref(),
            Image::Unzip(u) => u.key_name.as_deref(),
            Image::Other { key_name } => key_name.as_deref(),
        }
    }

    /// The image of the item whose key is `keys` (the record's `Keys`),
    /// from its DynamoDB JSON text: what [`Image::from_item`] reads from
    /// that image's item, or an error where the text holds anything it
    /// reads leniently (then the event is decoded into items).
    pub fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Image, D::Error> {
        let (Some(pk), Some(sk), 2) = (keys.get(keys::PK), keys.get(keys::SK), keys.len()) else {
            return Err(de::Error::custom("not the table's key"));
        };
        let key: [(&str, &AttributeValue); 2] = [(keys::PK, pk), (keys::SK, sk)];
        let text: Text = read_image(d, &key)?;
        let key_name = text.key_name.filter(|k| !k.is_empty());
        Ok(match ItemKey::from_item(keys) {
            Ok(ItemKey::File(time)) => Image::File(ArchivedFile {
                time,
                key_name,
                is_unzipped: text.is_unzipped.and_then(|f| f.0),
                vault: text.vault,
            }),
            Ok(ItemKey::Unzipped { created }) => Image::Unzip(UnzipItem {
                stage: Stage::Unzipped,
                created,
                key_name,
            }),
            Ok(ItemKey::Unzipping { created }) => Image::Unzip(UnzipItem {
                stage: Stage::Unzipping,
                created,
                key_name,
            }),
            _ => Image::Other { key_name },
        })
    }
}

/// The attributes an image is read for. A string is read from `S` only,
/// as [`items::string`] reads it; `NULL` is absent, as there.
#[derive(Deserialize)]
struct Text {
    #[serde(rename = "KeyName")]
    key_name: Option<String>,
    #[serde(rename = "IsUnzipped")]
    is_unzipped: Option<Flag>,
    #[serde(rename = "Vault")]
    vault: Option<String>,
}

/// `IsUnzipped` as [`items::is_unzipped`] reads it from a `BOOL` or a
/// string (any other string is absent); a number is left to the items.
struct Flag(Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Flag, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a BOOL or an S")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Flag, E> {
                Ok(Flag(Some(b)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Flag, E> {
                Ok(Flag(if s.eq_ignore_ascii_case("true") {
                    Some(true)
                } else if s.eq_ignore_ascii_case("false") {
                    Some(false)
                } else {
                    None
                }))
            }
        }
        d.deserialize_any(V)
    }
}

/// A record's images, as the handlers read them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Images {
    /// The item before the change.
    pub old: Option<Image>,
    /// The item after it.
    pub new: Option<Image>,
}

impl Images {
    /// The images of `change`: as the reader typed them, or read from its
    /// items (an event the reader did not take).
    pub fn of(change: &StreamChange) -> Cow<'_, Images> {
        if let Some(images) = change.typed.as_ref().and_then(|t| t.get::<Images>()) {
            return Cow::Borrowed(images);
        }
        Cow::Owned(Images {
            old: change.old_image.as_ref().map(Image::from_item),
            new: change.new_image.as_ref().map(Image::from_item),
        })
    }
}

/// The archive's [`ChangeReader`]: each image an [`Image`] as the event is
/// read ([`Image::read`]), each record its [`Images`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Reader;

impl ChangeReader for Reader {
    type Image = Image;
    type Change = Images;

    fn image<'de, D: Deserializer<'de>>(&self, keys: &Item, d: D) -> Result<Image, D::Error> {
        Image::read(keys, d)
    }

    fn change(&self, _: &StreamChange, old: Option<Image>, new: Option<Image>) -> Option<Images> {
        Some(Images { old, new })
    }
}

/// The stream function's reading of a Lambda event ([`crate::app::APP`]'s
/// `decode`): each record's images typed by [`Reader`] as it is read.
pub fn decode_event(bytes: &[u8]) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    decode_event_bytes_with(bytes, &Reader)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Whether the reader takes `event`, having read it as its items decode.
    fn taken(event: &str) -> bool {
        worker_testkit::reader::read_as_the_items_decode(event, &Reader, |c| {
            Images::of(c).into_owned()
        })
    }

    fn fixtures() -> Vec<(String, [String; 2])> {
        let dir = format!("{}/../../events/archive/stream", env!("CARGO_MANIFEST_DIR"));
        worker_testkit::reader::stream_fixtures(std::path::Path::new(&dir))
    }

    #[test]
    fn the_reader_types_the_fixtures_as_their_items_decode() {
        let fixtures = fixtures();
        assert!(fixtures.len() >= 4, "{}", fixtures.len());
        for (name, events) in &fixtures {
            for event in events {
                assert!(taken(event), "{name}");
            }
        }
    }

    #[test]
    fn what_the_reader_refuses_is_decoded_from_the_items() {
        let fixtures = fixtures();
        let event = |name: &str| {
            let [_, compact] = fixtures.iter().find(|(n, _)| n == name).unwrap().1.clone();
            compact
        };
        let files = event("files-archived.json");
        let new_image = r#""NewImage":{"#;
        assert!(files.contains(new_image), "{files}");
        let in_new = |attrs: &str| files.replacen(new_image, &format!("{new_image}{attrs},"), 1);
        let edit = |change: &dyn Fn(&mut Value)| {
            let mut event: Value = serde_json::from_str(&files).unwrap();
            change(&mut event["Records"][0]["dynamodb"]);
            event.to_string()
        };
        let set = |name: &'static str, value: Value| {
            edit(&move |d: &mut Value| d["NewImage"][name] = value.clone())
        };
        let lookup_item = edit(&|d| {
            let key = json!({"PK": {"S": "2024-03"}, "SK": {"N": "0"}});
            d["Keys"] = key.clone();
            d["NewImage"] = key;
            d["NewImage"]["SavedDate"] = json!({"L": [{"S": "01"}, {"S": "24"}]});
        });
        let taken_events = [
            // Read leniently by both: a string flag, an empty or null KeyName.
            set("IsUnzipped", json!({"S": "TRUE"})),
            set("IsUnzipped", json!({"S": "maybe"})),
            set("IsUnzipped", json!({"NULL": true})),
            set("KeyName", json!({"S": ""})),
            set("KeyName", json!({"NULL": true})),
            set("Vault", json!({"NULL": true})),
            // Attributes the handlers do not read; an item of the date
            // lookup.
            in_new(r#""Note":{"S":"n"},"Tags":{"L":[]},"Deep":{"M":{"x":{"NS":["1"]}}}"#),
            in_new(&format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(150_000))),
            // One of them twice: the items keep the last, which the
            // handlers do not read either.
            in_new(r#""Note":{"S":"n"},"Note":{"S":"m"}"#),
            lookup_item,
        ];
        for (n, event) in taken_events.iter().enumerate() {
            assert_ne!(event, &files, "case {n} changes the event");
            assert!(taken(event), "case {n} taken");
        }
        let refused = [
            // Read leniently by the items only: a number flag, a number
            // KeyName or Vault.
            set("IsUnzipped", json!({"N": "1"})),
            set("KeyName", json!({"N": "1"})),
            set("Vault", json!({"BOOL": true})),
            // An image's key that is not the record's, or none.
            set("SK", json!({"N": "1709323201"})),
            edit(&|d| {
                d["NewImage"].as_object_mut().unwrap().remove("SK");
            }),
            // A NULL that is false, a binary value.
            set("Vault", json!({"NULL": false})),
            in_new(r#""Blob":{"B":"AQ=="}"#),
            // A name the handlers read, or a key attribute, twice.
            in_new(r#""KeyName":{"S":"again"}"#),
            in_new(r#""PK":{"S":"2024-03-01-20-00-00"}"#),
            // DynamoDB Local's untagged empties, which the items read.
            in_new(r#""Tags":[]"#),
            in_new(r#""Deep":{"M":{"x":{}}}"#),
            // The images before the keys.
            files.replacen(r#""Keys":"#, r#""Keys0":"#, 1).replacen(
                r#""SequenceNumber""#,
                r#""Keys":{"PK":{"S":"2024-03-01-20-00-00"},"SK":{"N":"1709323200"}},"SequenceNumber""#,
                1,
            ),
            // An image whose text might be over the item limit (and one
            // that is).
            in_new(&format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(250_000))),
            in_new(&format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(410_000))),
            // An escaped field name: its place in the event is unknown.
            files.replacen(new_image, r#""New\u0049mage":{"#, 1),
        ];
        for (n, event) in refused.iter().enumerate() {
            assert_ne!(event, &files, "case {n} changes the event");
            assert!(!taken(event), "case {n} refused");
        }
    }
}
