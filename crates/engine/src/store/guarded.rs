//! Writes decided from the state of *other* items, applied only while that
//! state still holds: the worker's answer to a service that writes while
//! it runs.
//!
//! A cascade reads "the group is gone" and deletes what hung off it; a
//! repair reads "no live group links this container" and deletes it. Between
//! that read and the write the service may have written the group again. A
//! condition on the item written cannot see that: it names the child, not
//! the parent. A [`Guard`] names the parent. [`GuardedWriter::write_guarded`]
//! sends the writes in `TransactWriteItems` requests, each carrying every
//! guard as a `ConditionCheck` beside at most
//! [`MAX_TRANSACT_ACTIONS`]` - guards` writes, so each write lands only if
//! every guard holds at the moment it is applied.
//!
//! # Semantics
//!
//! - **Order.** Writes go in the order given (ops on the same key collapse
//!   to the last, as in a batch), in transactions sent one after the other.
//!   A caller that orders its writes so that a retry after a partial run
//!   still finds the rest (containers before the links that lead to them)
//!   keeps that property.
//! - **A guard that fails stops the sequence.** The transaction it failed in
//!   writes nothing, and no later transaction is sent: the decision went
//!   stale, and the change that made it stale has a stream record of its
//!   own. The report says how many writes were [`GuardedReport::withheld`];
//!   this is a normal outcome, not an error. Writes of earlier transactions
//!   stay: each was applied while every guard held.
//! - **A write with a condition of its own** (an invitation deleted only if
//!   its hash and expiry are still the ones read) goes in a transaction of
//!   its own with the guards, so its condition failing cancels only itself:
//!   it is counted in [`GuardedReport::refused`] and the sequence goes on.
//! - **Idempotent.** A delete of an item already gone succeeds; a put
//!   writes the same item again. Replaying the same guarded write gives the
//!   same table.
//! - **Conflicts.** A transaction cancelled by another transaction on the
//!   same items, or by throttling, is [`StoreError::Transient`]: the record
//!   is retried and decides again.
//! - **Cost.** A transactional write costs twice the write capacity of a
//!   plain one, and each `ConditionCheck` is charged as a write of the item
//!   checked (see BENCHMARKS.md for the measured figures per cascade).

use async_trait::async_trait;

use super::{Expr, Key, StoreError, WriteOp};
use crate::item::Item;

/// At most this many actions (writes and condition checks) go in one
/// `TransactWriteItems` request.
pub(crate) const MAX_TRANSACT_ACTIONS: usize = 100;

/// A condition on an item that is read, not written: the fact a decision
/// was taken on. Checked in every transaction of a guarded write.
#[derive(Debug, Clone, PartialEq)]
pub struct Guard {
    /// The primary key of the item checked (of the store's table).
    pub key: Key,
    /// What must hold of that item (a `ConditionCheck`'s expression).
    pub condition: Expr,
}

impl Guard {
    /// The item is still absent (`attribute_not_exists` on a key attribute).
    pub fn absent(key: Key, key_attribute: &str) -> Self {
        Guard {
            key,
            condition: Expr::not_exists(key_attribute),
        }
    }

    /// The item still exists.
    pub fn present(key: Key, key_attribute: &str) -> Self {
        Guard {
            key,
            condition: Expr::exists(key_attribute),
        }
    }

    /// Any condition on the item.
    pub fn new(key: Key, condition: Expr) -> Self {
        Guard { key, condition }
    }
}

/// One write of a guarded sequence, optionally with a condition on the item
/// written itself.
#[derive(Debug, Clone, PartialEq)]
pub enum GuardedOp {
    /// A PutItem of the whole item, replacing any of the same key.
    Put {
        /// The whole item, key attributes included.
        item: Item,
        /// A condition on this item; `Some` sends the write in a
        /// transaction of its own, counted in [`GuardedReport::refused`]
        /// when it fails.
        condition: Option<Expr>,
    },
    /// A DeleteItem (applied when the item is already gone, too).
    Delete {
        /// The primary key of the item deleted.
        key: Key,
        /// A condition on this item; `Some` sends the write in a
        /// transaction of its own, counted in [`GuardedReport::refused`]
        /// when it fails.
        condition: Option<Expr>,
    },
    /// An UpdateItem (`SET ...`, `ADD ...`): changes some attributes and
    /// leaves what the service wrote meanwhile in the others.
    Update {
        /// The primary key of the item updated.
        key: Key,
        /// `UpdateExpression` (`SET ...`, `ADD ...`).
        update: Expr,
        /// A condition on this item; `Some` sends the write in a
        /// transaction of its own, counted in [`GuardedReport::refused`]
        /// when it fails.
        condition: Option<Expr>,
    },
}

impl GuardedOp {
    /// An unconditional delete.
    pub fn delete(key: Key) -> Self {
        GuardedOp::Delete {
            key,
            condition: None,
        }
    }

    /// An unconditional put.
    pub fn put(item: Item) -> Self {
        GuardedOp::Put {
            item,
            condition: None,
        }
    }

    /// The op's own condition, if any.
    pub fn condition(&self) -> Option<&Expr> {
        match self {
            GuardedOp::Put { condition, .. }
            | GuardedOp::Delete { condition, .. }
            | GuardedOp::Update { condition, .. } => condition.as_ref(),
        }
    }

    /// The item (put) or key (delete) the op writes.
    pub fn target(&self) -> &Item {
        match self {
            GuardedOp::Put { item, .. } => item,
            GuardedOp::Delete { key, .. } | GuardedOp::Update { key, .. } => key,
        }
    }

    fn key_id(&self, key_attributes: (&str, &str)) -> String {
        super::key_id(self.target(), key_attributes)
    }
}

impl From<WriteOp> for GuardedOp {
    fn from(op: WriteOp) -> Self {
        match op {
            WriteOp::Put(item) => GuardedOp::put(item),
            WriteOp::Delete(key) => GuardedOp::delete(key),
        }
    }
}

/// What a guarded write did.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct GuardedReport {
    /// Writes applied, every guard holding.
    pub applied: usize,
    /// Writes not applied because a guard stopped holding (the decision
    /// went stale): the one transaction it failed in and every later one.
    pub withheld: usize,
    /// Writes not applied because their own condition failed.
    pub refused: usize,
    /// `TransactWriteItems` requests sent.
    pub requests: u32,
    /// Write capacity consumed (as the store reports it).
    pub consumed_capacity: f64,
}

impl GuardedReport {
    /// Whether every guard held to the end.
    pub fn held(&self) -> bool {
        self.withheld == 0
    }

    /// Add another report's counts (several guarded writes of one decision).
    pub fn add(&mut self, other: &GuardedReport) {
        self.applied += other.applied;
        self.withheld += other.withheld;
        self.refused += other.refused;
        self.requests += other.requests;
        self.consumed_capacity += other.consumed_capacity;
    }
}

/// Guarded writes. Implemented for every [`Store`](super::Store), through
/// [`Store::call`](super::Store::call).
#[async_trait]
pub trait GuardedWriter: Send + Sync {
    /// Apply `ops` only while every guard holds (see the module docs).
    async fn write_guarded(
        &self,
        guards: &[Guard],
        ops: Vec<GuardedOp>,
    ) -> Result<GuardedReport, StoreError>;
}

/// The transactions a guarded write is sent as, in order: each is the
/// indexes of its ops (the guards go in every one). Ops on the same key
/// collapse to the last; an op with its own condition goes alone; the
/// others fill transactions of `MAX_TRANSACT_ACTIONS - guards` ops.
pub(crate) fn plan_transactions(
    guards: usize,
    ops: &[GuardedOp],
    key_attributes: (&str, &str),
) -> Result<Vec<Vec<usize>>, StoreError> {
    if guards >= MAX_TRANSACT_ACTIONS {
        return Err(StoreError::Permanent {
            operation: "TransactWriteItems",
            code: "TooManyGuards".into(),
            message: format!(
                "{guards} guards leave no room for a write in a transaction of {MAX_TRANSACT_ACTIONS}"
            ),
        });
    }
    let room = MAX_TRANSACT_ACTIONS - guards;
    let mut last = std::collections::HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        last.insert(op.key_id(key_attributes), i);
    }
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if last.get(&op.key_id(key_attributes)) != Some(&i) {
            continue;
        }
        if op.condition().is_some() {
            if !open.is_empty() {
                out.push(std::mem::take(&mut open));
            }
            out.push(vec![i]);
            continue;
        }
        open.push(i);
        if open.len() == room {
            out.push(std::mem::take(&mut open));
        }
    }
    if !open.is_empty() {
        out.push(open);
    }
    Ok(out)
}

/// A guard naming an item that is also written in the same request:
/// DynamoDB refuses two actions on one item in a transaction, and the
/// decision would be about the item itself (its own condition says that).
pub(crate) fn guard_on_written_item(
    guards: &[Guard],
    ops: &[GuardedOp],
    key_attributes: (&str, &str),
) -> Option<String> {
    let written: std::collections::HashSet<String> =
        ops.iter().map(|op| op.key_id(key_attributes)).collect();
    guards
        .iter()
        .map(|g| super::key_id(&g.key, key_attributes))
        .find(|id| written.contains(id))
}

impl super::DynamoStore {
    /// [`GuardedWriter::write_guarded`] as `TransactWriteItems` requests
    /// ([`plan_transactions`]), one after the other.
    pub(super) async fn write_guarded_in_transactions(
        &self,
        guards: &[Guard],
        ops: Vec<GuardedOp>,
    ) -> Result<GuardedReport, StoreError> {
        use super::transact::{TransactOp, TransactOutcome};
        let keys = self.key_attributes();
        if let Some(id) = guard_on_written_item(guards, &ops, keys) {
            return Err(StoreError::Permanent {
                operation: "TransactWriteItems",
                code: "GuardOnWrittenItem".into(),
                message: format!("a guard names an item the same request writes ({id})"),
            });
        }
        let plan = plan_transactions(guards.len(), &ops, keys)?;
        let mut report = GuardedReport::default();
        let planned: usize = plan.iter().map(Vec::len).sum();
        let mut slots: Vec<Option<GuardedOp>> = ops.into_iter().map(Some).collect();
        let mut sent = 0;
        for indexes in plan {
            let n = indexes.len();
            let own_condition = n == 1
                && slots[indexes[0]]
                    .as_ref()
                    .is_some_and(|op| op.condition().is_some());
            let mut actions: Vec<TransactOp> = guards
                .iter()
                .map(|g| TransactOp::Check {
                    table: self.table.clone(),
                    key: g.key.clone(),
                    condition: g.condition.clone(),
                })
                .collect();
            for i in indexes {
                let op = slots[i].take().expect("each op is planned once");
                actions.push(match op {
                    GuardedOp::Put { item, condition } => TransactOp::Put {
                        table: self.table.clone(),
                        item,
                        condition,
                    },
                    GuardedOp::Delete { key, condition } => TransactOp::Delete {
                        table: self.table.clone(),
                        key,
                        condition,
                    },
                    GuardedOp::Update {
                        key,
                        update,
                        condition,
                    } => TransactOp::Update {
                        table: self.table.clone(),
                        key,
                        update,
                        condition,
                    },
                });
            }
            report.requests += 1;
            let (outcome, consumed) = self.send_transaction(actions).await?;
            report.consumed_capacity += consumed;
            match outcome {
                TransactOutcome::Applied => report.applied += n,
                TransactOutcome::Cancelled(_) if (0..guards.len()).any(|g| outcome.failed(g)) => {
                    report.withheld = planned - sent;
                    return Ok(report);
                }
                TransactOutcome::Cancelled(_) if own_condition => report.refused += 1,
                TransactOutcome::Cancelled(reasons) => {
                    return Err(StoreError::Permanent {
                        operation: "TransactWriteItems",
                        code: "UnexpectedCancellation".into(),
                        message: format!(
                            "a transaction of unconditional writes was cancelled ({reasons:?})"
                        ),
                    });
                }
            }
            sent += n;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;

    const KEYS: (&str, &str) = ("PK", "SK");

    fn key(pk: &str) -> Key {
        Key::from([
            ("PK".to_owned(), AttributeValue::S(pk.into())),
            ("SK".to_owned(), AttributeValue::S("x".into())),
        ])
    }

    #[test]
    fn unconditional_ops_fill_transactions_beside_the_guards() {
        let ops: Vec<GuardedOp> = (0..250)
            .map(|i| GuardedOp::delete(key(&i.to_string())))
            .collect();
        let plan = plan_transactions(2, &ops, KEYS).unwrap();
        let sizes: Vec<usize> = plan.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![98, 98, 54]);
        let flat: Vec<usize> = plan.into_iter().flatten().collect();
        assert_eq!(flat, (0..250).collect::<Vec<_>>(), "order is kept");
    }

    #[test]
    fn an_op_with_its_own_condition_goes_alone_in_its_place() {
        let ops = vec![
            GuardedOp::delete(key("a")),
            GuardedOp::Delete {
                key: key("inv"),
                condition: Some(Expr::exists("PK")),
            },
            GuardedOp::delete(key("b")),
            GuardedOp::delete(key("c")),
        ];
        assert_eq!(
            plan_transactions(1, &ops, KEYS).unwrap(),
            vec![vec![0], vec![1], vec![2, 3]]
        );
    }

    #[test]
    fn ops_on_one_key_collapse_to_the_last() {
        let mut item = key("a");
        item.insert("V".into(), AttributeValue::N("1".into()));
        let ops = vec![
            GuardedOp::put(item),
            GuardedOp::delete(key("b")),
            GuardedOp::delete(key("a")),
        ];
        assert_eq!(plan_transactions(1, &ops, KEYS).unwrap(), vec![vec![1, 2]]);
    }

    #[test]
    fn no_room_for_a_write_is_an_error_not_an_empty_plan() {
        let ops = vec![GuardedOp::delete(key("a"))];
        assert!(plan_transactions(100, &ops, KEYS).is_err());
        assert_eq!(plan_transactions(99, &ops, KEYS).unwrap(), vec![vec![0]]);
        assert!(plan_transactions(1, &[], KEYS).unwrap().is_empty());
    }

    #[test]
    fn a_guard_on_a_written_item_is_found() {
        let guards = [Guard::absent(key("g"), "PK")];
        assert_eq!(
            guard_on_written_item(&guards, &[GuardedOp::delete(key("a"))], KEYS),
            None
        );
        assert!(guard_on_written_item(&guards, &[GuardedOp::delete(key("g"))], KEYS).is_some());
    }
}
