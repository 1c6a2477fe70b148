//! `redirector check DIR...`: offline validation for people's CI pipelines.

use std::{path::PathBuf, process::ExitCode};

use crate::backend;

pub fn check(dirs: &[PathBuf]) -> ExitCode {
    let catalog = match backend::load(dirs) {
        Ok(catalog) => catalog,
        Err(error) => {
            println!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let backends = (catalog.backends.iter())
        .map(|b| (b.key.clone(), b.clone()))
        .collect();
    let attachment = backend::attach_policies(&catalog, &backends);
    let rejected = backend::policy_problems(&catalog, &attachment);
    // Notes first: they explain objects that are accepted (a deprecated v1.6 shape, an
    // EndpointSelector Backend left to other controllers) and fail nothing.
    for notice in &catalog.notices {
        println!("note: {notice}");
    }
    for problem in catalog.problems.iter().chain(&rejected) {
        println!("{problem}");
    }
    if catalog.problems.is_empty() && rejected.is_empty() {
        let policies = match catalog.policies.len() {
            0 => String::new(),
            n => format!(", {n} BackendPolicies accepted"),
        };
        println!("ok: {} Backends valid{policies}", catalog.backends.len());
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
