//! A minimal app on the worker engine: a table of notes.
//!
//! - the stream keeps each note's `TitleKey` equal to its `Title` in lower
//!   case (a conditional write; a note already right costs no write);
//! - a scheduled job, `purge-expired`, deletes the notes whose `ExpiresAt`
//!   (epoch seconds) has passed, never one renewed meanwhile.
//!
//! Sections (a) to (f) follow the order in which an app is written;
//! `docs/ENGINE.md` walks through them, `tests/minimal_example.rs` runs
//! them on DynamoDB Local.

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::Error;
use serde::{Deserialize, Serialize};
use serde_json::json;
use worker_engine::app::{Sharing, TableDeps};
use worker_engine::env::ConfigError;
use worker_engine::error::HandlerError;
use worker_engine::item::{Item, redact_quoted};
use worker_engine::job::{Access, AppSpec, JobSpec, Schedule, ScheduleSpec, StreamSpec};
use worker_engine::lambda::{self, bootstrap};
use worker_engine::metrics::{Metric, WriteCounter};
use worker_engine::notify::RecordingPublisher;
use worker_engine::runtime::Worker;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::schema::{IndexSpec, KeySchema, TableSchema};
use worker_engine::settings::{JobSettings, Settings};
use worker_engine::store::{Expr, QuerySpec, Store, WriteOutcome};
use worker_engine::stream::decode::StreamChange;
use worker_engine::stream::engine::{ProcessError, RecordOutcome, RecordProcessor};
use worker_toolkit::cli::tables::WorkerParts;
use worker_toolkit::cli::{CliApp, NoExtra};

// ---------------------------------------------------------------------------
// (a) The table, as data: what tests, the CLI and templates create.

/// Notes by expiry: sparse (only notes with `ExpiresAt`), one partition
/// (`SK`, the same for every note: enough for a small table).
pub const BY_EXPIRY: IndexSpec = IndexSpec {
    name: keys::BY_EXPIRY_INDEX,
    partition_key: keys::SK,
    sort_key: Some(keys::EXPIRES_AT),
    include: None,
};

/// `PK`/`SK` strings, `ExpiresAt` a number, one index, a NEW_AND_OLD_IMAGES
/// stream.
pub fn schema() -> TableSchema {
    TableSchema::new(KeySchema::composite(keys::PK, keys::SK))
        .with_numbers(&[keys::EXPIRES_AT])
        .with_index(BY_EXPIRY)
}

// ---------------------------------------------------------------------------
// (b) The key module (every key string and attribute name of the app) and
// the typed item.

pub mod keys {
    use aws_sdk_dynamodb::types::AttributeValue;
    use worker_engine::item::Item;
    use worker_engine::store::Key;

    pub const PK: &str = "PK";
    pub const SK: &str = "SK";
    pub const TITLE: &str = "Title";
    pub const TITLE_KEY: &str = "TitleKey";
    pub const EXPIRES_AT: &str = "ExpiresAt";
    pub const BY_EXPIRY_INDEX: &str = "NotesByExpiry";
    /// `SK` of every note (the partition of [`BY_EXPIRY_INDEX`]).
    pub const NOTE_SK: &str = "NOTE";
    const NOTE_PREFIX: &str = "NOTE#";

    /// The key of note `id`: `PK = NOTE#<id>`, `SK = NOTE`.
    pub fn note(id: &str) -> Key {
        Key::from([
            (
                PK.to_owned(),
                AttributeValue::S(format!("{NOTE_PREFIX}{id}")),
            ),
            (SK.to_owned(), AttributeValue::S(NOTE_SK.to_owned())),
        ])
    }

    /// The note id of an item's key; `None` when the item is not a note.
    pub fn note_id(item: &Item) -> Option<&str> {
        let s = |name| worker_engine::keys::string(item, name).ok();
        if s(SK)? != NOTE_SK {
            return None;
        }
        s(PK)?.strip_prefix(NOTE_PREFIX).filter(|id| !id.is_empty())
    }
}

/// A note. Its attributes are its fields in PascalCase ([`keys::TITLE`],
/// [`keys::TITLE_KEY`], [`keys::EXPIRES_AT`]); its key comes from the id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Note {
    #[serde(skip)]
    pub id: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title_key: Option<String>,
    /// Epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

impl Note {
    /// `Ok(None)` when the item is not a note; `Err` (values redacted) when
    /// it is one that does not decode.
    pub fn from_item(item: &Item) -> Result<Option<Note>, String> {
        let Some(id) = keys::note_id(item) else {
            return Ok(None);
        };
        let mut note: Note = serde_dynamo::from_item(item.clone())
            .map_err(|e| format!("note does not decode: {}", redact_quoted(&e.to_string())))?;
        note.id = id.to_owned();
        Ok(Some(note))
    }

    pub fn to_item(&self) -> Item {
        let mut item: Item = serde_dynamo::to_item(self).expect("a note always serializes");
        item.extend(keys::note(&self.id));
        item
    }

    /// What `TitleKey` must hold.
    pub fn wanted_title_key(&self) -> String {
        self.title.to_lowercase()
    }
}

// ---------------------------------------------------------------------------
// (c) The stream handler. Delivery is at least once and items arrive in any
// order: decide from the record's image, write conditionally, and take a
// failed condition as a normal outcome.

/// Keeps `TitleKey` equal to the lowercase `Title` of every note.
pub struct TitleKeys {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
}

#[async_trait]
impl RecordProcessor for TitleKeys {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, ProcessError> {
        if change.kind.is_removal() {
            return Ok(RecordOutcome::skipped("removed"));
        }
        let Some(image) = &change.new_image else {
            return Ok(RecordOutcome::skipped("no new image"));
        };
        let Some(note) = Note::from_item(image).map_err(ProcessError::permanent)? else {
            return Ok(RecordOutcome::skipped("not a note"));
        };
        let wanted = note.wanted_title_key();
        if note.title_key.as_deref() == Some(wanted.as_str()) {
            // Also the record of this handler's own write: the loop ends here.
            return Ok(RecordOutcome::skipped("title key up to date"));
        }
        let set = Expr::new("SET #tk = :tk")
            .name("#tk", keys::TITLE_KEY)
            .string(":tk", wanted);
        // Only over the title this record saw (false too when the note is
        // gone): a newer title has a record of its own.
        let same_title = Expr::new("#t = :t")
            .name("#t", keys::TITLE)
            .string(":t", &note.title);
        let outcome = self
            .store
            .update(&keys::note(&note.id), set, Some(same_title))
            .await?;
        match outcome {
            WriteOutcome::Applied => {
                self.writes.add(TITLE_KEY_WRITES, 1);
                Ok(RecordOutcome::handled("title key set"))
            }
            WriteOutcome::ConditionFailed => Ok(RecordOutcome::skipped("title changed since")),
        }
    }
}

// ---------------------------------------------------------------------------
// (d) The scheduled job, and the app described once.

worker_engine::job_names! {
    /// The app's jobs, by the names the command line and ticks use.
    pub enum Job {
        PurgeExpired = "purge-expired",
    }
}

/// Deletes the notes whose `ExpiresAt` has passed. Idempotent per tick: a
/// second run finds nothing; a run stopped by the deadline leaves the rest
/// to the next tick.
pub struct PurgeExpired {
    store: Arc<dyn Store>,
}

#[async_trait]
impl ScheduledJob<Job> for PurgeExpired {
    fn job(&self) -> Job {
        Job::PurgeExpired
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let expired = self
            .store
            .query_all(&QuerySpec {
                index: Some(keys::BY_EXPIRY_INDEX.to_owned()),
                key_condition: Expr::new("#sk = :sk AND #exp <= :now")
                    .name("#sk", keys::SK)
                    .name("#exp", keys::EXPIRES_AT)
                    .string(":sk", keys::NOTE_SK)
                    .value(":now", AttributeValue::N(run.now.timestamp().to_string())),
                forward: true,
                ..Default::default()
            })
            .await?;
        let (mut purged, mut kept, mut complete) = (0u64, 0u64, true);
        for item in &expired {
            if !run.has_time() {
                complete = false;
                break;
            }
            let (Some(id), Some(seen)) = (keys::note_id(item), item.get(keys::EXPIRES_AT)) else {
                continue;
            };
            // Only if not renewed since the query.
            let unchanged = Expr::new("#exp = :seen")
                .name("#exp", keys::EXPIRES_AT)
                .value(":seen", seen.clone());
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

/// The app's own settings: none (the common ones name the table, ...).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NoteSettings;

impl JobSettings for NoteSettings {
    const TABLE: &'static str = "the notes table";
}

/// What the handler and the job are built from: the table, the settings,
/// a publisher (unused here) and the write counter.
pub type Deps = TableDeps<Settings<Job, NoteSettings>>;

pub const TITLE_KEY_WRITES: &str = "TitleKeyWrites";
pub const NOTES_PURGED: &str = "NotesPurged";

/// The notes job: its stream side, its scheduled job, what each needs.
pub const NOTES: JobSpec<Job, Deps, dyn RecordProcessor> = JobSpec {
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

/// The app: its common variables and its jobs (one line per job).
pub const APP: AppSpec<Job, Deps, dyn RecordProcessor> = AppSpec {
    name: "notes-worker",
    namespace: "NotesWorker",
    // TABLE_NAME, a local endpoint, WORKER_JOB, the parking table, ...
    env: worker_engine::common_env!(Job, NoteSettings::TABLE),
    jobs: &[&NOTES],
    schema,
    checkpoint: |_| None,
};

// ---------------------------------------------------------------------------
// (e) The app assembled on the engine's `Worker`, and the two Lambda mains.

/// The app as Lambda runs it: settings, clock, table and parking table
/// from the environment (`AppSpec::table_worker` is the same over any
/// store: the command line's and the tests').
pub async fn worker_from_env() -> Result<Worker<Job>, ConfigError> {
    APP.table_worker_from_env(Sharing::Separate)
}

// ---------------------------------------------------------------------------
// (f) The command line: the toolkit's (`worker_toolkit::cli`), with what
// only this app knows, and `main`.

/// The app, as the toolkit's command line sees it.
pub struct Minimal;

impl CliApp for Minimal {
    type Job = Job;
    type Deps = Deps;
    type Handler = dyn RecordProcessor;
    type Extra = NoExtra;
    const APP: &'static AppSpec<Job, Deps, dyn RecordProcessor> = &APP;
    const DEFAULT_TABLE: &'static str = "notes-local";
    const ABOUT: &'static str =
        "Run the notes worker locally: replay events, run a job, manage a table, live loop.";
    const EXAMPLES: &'static str = "Example:\n  minimal replay --apply-writes captured.json";

    fn worker(p: WorkerParts<'_>) -> Result<Worker<Job>, ConfigError> {
        let settings = Settings::from_lookup(p.lookup)?;
        let publisher = Arc::new(RecordingPublisher::default());
        Ok(APP.table_worker(p.store, settings, publisher, p.clock, Sharing::Separate))
    }
}

/// `minimal stream|schedule`: a Lambda function; anything else: the
/// command line (`minimal replay|run|table|capture|dev`).
fn main() -> Result<ExitCode, Error> {
    let served = match std::env::args().nth(1).as_deref() {
        Some("stream") => bootstrap(lambda::Stream, APP.namespace, worker_from_env),
        Some("schedule") => bootstrap(lambda::Schedule, APP.namespace, worker_from_env),
        _ => return Ok(worker_toolkit::cli::main::<Minimal>()),
    };
    served.map(|()| ExitCode::SUCCESS)
}
