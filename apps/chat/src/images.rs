//! What the stream handlers read of a record's images: a request copy's
//! [`RequestCopy`] (`requests`) and any item's `NumMembers` (`members`),
//! whichever of the six tables the record comes from.
//!
//! The stream function reads them as it reads the Lambda event (the
//! engine's `decode_views::<Image>`), without building an item of any
//! image; an event the reader does not take whole is decoded into items,
//! and `Images::of` reads the same [`Images`] from them. The reader takes
//! an image only where it reads what [`Image::from_item`] reads from its
//! item (a copy that does not decode, or disagrees with its key, is left
//! to the items, which say why): the tests hold the two side by side.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::{self, Deserializer};
use worker_engine::item::Item;
use worker_engine::item::text::{Unread, read_image_from};
use worker_engine::stream::ImageView;

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
                let (Unread {}, rest) = read_image_from(d, key, known)?;
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

impl ImageView for Image {
    fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Image, D::Error> {
        Image::read(keys, d)
    }

    fn from_item(keys: &Item, item: &Item) -> Image {
        Image::from_item(keys, item)
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
        format!("{}/../../events/chat/stream", env!("CARGO_MANIFEST_DIR")).into()
    }

    #[test]
    fn the_reader_types_the_fixtures_as_their_items_decode() {
        worker_testkit::reader::assert_every_fixture_read::<Image>(&dir(), 6);
    }

    #[test]
    fn what_the_reader_refuses_is_decoded_from_the_items() {
        // A group chat's copy of a request, accepted; a group chat created.
        let copy = Edits::of(&dir(), "request-accepted.json");
        let chat = Edits::of(&dir(), "chat-created.json");
        let mut taken_events = copy.taken();
        taken_events.extend(chat.taken());
        taken_events.extend([
            // `NumMembers` kept as it is, whatever its type or spelling.
            chat.set("NumMembers", json!({"N": "0.0"})),
            chat.set("NumMembers", json!({"S": "0"})),
            chat.set("NumMembers", json!({"L": []})),
            copy.set("NumMembers", json!({"N": "3"})),
            // An attribute the handlers do not read, twice (the items keep
            // the last).
            copy.in_new(r#""Note":{"S":"n"},"Note":{"S":"m"}"#),
            // A copy's attribute left to its default.
            copy.remove("Seen"),
        ]);
        let mut refused = copy.refusals();
        refused.extend(chat.refusals());
        refused.extend([
            // A copy that does not decode, or disagrees with its key: the
            // items say why.
            copy.set("Status", json!({"S": "lost"})),
            copy.set("Status", json!({"N": "1"})),
            copy.set("Id", json!({"S": "r9"})),
            copy.set("ChatId", json!({"S": "g9"})),
            copy.remove("UserId"),
            // An image's key that is not the record's, or none.
            chat.set("SK", json!({"S": "GROUPCHAT#g9"})),
            chat.remove("PK"),
            // A name kept or read twice; values the items read and the
            // reader leaves to them.
            chat.in_new(r#""NumMembers":{"N":"1"}"#),
            copy.in_new(r#""Status":{"S":"pending"}"#),
            chat.in_new(r#""Tags":[]"#),
            chat.set("Capacity", json!({"NULL": false})),
        ]);
        worker_testkit::reader::assert_views_take_and_refuse::<Image>(
            &[&copy, &chat],
            &taken_events,
            &refused,
        );
    }
}
