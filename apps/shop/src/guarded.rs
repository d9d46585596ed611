//! An UpdateItem applied only while the items its decision was read from
//! are as read: the shop's answer to a service that writes while the
//! worker runs (issue 29).
//!
//! A product is flagged because its brand is *gone*; its flag is removed
//! because its brand and category *exist*. Those facts are about other
//! items, so a condition on the product cannot state them. A
//! [`Guard`](worker_engine::store::guarded::Guard) on the brand (or the
//! category) does: the flag's UpdateItem goes in one `TransactWriteItems`
//! request beside a `ConditionCheck` of every guard, and lands only if
//! each guard holds when it is applied.
//!
//! The engine's guarded writes ([`GuardedWriter`]) carry Puts and Deletes
//! only, and a Put of the whole product would overwrite what the service
//! wrote meanwhile; so this module sends the transaction itself, over
//! [`Transactions`] ([`OnTable`]), until the engine offers a guarded
//! update.
//!
//! [`GuardedWriter`]: worker_engine::store::guarded::GuardedWriter

use async_trait::async_trait;
use worker_engine::store::guarded::Guard;
use worker_engine::store::transact::{TransactOp, TransactOutcome, Transactions};
use worker_engine::store::{Expr, Key, StoreError};

/// What a guarded update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarded {
    /// Written, every guard holding.
    Applied,
    /// Not written: a guard no longer holds (the decision went stale; the
    /// change that made it stale has a stream record of its own).
    Withheld,
    /// Not written: the item's own condition failed (it changed since).
    Refused,
}

/// UpdateItems guarded by conditions on other items.
#[async_trait]
pub trait GuardedUpdates: Send + Sync {
    /// `update` on `key` (with its own `condition`), only while every
    /// guard holds.
    async fn update_guarded(
        &self,
        guards: &[Guard],
        key: &Key,
        update: Expr,
        condition: Option<Expr>,
    ) -> Result<Guarded, StoreError>;
}

/// Guarded updates on one table, as transactions.
pub struct OnTable<T: ?Sized> {
    pub table: String,
    pub tx: std::sync::Arc<T>,
}

impl<T: Transactions + ?Sized> OnTable<T> {
    pub fn new(tx: std::sync::Arc<T>, table: impl Into<String>) -> Self {
        OnTable {
            table: table.into(),
            tx,
        }
    }
}

#[async_trait]
impl<T: Transactions + ?Sized> GuardedUpdates for OnTable<T> {
    async fn update_guarded(
        &self,
        guards: &[Guard],
        key: &Key,
        update: Expr,
        condition: Option<Expr>,
    ) -> Result<Guarded, StoreError> {
        let mut ops: Vec<TransactOp> = guards
            .iter()
            .map(|g| TransactOp::Check {
                table: self.table.clone(),
                key: g.key.clone(),
                condition: g.condition.clone(),
            })
            .collect();
        ops.push(TransactOp::Update {
            table: self.table.clone(),
            key: key.clone(),
            update,
            condition,
        });
        let outcome = self.tx.transact_write(ops).await?;
        Ok(match outcome {
            TransactOutcome::Applied => Guarded::Applied,
            _ if (0..guards.len()).any(|i| outcome.failed(i)) => Guarded::Withheld,
            _ => Guarded::Refused,
        })
    }
}
