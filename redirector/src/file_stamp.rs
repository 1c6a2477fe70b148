//! Identity and version of a file, to read it again only when it changed.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Enough to notice an edit in place (size, modification and change times, to the
/// nanosecond) and a replacement (device and inode: an editor's write-then-rename, a
/// ConfigMap volume's symlink swap, since the stat follows symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    device: u64,
    inode: u64,
    length: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileStamp {
    /// `None` when the file cannot be stat'ed (then it cannot be read either).
    pub fn of(path: &Path) -> Option<Self> {
        let metadata = std::fs::metadata(path).ok()?;
        Some(Self {
            device: metadata.dev(),
            inode: metadata.ino(),
            length: metadata.len(),
            modified: (metadata.mtime(), metadata.mtime_nsec()),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        })
    }
}
