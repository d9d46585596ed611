//! Writes on one clock: what a soak test logs of each write that landed,
//! the service's as it makes them and the worker's from the calls the
//! toolkit's recording store wrote down (a key, put or delete, and the
//! time it was in flight), and what such a log says an item certainly was
//! over a span of time.

use std::time::Instant;

/// Whether an item exists after a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The item exists after the write.
    Put,
    /// The item is gone after the write.
    Delete,
}

/// A write that landed, with the time it was in flight (from its first
/// attempt to its reply).
pub trait Landed {
    /// What it did, when it started and when it ended.
    fn span(&self) -> (Kind, Instant, Instant);
    /// What it did: [`Landed::span`]'s kind.
    fn kind(&self) -> Kind {
        self.span().0
    }
    /// When its first attempt was sent.
    fn start(&self) -> Instant {
        self.span().1
    }
    /// When its reply came back.
    fn end(&self) -> Instant {
        self.span().2
    }
}

/// Whether `writes` (all of one key) say the item existed for the whole of
/// `[start, end]`: the last write completed before `start` is a Put, and
/// no Delete was in flight or made between that Put and `end`.
pub fn definitely_live<W: Landed>(writes: &[&W], start: Instant, end: Instant) -> bool {
    let Some(last) = writes
        .iter()
        .filter(|w| w.end() < start)
        .max_by_key(|w| w.end())
    else {
        return false;
    };
    last.kind() == Kind::Put
        && !writes
            .iter()
            .any(|w| w.kind() == Kind::Delete && w.start() < end && w.end() > last.start())
}

/// Whether `writes` (all of one key) say the item was absent for the whole
/// of `[start, end]`: never put before `end`, or the last write completed
/// before `start` is a Delete and no Put was in flight or made between
/// that Delete and `end`.
pub fn definitely_absent<W: Landed>(writes: &[&W], start: Instant, end: Instant) -> bool {
    let since = match writes
        .iter()
        .filter(|w| w.end() < start)
        .max_by_key(|w| w.end())
    {
        Some(w) if w.kind() == Kind::Put => return false,
        Some(w) => Some(w.start()),
        None => None,
    };
    !writes
        .iter()
        .any(|w| w.kind() == Kind::Put && w.start() < end && since.is_none_or(|s| w.end() > s))
}
