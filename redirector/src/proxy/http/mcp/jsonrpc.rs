//! JSON-RPC as MCP uses it, only as far as the tool policy needs: what a client's
//! message (or batch) asks, the proxy's own error answers, and tool lists filtered.

use serde_json::{Value, json};

use crate::{backend_policy::ToolAllowList, proxy::access_log};

pub const TOOLS_CALL: &str = "tools/call";
pub const TOOLS_LIST: &str = "tools/list";

/// JSON-RPC's "invalid params": what MCP servers (and agentgateway, which answers a
/// tool its policy refuses as if it did not exist) send for an unknown tool.
const INVALID_PARAMS: i64 = -32602;
const INVALID_REQUEST: i64 = -32600;
const PARSE_ERROR: i64 = -32700;

/// One request or notification of a client's POST body.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// `None` for a notification.
    pub id: Option<Value>,
    pub method: String,
    /// `params.name` of a `tools/call` (`None` if absent or not a string).
    pub tool: Option<String>,
}

/// What a client's POST body asks: its requests and notifications (responses to the
/// server's requests have no method and are left out).
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub calls: Vec<Call>,
    /// The body is a JSON array (a JSON-RPC batch).
    pub batch: bool,
    /// Something in it is no JSON-RPC message at all (not an object, or an empty
    /// batch): what a server would make of it cannot be told.
    pub invalid: bool,
}

impl Asked {
    pub fn parse(body: &[u8]) -> Result<Self, serde_json::Error> {
        Ok(match serde_json::from_slice(body)? {
            Value::Array(messages) => Self {
                calls: messages.iter().filter_map(call).collect(),
                batch: true,
                invalid: messages.is_empty() || !messages.iter().all(Value::is_object),
            },
            message => Self {
                calls: call(&message).into_iter().collect(),
                batch: false,
                invalid: !message.is_object(),
            },
        })
    }

    /// Whether a `tools/list` result may come back.
    pub fn lists_tools(&self) -> bool {
        self.calls.iter().any(|c| c.method == TOOLS_LIST)
    }

    /// The `tools/call`s of a tool `allow` does not name (a call without a name
    /// names none of them).
    pub fn refused<'a>(&'a self, allow: &'a ToolAllowList) -> impl Iterator<Item = &'a Call> {
        (self.calls.iter()).filter(|c| {
            c.method == TOOLS_CALL && c.tool.as_deref().is_none_or(|t| !allow.allows(t))
        })
    }

    /// The access log's `mcp` fields; `None` when nothing was asked.
    pub fn log(&self) -> Option<access_log::Mcp> {
        if self.calls.is_empty() {
            return None;
        }
        let methods: Vec<&str> = self.calls.iter().map(|c| c.method.as_str()).collect();
        let tools: Vec<&str> = (self.calls.iter())
            .filter_map(|c| c.tool.as_deref())
            .collect();
        Some(access_log::Mcp {
            method: methods.join(","),
            tool: (!tools.is_empty()).then(|| tools.join(",")),
        })
    }

    /// The proxy's answer when `refused` is not empty: nothing of the body goes
    /// upstream, a batch included (its other requests would otherwise run while the
    /// client is told the batch failed, or the batch would have to be split). A refused
    /// call gets "Unknown tool", as if the server had none of that name; the other
    /// requests of a batch get "Invalid Request" saying why they were not sent.
    pub fn refusal(&self, allow: &ToolAllowList) -> String {
        let unknown = |call: &Call| {
            let name = call.tool.as_deref().unwrap_or("(no name)");
            error(
                call.id.clone(),
                INVALID_PARAMS,
                &format!("Unknown tool: {name}"),
            )
        };
        let first = self.refused(allow).next();
        if !self.batch {
            return first.map_or(Value::Null, unknown).to_string();
        }
        let refused: Vec<&Call> = self.refused(allow).collect();
        let answers: Vec<Value> = (self.calls.iter())
            .filter(|c| c.id.is_some())
            .map(|call| match refused.contains(&call) {
                true => unknown(call),
                false => error(
                    call.id.clone(),
                    INVALID_REQUEST,
                    "Not sent: another request of this batch calls an unknown tool",
                ),
            })
            .collect();
        match answers.is_empty() {
            // Notifications only: a batch answer may not be empty.
            true => first.map_or(Value::Null, unknown).to_string(),
            false => Value::Array(answers).to_string(),
        }
    }
}

/// The proxy's answer to a body that is not JSON.
pub fn parse_error(why: &serde_json::Error) -> String {
    error(None, PARSE_ERROR, &format!("Parse error: {why}")).to_string()
}

/// The proxy's answer to JSON that holds something other than JSON-RPC messages.
pub fn invalid_request() -> String {
    let message = "Invalid Request: not a JSON-RPC message or a batch of them";
    error(None, INVALID_REQUEST, message).to_string()
}

fn call(message: &Value) -> Option<Call> {
    let method = message.get("method")?.as_str()?.to_owned();
    let tool = match method == TOOLS_CALL {
        true => (message.get("params"))
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        false => None,
    };
    Some(Call {
        id: message.get("id").cloned(),
        method,
        tool,
    })
}

fn error(id: Option<Value>, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Takes every tool `allow` does not name out of the results in `message` (one
/// message or a batch) that list tools: a response whose `result.tools` is an array.
/// Told by shape, not by matching ids to `tools/list` requests, so that a result
/// replayed on a resumed event stream is filtered too. True if anything was taken out.
pub fn filter_tools(message: &mut Value, allow: &ToolAllowList) -> bool {
    match message {
        Value::Array(batch) => {
            // Every message filtered: no short cut once one has changed.
            let mut changed = false;
            for message in batch {
                changed |= filter_tools(message, allow);
            }
            changed
        }
        Value::Object(object) => {
            let Some(Value::Array(tools)) =
                object.get_mut("result").and_then(|r| r.get_mut("tools"))
            else {
                return false;
            };
            let before = tools.len();
            tools.retain(|tool| {
                (tool.get("name").and_then(Value::as_str)).is_some_and(|name| allow.allows(name))
            });
            tools.len() != before
        }
        _ => false,
    }
}
