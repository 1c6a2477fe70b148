//! Following one watch: a kube-rs watcher with its default backoff, its events applied to
//! a reflector store, a callback after every change that is visible in the store, a
//! relist on every kind of 410 Gone, and errors logged without flooding.

use std::{
    fmt::Display,
    hash::Hash,
    pin::Pin,
    time::{Duration, Instant},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Resource,
    runtime::{
        WatchStreamExt,
        reflector::{Lookup, Store, store::Writer},
        watcher::{self, DefaultBackoff},
    },
};
use tokio_util::sync::CancellationToken;

use super::pods::MIRROR_POD_ANNOTATION;
use crate::egress::POLICY_LABEL;

/// One warning per watch at most this often while it keeps failing.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// The next item of a stream.
///
/// The `futures` crate is not a dependency of the agent, so its `Stream` trait cannot be
/// imported; a type bounded by kube's `WatchStreamExt`, whose supertrait it is, still
/// has `poll_next`.
async fn next<S>(stream: &mut Pin<Box<S>>) -> Option<S::Item>
where
    S: WatchStreamExt + ?Sized,
{
    std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await
}

/// Runs watchers made by `start` until `shutdown`, applying their events to `writer` and
/// calling `changed` with the store after every change visible in it: the end of each
/// (re)list, and every later add, modify and delete. Nothing is called before the first
/// list completes, and nothing while the API server is unreachable: the store keeps the
/// last state it saw. `managedFields` are dropped before objects are stored (nothing
/// reads them, and they are often the larger part of an object).
pub(super) async fn follow<K, S>(
    what: &str,
    mut start: impl FnMut() -> S,
    mut writer: Writer<K>,
    mut changed: impl FnMut(&Store<K>),
    shutdown: CancellationToken,
) where
    K: Resource + Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
    S: WatchStreamExt<Item = watcher::Result<watcher::Event<K>>> + Send,
{
    let store = writer.as_reader();
    let mut log = ErrorLog::new(what);
    // Between restarts of the watcher itself (kube's own backoff lives in the stream
    // and is lost with it); resets after two quiet minutes.
    let mut restarts = DefaultBackoff::default();
    loop {
        let mut events = Box::pin(start().default_backoff());
        loop {
            let item = tokio::select! {
                () = shutdown.cancelled() => return,
                item = next(&mut events) => item,
            };
            match item {
                Some(Ok(event)) => {
                    let event = event.modify(|object| trim(object.meta_mut()));
                    writer.apply_watcher_event(&event);
                    if let watcher::Event::Apply(_)
                    | watcher::Event::Delete(_)
                    | watcher::Event::InitDone = event
                    {
                        log.recovered();
                        changed(&store);
                    }
                }
                Some(Err(error)) => {
                    // kube-rs relists after a 410 inside the stream, but retries a watch
                    // request answered with HTTP 410 with the same expired
                    // resourceVersion forever: start over with a new watcher, which lists.
                    let expired_at_start = matches!(
                        &error,
                        watcher::Error::WatchStartFailed(kube::Error::Api(status))
                            if status.code == 410
                    );
                    log.failed(&error, status_code(&error));
                    if expired_at_start {
                        break;
                    }
                }
                // A watcher never ends on its own; if it does, start another.
                None => break,
            }
        }
        let pause = restarts.next().unwrap_or(Duration::from_secs(1));
        tracing::debug!(what, ?pause, "restarting the watch with a fresh list");
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// The HTTP status of an error the API server answered with.
fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::InitialListFailed(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

/// What an operator should look at, for the errors that have one cause.
fn hint(code: Option<u16>) -> &'static str {
    match code {
        Some(401) => "the API server refused the credentials (kubeconfig or service account token)",
        Some(403) => "forbidden: check the agent's RBAC (deploy/)",
        Some(404) => "not served by the API server: is its CRD installed (redirector crd)?",
        None => "the API server is unreachable or the connection failed",
        Some(_) => "the API server answered with an error",
    }
}

/// Rate-limited error reporting for one watch: the first error at once, then at most
/// one warning per [`LOG_EVERY`] with the number of errors in between, and one line when
/// the watch works again.
struct ErrorLog<'a> {
    what: &'a str,
    failing_since: Option<Instant>,
    last_warning: Option<Instant>,
    errors: u64,
    suppressed: u64,
}

impl<'a> ErrorLog<'a> {
    fn new(what: &'a str) -> Self {
        Self {
            what,
            failing_since: None,
            last_warning: None,
            errors: 0,
            suppressed: 0,
        }
    }

    /// `code`: the HTTP status of an API error, if it was one.
    fn failed(&mut self, error: &impl Display, code: Option<u16>) {
        let gone = code == Some(410);
        let what = self.what;
        if gone {
            // Routine: API servers expire resourceVersions all the time.
            tracing::info!(what, %error, "watch expired (410 Gone): listing again");
            return;
        }
        let now = Instant::now();
        self.failing_since.get_or_insert(now);
        self.errors += 1;
        match self.last_warning {
            Some(last) if now.duration_since(last) < LOG_EVERY => {
                self.suppressed += 1;
                tracing::debug!(what, %error, "Kubernetes watch failed");
            }
            _ => {
                tracing::warn!(
                    what,
                    %error,
                    hint = hint(code),
                    suppressed = self.suppressed,
                    "Kubernetes watch failed; retrying with backoff, the last state received stays in force"
                );
                self.last_warning = Some(now);
                self.suppressed = 0;
            }
        }
    }

    fn recovered(&mut self) {
        if let Some(since) = self.failing_since.take() {
            tracing::info!(
                what = self.what,
                errors = self.errors,
                failing_for_ms = since.elapsed().as_millis() as u64,
                "Kubernetes watch recovered"
            );
            self.errors = 0;
            self.suppressed = 0;
            self.last_warning = None;
        }
    }
}

/// Keeps of an object's metadata what the agent reads. Every agent holds every object it
/// watches, and the rest (managed fields, labels, annotations such as kubectl's copy of
/// the whole object) is for any tenant to make large.
fn trim(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(labels) = &mut meta.labels {
        labels.retain(|name, _| name == POLICY_LABEL);
    }
    if let Some(annotations) = &mut meta.annotations {
        annotations.retain(|name, _| {
            name == MIRROR_POD_ANNOTATION || name == crate::crd::BUNDLE_VERSION_ANNOTATION
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn only_what_the_agent_reads_is_kept() {
        let mut meta = ObjectMeta {
            name: Some("a".into()),
            labels: Some(BTreeMap::from([
                ("app".into(), "x".into()),
                (POLICY_LABEL.into(), "deny".into()),
            ])),
            annotations: Some(BTreeMap::from([
                (MIRROR_POD_ANNOTATION.into(), "uid".into()),
                (
                    "kubectl.kubernetes.io/last-applied-configuration".into(),
                    "{}".repeat(1000),
                ),
            ])),
            managed_fields: Some(Vec::new()),
            ..ObjectMeta::default()
        };
        trim(&mut meta);
        assert_eq!(meta.name.as_deref(), Some("a"));
        let labels = BTreeMap::from([(POLICY_LABEL.to_owned(), "deny".to_owned())]);
        assert_eq!((meta.labels, meta.managed_fields), (Some(labels), None));
        let kept = BTreeMap::from([(MIRROR_POD_ANNOTATION.to_owned(), "uid".to_owned())]);
        assert_eq!(meta.annotations, Some(kept));
    }
}
