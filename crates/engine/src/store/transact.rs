//! Writes that must happen together: `TransactWriteItems` over any tables
//! of one account, for an app whose decision spans several items (an item
//! created only while a counter on another item stays under a limit, and
//! the count moved with it).
//!
//! A transaction is all or nothing: when a condition fails, nothing is
//! written and [`TransactOutcome::Cancelled`] says which operation's
//! condition failed (one code per operation, in order). A cancellation
//! caused by a concurrent transaction on the same items
//! (`TransactionConflict`) or by throttling is a
//! [`StoreError::Transient`]: retrying decides again. Conditions make a
//! transaction idempotent: one that writes an item only while it does not
//! exist cannot apply twice.
//!
//! [`Transactions`] is separate from [`Store`](super::Store): the store
//! layers (coalescing, dry runs, fault injection) know nothing of it, and
//! an app holding one says so in its types.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, Delete, Put, ReturnConsumedCapacity, TransactWriteItem, Update,
};

use super::{DynamoStore, Expr, Key, Operation, StoreError, non_empty};
use crate::item::Item;

/// One write of a transaction, on the table it names.
#[derive(Debug, Clone, PartialEq)]
pub enum TransactOp {
    /// Put the whole item, replacing any of the same key.
    Put {
        /// The table's name (any table of the account and region).
        table: String,
        /// The whole item, key attributes included.
        item: Item,
        /// A condition on this item; when it fails the whole transaction
        /// is [`TransactOutcome::Cancelled`].
        condition: Option<Expr>,
    },
    /// Change some attributes of an item (creating it when absent, unless
    /// the condition forbids it).
    Update {
        /// The table's name.
        table: String,
        /// The primary key of the item updated.
        key: Key,
        /// `UpdateExpression` (`SET ...`, `ADD ...`).
        update: Expr,
        /// A condition on this item; when it fails the whole transaction
        /// is cancelled.
        condition: Option<Expr>,
    },
    /// Delete an item (applied when it is already gone, too).
    Delete {
        /// The table's name.
        table: String,
        /// The primary key of the item deleted.
        key: Key,
        /// A condition on this item; when it fails the whole transaction
        /// is cancelled.
        condition: Option<Expr>,
    },
    /// A condition on an item that is not written.
    Check {
        /// The table's name.
        table: String,
        /// The primary key of the item checked.
        key: Key,
        /// What must hold of it for the transaction to apply.
        condition: Expr,
    },
}

/// What a transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransactOutcome {
    /// Every operation was applied.
    Applied,
    /// A condition failed; nothing was written. Per operation, in order:
    /// whether its condition failed (`ConditionalCheckFailed`).
    Cancelled(Vec<bool>),
}

impl TransactOutcome {
    /// Whether operation `i`'s condition failed.
    pub fn failed(&self, i: usize) -> bool {
        matches!(self, TransactOutcome::Cancelled(f) if f.get(i).copied().unwrap_or(false))
    }
}

/// Something that runs transactions ([`DynamoStore`]: on its client, any
/// table).
#[async_trait]
pub trait Transactions: Send + Sync {
    /// Run `ops` as one `TransactWriteItems` request (DynamoDB takes at
    /// most 100, no two on the same item): [`TransactOutcome::Applied`], or
    /// [`TransactOutcome::Cancelled`] when a condition failed. Errors:
    /// [`StoreError::Transient`] for a conflict with another transaction or
    /// throttling (retry decides again); [`StoreError::Permanent`] for a
    /// request the service refuses.
    async fn transact_write(&self, ops: Vec<TransactOp>) -> Result<TransactOutcome, StoreError>;
}

fn built(e: impl std::fmt::Display) -> StoreError {
    StoreError::Permanent {
        operation: "TransactWriteItems",
        code: "Validation".into(),
        message: e.to_string(),
    }
}

fn to_sdk(op: TransactOp) -> Result<TransactWriteItem, StoreError> {
    let item = match op {
        TransactOp::Put {
            table,
            item,
            condition,
        } => {
            let c = condition.unwrap_or_default();
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .set_condition_expression((!c.text.is_empty()).then_some(c.text))
                .set_expression_attribute_names(non_empty(c.names))
                .set_expression_attribute_values(non_empty(c.values))
                .build()
                .map_err(built)?;
            TransactWriteItem::builder().put(put).build()
        }
        TransactOp::Update {
            table,
            key,
            update,
            condition,
        } => {
            let mut names = update.names;
            let mut values = update.values;
            let c = condition.unwrap_or_default();
            names.extend(c.names);
            values.extend(c.values);
            let u = Update::builder()
                .table_name(table)
                .set_key(Some(key))
                .update_expression(update.text)
                .set_condition_expression((!c.text.is_empty()).then_some(c.text))
                .set_expression_attribute_names(non_empty(names))
                .set_expression_attribute_values(non_empty(values))
                .build()
                .map_err(built)?;
            TransactWriteItem::builder().update(u).build()
        }
        TransactOp::Delete {
            table,
            key,
            condition,
        } => {
            let c = condition.unwrap_or_default();
            let d = Delete::builder()
                .table_name(table)
                .set_key(Some(key))
                .set_condition_expression((!c.text.is_empty()).then_some(c.text))
                .set_expression_attribute_names(non_empty(c.names))
                .set_expression_attribute_values(non_empty(c.values))
                .build()
                .map_err(built)?;
            TransactWriteItem::builder().delete(d).build()
        }
        TransactOp::Check {
            table,
            key,
            condition,
        } => {
            let c = ConditionCheck::builder()
                .table_name(table)
                .set_key(Some(key))
                .condition_expression(condition.text)
                .set_expression_attribute_names(non_empty(condition.names))
                .set_expression_attribute_values(non_empty(condition.values))
                .build()
                .map_err(built)?;
            TransactWriteItem::builder().condition_check(c).build()
        }
    };
    Ok(item)
}

/// Cancellation reason codes that retrying may clear.
const TRANSIENT_REASONS: [&str; 3] = [
    "TransactionConflict",
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
];

#[async_trait]
impl Transactions for DynamoStore {
    async fn transact_write(&self, ops: Vec<TransactOp>) -> Result<TransactOutcome, StoreError> {
        self.send_transaction(ops).await.map(|(outcome, _)| outcome)
    }
}

impl DynamoStore {
    /// Send one `TransactWriteItems` request: its outcome and the write
    /// capacity it consumed (counted in the store's metrics too).
    pub(super) async fn send_transaction(
        &self,
        ops: Vec<TransactOp>,
    ) -> Result<(TransactOutcome, f64), StoreError> {
        let items = ops.into_iter().map(to_sdk).collect::<Result<Vec<_>, _>>()?;
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                let consumed = self
                    .metrics
                    .record_batch(Operation::TransactWriteItems, out.consumed_capacity());
                Ok((TransactOutcome::Applied, consumed))
            }
            Err(SdkError::ServiceError(e))
                if matches!(
                    e.err(),
                    TransactWriteItemsError::TransactionCanceledException(_)
                ) =>
            {
                let TransactWriteItemsError::TransactionCanceledException(c) = e.err() else {
                    unreachable!("matched above")
                };
                self.metrics.record(Operation::TransactWriteItems, None);
                let codes: Vec<&str> = c
                    .cancellation_reasons()
                    .iter()
                    .map(|r| r.code().unwrap_or("None"))
                    .collect();
                if let Some(code) = codes.iter().find(|c| TRANSIENT_REASONS.contains(c)) {
                    return Err(StoreError::Transient {
                        operation: "TransactWriteItems",
                        code: (*code).to_owned(),
                        message: "the transaction was cancelled; retry".into(),
                    });
                }
                if codes
                    .iter()
                    .all(|c| *c == "None" || *c == "ConditionalCheckFailed")
                {
                    return Ok((
                        TransactOutcome::Cancelled(
                            codes
                                .iter()
                                .map(|c| *c == "ConditionalCheckFailed")
                                .collect(),
                        ),
                        0.0,
                    ));
                }
                Err(StoreError::Permanent {
                    operation: "TransactWriteItems",
                    code: "TransactionCanceled".into(),
                    message: format!("cancellation reasons: {}", codes.join(", ")),
                })
            }
            Err(e) => Err(StoreError::from_sdk("TransactWriteItems", e)),
        }
    }
}
