//! What the stream handlers read of a record's images: each image as an
//! [`Image`] (a file, an unzip item, or any other item's `KeyName`).
//!
//! The stream function types them as it reads the Lambda event (the
//! engine's `decode_views::<Image>`), without building an item of any
//! image; an event the reader does not take whole is decoded into items,
//! and `Images::of` reads the same [`Images`] from them. The reader takes
//! an image only where it reads what [`Image::from_item`] reads from its
//! item, and refuses the rest (a value of another type than the one the
//! service writes, which the items read leniently): the tests hold the two
//! side by side.

use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use worker_engine::item::Item;
use worker_engine::item::text::read_image;
use worker_engine::stream::ImageView;

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

impl ImageView for Image {
    fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Image, D::Error> {
        Image::read(keys, d)
    }

    fn from_item(_: &Item, item: &Item) -> Image {
        Image::from_item(item)
    }
}

/// A record's images, as the handlers read them.
pub type Images = worker_engine::stream::Images<Image>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use worker_testkit::reader::Edits;

    fn dir() -> std::path::PathBuf {
        format!("{}/../../events/archive/stream", env!("CARGO_MANIFEST_DIR")).into()
    }

    #[test]
    fn the_reader_types_the_fixtures_as_their_items_decode() {
        worker_testkit::reader::assert_every_fixture_read::<Image>(&dir(), 4);
    }

    #[test]
    fn what_the_reader_refuses_is_decoded_from_the_items() {
        let files = Edits::of(&dir(), "files-archived.json");
        let lookup_item = files.edit(|d| {
            let key = json!({"PK": {"S": "2024-03"}, "SK": {"N": "0"}});
            d["Keys"] = key.clone();
            d["NewImage"] = key;
            d["NewImage"]["SavedDate"] = json!({"L": [{"S": "01"}, {"S": "24"}]});
        });
        let mut taken_events = files.taken();
        taken_events.extend([
            // Read leniently by both: a string flag, an empty or null KeyName.
            files.set("IsUnzipped", json!({"S": "TRUE"})),
            files.set("IsUnzipped", json!({"S": "maybe"})),
            files.set("IsUnzipped", json!({"NULL": true})),
            files.set("KeyName", json!({"S": ""})),
            files.set("KeyName", json!({"NULL": true})),
            files.set("Vault", json!({"NULL": true})),
            // An attribute the handlers do not read, twice: the items keep
            // the last, which the handlers do not read either.
            files.in_new(r#""Note":{"S":"n"},"Note":{"S":"m"}"#),
            // An item of the date lookup.
            lookup_item,
        ]);
        let mut refused = files.refusals();
        refused.extend([
            // Read leniently by the items only: a number flag, a number
            // KeyName or Vault.
            files.set("IsUnzipped", json!({"N": "1"})),
            files.set("KeyName", json!({"N": "1"})),
            files.set("Vault", json!({"BOOL": true})),
            // An image's key that is not the record's, or none.
            files.set("SK", json!({"N": "1709323201"})),
            files.remove("SK"),
            // A NULL that is false.
            files.set("Vault", json!({"NULL": false})),
            // A name the handlers read, or a key attribute, twice.
            files.in_new(r#""KeyName":{"S":"again"}"#),
            files.in_new(r#""PK":{"S":"2024-03-01-20-00-00"}"#),
            // DynamoDB Local's untagged empties, which the items read.
            files.in_new(r#""Tags":[]"#),
            files.in_new(r#""Deep":{"M":{"x":{}}}"#),
        ]);
        worker_testkit::reader::assert_views_take_and_refuse::<Image>(
            &[&files],
            &taken_events,
            &refused,
        );
    }
}
