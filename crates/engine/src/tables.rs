//! An app that serves several tables, each named by a variable of its own
//! (`PEOPLE_TABLE`, `ORDERS_TABLE`, ...) instead of `TABLE_NAME`.
//!
//! The app lists its tables once, as a [`TableSet`]; the engine gives it
//! their names from the environment ([`TableNames`]), a store per table
//! ([`Stores`]), handlers that each serve one table ([`TableHandler`],
//! routed by the `eventSourceARN` of a record: [`routes`]) and the
//! table-by-table grants of its functions ([`TableAccess`], [`TableAccess::grants`]).
//! The worker's own store (its transactions, request counts and
//! checkpoints) is opened on [`TableSet::HOME`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use crate::env::{ConfigError, Env};
use crate::runtime::AllHandlers;
use crate::schema::TableSchema;
use crate::store::{DynamoStore, Store};
use crate::stream::engine::RecordProcessor;
use crate::stream::source::ByTable;

/// The tables of an app, as data.
pub trait TableSet: Copy + Ord + Debug + Send + Sync + 'static {
    /// Every table, in the order the app lists them.
    const ALL: &'static [Self];
    /// The table the worker's own store is opened on.
    const HOME: Self;
    /// The variable naming it (`PEOPLE_TABLE`).
    fn env_var(self) -> &'static str;
    /// Its name where no variable names it (the seed's; local runs).
    fn default_name(self) -> &'static str;
    /// Its keys, indexes and stream.
    fn schema(self) -> TableSchema;
}

/// Each table's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableNames<T: TableSet>(BTreeMap<T, String>);

impl<T: TableSet> TableNames<T> {
    /// Each table named by `name`.
    pub fn new(name: impl Fn(T) -> String) -> Self {
        TableNames(T::ALL.iter().map(|t| (*t, name(*t))).collect())
    }

    /// Each table's variable, required (in [`TableSet::ALL`]'s order: the
    /// error names the first one missing).
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mut names = BTreeMap::new();
        for t in T::ALL {
            names.insert(
                *t,
                env.required(t.env_var(), crate::settings::A_TABLE_NAME)?,
            );
        }
        Ok(TableNames(names))
    }

    /// The name of `table`.
    pub fn name(&self, table: T) -> &str {
        &self.0[&table]
    }

    /// The name of [`TableSet::HOME`].
    pub fn home(&self) -> &str {
        self.name(T::HOME)
    }

    /// The table named `name`, if it is one of these.
    #[cfg(test)]
    pub(crate) fn table_of(&self, name: &str) -> Option<T> {
        self.0.iter().find(|(_, n)| *n == name).map(|(t, _)| *t)
    }
}

/// The default names ([`TableSet::default_name`]).
impl<T: TableSet> Default for TableNames<T> {
    fn default() -> Self {
        TableNames::new(|t: T| t.default_name().to_owned())
    }
}

/// A store per table.
#[derive(Clone)]
pub struct Stores<T>(BTreeMap<T, Arc<dyn Store>>);

impl<T: TableSet> Stores<T> {
    /// `stores`, one for each table.
    ///
    /// # Panics
    /// If a table has none: a worker without one of its stores is a bug
    /// of its assembly, not a configuration to report.
    pub fn new(stores: impl IntoIterator<Item = (T, Arc<dyn Store>)>) -> Self {
        let map: BTreeMap<_, _> = stores.into_iter().collect();
        if let Some(t) = T::ALL.iter().find(|t| !map.contains_key(t)) {
            panic!("no store for table {t:?}");
        }
        Stores(map)
    }

    /// Every table on `store` (checking a configuration, benches of one
    /// table).
    pub fn same(store: Arc<dyn Store>) -> Self {
        Stores::new(T::ALL.iter().map(|t| (*t, store.clone())))
    }

    /// Each table named by `names`, on `home`'s client, retries and
    /// counters (every table's requests in one invocation's metrics).
    pub fn on_client(home: &DynamoStore, names: &TableNames<T>) -> Self {
        Stores::new(T::ALL.iter().map(|t| {
            let store: Arc<dyn Store> = Arc::new(home.on_table(names.name(*t), t.schema().key));
            (*t, store)
        }))
    }

    /// The store of `table`.
    pub fn get(&self, table: T) -> &Arc<dyn Store> {
        &self.0[&table]
    }
}

/// A stream handler of one table: it sees that table's records only.
pub trait TableHandler<T>: RecordProcessor {
    /// The table whose records this handler is given.
    fn table(&self) -> T;
}

/// The stream side of an app of several tables: each table's records go
/// to its handlers, in `handlers`' order; a record of a table no handler
/// serves is handled by none (and counted handled).
pub(crate) fn routes<T: TableSet>(
    handlers: &[Arc<dyn TableHandler<T>>],
    names: &TableNames<T>,
) -> ByTable {
    ByTable::new(
        T::ALL
            .iter()
            .map(|t| {
                let mine: Vec<Arc<dyn RecordProcessor>> = handlers
                    .iter()
                    .filter(|h| h.table() == *t)
                    .map(|h| h.clone() as Arc<dyn RecordProcessor>)
                    .collect();
                let all: Arc<dyn RecordProcessor> = Arc::new(AllHandlers(mine));
                (names.name(*t).to_owned(), all)
            })
            .collect(),
    )
}

/// What a handler or job does on one table: the DynamoDB actions (a
/// transaction needs its operations' own: `PutItem`, `UpdateItem`,
/// `ConditionCheckItem`) and the indexes it queries. A template grants
/// each function exactly these, table by table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableAccess<T> {
    /// The table these grants are on.
    pub table: T,
    /// DynamoDB actions on it (`dynamodb:GetItem`, ...).
    pub actions: &'static [&'static str],
    /// Index names it queries or scans (their ARNs are granted, no others).
    pub indexes: &'static [&'static str],
}

/// Actions and indexes, by table.
pub type Grants<T> = BTreeMap<T, (BTreeSet<&'static str>, BTreeSet<&'static str>)>;

impl<T: TableSet> TableAccess<T> {
    /// The grants of a function whose handlers or job declare `lists`,
    /// merged table by table.
    pub fn grants(lists: &[&[TableAccess<T>]]) -> Grants<T> {
        let mut out: Grants<T> = BTreeMap::new();
        for a in lists.iter().copied().flatten() {
            let e = out.entry(a.table).or_default();
            e.0.extend(a.actions);
            e.1.extend(a.indexes);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::KeySchema;
    use crate::store::local_client;
    use std::collections::HashMap;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum T {
        People,
        Orders,
    }

    impl TableSet for T {
        const ALL: &'static [T] = &[T::People, T::Orders];
        const HOME: T = T::Orders;
        fn env_var(self) -> &'static str {
            match self {
                T::People => "PEOPLE_TABLE",
                T::Orders => "ORDERS_TABLE",
            }
        }
        fn default_name(self) -> &'static str {
            match self {
                T::People => "People",
                T::Orders => "Orders",
            }
        }
        fn schema(self) -> TableSchema {
            TableSchema::new(KeySchema::composite("PK", "SK"))
        }
    }

    #[test]
    fn names_come_from_each_tables_variable() {
        let vars: HashMap<&str, &str> = [("PEOPLE_TABLE", "people"), ("ORDERS_TABLE", "orders")]
            .into_iter()
            .collect();
        let lookup = |n: &str| vars.get(n).map(|v| v.to_string());
        let names = TableNames::<T>::from_env(&Env::new(&lookup)).unwrap();
        assert_eq!((names.name(T::People), names.home()), ("people", "orders"));
        assert_eq!(names.table_of("people"), Some(T::People));
        assert_eq!(names.table_of("People"), None);
        let none = |_: &str| None;
        let e = TableNames::<T>::from_env(&Env::new(&none)).unwrap_err();
        assert_eq!(e.name, "PEOPLE_TABLE", "the first missing, in ALL's order");
        assert_eq!(TableNames::<T>::default().name(T::Orders), "Orders");
    }

    #[test]
    #[should_panic(expected = "no store for table Orders")]
    fn every_table_has_a_store() {
        let home: Arc<dyn Store> = Arc::new(DynamoStore::new(local_client("http://x:1"), "u"));
        Stores::<T>::new([(T::People, home)]);
    }

    #[test]
    fn grants_merge_table_by_table() {
        let stream = [
            TableAccess {
                table: T::People,
                actions: &["dynamodb:GetItem"],
                indexes: &[],
            },
            TableAccess {
                table: T::Orders,
                actions: &["dynamodb:Query"],
                indexes: &["ByUser"],
            },
        ];
        let more = [TableAccess {
            table: T::People,
            actions: &["dynamodb:GetItem", "dynamodb:PutItem"],
            indexes: &[],
        }];
        let g = TableAccess::grants(&[&stream, &more]);
        assert_eq!(
            g[&T::People].0.iter().copied().collect::<Vec<_>>(),
            ["dynamodb:GetItem", "dynamodb:PutItem"]
        );
        assert_eq!(
            g[&T::Orders].1.iter().copied().collect::<Vec<_>>(),
            ["ByUser"]
        );
    }
}
