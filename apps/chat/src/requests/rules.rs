//! What must hold for one chat request, decided from its two copies as they
//! are now (consistent reads), never from the record that triggered it: the
//! same copies give the same plan, whichever record, in whichever order,
//! however often.
//!
//! - a copy that left `pending` carries no `PendingId` (the sparse index
//!   holds pending requests only); a pending copy without one gets its
//!   request id as `PendingId`, so the expiry can find it;
//! - one copy terminal, the other pending: the pending one follows (same
//!   status, same `StatusReason`);
//! - both terminal and different: a conflict, reported, never overwritten;
//! - the group chat's copy accepted and not yet joined: the user joins.

use crate::items::{RequestCopy, Status};
use crate::keys::RequestKey;

/// The writes one request needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Copies to drop `PendingId` from, with the terminal status they have.
    pub drop_pending_id: Vec<(RequestKey, Status)>,
    /// A pending copy without `PendingId`.
    pub add_pending_id: Option<RequestKey>,
    /// A pending copy that follows its twin's terminal status (and reason).
    pub follow: Option<Follow>,
    /// Two different terminal statuses: (user copy's, group chat copy's).
    pub conflict: Option<(Status, Status)>,
    /// The group chat copy is accepted and the user is not a member by it.
    pub join: bool,
}

/// A pending copy to set to its twin's terminal status. Decided from the
/// twin: the write carries a check that the twin still holds `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follow {
    /// The pending copy to update.
    pub copy: RequestKey,
    /// The twin's terminal status, to copy.
    pub status: Status,
    /// The twin's `StatusReason`, copied with it.
    pub reason: Option<String>,
    /// The copy the status is read from.
    pub twin: RequestKey,
}

/// The plan for a request given its copies (either may be missing).
pub fn plan(user: Option<&RequestCopy>, chat: Option<&RequestCopy>) -> Plan {
    let mut p = Plan::default();
    for c in [user, chat].into_iter().flatten() {
        if c.status.is_terminal() && c.pending_id.is_some() {
            p.drop_pending_id.push((c.key().clone(), c.status));
        }
    }
    if let (Some(u), Some(g)) = (user, chat) {
        match (u.status.is_terminal(), g.status.is_terminal()) {
            (true, false) => p.follow = Some(follow(g, u)),
            (false, true) => p.follow = Some(follow(u, g)),
            (true, true) if u.status != g.status => p.conflict = Some((u.status, g.status)),
            _ => {}
        }
    }
    if p.follow.is_none() {
        p.add_pending_id = [user, chat]
            .into_iter()
            .flatten()
            .find(|c| c.status == Status::Pending && c.pending_id.is_none())
            .map(|c| c.key().clone());
    }
    p.join = chat.is_some_and(|g| g.status == Status::Accepted && g.joined_at.is_none())
        && p.conflict.is_none();
    p
}

fn follow(pending: &RequestCopy, terminal: &RequestCopy) -> Follow {
    Follow {
        copy: pending.key().clone(),
        status: terminal.status,
        reason: terminal.status_reason.clone(),
        twin: terminal.key().clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;
    use chrono::{TimeZone, Utc};

    fn pair(user: Status, chat: Status) -> (RequestCopy, RequestCopy) {
        let t = Utc.with_ymd_and_hms(2024, 5, 1, 10, 0, 0).unwrap();
        let [ku, kg] = RequestKey::copies("u1", "g1", t, "r1");
        let copy = |key, status: Status| RequestCopy {
            key: Some(key),
            id: "r1".into(),
            user_id: "u1".into(),
            chat_id: "g1".into(),
            created_at: keys::format_time(t),
            status,
            seen: false,
            pending_id: (status == Status::Pending).then(|| "p".into()),
            status_reason: None,
            joined_at: None,
        };
        (copy(ku, user), copy(kg, chat))
    }

    #[test]
    fn both_pending_needs_nothing() {
        let (u, g) = pair(Status::Pending, Status::Pending);
        assert_eq!(plan(Some(&u), Some(&g)), Plan::default());
    }

    #[test]
    fn the_pending_copy_follows_in_either_order() {
        let (u, g) = pair(Status::Cancelled, Status::Pending);
        let p = plan(Some(&u), Some(&g));
        assert_eq!(p.follow.unwrap().copy, *g.key());
        let (u, g) = pair(Status::Pending, Status::Accepted);
        let p = plan(Some(&u), Some(&g));
        let f = p.follow.clone().unwrap();
        assert_eq!((f.copy, f.status), (u.key().clone(), Status::Accepted));
        assert!(p.join);
    }

    #[test]
    fn conflicts_are_reported_not_resolved() {
        let (u, g) = pair(Status::Cancelled, Status::Accepted);
        let p = plan(Some(&u), Some(&g));
        assert_eq!(p.conflict, Some((Status::Cancelled, Status::Accepted)));
        assert!(p.follow.is_none() && !p.join);
    }

    #[test]
    fn terminal_copies_lose_their_pending_id() {
        let (mut u, mut g) = pair(Status::Expired, Status::Expired);
        u.pending_id = Some("p".into());
        let p = plan(Some(&u), Some(&g));
        assert_eq!(p.drop_pending_id, vec![(u.key().clone(), Status::Expired)]);
        g.joined_at = Some("t".into());
        assert!(!plan(None, Some(&g)).join);
    }

    #[test]
    fn a_pending_copy_without_pending_id_gets_one() {
        let (u, mut g) = pair(Status::Pending, Status::Pending);
        g.pending_id = None;
        assert_eq!(
            plan(Some(&u), Some(&g)).add_pending_id,
            Some(g.key().clone())
        );
        assert_eq!(plan(None, Some(&g)).add_pending_id, Some(g.key().clone()));
    }
}
