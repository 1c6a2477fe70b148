//! A descriptor held back for the probes (`--admin-socket`).
//!
//! At the open file limit every accept fails, the kubelet's exec probe with it, and the
//! kubelet would restart an agent that is only busy. So one descriptor is kept open for
//! the probe socket: when its accept fails for want of descriptors, the reserve is
//! closed and the accept retried at once, and the reserve is opened again once that
//! probe's connection is done.

use std::{fs::File, io, sync::Mutex};

#[derive(Debug)]
pub struct Reserve(Mutex<Option<File>>);

impl Reserve {
    pub fn new() -> Self {
        Self(Mutex::new(open()))
    }

    /// Closes the held descriptor; `false` if none was held.
    pub fn release(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some()
    }

    /// Holds a descriptor again, if none is held and one can be had.
    pub fn refill(&self) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_none() {
            *held = open();
        }
    }
}

fn open() -> Option<File> {
    File::open("/dev/null").ok()
}

/// Whether an accept failed because the process or the system has no descriptor left.
pub fn out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_once_until_refilled() {
        let reserve = Reserve::new();
        assert!(reserve.release());
        assert!(!reserve.release(), "nothing left to release");
        reserve.refill();
        assert!(reserve.release());
    }

    #[test]
    fn descriptor_exhaustion_is_recognised() {
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(
            libc::ENFILE
        )));
        assert!(!out_of_descriptors(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
    }
}
