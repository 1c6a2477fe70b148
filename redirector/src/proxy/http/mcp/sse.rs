//! An event stream (`text/event-stream`) rewritten event by event as its bytes come:
//! each event is passed on once its closing blank line has arrived, unchanged unless its
//! data is a JSON-RPC message listing tools, which is rewritten. Only the event in
//! progress is held, never the stream.

use serde_json::Value;

use super::jsonrpc::filter_tools;
use crate::backend_policy::ToolAllowList;

/// The longest event held while it is incomplete. An event is one JSON-RPC message;
/// a longer one cannot be judged, and the stream is cut rather than passed unjudged.
pub const MAX_EVENT: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
#[error("an event of the MCP event stream exceeds {MAX_EVENT} bytes")]
pub struct EventTooLarge;

#[derive(Debug, Default)]
pub struct EventStream {
    /// The event in progress: its lines so far (`scanned` bytes) and any partial line.
    held: Vec<u8>,
    scanned: usize,
}

impl EventStream {
    /// Takes the next bytes of the stream; returns those that can go on now (the
    /// events completed by them, rewritten where needed, and comments between events).
    pub fn feed(&mut self, bytes: &[u8], allow: &ToolAllowList) -> Result<Vec<u8>, EventTooLarge> {
        self.held.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some((line_end, next)) = line_end(&self.held, self.scanned) {
            let line = &self.held[self.scanned..line_end];
            let event_ends = line.is_empty();
            // A comment outside an event (a keep-alive) goes on at once.
            let lone_comment = self.scanned == 0 && line.first() == Some(&b':');
            if event_ends || lone_comment {
                let done: Vec<u8> = self.held.drain(..next).collect();
                match event_ends {
                    true => out.extend(rewrite(&done, allow).as_deref().unwrap_or(&done)),
                    false => out.extend_from_slice(&done),
                }
                self.scanned = 0;
            } else {
                self.scanned = next;
            }
        }
        if self.held.len() > MAX_EVENT {
            return Err(EventTooLarge);
        }
        Ok(out)
    }

    /// The stream ended: what is left of an unfinished event, judged like a whole one
    /// (clients should drop it, but one that does not must not see a refused tool).
    pub fn finish(&mut self, allow: &ToolAllowList) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        self.scanned = 0;
        rewrite(&held, allow).unwrap_or(held)
    }
}

/// The end of the line that starts at `from` and where the next one starts, if it is
/// complete. A CR at the very end may be the first half of CRLF: not complete yet.
fn line_end(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    let at = from
        + bytes[from..]
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')?;
    match (bytes[at], bytes.get(at + 1)) {
        (b'\n', _) => Some((at, at + 1)),
        (_, Some(b'\n')) => Some((at, at + 2)),
        (_, Some(_)) => Some((at, at + 1)),
        (_, None) => None,
    }
}

/// The event (its lines and closing blank line) rewritten, or `None` to pass it as it
/// is: no data, data that is not JSON, or JSON with no tool to take out.
fn rewrite(event: &[u8], allow: &ToolAllowList) -> Option<Vec<u8>> {
    let lines = split_lines(event);
    let mut data: Vec<&[u8]> = Vec::new();
    for line in &lines {
        if let Some(value) = field_value(line, b"data") {
            data.push(value);
        }
    }
    if data.is_empty() {
        return None;
    }
    let joined = data.join(&b'\n');
    let mut message: Value = serde_json::from_slice(&joined).ok()?;
    if !filter_tools(&mut message, allow) {
        return None;
    }
    // The other fields (id, event, retry, comments) stay as they were, around one
    // data line where the first one was.
    let mut out = Vec::with_capacity(event.len());
    let mut data_written = false;
    for line in &lines {
        if field_value(line, b"data").is_none() {
            out.extend_from_slice(line);
            out.push(b'\n');
        } else if !data_written {
            out.extend_from_slice(b"data: ");
            out.extend(message.to_string().into_bytes());
            out.push(b'\n');
            data_written = true;
        }
    }
    out.push(b'\n');
    Some(out)
}

/// The lines of an event, without their ends and without the closing blank line.
fn split_lines(event: &[u8]) -> Vec<&[u8]> {
    let mut lines = Vec::new();
    let mut from = 0;
    while from < event.len() {
        let (end, next) = line_end(event, from).unwrap_or((event.len(), event.len()));
        if end == from && next >= event.len() {
            break;
        }
        lines.push(&event[from..end]);
        from = next;
    }
    lines
}

/// The value of `line` if it is field `name` (`name: value`, one space after the
/// colon dropped, or `name` alone for an empty value).
fn field_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?;
    match rest.split_first() {
        None => Some(rest),
        Some((b':', value)) => Some(value.strip_prefix(b" ").unwrap_or(value)),
        Some(_) => None,
    }
}
