//! What the stream handlers read of a record's images: a request copy's
//! [`RequestCopy`] (`requests`) and any item's `NumMembers` (`members`),
//! whichever of the six tables the record comes from.
//!
//! The stream function types them as it reads the Lambda event
//! ([`decode_event`], by [`Reader`]), without building an item of any
//! image; an event the reader does not take whole is decoded into items,
//! and [`Images::of`] reads the same [`Images`] from them. The reader takes
//! an image only where it reads what [`Image::from_item`] reads from its
//! item (a copy that does not decode, or disagrees with its key, is left
//! to the items, which say why): the tests hold the two side by side.

use std::borrow::Cow;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;
use serde::de::{self, Deserializer};
use worker_engine::item::Item;
use worker_engine::item::text::read_image_from;
use worker_engine::stream::{
    ChangeReader, EnvelopeError, RecordError, StreamChange, decode_event_bytes_with,
};

use crate::items::RequestCopy;
use crate::keys::{self, RequestsItem};

/// One image, as the stream handlers read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// The request copy, when the record's key is a copy's
    /// ([`RequestCopy::from_item`] of the image: or why it is not one).
    pub copy: Option<Result<RequestCopy, String>>,
    /// `NumMembers`, as it is.
    pub num_members: Option<AttributeValue>,
}

impl Image {
    /// The image of `item`, of a record whose key is `keys`.
    pub fn from_item(keys: &Item, item: &Item) -> Image {
        Image {
            copy: is_copy(keys).then(|| RequestCopy::from_item(item)),
            num_members: item.get(keys::NUM_MEMBERS).cloned(),
        }
    }

    /// The image of the item whose key is `keys` (the record's `Keys`),
    /// from its DynamoDB JSON text: what [`Image::from_item`] reads from
    /// that image's item, or an error (then the event is decoded into
    /// items).
    pub fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Image, D::Error> {
        // `PK` (Users) or `PK` and `SK` (the other tables).
        let pk = keys.get(keys::PK);
        let key: &[(&str, &AttributeValue)] = match (pk, keys.get(keys::SK), keys.len()) {
            (Some(pk), None, 1) => &[(keys::PK, pk)],
            (Some(pk), Some(sk), 2) => &[(keys::PK, pk), (keys::SK, sk)],
            _ => return Err(de::Error::custom("not a key of the tables")),
        };
        // `NumMembers` is kept as it is; the rest goes to the copy, or is
        // checked and skipped.
        let known = |name: &str| name != keys::PK && name != keys::SK && name != keys::NUM_MEMBERS;
        let (copy, mut rest) = match RequestsItem::parse(keys) {
            Ok(RequestsItem::Copy(key_of_copy)) => {
                let (copy, rest) = read_image_from::<RequestCopy, D>(d, key, known)?;
                let copy = RequestCopy::of_key(key_of_copy, copy).map_err(de::Error::custom)?;
                (Some(Ok(copy)), rest)
            }
            _ => {
                let (Nothing {}, rest) = read_image_from(d, key, known)?;
                (None, rest)
            }
        };
        Ok(Image {
            copy,
            num_members: rest.remove(keys::NUM_MEMBERS),
        })
    }
}

/// Whether the record whose key is `keys` is of a request copy.
fn is_copy(keys: &Item) -> bool {
    matches!(RequestsItem::parse(keys), Ok(RequestsItem::Copy(_)))
}

/// An image's attributes other than those kept: checked and skipped.
#[derive(Deserialize)]
struct Nothing {}

/// A record's images, as the handlers read them.
#[derive(Debug, Clone, PartialEq, Default)]
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
        let image = |item: &Option<Item>| {
            item.as_ref()
                .map(|item| Image::from_item(&change.keys, item))
        };
        Cow::Owned(Images {
            old: image(&change.old_image),
            new: image(&change.new_image),
        })
    }
}

/// The chat worker's [`ChangeReader`]: each image an [`Image`] as the
/// event is read ([`Image::read`]), each record its [`Images`].
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
        let dir = format!("{}/../../events/chat/stream", env!("CARGO_MANIFEST_DIR"));
        worker_testkit::reader::stream_fixtures(std::path::Path::new(&dir))
    }

    #[test]
    fn the_reader_types_the_fixtures_as_their_items_decode() {
        let fixtures = fixtures();
        assert!(fixtures.len() >= 6, "{}", fixtures.len());
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
        // A group chat's copy of a request, accepted; a group chat created.
        let copy = event("request-accepted.json");
        let chat = event("chat-created.json");
        let edit = |event: &str, change: &dyn Fn(&mut Value)| {
            let mut event: Value = serde_json::from_str(event).unwrap();
            change(&mut event["Records"][0]["dynamodb"]);
            event.to_string()
        };
        let set = |event: &str, name: &'static str, value: Value| {
            edit(event, &move |d: &mut Value| {
                d["NewImage"][name] = value.clone()
            })
        };
        let new_image = r#""NewImage":{"#;
        let in_new = |event: &str, attrs: &str| {
            assert!(event.contains(new_image), "{event}");
            event.replacen(new_image, &format!("{new_image}{attrs},"), 1)
        };
        let taken_events = [
            // `NumMembers` kept as it is, whatever its type or spelling.
            set(&chat, "NumMembers", json!({"N": "0.0"})),
            set(&chat, "NumMembers", json!({"S": "0"})),
            set(&chat, "NumMembers", json!({"L": []})),
            set(&copy, "NumMembers", json!({"N": "3"})),
            // Attributes the handlers do not read, one of them twice (the
            // items keep the last).
            in_new(&copy, r#""Note":{"S":"n"},"Deep":{"M":{"x":{"NS":["1"]}}}"#),
            in_new(&copy, r#""Note":{"S":"n"},"Note":{"S":"m"}"#),
            in_new(
                &chat,
                &format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(150_000)),
            ),
            // A copy's attribute left to its default.
            edit(&copy, &|d| {
                d["NewImage"].as_object_mut().unwrap().remove("Seen");
            }),
        ];
        for (n, event) in taken_events.iter().enumerate() {
            assert!(
                event != &copy && event != &chat,
                "case {n} changes the event"
            );
            assert!(taken(event), "case {n} taken");
        }
        let refused = [
            // A copy that does not decode, or disagrees with its key: the
            // items say why.
            set(&copy, "Status", json!({"S": "lost"})),
            set(&copy, "Status", json!({"N": "1"})),
            set(&copy, "Id", json!({"S": "r9"})),
            set(&copy, "ChatId", json!({"S": "g9"})),
            edit(&copy, &|d| {
                d["NewImage"].as_object_mut().unwrap().remove("UserId");
            }),
            // An image's key that is not the record's, or none.
            set(&chat, "SK", json!({"S": "GROUPCHAT#g9"})),
            edit(&chat, &|d| {
                d["NewImage"].as_object_mut().unwrap().remove("PK");
            }),
            // A name kept or read twice; values the items read and the
            // reader leaves to them.
            in_new(&chat, r#""NumMembers":{"N":"1"}"#),
            in_new(&copy, r#""Status":{"S":"pending"}"#),
            in_new(&chat, r#""Blob":{"B":"AQ=="}"#),
            in_new(&chat, r#""Tags":[]"#),
            set(&chat, "Capacity", json!({"NULL": false})),
            // The images before the keys.
            chat.replacen(r#""Keys":"#, r#""Keys0":"#, 1).replacen(
                r#""SequenceNumber""#,
                r#""Keys":{"PK":{"S":"GROUPCHAT#g1"},"SK":{"S":"GROUPCHAT#g1"}},"SequenceNumber""#,
                1,
            ),
            // An image whose text might be over the item limit.
            in_new(
                &chat,
                &format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(250_000)),
            ),
            // An escaped field name: its place in the event is unknown.
            chat.replacen(new_image, r#""New\u0049mage":{"#, 1),
        ];
        for (n, event) in refused.iter().enumerate() {
            assert!(
                event != &copy && event != &chat,
                "case {n} changes the event"
            );
            assert!(!taken(event), "case {n} refused");
        }
    }
}
