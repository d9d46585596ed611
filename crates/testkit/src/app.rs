//! An app on one table (`worker_engine::app`) as its tests run it: at a
//! fixed time, its events recorded unless a test gives a publisher.

use std::sync::Arc;

use worker_engine::AppSpec;
use worker_engine::Worker;
use worker_engine::clock::ManualClock;
use worker_engine::metrics::{CapturedLines, Emitter};
use worker_engine::schedule::JobName;
use worker_engine::settings::{JobSettings, Settings};
use worker_engine::store::Store;
use worker_engine::stream::RecordProcessor;
use worker_engine::{EventPublisher, RecordingPublisher};
use worker_engine::{Sharing, TableDeps};

/// An app on one table, as its tests build its worker.
pub struct TestApp<J: 'static, S: 'static> {
    /// The app's spec (its `APP` static): the namespace its metrics go
    /// to and how it builds a worker over one table.
    pub app: &'static AppSpec<J, TableDeps<Settings<J, S>>, dyn RecordProcessor>,
    /// How its stream handlers share requests (the app's own choice).
    pub sharing: Sharing,
    /// The clock's fixed time (RFC 3339).
    pub now: &'static str,
}

impl<J: JobName, S: JobSettings> TestApp<J, S> {
    /// The worker over `store`: the default settings (on table `test`),
    /// its events recorded.
    pub fn worker(&self, store: Arc<dyn Store>) -> Worker<J> {
        let publisher = Arc::new(RecordingPublisher::default());
        self.worker_with(store, Settings::for_table("test"), publisher)
    }

    /// The worker over `store` with `settings`, its events recorded, and
    /// the EMF lines it writes (function `test`): what a test counts its
    /// requests and metrics from.
    pub fn worker_emitting(
        &self,
        store: Arc<dyn Store>,
        settings: Settings<J, S>,
    ) -> (Worker<J>, CapturedLines) {
        let lines = CapturedLines::default();
        let emitter = Emitter::new(self.app.namespace, "test", Arc::new(lines.clone()));
        let publisher = Arc::new(RecordingPublisher::default());
        let worker = self.worker_with(store, settings, publisher);
        (worker.with_metrics(emitter), lines)
    }

    /// The worker over `store` with `settings` and `publisher`.
    ///
    /// # Panics
    /// If [`TestApp::now`] is not an RFC 3339 time.
    pub fn worker_with(
        &self,
        store: Arc<dyn Store>,
        settings: Settings<J, S>,
        publisher: Arc<dyn EventPublisher>,
    ) -> Worker<J> {
        let now = self.now.parse().expect("TestApp::now is an RFC 3339 time");
        let clock = Arc::new(ManualClock::new(now));
        self.app
            .table_worker(store, settings, publisher, clock, self.sharing)
    }
}
