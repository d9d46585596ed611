//! What the stream handler reads of a record's images: each image's key and
//! the attributes a derivation reads ([`READS`]), as they are.
//!
//! The stream function reads them as it reads the Lambda event (the
//! engine's `decode_views::<Image>`), without building an item of the rest
//! of any image; an event the reader does not take whole is decoded into
//! items, and `Images::of` reads the same [`Images`] from them. An item
//! holding its key and [`READS`] derives as the whole item does (the tests
//! hold the two side by side).

use std::borrow::Cow;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::{self, Deserializer};
use worker_engine::item::Item;
use worker_engine::item::text::{Kept, Unread, read_image_into};
use worker_engine::stream::ImageView;

use crate::derive::rules::READS;
use crate::items::Fields;
use crate::keys;

/// What the handler reads of an image: its key and the attributes of
/// [`READS`] it has, as they are. A derivation reads it as it reads the
/// whole item ([`Fields`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// Each attribute read, at its [`place`] (`None`: the image has not).
    attributes: [Option<AttributeValue>; 2 + READS.len()],
}

/// Where an image keeps the attribute `name`: `PK`, `SK`, then those of
/// [`READS`] in its order; `None` for one the handler does not read.
fn place(name: &str) -> Option<usize> {
    match name {
        keys::PK => Some(0),
        keys::SK => Some(1),
        _ => READS.iter().position(|r| *r == name).map(|i| 2 + i),
    }
}

impl Image {
    /// What the handler reads of `item`.
    pub fn of(item: &Item) -> Image {
        let mut image = Image::empty();
        for (name, value) in item {
            if let Some(i) = place(name) {
                image.attributes[i] = Some(value.clone());
            }
        }
        image
    }

    fn empty() -> Image {
        Image {
            attributes: Default::default(),
        }
    }

    /// [`Image::of`] the item whose key is `keys` (the record's `Keys`),
    /// from its DynamoDB JSON text; every other attribute checked and
    /// skipped. An error where the text holds what the items read and this
    /// does not (then the event is decoded into items).
    pub fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Image, D::Error> {
        let (Some(pk), Some(sk), 2) = (keys.get(keys::PK), keys.get(keys::SK), keys.len()) else {
            return Err(de::Error::custom("not the table's key"));
        };
        let key: [(&str, &AttributeValue); 2] = [(keys::PK, pk), (keys::SK, sk)];
        let (Unread {}, mut image) =
            read_image_into(d, &key, |name| place(name).is_none(), Image::empty())?;
        image.attributes[0] = Some(pk.clone());
        image.attributes[1] = Some(sk.clone());
        Ok(image)
    }
}

impl Kept for Image {
    /// Only the attributes of [`READS`] come here: the key's are checked
    /// against the record's `Keys`, the others skipped.
    fn keep(&mut self, name: Cow<'_, str>, value: AttributeValue) -> bool {
        match place(&name).map(|i| &mut self.attributes[i]) {
            Some(slot @ None) => {
                *slot = Some(value);
                true
            }
            _ => false,
        }
    }
}

impl Fields for Image {
    fn field(&self, name: &str) -> Option<&AttributeValue> {
        place(name).and_then(|i| self.attributes[i].as_ref())
    }
}

impl ImageView for Image {
    fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Image, D::Error> {
        Image::read(keys, d)
    }

    fn from_item(_: &Item, item: &Item) -> Image {
        Image::of(item)
    }
}

/// A record's images, as the handler reads them.
pub type Images = worker_engine::stream::Images<Image>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::rules::Derivation;
    use crate::items::{Named, Order, Product, Stamps, User};
    use crate::keys::{Id, ItemKey};
    use serde_json::json;
    use worker_testkit::reader::Edits;

    fn dir() -> std::path::PathBuf {
        format!("{}/../../events/shop/stream", env!("CARGO_MANIFEST_DIR")).into()
    }

    #[test]
    fn the_reader_types_the_fixtures_as_their_items_decode() {
        worker_testkit::reader::assert_every_fixture_read::<Image>(&dir(), 4);
    }

    #[test]
    fn what_the_reader_refuses_is_decoded_from_the_items() {
        let products = Edits::of(&dir(), "products-written.json");
        let mut taken_events = products.taken();
        taken_events.extend([
            // What a derivation reads, kept as it is, whatever its type.
            products.set("brand_id", json!({"N": "7"})),
            products.set("created_at", json!({"S": "yesterday"})),
            products.set("GSI1PK", json!({"S": "BRAND#stale"})),
            products.set("GSI2SK", json!({"L": []})),
            // An attribute the handler does not read, twice (the items keep
            // the last).
            products.in_new(r#""Note":{"S":"n"},"Note":{"S":"m"}"#),
        ]);
        let mut refused = products.refusals();
        refused.extend([
            // An image's key that is not the record's, or none.
            products.set("SK", json!({"S": "PRO#2icLDeBe0wzuNFfkBrKtSDXoXDC"})),
            products.remove("PK"),
            // A name read twice; values the items read and the reader
            // leaves to them.
            products.in_new(r#""brand_id":{"S":"2h6QMcr2GPfWcFCuRWD2J66yND1"}"#),
            products.in_new(r#""Tags":[]"#),
            products.set("price", json!({"NULL": false})),
        ]);
        worker_testkit::reader::assert_views_take_and_refuse::<Image>(
            &[&products],
            &taken_events,
            &refused,
        );
    }

    #[test]
    fn an_image_derives_as_its_whole_item() {
        const T: i64 = 1_719_473_962;
        let id = |n: u8| Id::at(T - 1000 + i64::from(n), [n; 16]);
        let stamps = Stamps {
            created_at: T,
            updated_at: T + 5,
        };
        let entities = [
            Named {
                key: ItemKey::Category(id(3)),
                name: Some("Drinks".into()),
                stamps,
            }
            .to_item(),
            Named {
                key: ItemKey::Brand(id(2)),
                name: Some("Tea Co".into()),
                stamps,
            }
            .to_item(),
            User {
                id: id(4),
                name: Some("Ann".into()),
                email: Some("a@b.c".into()),
                stamps,
            }
            .to_item(),
            Product {
                id: id(1),
                name: Some("Tea".into()),
                price: Some(3.5),
                stock: Some(4),
                brand_id: Some(id(2)),
                category_id: Some(id(3)),
                stamps,
            }
            .to_item(),
            Order {
                user: id(4),
                id: id(5),
                status: Some("PAID".into()),
                total_price: Some(10.0),
                stamps,
            }
            .to_item(),
        ];
        for mut item in entities {
            // An attribute no derivation reads.
            item.insert("note".into(), AttributeValue::S("n".into()));
            let d = Derivation::of(&item).unwrap().unwrap();
            // As written, with its derived attributes, and with stale ones.
            let done = d.apply(&item);
            let mut stale = done.clone();
            for (name, _) in &d.derived {
                stale.insert((*name).to_owned(), AttributeValue::S("stale".into()));
            }
            for item in [item, done, stale] {
                let image = Image::of(&item);
                assert_eq!(image.field("note"), None, "{item:?}");
                assert_eq!(Derivation::of(&image), Derivation::of(&item));
                assert_eq!(d.satisfied_by(&image), d.satisfied_by(&item));
            }
        }
    }
}
