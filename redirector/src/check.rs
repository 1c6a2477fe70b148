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
    for problem in &catalog.problems {
        println!("{problem}");
    }
    if catalog.problems.is_empty() {
        println!("ok: {} Backends valid", catalog.backends.len());
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
