//! One worker over several tables: each table's stream has an event source
//! mapping of its own, and a record's `eventSourceARN`
//! (`arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL`) says which
//! table it is from. [`ByTable`] routes each change to the processor of its
//! table, by name; a change from no known table is a permanent failure of
//! that record (logged, counted, skipped), never a guess.

use std::sync::Arc;

use async_trait::async_trait;

use super::decode::StreamChange;
use super::engine::{RecordOutcome, RecordProcessor};
use crate::error::HandlerError;

/// The table name in a stream (or table) ARN; `None` when the ARN names
/// no table.
pub fn table_name(arn: &str) -> Option<&str> {
    let (_, rest) = arn.split_once(":table/")?;
    let name = rest.split('/').next()?;
    (!name.is_empty()).then_some(name)
}

/// Routes each change to the processor of the table it is from.
pub struct ByTable {
    routes: Vec<(String, Arc<dyn RecordProcessor>)>,
}

impl ByTable {
    /// Routes by table name: `(table, processor)`.
    pub fn new(routes: Vec<(String, Arc<dyn RecordProcessor>)>) -> Self {
        ByTable { routes }
    }

    /// The processor of the change's table.
    pub fn route(&self, change: &StreamChange) -> Result<&Arc<dyn RecordProcessor>, HandlerError> {
        let Some(arn) = change.event_source_arn.as_deref() else {
            return Err(HandlerError::permanent(
                "the record has no eventSourceARN: its table is unknown",
            ));
        };
        let name = table_name(arn)
            .ok_or_else(|| HandlerError::permanent("the record's eventSourceARN names no table"))?;
        self.routes
            .iter()
            .find(|(t, _)| t == name)
            .map(|(_, p)| p)
            .ok_or_else(|| {
                HandlerError::permanent(format!(
                    "the record is from table {name:?}, which this worker does not serve"
                ))
            })
    }
}

#[async_trait]
impl RecordProcessor for ByTable {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        self.route(change)?.process(change).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_of_an_arn() {
        let arn = "arn:aws:dynamodb:us-east-1:111122223333:table/orders-prod/stream/2024-01-01T00:00:00.000";
        assert_eq!(table_name(arn), Some("orders-prod"));
        assert_eq!(
            table_name("arn:aws:dynamodb:ddblocal:000000000000:table/t"),
            Some("t")
        );
        assert_eq!(table_name("arn:aws:s3:::bucket"), None);
        assert_eq!(table_name("arn:aws:dynamodb:r:a:table//stream/x"), None);
    }
}
