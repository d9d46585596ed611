//! The date lookup's rules, without I/O: which lookup items list a file,
//! how a `SavedDate` list reads, and what a change to it writes.
//!
//! - A file at `t` is listed by four items, bottom-up ([`path`]): its day
//!   (`hh-mm-ss`), its month (`DD`), its year (`MM`) and `root` (`YYYY`).
//! - A list is read leniently ([`read_list`]): unpadded entries count as
//!   their canonical form, duplicates once; entries that name nothing
//!   (another type, malformed, a day the month does not have) are counted
//!   as unreadable and dropped by the next write.
//! - A change ([`plan`]) is a set of children added or removed. It costs a
//!   write only when the set changes (or a tidy-up asks for the canonical
//!   form); the written list is canonical: padded, sorted in time order,
//!   no duplicates. An item left with nothing to list is deleted, so an
//!   absent item and an empty one mean the same.
//! - [`lookup_of`] is the lookup a set of files must end with: what the
//!   stream maintains and what `rebuild-lookup` rebuilds.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::keys::{Child, FileTime, LookupKey};

/// A lookup item's `SavedDate` as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    /// The children its entries name (duplicates merged).
    pub children: BTreeSet<Child>,
    /// Entries that name nothing.
    pub unreadable: usize,
    /// The stored value is exactly [`canonical`] of `children`.
    pub canonical: bool,
}

/// Read a `SavedDate` value (`None`: the attribute or the item is absent).
/// A list of strings is expected; a string set is read too.
pub fn read_list(key: LookupKey, saved: Option<&AttributeValue>) -> Listed {
    let mut listed = Listed::default();
    let entries: Vec<Option<&str>> = match saved {
        None => {
            listed.canonical = true;
            return listed;
        }
        Some(AttributeValue::L(values)) => values
            .iter()
            .map(|v| match v {
                AttributeValue::S(s) => Some(s.as_str()),
                _ => None,
            })
            .collect(),
        Some(AttributeValue::Ss(values)) => values.iter().map(|s| Some(s.as_str())).collect(),
        Some(_) => {
            listed.unreadable = 1;
            return listed;
        }
    };
    let mut stored = Vec::new();
    for entry in &entries {
        match entry.map(|e| key.child(e)) {
            Some(Ok(child)) => {
                listed.children.insert(child);
            }
            _ => listed.unreadable += 1,
        }
        stored.push(*entry);
    }
    let canonical = canonical(&listed.children);
    listed.canonical = matches!(saved, Some(AttributeValue::L(_)))
        && stored.len() == canonical.len()
        && stored
            .iter()
            .zip(&canonical)
            .all(|(s, c)| *s == Some(c.as_str()));
    listed
}

/// The canonical list of `children`: their entries, in time order.
pub fn canonical(children: &BTreeSet<Child>) -> Vec<String> {
    children.iter().map(|c| c.entry()).collect()
}

/// One change asked of a lookup item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// List this child (nothing to do if it is listed).
    Add(Child),
    /// Stop listing this child (nothing to do if it is not).
    Remove(Child),
    /// Rewrite the list in canonical form if it is not (rebuild).
    Tidy,
}

/// What to write to the item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The item already lists what `ops` ask: no write.
    Unchanged,
    /// `SavedDate` becomes this list.
    Write(Vec<String>),
    /// Nothing left to list: delete the item.
    Delete,
}

/// The write for `ops`, applied in order to the item as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The write, if any.
    pub change: Change,
    /// The children listed after the change.
    pub after: BTreeSet<Child>,
    /// Per op: whether it changed the set.
    pub changed: Vec<bool>,
}

/// Apply `ops` to an item that `exists` (or not) with `listed`.
pub fn plan(exists: bool, listed: &Listed, ops: &[Op]) -> Plan {
    let mut after = listed.children.clone();
    let mut tidy = false;
    let changed = ops
        .iter()
        .map(|op| match op {
            Op::Add(c) => after.insert(*c),
            Op::Remove(c) => after.remove(c),
            Op::Tidy => {
                tidy = true;
                false
            }
        })
        .collect();
    let change = if after.is_empty() {
        if exists {
            Change::Delete
        } else {
            Change::Unchanged
        }
    } else if after == listed.children && (listed.canonical || !tidy) {
        Change::Unchanged
    } else {
        Change::Write(canonical(&after))
    };
    Plan {
        change,
        after,
        changed,
    }
}

/// The four lookup items listing `t`, bottom-up, each with the child it
/// lists: (day, the file), (month, the day), (year, the month), (root,
/// the year).
pub fn path(t: FileTime) -> Vec<(LookupKey, Child)> {
    let mut out = Vec::with_capacity(4);
    let mut child = Child::File(t);
    while let Some(parent) = child.parent() {
        out.push((parent, child));
        child = Child::Lookup(parent);
    }
    out
}

/// The lookup a set of files must end with: every lookup item and its
/// children.
pub fn lookup_of(
    files: impl IntoIterator<Item = FileTime>,
) -> BTreeMap<LookupKey, BTreeSet<Child>> {
    let mut lookup: BTreeMap<LookupKey, BTreeSet<Child>> = BTreeMap::new();
    for t in files {
        for (item, child) in path(t) {
            lookup.entry(item).or_default().insert(child);
        }
    }
    lookup
}

/// A lookup, its items grouped by level (days first, root last): the
/// order in which additions are written, so that a parent never lists a
/// child before the child lists something.
pub fn by_level(
    lookup: BTreeMap<LookupKey, BTreeSet<Child>>,
) -> [Vec<(LookupKey, BTreeSet<Child>)>; 4] {
    let mut levels: [Vec<_>; 4] = Default::default();
    for (key, children) in lookup {
        levels[usize::from(key.level())].push((key, children));
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> FileTime {
        FileTime::parse(s).unwrap()
    }

    fn list(entries: &[&str]) -> AttributeValue {
        AttributeValue::L(
            entries
                .iter()
                .map(|e| AttributeValue::S((*e).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn a_file_is_listed_by_four_items() {
        let f = t("2024-03-05-07-08-09");
        let path: Vec<(String, String)> = path(f)
            .into_iter()
            .map(|(k, c)| (k.pk(), c.entry()))
            .collect();
        assert_eq!(
            path,
            [
                ("2024-03-05".into(), "07-08-09".into()),
                ("2024-03".into(), "05".into()),
                ("2024".into(), "03".into()),
                ("root".into(), "2024".into()),
            ]
        );
    }

    #[test]
    fn lists_read_leniently() {
        let month = LookupKey::Month {
            year: 2024,
            month: 2,
        };
        let l = read_list(month, Some(&list(&["05", "5", "1", "30", "xx"])));
        assert_eq!(canonical(&l.children), ["01", "05"]);
        assert_eq!(l.unreadable, 2, "30 February and xx");
        assert!(!l.canonical);
        assert!(read_list(month, Some(&list(&["01", "05"]))).canonical);
        assert!(
            !read_list(month, Some(&list(&["05", "01"]))).canonical,
            "order"
        );
        let set = AttributeValue::Ss(vec!["03".into()]);
        let l = read_list(month, Some(&set));
        assert_eq!((l.children.len(), l.canonical), (1, false));
        let l = read_list(month, Some(&AttributeValue::S("03".into())));
        assert_eq!((l.children.len(), l.unreadable), (0, 1));
        let mixed = AttributeValue::L(vec![AttributeValue::N("3".into())]);
        assert_eq!(read_list(month, Some(&mixed)).unreadable, 1);
        assert_eq!(
            read_list(month, None),
            Listed {
                canonical: true,
                ..Listed::default()
            }
        );
    }

    #[test]
    fn a_change_writes_only_when_the_set_changes() {
        let day = LookupKey::Day(t("2024-03-05-00-00-00").date());
        let a = Child::File(t("2024-03-05-07-08-09"));
        let b = Child::File(t("2024-03-05-01-00-00"));
        let seen = read_list(day, Some(&list(&["7-8-9"])));

        let p = plan(true, &seen, &[Op::Add(a)]);
        assert_eq!((p.change, p.changed), (Change::Unchanged, vec![false]));
        let p = plan(true, &seen, &[Op::Add(b)]);
        assert_eq!(
            p.change,
            Change::Write(vec!["01-00-00".into(), "07-08-09".into()]),
            "sorted, canonical"
        );
        let p = plan(true, &seen, &[Op::Remove(a)]);
        assert_eq!((p.change, p.after.is_empty()), (Change::Delete, true));
        let p = plan(true, &seen, &[Op::Remove(b)]);
        assert_eq!(p.change, Change::Unchanged);
        let p = plan(true, &seen, &[Op::Tidy]);
        assert_eq!(p.change, Change::Write(vec!["07-08-09".into()]));
        // Several ops at once, in order.
        let p = plan(true, &seen, &[Op::Remove(a), Op::Add(b)]);
        assert_eq!(p.change, Change::Write(vec!["01-00-00".into()]));
        assert_eq!(p.changed, [true, true]);
        let p = plan(true, &seen, &[Op::Add(b), Op::Remove(b)]);
        assert_eq!(p.change, Change::Unchanged);
        // Absent items.
        let none = read_list(day, None);
        assert_eq!(
            plan(false, &none, &[Op::Remove(a)]).change,
            Change::Unchanged
        );
        assert_eq!(
            plan(false, &none, &[Op::Add(a)]).change,
            Change::Write(vec!["07-08-09".into()])
        );
        // An empty item that exists is deleted once touched.
        assert_eq!(plan(true, &none, &[Op::Remove(a)]).change, Change::Delete);
    }

    #[test]
    fn the_lookup_of_files() {
        let files = [
            t("2024-03-05-07-08-09"),
            t("2024-03-05-01-00-00"),
            t("2024-04-01-00-00-00"),
            t("2023-12-31-23-59-59"),
        ];
        let lookup = lookup_of(files);
        let text: Vec<(String, Vec<String>)> =
            lookup.iter().map(|(k, c)| (k.pk(), canonical(c))).collect();
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            text,
            [
                ("2023-12-31".into(), s(&["23-59-59"])),
                ("2024-03-05".into(), s(&["01-00-00", "07-08-09"])),
                ("2024-04-01".into(), s(&["00-00-00"])),
                ("2023-12".into(), s(&["31"])),
                ("2024-03".into(), s(&["05"])),
                ("2024-04".into(), s(&["01"])),
                ("2023".into(), s(&["12"])),
                ("2024".into(), s(&["03", "04"])),
                ("root".into(), s(&["2023", "2024"])),
            ]
        );
        let levels = by_level(lookup);
        assert_eq!(levels.map(|l| l.len()), [3, 3, 2, 1]);
    }

    /// The stream's protocol, run one record at a time on an in-memory
    /// lookup: add bottom-up; remove the file, then each emptied item
    /// from its parent.
    fn ensure(lookup: &mut BTreeMap<LookupKey, Vec<String>>, t: FileTime) {
        for (key, child) in path(t) {
            step(lookup, key, Op::Add(child));
        }
    }

    fn remove(lookup: &mut BTreeMap<LookupKey, Vec<String>>, t: FileTime) {
        for (key, child) in path(t) {
            if !step(lookup, key, Op::Remove(child)) {
                return;
            }
        }
    }

    /// One item's change; true when the item is empty after it.
    fn step(lookup: &mut BTreeMap<LookupKey, Vec<String>>, key: LookupKey, op: Op) -> bool {
        let stored = lookup
            .get(&key)
            .map(|l| list(&l.iter().map(String::as_str).collect::<Vec<_>>()));
        let listed = read_list(key, stored.as_ref());
        let p = plan(stored.is_some(), &listed, &[op]);
        match p.change {
            Change::Unchanged => {}
            Change::Write(l) => {
                lookup.insert(key, l);
            }
            Change::Delete => {
                lookup.remove(&key);
            }
        }
        p.after.is_empty()
    }

    proptest! {
        /// Any sequence of file writes and removals, each delivered once or
        /// twice, leaves the lookup of the files present.
        #[test]
        fn the_protocol_ends_at_the_lookup_of_the_files(
            events in proptest::collection::vec((0usize..12, any::<bool>(), any::<bool>()), 0..60)
        ) {
            let pool: Vec<FileTime> = (0..12)
                .map(|i| FileTime::from_epoch(1_700_000_000 + (i as i64 % 4) * 86_400 * 20 + i as i64 * 7).unwrap())
                .collect();
            let mut present = BTreeSet::new();
            let mut lookup = BTreeMap::new();
            for (i, write, twice) in events {
                let f = pool[i];
                for _ in 0..(1 + usize::from(twice)) {
                    if write {
                        present.insert(f);
                        ensure(&mut lookup, f);
                    } else {
                        present.remove(&f);
                        remove(&mut lookup, f);
                    }
                }
            }
            let expected: BTreeMap<LookupKey, Vec<String>> = lookup_of(present)
                .into_iter()
                .map(|(k, c)| (k, canonical(&c)))
                .collect();
            prop_assert_eq!(lookup, expected);
        }
    }
}
