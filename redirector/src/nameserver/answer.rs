//! Which captured queries the agent answers itself, and the answers.
//!
//! A query for a Backend hostname in the caller's scope is answered with the hostname's
//! virtual addresses: A and AAAA (ANY gets both) for the families the proxy listens on,
//! an empty answer for the other; HTTPS and SVCB get an empty answer, since their
//! address hints would lead around the virtual addresses. Every other query
//! (other names, other types, anything that does not parse) goes to the nameserver the
//! client asked, and its answer comes back unchanged.

use hickory_proto::{
    op::{Edns, Message, MessageType, OpCode, ResponseCode},
    rr::{
        DNSClass, RData, Record, RecordType,
        rdata::{A, AAAA},
    },
};

use crate::table::BackendTable;

/// What to do with one query.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send this answer back.
    Answer(Vec<u8>),
    /// Forward the query to the nameserver the client asked.
    Forward,
}

/// How Backend names are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answering {
    /// TTL of the virtual addresses, in seconds.
    pub ttl: u32,
    /// The families the proxy listens on. A virtual address of another family would
    /// not be redirected, so A or AAAA queries for it get an empty answer: the client
    /// uses the family that is.
    pub v4: bool,
    pub v6: bool,
}

/// The largest UDP answer we advertise and send (the DNS flag day 2020 value).
const MAX_PAYLOAD: u16 = 1232;

/// Decides on `query`, from a client in `scope`.
pub fn decide(query: &[u8], scope: u64, table: &BackendTable, how: &Answering) -> Decision {
    let Ok(request) = Message::from_vec(query) else {
        return Decision::Forward;
    };
    if request.message_type() != MessageType::Query
        || request.op_code() != OpCode::Query
        || request.queries().len() != 1
    {
        return Decision::Forward;
    }
    let question = &request.queries()[0];
    if question.query_class() != DNSClass::IN {
        return Decision::Forward;
    }
    let name = question.name().to_lowercase().to_ascii();
    let Some(host) = table.answer(scope, name.trim_end_matches('.')) else {
        return Decision::Forward;
    };
    let (a, aaaa) = match question.query_type() {
        RecordType::A => (true, false),
        RecordType::AAAA => (false, true),
        RecordType::ANY => (true, true),
        RecordType::HTTPS | RecordType::SVCB => (false, false),
        _ => return Decision::Forward,
    };
    let (a, aaaa) = (a && how.v4, aaaa && how.v6);
    let ttl = how.ttl;
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true)
        .set_checking_disabled(request.checking_disabled())
        .set_response_code(ResponseCode::NoError)
        .add_query(question.clone());
    let owner = question.name().clone();
    if a {
        response.add_answer(Record::from_rdata(owner.clone(), ttl, RData::A(A(host.v4))));
    }
    if aaaa {
        response.add_answer(Record::from_rdata(owner, ttl, RData::AAAA(AAAA(host.v6))));
    }
    if request.extensions().is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_PAYLOAD);
        response.set_edns(edns);
    }
    match response.to_vec() {
        Ok(bytes) => Decision::Answer(bytes),
        // Cannot happen for these few records; the nameserver answers instead.
        Err(_) => Decision::Forward,
    }
}

#[cfg(test)]
mod tests;
