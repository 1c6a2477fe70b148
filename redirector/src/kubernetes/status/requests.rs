//! The API requests both status writers (XBackends, BackendPolicies) make: each with a
//! timeout, the paged list of every object of a kind, and the server-side apply of a
//! status with its outcome sorted.

use std::time::Duration;

use kube::{
    Api,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::Value;

use super::FIELD_MANAGER;
use crate::kubernetes::lease::is_conflict;

/// Longest wait for one API request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Objects per page of a list.
const PAGE: u32 = 500;

/// `request` with [`REQUEST_TIMEOUT`], errors as text.
pub(super) async fn timed<T>(request: impl Future<Output = kube::Result<T>>) -> Result<T, String> {
    timed_raw(request).await.map_err(describe)
}

/// `request` with [`REQUEST_TIMEOUT`]; `Err(None)` when it timed out.
pub(super) async fn timed_raw<T>(
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, Option<kube::Error>> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => result.map_err(Some),
        Err(_) => Err(None),
    }
}

/// An error of [`timed_raw`] as text.
pub(super) fn describe(error: Option<kube::Error>) -> String {
    match error {
        Some(e) => e.to_string(),
        None => "the API server did not answer in time".to_owned(),
    }
}

/// Every object `api` lists, page by page.
pub(super) async fn list_all(
    api: &Api<DynamicObject>,
) -> Result<Vec<DynamicObject>, Option<kube::Error>> {
    let mut objects = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(token) = &token {
            params = params.continue_token(token);
        }
        let page = timed_raw(api.list(&params)).await?;
        objects.extend(page.items);
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(objects);
        }
    }
}

/// What became of a status write.
pub(super) enum Applied {
    Written,
    /// The object changed since it was read (409): read it again and retry.
    Conflict,
    /// The object is gone: its status went with it.
    Gone,
}

/// Server-side apply of `body` (which carries the resourceVersion read, as a
/// precondition) to `name`'s status subresource, as [`FIELD_MANAGER`].
pub(super) async fn apply_status(
    api: &Api<DynamicObject>,
    name: &str,
    body: &Value,
) -> Result<Applied, String> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match timed_raw(api.patch_status(name, &params, &Patch::Apply(body))).await {
        Ok(_) => Ok(Applied::Written),
        Err(Some(e)) if is_conflict(&e) => Ok(Applied::Conflict),
        Err(Some(kube::Error::Api(s))) if s.code == 404 => Ok(Applied::Gone),
        Err(error) => Err(describe(error)),
    }
}
