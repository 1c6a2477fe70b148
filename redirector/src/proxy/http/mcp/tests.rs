use serde_json::{Value, json};

use super::{
    jsonrpc::{Asked, filter_tools, parse_error},
    sse::{EventStream, MAX_EVENT},
};
use crate::backend_policy::ToolAllowList;

fn allow() -> ToolAllowList {
    ToolAllowList::new(["search".to_owned(), "fetch".to_owned()])
}

fn asked(body: &Value) -> Asked {
    Asked::parse(body.to_string().as_bytes()).unwrap()
}

fn call(id: u64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": {}}})
}

#[test]
fn a_call_of_an_allowed_tool_passes_and_names_itself() {
    let asked = asked(&call(1, "search"));
    assert_eq!(asked.refused(&allow()).count(), 0);
    let log = asked.log().unwrap();
    assert_eq!(
        (log.method.as_str(), log.tool.as_deref()),
        ("tools/call", Some("search"))
    );
    assert!(!asked.lists_tools());
}

#[test]
fn a_call_of_another_tool_is_answered_unknown_with_its_id() {
    let asked = asked(&call(7, "delete"));
    let allow = allow();
    let refused: Vec<_> = asked.refused(&allow).collect();
    assert_eq!(refused[0].tool.as_deref(), Some("delete"));
    let answer: Value = serde_json::from_str(&asked.refusal(&allow)).unwrap();
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": 7,
               "error": {"code": -32602, "message": "Unknown tool: delete"}})
    );
    // String ids come back as they were.
    let mut named = call(0, "delete");
    named["id"] = json!("req-1");
    let answer: Value = serde_json::from_str(&asked_refusal(&named)).unwrap();
    assert_eq!(answer["id"], "req-1");
}

fn asked_refusal(body: &Value) -> String {
    asked(body).refusal(&allow())
}

#[test]
fn a_call_without_a_usable_name_is_refused() {
    for params in [json!({}), json!({"name": 3}), json!(null)] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        assert_eq!(asked(&body).refused(&allow()).count(), 1, "{params}");
    }
    // Methods are case-sensitive: this is not tools/call, and no server runs it as one.
    let other = json!({"jsonrpc": "2.0", "id": 1, "method": "Tools/Call",
                       "params": {"name": "delete"}});
    assert_eq!(asked(&other).refused(&allow()).count(), 0);
}

#[test]
fn a_batch_with_a_refused_call_is_answered_whole() {
    let body = json!([
        call(1, "search"),
        call(2, "delete"),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 9, "result": {}},
    ]);
    let asked = asked(&body);
    assert!(asked.batch && asked.lists_tools());
    let log = asked.log().unwrap();
    assert_eq!(
        log.method,
        "tools/call,tools/call,notifications/progress,tools/list"
    );
    assert_eq!(log.tool.as_deref(), Some("search,delete"));
    let answer: Value = serde_json::from_str(&asked.refusal(&allow())).unwrap();
    let answers = answer.as_array().unwrap();
    // One answer per request: none for the notification, nor for the client's response.
    let ids: Vec<_> = answers.iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids, [json!(1), json!(2), json!(3)]);
    assert_eq!(answers[1]["error"]["message"], "Unknown tool: delete");
    assert_eq!(answers[0]["error"]["code"], -32600);
    // A batch of allowed calls passes.
    let fine = self::asked(&json!([call(1, "search"), call(2, "fetch")]));
    assert_eq!(fine.refused(&allow()).count(), 0);
}

#[test]
fn bodies_that_are_not_json_are_errors_and_responses_ask_nothing() {
    let error = Asked::parse(b"{\"method\": ").unwrap_err();
    let answer: Value = serde_json::from_str(&parse_error(&error)).unwrap();
    assert_eq!(answer["error"]["code"], -32700);
    assert_eq!(answer["id"], Value::Null);
    let response = asked(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    assert!(response.calls.is_empty() && response.log().is_none());
    assert!(!response.invalid);
    // JSON that holds no JSON-RPC messages cannot be judged.
    for body in [
        json!([]),
        json!([[call(1, "delete")]]),
        json!("tools/call"),
        json!(3),
    ] {
        assert!(asked(&body).invalid, "{body}");
    }
    assert!(!asked(&json!([call(1, "search")])).invalid);
}

fn listing(id: u64, names: &[&str]) -> Value {
    let tools: Vec<Value> = (names.iter())
        .map(|n| json!({"name": n, "inputSchema": {"type": "object"}}))
        .collect();
    json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools, "nextCursor": "c"}})
}

fn names(message: &Value) -> Vec<String> {
    let tools = message["result"]["tools"].as_array().unwrap();
    (tools.iter())
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn tool_lists_keep_only_allowed_tools() {
    let mut message = listing(1, &["search", "delete", "fetch"]);
    assert!(filter_tools(&mut message, &allow()));
    assert_eq!(names(&message), ["search", "fetch"]);
    assert_eq!(message["result"]["nextCursor"], "c", "the rest is kept");
    assert!(
        !filter_tools(&mut message, &allow()),
        "nothing left to take"
    );
    let mut batch = json!([listing(1, &["delete"]), {"jsonrpc": "2.0", "id": 2, "result": {}}]);
    assert!(filter_tools(&mut batch, &allow()));
    assert_eq!(names(&batch[0]), Vec::<String>::new());
    let mut nameless = json!({"id": 1, "result": {"tools": [{"title": "x"}]}});
    assert!(filter_tools(&mut nameless, &allow()));
    let mut call_result = json!({"id": 1, "result": {"content": [{"type": "text"}]}});
    assert!(!filter_tools(&mut call_result, &allow()));
}

/// Feeds `chunks` through an event stream; returns what came out after each.
fn stream(chunks: &[&[u8]]) -> Vec<String> {
    let mut events = EventStream::default();
    let mut out: Vec<String> = (chunks.iter())
        .map(|c| String::from_utf8(events.feed(c, &allow()).unwrap()).unwrap())
        .collect();
    out.push(String::from_utf8(events.finish(&allow())).unwrap());
    out
}

fn event(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

#[test]
fn events_go_on_as_soon_as_they_are_complete() {
    let progress =
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}});
    let first = event(&progress);
    let (a, b) = first.split_at(10);
    let out = stream(&[a.as_bytes(), b.as_bytes(), b": ping\n", b"id: 4\n"]);
    assert_eq!(out, ["", &first, ": ping\n", "", "id: 4\n"]);
}

#[test]
fn a_tool_list_event_is_rewritten_and_its_other_fields_kept() {
    let list = listing(2, &["search", "delete"]);
    let text = format!("id: 7\r\nevent: message\r\ndata: {list}\r\n\r\n");
    let out = stream(&[text.as_bytes()]);
    let (fields, rest) = out[0].split_once("data: ").unwrap();
    assert_eq!(fields, "id: 7\nevent: message\n");
    let data = rest.strip_suffix("\n\n").unwrap();
    let filtered: Value = serde_json::from_str(data).unwrap();
    assert_eq!(names(&filtered), ["search"]);
    assert_eq!(filtered["id"], 2);
}

#[test]
fn data_split_over_lines_and_chunks_is_judged_whole() {
    // A server that writes JSON with newlines sends one data line per line.
    let pretty = serde_json::to_string_pretty(&listing(3, &["delete", "fetch"])).unwrap();
    let text: String = pretty.lines().map(|l| format!("data:{l}\n")).collect();
    let text = format!("{text}\n");
    let (x, y) = text.split_at(text.len() / 2);
    let (y, z) = y.split_at(y.len() - 1);
    let out = stream(&[x.as_bytes(), y.as_bytes(), z.as_bytes()]);
    assert_eq!(out[..2], ["", ""], "held until the blank line");
    let data = out[2].strip_prefix("data: ").unwrap().trim_end();
    assert_eq!(names(&serde_json::from_str(data).unwrap()), ["fetch"]);
}

#[test]
fn a_crlf_split_between_chunks_is_one_line_end() {
    let out = stream(&[b"data: 1\r", b"\n\r", b"\n"]);
    assert_eq!(out.concat(), "data: 1\r\n\r\n");
    assert_eq!(out[2], "data: 1\r\n\r\n", "complete only once the CRLF is");
}

#[test]
fn events_that_list_no_tools_pass_byte_for_byte() {
    let text = "retry: 10\n\ndata: not json\n\n:comment\r\n";
    assert_eq!(stream(&[text.as_bytes()]).concat(), text);
}

#[test]
fn an_unfinished_last_event_is_filtered_too() {
    let list = listing(4, &["delete"]);
    let out = stream(&[format!("data: {list}").as_bytes()]);
    assert_eq!(out[0], "");
    let data = out[1].strip_prefix("data: ").unwrap().trim_end();
    assert_eq!(
        names(&serde_json::from_str(data).unwrap()),
        Vec::<String>::new()
    );
}

#[test]
fn an_event_too_large_to_judge_cuts_the_stream() {
    let mut events = EventStream::default();
    let chunk = vec![b'x'; 1024 * 1024];
    let mut fed = events.feed(b"data: ", &allow()).map(|_| ());
    for _ in 0..=MAX_EVENT / chunk.len() {
        fed = fed.and_then(|()| events.feed(&chunk, &allow()).map(|_| ()));
    }
    assert!(fed.is_err());
}
