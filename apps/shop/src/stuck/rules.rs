//! Which orders are stuck, and the `OrderStuck` event (pure).
//!
//! An order is stuck when it stayed in one of `STUCK_STATUSES` longer than
//! `STUCK_AFTER_HOURS`: its `updated_at` (its `GSI1SK`, `AT#<seconds>`) is
//! before `now − STUCK_AFTER_HOURS`. The key condition `GSI1PK =
//! ORDER#STATUS#<s> AND GSI1SK < AT#<cutoff>` reads exactly those.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use worker_engine::EventEntry;
use worker_engine::item::Item;
use worker_engine::keys::AttributeError;

use crate::keys::{At, Gsi1, Id, ItemKey, KeyError};

/// The event's source.
pub const EVENT_SOURCE: &str = "shop.worker";
/// The event's detail type.
pub const EVENT_TYPE: &str = "OrderStuck";

/// The cutoff of a run: orders updated before it are stuck.
pub fn cutoff(now: DateTime<Utc>, after_hours: u64) -> i64 {
    now.timestamp() - (after_hours as i64).saturating_mul(3600)
}

/// A stuck order, as read from `GSI1` (ids and times only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StuckOrder {
    /// The order's id.
    pub order_id: Id,
    /// The ordering user's id.
    pub user_id: Id,
    /// The status it is stuck in.
    pub status: String,
    /// Its `updated_at`, epoch seconds (from its `GSI1SK`).
    pub updated_at: i64,
}

impl StuckOrder {
    /// Read an index item (its table key and `GSI1` key).
    pub fn from_index_item(item: &Item) -> Result<StuckOrder, KeyError> {
        let ItemKey::Order { user, order } = ItemKey::from_item(item)? else {
            return Err(KeyError::Malformed {
                what: "order in GSI1",
                reason: "not an order's key",
            });
        };
        let s = |name| match item.get(name) {
            Some(aws_sdk_dynamodb::types::AttributeValue::S(s)) => Ok(s.as_str()),
            _ => Err(AttributeError::Missing(name)),
        };
        match Gsi1::parse(s(crate::keys::GSI1PK)?, s(crate::keys::GSI1SK)?)? {
            Gsi1::OrderByStatus { status, updated } => Ok(StuckOrder {
                order_id: order,
                user_id: user,
                status,
                updated_at: updated.secs(),
            }),
            Gsi1::ProductByBrand { .. } => Err(KeyError::Malformed {
                what: "order in GSI1",
                reason: "keyed as a product",
            }),
        }
    }

    /// Its `OrderStuck` event on `bus`.
    pub fn event(&self, bus: &str, now: DateTime<Utc>) -> EventEntry {
        EventEntry {
            source: EVENT_SOURCE.into(),
            detail_type: EVENT_TYPE.into(),
            event_bus_name: bus.into(),
            detail: json!({
                "order_id": self.order_id,
                "user_id": self.user_id,
                "status": self.status,
                "updated_at": self.updated_at,
                "stuck_seconds": now.timestamp() - self.updated_at,
            })
            .to_string(),
        }
    }
}

/// `AT#<cutoff>`, the exclusive upper bound of the range query.
pub fn cutoff_key(cutoff: i64) -> Result<String, KeyError> {
    At::new("cutoff", cutoff).map(At::key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;
    use aws_sdk_dynamodb::types::AttributeValue;

    #[test]
    fn an_index_item_becomes_an_event() {
        let now: DateTime<Utc> = "2024-06-30T00:00:00Z".parse().unwrap();
        assert_eq!(cutoff(now, 48), now.timestamp() - 172_800);
        assert_eq!(cutoff_key(1_719_473_962).unwrap(), "AT#1719473962");
        let (user, order) = (
            Id::at(1_719_000_000, [1; 16]),
            Id::at(1_719_000_001, [2; 16]),
        );
        let mut item = ItemKey::Order {
            user: user.clone(),
            order: order.clone(),
        }
        .key();
        item.insert(
            keys::GSI1PK.into(),
            AttributeValue::S("ORDER#STATUS#PAID".into()),
        );
        item.insert(
            keys::GSI1SK.into(),
            AttributeValue::S("AT#1719473962".into()),
        );
        let o = StuckOrder::from_index_item(&item).unwrap();
        assert_eq!(o.status, "PAID");
        let e = o.event("bus", now);
        assert_eq!(
            (e.source.as_str(), e.detail_type.as_str()),
            ("shop.worker", "OrderStuck")
        );
        let detail: serde_json::Value = serde_json::from_str(&e.detail).unwrap();
        assert_eq!(
            detail,
            json!({"order_id": order, "user_id": user, "status": "PAID",
                   "updated_at": 1_719_473_962, "stuck_seconds": now.timestamp() - 1_719_473_962})
        );
        item.insert(keys::GSI1SK.into(), AttributeValue::S("AT#x".into()));
        assert!(StuckOrder::from_index_item(&item).is_err());
    }
}
