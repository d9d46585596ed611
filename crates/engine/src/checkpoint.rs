//! A resumable pass: a scheduled job that pages through a table saves where
//! it stopped when a tick runs out of time, and the next tick goes on from
//! there; the job deletes the checkpoint when its pass completes.
//!
//! [`Pass`] is what every such checkpoint holds: where the Scan or Query
//! resumes, when the pass started, its ticks and its running totals. The
//! app keeps what is its own: the checkpoint's key, the attribute names it
//! is stored under ([`PassAttributes`]) and any fields of its own (a phase,
//! cutoffs), written beside the pass's in the same item.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

use crate::item::Item;
use crate::store::Key;

/// The attributes a table stores a [`Pass`] under, and how it reads a
/// whole number (an app's own rule, strict or lenient).
#[derive(Debug, Clone, Copy)]
pub struct PassAttributes {
    /// Where the pass resumes: a map holding the table's key attributes.
    pub position: &'static str,
    /// When the pass started, epoch seconds (`N`).
    pub pass_started: &'static str,
    /// Ticks of the pass so far (`N`).
    pub ticks: &'static str,
    /// The running totals: a map of name to `N`.
    pub totals: &'static str,
    /// The table's key attributes (`PK`, `SK`): a stored position holds both.
    pub key: [&'static str; 2],
    /// Reads a whole-number attribute; `None` when absent or not one.
    pub number: fn(&Item, &'static str) -> Option<i64>,
}

/// Where a pass resumes, when it started, its ticks and running totals.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    /// Where the pass's Scan or Query resumes (`ExclusiveStartKey`); `None`
    /// at the start of the pass (or of a phase of it).
    pub position: Option<Key>,
    /// When the pass started, epoch seconds.
    pub pass_started: i64,
    /// Ticks of the pass so far (this one included once saved).
    pub ticks: u64,
    /// The pass's running totals, by name.
    pub totals: BTreeMap<String, u64>,
}

impl Pass {
    /// A pass starting `now`: no position, no ticks, no totals.
    pub fn new(now: DateTime<Utc>) -> Self {
        Pass {
            position: None,
            pass_started: now.timestamp(),
            ticks: 0,
            totals: BTreeMap::new(),
        }
    }

    /// Adds `n` to the total `name`.
    pub fn add(&mut self, name: &str, n: u64) {
        *self.totals.entry(name.to_owned()).or_default() += n;
    }

    /// The total `name` so far (0 when none was added).
    pub fn total(&self, name: &str) -> u64 {
        self.totals.get(name).copied().unwrap_or(0)
    }

    /// Reads the pass from a stored checkpoint. `Err` (a reason naming
    /// attributes, never values) when the position is not a key or the
    /// start is missing; the job then starts a new pass. Ticks that are
    /// absent or not a count read as 0; a total that is not a number is
    /// left out.
    pub fn from_item(item: &Item, attributes: &PassAttributes) -> Result<Pass, String> {
        let [pk, sk] = attributes.key;
        let position = match item.get(attributes.position) {
            None => None,
            Some(AttributeValue::M(m)) if m.contains_key(pk) && m.contains_key(sk) => {
                Some(m.clone())
            }
            Some(_) => return Err(format!("{} is not a key", attributes.position)),
        };
        let totals = match item.get(attributes.totals) {
            Some(AttributeValue::M(m)) => m
                .iter()
                .filter_map(|(k, v)| match v {
                    AttributeValue::N(n) => n.parse().ok().map(|n| (k.clone(), n)),
                    _ => None,
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        let number = |name| (attributes.number)(item, name);
        Ok(Pass {
            position,
            pass_started: number(attributes.pass_started)
                .ok_or_else(|| format!("no {}", attributes.pass_started))?,
            ticks: number(attributes.ticks)
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0),
            totals,
        })
    }

    /// Writes the pass into `item` (the checkpoint's key and the app's own
    /// fields are the app's to write).
    pub fn put(&self, item: &mut Item, attributes: &PassAttributes) {
        if let Some(p) = &self.position {
            item.insert(attributes.position.into(), AttributeValue::M(p.clone()));
        }
        let n = |v: String| AttributeValue::N(v);
        item.insert(
            attributes.pass_started.into(),
            n(self.pass_started.to_string()),
        );
        item.insert(attributes.ticks.into(), n(self.ticks.to_string()));
        let totals = self
            .totals
            .iter()
            .map(|(k, v)| (k.clone(), n(v.to_string())))
            .collect();
        item.insert(attributes.totals.into(), AttributeValue::M(totals));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(item: &Item, name: &'static str) -> Option<i64> {
        match item.get(name) {
            Some(AttributeValue::N(n)) => n.parse().ok(),
            _ => None,
        }
    }

    const ATTRIBUTES: PassAttributes = PassAttributes {
        position: "Resume",
        pass_started: "Began",
        ticks: "Runs",
        totals: "Counts",
        key: ["P", "S"],
        number: strict,
    };

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    #[test]
    fn a_pass_round_trips_under_the_apps_attributes() {
        let mut pass = Pass::new("2024-03-25T00:00:00Z".parse().unwrap());
        assert_eq!(pass.pass_started, 1_711_324_800);
        pass.position = Some(Key::from([("P".into(), s("a")), ("S".into(), s("b"))]));
        pass.ticks = 2;
        pass.add("read", 7);
        pass.add("read", 1);
        assert_eq!((pass.total("read"), pass.total("written")), (8, 0));
        let mut item = Item::new();
        pass.put(&mut item, &ATTRIBUTES);
        assert_eq!(item["Began"], AttributeValue::N("1711324800".into()));
        assert_eq!(item["Runs"], AttributeValue::N("2".into()));
        assert_eq!(Pass::from_item(&item, &ATTRIBUTES), Ok(pass));
    }

    #[test]
    fn errors_name_the_attribute_and_the_rest_reads_leniently() {
        let mut item = Item::new();
        Pass::new(chrono::DateTime::UNIX_EPOCH).put(&mut item, &ATTRIBUTES);
        assert!(!item.contains_key("Resume"), "no position at the start");

        let mut bad = item.clone();
        bad.insert(
            "Resume".into(),
            AttributeValue::M(Key::from([("P".into(), s("a"))])),
        );
        assert_eq!(
            Pass::from_item(&bad, &ATTRIBUTES),
            Err("Resume is not a key".into())
        );
        bad.insert("Resume".into(), s("a"));
        assert_eq!(
            Pass::from_item(&bad, &ATTRIBUTES),
            Err("Resume is not a key".into())
        );
        let mut bad = item.clone();
        bad.insert("Began".into(), s("0"));
        assert_eq!(
            Pass::from_item(&bad, &ATTRIBUTES),
            Err("no Began".into()),
            "the app's number rule decides"
        );

        item.insert("Runs".into(), AttributeValue::N("-1".into()));
        item.insert(
            "Counts".into(),
            AttributeValue::M(Key::from([
                ("read".into(), AttributeValue::N("3".into())),
                ("bad".into(), s("4")),
            ])),
        );
        let pass = Pass::from_item(&item, &ATTRIBUTES).unwrap();
        assert_eq!(pass.ticks, 0);
        assert_eq!(pass.totals, BTreeMap::from([("read".to_owned(), 3)]));
    }
}
