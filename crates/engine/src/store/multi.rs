//! One worker over several tables: a store per table, all on one client
//! and one set of request and capacity counters, so an invocation's
//! metrics count every table's requests.

use crate::schema::KeySchema;

use super::{DynamoStore, key_names};

impl DynamoStore {
    /// A store for another table, sharing this one's client, retry policy
    /// and counters.
    pub fn on_table(&self, table: impl Into<String>, key: KeySchema) -> DynamoStore {
        DynamoStore {
            client: self.client.clone(),
            table: table.into(),
            key_attributes: key_names(key),
            backoff: self.backoff,
            metrics: self.metrics.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Operation, local_client};

    #[test]
    fn tables_share_their_counters() {
        let a = DynamoStore::new(local_client("http://127.0.0.1:1"), "a");
        let b = a.on_table("b", KeySchema::composite("PK", "SK"));
        b.metrics().record(Operation::GetItem, None);
        assert_eq!(b.table(), "b");
        assert_eq!(a.metrics().snapshot().requests(), 1);
    }
}
