//! Seeded workloads for any app's tests: the writes of a history, delivered
//! the way a stream delivers them under at-least-once semantics (in any
//! order across items, some twice), reproducibly from one seed.
//!
//! An app's own model of its service (which items exist, which writes its
//! service makes) is the app's: Nishiki's is `tests/it/support/workload.rs`.
//! This module holds what every app's randomized tests share: one seeded
//! generator ([`Seeded`]), a write ([`Write`]) and how to perform writes
//! ([`apply`], [`apply_batched`]).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use worker_engine::item::Item;
use worker_engine::store::{BatchWriter, DynamoStore, Key, Store, WriteOp};

/// One write of a history: a whole-item Put or a Delete, unconditional (as
/// a service writes).
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Put this whole item (replacing the one of its key, if any).
    Put(Item),
    /// Delete the item of this key (nothing if it is absent).
    Delete(Key),
}

/// Every random choice of a test, from one seed (never `random()`): the same
/// seed gives the same history and the same deliveries.
#[derive(Debug, Clone)]
pub struct Seeded(StdRng);

impl Seeded {
    /// The generator of `seed`: the same seed makes the same choices.
    pub fn new(seed: u64) -> Self {
        Seeded(StdRng::seed_from_u64(seed))
    }

    /// The generator, for the app's own choices.
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.0
    }

    /// `items` in a random order.
    pub fn shuffled<T>(&mut self, mut items: Vec<T>) -> Vec<T> {
        items.shuffle(&mut self.0);
        items
    }

    /// `items` as an at-least-once delivery: shuffled, and each item with
    /// probability `rate` delivered once more, at a random later position.
    /// Every item is delivered at least once.
    pub fn redelivered<T: Clone>(&mut self, items: Vec<T>, rate: f64) -> Vec<T> {
        let mut out = self.shuffled(items);
        let again: Vec<usize> = (0..out.len())
            .filter(|_| self.0.random_bool(rate.clamp(0.0, 1.0)))
            .collect();
        // From the last first delivery back: an insertion never moves a
        // first delivery past its own redelivery.
        for &first in again.iter().rev() {
            let item = out[first].clone();
            let at = self.0.random_range(first + 1..=out.len());
            out.insert(at, item);
        }
        out
    }

    /// `items` cut into batches of 1 to `max` items.
    pub fn batches<T>(&mut self, items: Vec<T>, max: usize) -> Vec<Vec<T>> {
        let mut batches = Vec::new();
        let mut rest = items.into_iter().peekable();
        while rest.peek().is_some() {
            let size = self.0.random_range(1..=max.max(1));
            batches.push(rest.by_ref().take(size).collect());
        }
        batches
    }
}

/// Perform `writes` in order, one request each (a service's calls).
pub async fn apply(store: &dyn Store, writes: &[Write]) {
    for w in writes {
        match w {
            Write::Put(item) => store.put(item.clone(), None).await,
            Write::Delete(key) => store.delete(key, None).await,
        }
        .expect("a service write");
    }
}

/// Perform `writes` in order, in runs of distinct keys (a write to a key
/// already in the run starts the next one), each run one
/// [`BatchWriter::batch_write`] (BatchWriteItem requests of 25): every
/// write lands and leaves its stream record, each key's in its order, in
/// about a twentieth of [`apply`]'s requests. For a history whose records a
/// test delivers in any order anyway: within one request, the order across
/// keys is the store's.
pub async fn apply_batched(store: &DynamoStore, writes: &[Write]) {
    let (pk, sk) = store.key_attributes();
    let mut run: Vec<WriteOp> = Vec::new();
    let mut keys = Vec::new();
    for w in writes {
        let (op, map) = match w {
            Write::Put(item) => (WriteOp::Put(item.clone()), item),
            Write::Delete(key) => (WriteOp::Delete(key.clone()), key),
        };
        let key = (map.get(pk), map.get(sk));
        if keys.contains(&key) {
            send(store, std::mem::take(&mut run)).await;
            keys.clear();
        }
        keys.push(key);
        run.push(op);
    }
    send(store, run).await;
}

/// One run of [`apply_batched`]: every op written (none collapsed).
async fn send(store: &DynamoStore, ops: Vec<WriteOp>) {
    if ops.is_empty() {
        return;
    }
    let n = ops.len();
    let report = store.batch_write(ops).await.expect("a service write");
    assert_eq!(report.items, n, "distinct keys: no write collapsed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_deliveries() {
        let items: Vec<u32> = (0..200).collect();
        let a = Seeded::new(7).redelivered(items.clone(), 0.2);
        let b = Seeded::new(7).redelivered(items.clone(), 0.2);
        assert_eq!(a, b);
        assert_ne!(a, Seeded::new(8).redelivered(items.clone(), 0.2));
        let mut seen = a.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, items, "every item at least once");
        assert!(
            a.len() > items.len() + 10,
            "some twice ({} of 200)",
            a.len()
        );
        assert_ne!(&a[..200], &items[..], "shuffled");
    }

    #[test]
    fn a_redelivery_comes_after_the_first() {
        let a = Seeded::new(3).redelivered((0..50).collect::<Vec<u32>>(), 1.0);
        assert_eq!(a.len(), 100);
        for x in 0..50 {
            let first = a.iter().position(|y| *y == x).unwrap();
            let last = a.iter().rposition(|y| *y == x).unwrap();
            assert!(first < last, "{x}");
        }
    }

    #[test]
    fn batches_keep_every_item_in_order() {
        let items: Vec<u32> = (0..100).collect();
        let batches = Seeded::new(1).batches(items.clone(), 7);
        assert!(batches.iter().all(|b| (1..=7).contains(&b.len())));
        assert_eq!(batches.concat(), items);
    }
}
