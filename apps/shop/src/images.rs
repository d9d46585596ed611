//! What the stream handler reads of a record's images: each image's key and
//! the attributes a derivation reads ([`READS`]), as they are.
//!
//! The stream function reads them as it reads the Lambda event
//! ([`decode_event`], by [`Reader`]), without building an item of the rest
//! of any image; an event the reader does not take whole is decoded into
//! items, and [`Images::of`] reads the same [`Images`] from them. An item
//! holding its key and [`READS`] derives as the whole item does (the tests
//! hold the two side by side).

use std::borrow::Cow;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;
use serde::de::{self, Deserializer};
use worker_engine::item::Item;
use worker_engine::item::text::read_image_from;
use worker_engine::stream::{
    ChangeReader, EnvelopeError, RecordError, StreamChange, decode_event_bytes_with,
};

use crate::derive::rules::READS;
use crate::keys;

/// What the handler reads of `item`: its key and the attributes of
/// [`READS`] it has.
pub fn image_of(item: &Item) -> Item {
    item.iter()
        .filter(|(name, _)| is_read(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

fn is_read(name: &str) -> bool {
    name == keys::PK || name == keys::SK || READS.contains(&name)
}

/// [`image_of`] the item whose key is `keys` (the record's `Keys`), from
/// its DynamoDB JSON text; every other attribute checked and skipped. An
/// error where the text holds what the items read and this does not
/// (then the event is decoded into items).
pub fn read_image<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Item, D::Error> {
    let (Some(pk), Some(sk), 2) = (keys.get(keys::PK), keys.get(keys::SK), keys.len()) else {
        return Err(de::Error::custom("not the table's key"));
    };
    let key: [(&str, &AttributeValue); 2] = [(keys::PK, pk), (keys::SK, sk)];
    let (Nothing {}, mut image) = read_image_from(d, &key, |name| !is_read(name))?;
    image.insert(keys::PK.to_owned(), pk.clone());
    image.insert(keys::SK.to_owned(), sk.clone());
    Ok(image)
}

/// An image's attributes the handler does not read: checked and skipped.
#[derive(Deserialize)]
struct Nothing {}

/// A record's images, as the handler reads them ([`image_of`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Images {
    /// The item before the change.
    pub old: Option<Item>,
    /// The item after it.
    pub new: Option<Item>,
}

impl Images {
    /// The images of `change`: as the reader read them, or from its items
    /// (an event the reader did not take).
    pub fn of(change: &StreamChange) -> Cow<'_, Images> {
        if let Some(images) = change.typed.as_ref().and_then(|t| t.get::<Images>()) {
            return Cow::Borrowed(images);
        }
        Cow::Owned(Images {
            old: change.old_image.as_ref().map(image_of),
            new: change.new_image.as_ref().map(image_of),
        })
    }
}

/// The shop worker's [`ChangeReader`]: each image read as [`read_image`]
/// reads it, each record its [`Images`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Reader;

impl ChangeReader for Reader {
    type Image = Item;
    type Change = Images;

    fn image<'de, D: Deserializer<'de>>(&self, keys: &Item, d: D) -> Result<Item, D::Error> {
        read_image(keys, d)
    }

    fn change(&self, _: &StreamChange, old: Option<Item>, new: Option<Item>) -> Option<Images> {
        Some(Images { old, new })
    }
}

/// The stream function's reading of a Lambda event ([`crate::app::APP`]'s
/// `decode`): each record's images read by [`Reader`] as it is read.
pub fn decode_event(bytes: &[u8]) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    decode_event_bytes_with(bytes, &Reader)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::rules::Derivation;
    use crate::items::{Named, Order, Product, Stamps, User};
    use crate::keys::{Id, ItemKey};
    use serde_json::{Value, json};

    /// Whether the reader takes `event`, having read it as its items decode.
    fn taken(event: &str) -> bool {
        worker_testkit::reader::read_as_the_items_decode(event, &Reader, |c| {
            Images::of(c).into_owned()
        })
    }

    fn fixtures() -> Vec<(String, [String; 2])> {
        let dir = format!("{}/../../events/shop/stream", env!("CARGO_MANIFEST_DIR"));
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
        let [_, products] = fixtures()
            .into_iter()
            .find(|(n, _)| n == "products-written.json")
            .unwrap()
            .1;
        let edit = |change: &dyn Fn(&mut Value)| {
            let mut event: Value = serde_json::from_str(&products).unwrap();
            change(&mut event["Records"][0]["dynamodb"]);
            event.to_string()
        };
        let set = |name: &'static str, value: Value| {
            edit(&move |d: &mut Value| d["NewImage"][name] = value.clone())
        };
        let new_image = r#""NewImage":{"#;
        assert!(products.contains(new_image), "{products}");
        let in_new = |attrs: &str| products.replacen(new_image, &format!("{new_image}{attrs},"), 1);
        let taken_events = [
            // What a derivation reads, kept as it is, whatever its type.
            set("brand_id", json!({"N": "7"})),
            set("created_at", json!({"S": "yesterday"})),
            set("GSI1PK", json!({"S": "BRAND#stale"})),
            set("GSI2SK", json!({"L": []})),
            // Attributes the handler does not read, one of them twice (the
            // items keep the last).
            in_new(r#""Note":{"S":"n"},"Deep":{"M":{"x":{"NS":["1"]}}}"#),
            in_new(r#""Note":{"S":"n"},"Note":{"S":"m"}"#),
            in_new(&format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(150_000))),
        ];
        for (n, event) in taken_events.iter().enumerate() {
            assert_ne!(event, &products, "case {n} changes the event");
            assert!(taken(event), "case {n} taken");
        }
        let refused = [
            // An image's key that is not the record's, or none.
            set("SK", json!({"S": "PRO#2icLDeBe0wzuNFfkBrKtSDXoXDC"})),
            edit(&|d| {
                d["NewImage"].as_object_mut().unwrap().remove("PK");
            }),
            // A name read twice; values the items read and the reader
            // leaves to them.
            in_new(r#""brand_id":{"S":"2h6QMcr2GPfWcFCuRWD2J66yND1"}"#),
            in_new(r#""Blob":{"B":"AQ=="}"#),
            in_new(r#""Tags":[]"#),
            set("price", json!({"NULL": false})),
            // The images before the keys.
            products.replacen(r#""Keys":"#, r#""Keys0":"#, 1).replacen(
                r#""SequenceNumber""#,
                r#""Keys":{"PK":{"S":"PROD"},"SK":{"S":"PRO#2icLDeBe0wzuNFfkBrKtSDXoXDB"}},"SequenceNumber""#,
                1,
            ),
            // An image whose text might be over the item limit.
            in_new(&format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(250_000))),
            // An escaped field name: its place in the event is unknown.
            products.replacen(new_image, r#""New\u0049mage":{"#, 1),
        ];
        for (n, event) in refused.iter().enumerate() {
            assert_ne!(event, &products, "case {n} changes the event");
            assert!(!taken(event), "case {n} refused");
        }
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
                let image = image_of(&item);
                assert!(!image.contains_key("note"), "{item:?}");
                assert_eq!(Derivation::of(&image), Derivation::of(&item));
                assert_eq!(d.satisfied_by(&image), d.satisfied_by(&item));
            }
        }
    }
}
