//! Reading the status PATCHes `fakeapi` recorded: which objects they wrote, and this
//! controller's conditions in them.

use crate::support::fakeapi::FakeApi;
use serde_json::Value;

pub(super) const CONTROLLER: &str = "redirector.dev/node-agent";

/// Every status PATCH answered so far, once there are at least `n`.
pub(super) fn patches_until(api: &mut FakeApi, n: usize) -> Vec<Value> {
    loop {
        let patches = api.status_patches();
        if patches.len() >= n {
            return patches;
        }
        api.wait_for_status_patches(patches.len());
    }
}

/// `demo/echo` from `.../namespaces/demo/xbackends/echo/status`.
pub(super) fn object_of(patch: &Value) -> String {
    let path = patch["path"].as_str().unwrap_or_default();
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        [.., "namespaces", ns, "xbackends", name, "status"] => format!("{ns}/{name}"),
        _ => panic!("not an XBackend status path: {path}"),
    }
}

pub(super) fn objects_of(patches: &[Value]) -> Vec<String> {
    patches.iter().map(object_of).collect()
}

/// The patches of `object`.
pub(super) fn of<'a>(patches: &'a [Value], object: &str) -> Vec<&'a Value> {
    patches.iter().filter(|p| object_of(p) == object).collect()
}

/// The status list and reference names a patch uses: `("ancestors", "ancestorRef")` on
/// a cluster with upstream's newest CRD, `("parents", "parentRef")` on a v1.6 one.
pub(super) fn shape_of(patch: &Value) -> (&'static str, &'static str) {
    let status = &patch["body"]["status"];
    match (status.get("ancestors"), status.get("parents")) {
        (Some(_), None) => ("ancestors", "ancestorRef"),
        (None, Some(_)) => ("parents", "parentRef"),
        _ => panic!("not exactly one of status.ancestors, status.parents: {patch}"),
    }
}

/// This controller's entry in a patch (checked to be the only one).
pub(super) fn entry(patch: &Value) -> &Value {
    let (list, _) = shape_of(patch);
    let entries = patch["body"]["status"][list]
        .as_array()
        .unwrap_or_else(|| panic!("no status.{list}: {patch}"));
    assert_eq!(entries.len(), 1, "{patch}");
    assert_eq!(entries[0]["controllerName"], CONTROLLER, "{patch}");
    &entries[0]
}

/// The reference of this controller's entry (`ancestorRef` or `parentRef`).
pub(super) fn reference(patch: &Value) -> &Value {
    let (_, reference) = shape_of(patch);
    &entry(patch)[reference]
}

/// The condition `type_` of a patch's entry.
pub(super) fn condition<'a>(patch: &'a Value, type_: &str) -> Option<&'a Value> {
    let conditions = entry(patch)["conditions"].as_array()?;
    conditions.iter().find(|c| c["type"] == type_)
}

/// `(status, reason, observedGeneration)` of a condition that must be there.
pub(super) fn state(patch: &Value, type_: &str) -> (String, String, i64) {
    let c = condition(patch, type_).unwrap_or_else(|| panic!("no {type_} in {patch}"));
    (
        c["status"].as_str().unwrap_or_default().to_owned(),
        c["reason"].as_str().unwrap_or_default().to_owned(),
        c["observedGeneration"].as_i64().unwrap_or(-1),
    )
}

pub(super) fn expect(status: &str, reason: &str, generation: i64) -> (String, String, i64) {
    (status.to_owned(), reason.to_owned(), generation)
}

pub(super) fn message<'a>(patch: &'a Value, type_: &str) -> &'a str {
    (condition(patch, type_).and_then(|c| c["message"].as_str())).unwrap_or_default()
}

pub(super) fn transition<'a>(patch: &'a Value, type_: &str) -> &'a str {
    (condition(patch, type_).and_then(|c| c["lastTransitionTime"].as_str())).unwrap_or_default()
}
