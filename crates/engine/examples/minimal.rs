//! A minimal app, a table of notes: the stream keeps `TitleKey` the lowercase
//! `Title`; the job `purge-expired` deletes the notes whose `ExpiresAt` (epoch
//! seconds) has passed, never one renewed meanwhile. `docs/ENGINE.md` walks
//! through (a) to (e), `tests/it/minimal_example.rs` runs them on DynamoDB Local.

use std::process::ExitCode;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use worker_engine::lambda::{self, bootstrap};
use worker_engine::*;
use worker_toolkit::cli::{CliApp, NoExtra, tables::WorkerParts};

// (a) The table, as data (what tests, the CLI and templates create); the index
// is sparse (only notes with `ExpiresAt`), one partition (`SK`) for a small table.
pub(crate) fn schema() -> TableSchema {
    TableSchema::new(KeySchema::composite(keys::PK, keys::SK))
        .with_numbers(&[keys::EXPIRES_AT])
        .with_index(IndexSpec {
            name: keys::BY_EXPIRY_INDEX,
            partition_key: keys::SK,
            sort_key: Some(keys::EXPIRES_AT),
            include: None,
        })
}

// (b) The key module (every key string and attribute name) and the typed item.
pub(crate) mod keys {
    use worker_engine::{Item, Key};

    pub(crate) const PK: &str = "PK";
    pub(crate) const SK: &str = "SK";
    pub(crate) const TITLE: &str = "Title";
    pub(crate) const TITLE_KEY: &str = "TitleKey";
    pub(crate) const EXPIRES_AT: &str = "ExpiresAt";
    pub(crate) const BY_EXPIRY_INDEX: &str = "NotesByExpiry";
    pub(crate) const NOTE_SK: &str = "NOTE";

    /// The key of note `id`: `PK = NOTE#<id>`, `SK = NOTE`.
    pub(crate) fn note(id: &str) -> Key {
        worker_engine::keys::strings([(PK, format!("NOTE#{id}")), (SK, NOTE_SK.into())])
    }

    /// The note id of an item's key; `None` when the item is not a note.
    pub(crate) fn note_id(item: &Item) -> Option<&str> {
        let s = |name| worker_engine::keys::string(item, name).ok();
        let id = s(PK)?.strip_prefix("NOTE#")?;
        (s(SK)? == NOTE_SK && !id.is_empty()).then_some(id)
    }
}

/// A note: its attributes are its fields in PascalCase, its key its id's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Note {
    #[serde(skip)]
    pub id: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

impl Note {
    /// `Ok(None)`: not a note; `Err` (values redacted): a note that does not decode.
    pub(crate) fn from_item(item: &Item) -> Result<Option<Note>, String> {
        let Some(id) = keys::note_id(item) else {
            return Ok(None);
        };
        let mut note: Note = worker_engine::item::decode(item, "note")?;
        note.id = id.into();
        Ok(Some(note))
    }

    /// The note as its item (the tests write notes with it).
    #[allow(dead_code)]
    pub(crate) fn to_item(&self) -> Item {
        worker_engine::item::encode(self, keys::note(&self.id))
    }
}

// (c) The stream handler. Delivery is at least once, in any order: it decides
// from the record's image and writes conditionally; a failed condition is normal.
pub(crate) struct TitleKeys {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
}

#[async_trait]
impl RecordProcessor for TitleKeys {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        let Some(image) = &change.new_image else {
            return Ok(RecordOutcome::skipped("removed"));
        };
        let Some(note) = Note::from_item(image).map_err(HandlerError::permanent)? else {
            return Ok(RecordOutcome::skipped("not a note"));
        };
        let wanted = note.title.to_lowercase();
        if note.title_key.as_deref() == Some(wanted.as_str()) {
            // Also the record of this handler's own write: the loop ends here.
            return Ok(RecordOutcome::skipped("title key up to date"));
        }
        let set = Expr::set(keys::TITLE_KEY, AttributeValue::S(wanted));
        // Only over the title this record saw (false when the note is gone
        // too): a newer title has a record of its own.
        let same = Expr::equals(keys::TITLE, AttributeValue::S(note.title.clone()));
        let key = keys::note(&note.id);
        match self.store.update(&key, set, Some(same)).await? {
            WriteOutcome::Applied => {
                self.writes.add(TITLE_KEY_WRITES, 1);
                Ok(RecordOutcome::handled("title key set"))
            }
            WriteOutcome::ConditionFailed => Ok(RecordOutcome::skipped("title changed since")),
        }
    }
}

// (d) The scheduled job, and the app described once.
worker_engine::job_names! {
    /// The app's jobs, by the names the command line and ticks use.
    pub enum Job {
        /// Deletes the notes whose `ExpiresAt` has passed (`PurgeExpired`).
        PurgeExpired = "purge-expired",
    }
}

/// Deletes the notes whose `ExpiresAt` has passed. A second run finds
/// nothing; one stopped by the deadline leaves the rest to the next tick.
pub(crate) struct PurgeExpired {
    store: Arc<dyn Store>,
}

#[async_trait]
impl ScheduledJob<Job> for PurgeExpired {
    fn job(&self) -> Job {
        Job::PurgeExpired
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let notes = (keys::SK, AttributeValue::S(keys::NOTE_SK.into()));
        let now = AttributeValue::N(run.now.timestamp().to_string());
        let due = QuerySpec::below(notes, keys::EXPIRES_AT, now).on_index(keys::BY_EXPIRY_INDEX);
        let expired = self.store.query_all(&due).await?;
        let (mut purged, mut kept, mut complete) = (0u64, 0u64, true);
        for item in &expired {
            let (Some(id), Some(seen)) = (keys::note_id(item), item.get(keys::EXPIRES_AT)) else {
                continue;
            };
            if !run.has_time() {
                complete = false;
                break;
            }
            // Only if not renewed since the query.
            let unchanged = Expr::equals(keys::EXPIRES_AT, seen.clone());
            match self.store.delete(&keys::note(id), Some(unchanged)).await? {
                WriteOutcome::Applied => purged += 1,
                WriteOutcome::ConditionFailed => kept += 1,
            }
        }
        Ok(JobReport {
            job: Job::PurgeExpired,
            complete,
            summary: format!("{purged} expired note(s) purged"),
            details: json!({"expired": expired.len(), "purged": purged, "renewed": kept}),
            metrics: vec![Metric::count(NOTES_PURGED, purged)],
        })
    }
}

/// What the handler and the job are built from; no settings of its own: `()`.
pub(crate) type Deps = TableDeps<Settings<Job, ()>>;

pub(crate) const TITLE_KEY_WRITES: &str = "TitleKeyWrites";
pub(crate) const NOTES_PURGED: &str = "NotesPurged";

/// The notes job: its stream side, its scheduled job, what each needs.
pub(crate) const NOTES: JobSpec<Job, Deps, dyn RecordProcessor> = JobSpec {
    name: "notes",
    summary: "keeps TitleKey equal to the lowercase Title; purges expired notes",
    env: &[],
    stream: Some(StreamSpec {
        handler: "title-keys",
        writes_metric: TITLE_KEY_WRITES,
        access: Access {
            dynamodb_actions: &["dynamodb:UpdateItem"],
            ..Access::NONE
        },
    }),
    scheduled: &[ScheduleSpec {
        job: Job::PurgeExpired,
        function: "PurgeExpiredFunction",
        schedule: Schedule::Rate("rate(1 hour)"),
        local_cron: "0 * * * *",
        access: Access {
            dynamodb_actions: &["dynamodb:DeleteItem", "dynamodb:Query"],
            indexes: &[keys::BY_EXPIRY_INDEX],
            ..Access::NONE
        },
        metrics: &[NOTES_PURGED],
    }],
    handlers: |d| {
        vec![Arc::new(TitleKeys {
            store: d.store.clone(),
            writes: d.writes.clone(),
        })]
    },
    jobs: |d| {
        vec![Arc::new(PurgeExpired {
            store: d.store.clone(),
        })]
    },
};

/// The app: the variables every app reads (`TABLE_NAME`, ...), its jobs, its table.
pub(crate) const APP: AppSpec<Job, Deps, dyn RecordProcessor> = AppSpec {
    name: "notes-worker",
    namespace: "NotesWorker",
    env: worker_engine::common_env!(Job, "the notes table"),
    jobs: &[&NOTES],
    schema,
    checkpoint: |_| None,
    // Each image an item: the app reads its images from items.
    decode: worker_engine::stream::decode_event_bytes,
};

// (e) The command line (`worker_toolkit::cli`), and `main`: Lambda's or the CLI's.
pub(crate) struct Minimal;

impl CliApp for Minimal {
    type Job = Job;
    type Deps = Deps;
    type Handler = dyn RecordProcessor;
    type Extra = NoExtra;
    const APP: &'static AppSpec<Job, Deps, dyn RecordProcessor> = &APP;
    const DEFAULT_TABLE: &'static str = "notes-local";
    const ABOUT: &'static str = "Run the notes worker locally: replay, run, table, dev loop.";
    const EXAMPLES: &'static str = "Example:\n  minimal replay --apply-writes captured.json";

    fn worker(p: WorkerParts<'_>) -> Result<Worker<Job>, ConfigError> {
        p.table_worker(&APP, Sharing::Separate)
    }
}

/// `minimal stream|schedule`: a Lambda function, its worker from the
/// environment; anything else: `minimal replay|run|table|capture|dev`.
fn main() -> Result<ExitCode, lambda_runtime::Error> {
    let from_env = || async { APP.table_worker_from_env(Sharing::Separate) };
    match std::env::args().nth(1).as_deref() {
        Some("stream") => bootstrap(lambda::Stream, APP.namespace, from_env)?,
        Some("schedule") => bootstrap(lambda::Schedule, APP.namespace, from_env)?,
        _ => return Ok(worker_toolkit::cli::main::<Minimal>()),
    }
    Ok(ExitCode::SUCCESS)
}
