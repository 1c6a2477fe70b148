use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use hickory_proto::{
    op::{Message, MessageType, OpCode, Query},
    rr::{Name, RData, RecordType},
};

use super::*;
use crate::{
    backend::{Backend, ObjectKey, Protocol},
    table::{Entry, Scoping},
    virtual_hosts::{VirtualHosts, VirtualRanges},
};

const BOTH: Answering = Answering {
    ttl: 5,
    v4: true,
    v6: true,
};

fn table() -> (BackendTable, VirtualHosts) {
    let ranges = VirtualRanges {
        v4: "240.0.0.0/16".parse().unwrap(),
        v6: "fd72:6564:6972::/96".parse().unwrap(),
    };
    let mut virtuals = VirtualHosts::new(ranges, None, Duration::from_secs(60));
    virtuals.track(BTreeMap::from([(
        "api.example.com".to_owned(),
        (BTreeSet::from([0]), vec!["10.0.0.1".parse().unwrap()]),
    )]));
    let entry = Entry {
        backend: Arc::new(Backend {
            key: ObjectKey::new("default", "api"),
            hostname: "api.example.com".to_owned(),
            port: 443,
            protocol: Protocol::Tcp,
            tls: None,
        }),
        addresses: vec!["10.0.0.1".parse().unwrap()],
        origination: Ok(None),
        policy: Default::default(),
    };
    let table = BackendTable::new([entry], Scoping::Cluster, Some(&virtuals));
    (table, virtuals)
}

fn query(name: &str, kind: RecordType, edns: bool) -> Vec<u8> {
    let mut message = Message::new();
    message
        .set_id(4242)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
    if edns {
        message.set_edns(Edns::new());
    }
    message.to_vec().unwrap()
}

fn answered(decision: Decision) -> Message {
    match decision {
        Decision::Answer(bytes) => Message::from_vec(&bytes).unwrap(),
        Decision::Forward => panic!("forwarded"),
    }
}

#[test]
fn backend_names_get_their_virtual_addresses() {
    let (table, virtuals) = table();
    let (v4, v6) = virtuals.get("api.example.com").unwrap();
    // Case and the trailing dot do not matter.
    let a = answered(decide(
        &query("API.example.com.", RecordType::A, true),
        0,
        &table,
        &BOTH,
    ));
    assert_eq!(a.id(), 4242);
    assert_eq!(a.message_type(), MessageType::Response);
    assert!(a.recursion_available());
    assert_eq!(a.answers().len(), 1);
    assert_eq!(a.answers()[0].data(), &RData::A(A(v4)));
    assert_eq!(a.answers()[0].ttl(), 5);
    assert!(a.extensions().is_some(), "EDNS answered with EDNS");
    let aaaa = answered(decide(
        &query("api.example.com", RecordType::AAAA, false),
        0,
        &table,
        &BOTH,
    ));
    assert_eq!(aaaa.answers()[0].data(), &RData::AAAA(AAAA(v6)));
    assert!(aaaa.extensions().is_none());
    let any = answered(decide(
        &query("api.example.com", RecordType::ANY, false),
        0,
        &table,
        &BOTH,
    ));
    assert_eq!(any.answers().len(), 2);
    // Address hints would lead around the virtual addresses.
    let https = answered(decide(
        &query("api.example.com", RecordType::HTTPS, false),
        0,
        &table,
        &BOTH,
    ));
    assert!(https.answers().is_empty());
    assert_eq!(https.response_code(), ResponseCode::NoError);
}

#[test]
fn a_family_the_proxy_does_not_listen_on_gets_an_empty_answer() {
    let (table, virtuals) = table();
    let (v4, _) = virtuals.get("api.example.com").unwrap();
    let v4_only = Answering { v6: false, ..BOTH };
    let ask = |kind| {
        answered(decide(
            &query("api.example.com", kind, false),
            0,
            &table,
            &v4_only,
        ))
    };
    let aaaa = ask(RecordType::AAAA);
    assert_eq!(aaaa.response_code(), ResponseCode::NoError);
    assert!(aaaa.answers().is_empty(), "{:?}", aaaa.answers());
    let any = ask(RecordType::ANY);
    assert_eq!(any.answers().len(), 1);
    assert_eq!(any.answers()[0].data(), &RData::A(A(v4)));
}

#[test]
fn everything_else_is_forwarded() {
    let (table, _) = table();
    let forward = |bytes: &[u8], scope| decide(bytes, scope, &table, &BOTH) == Decision::Forward;
    assert!(forward(
        &query("other.example.com", RecordType::A, false),
        0
    ));
    // Search-list expansions are other names.
    assert!(forward(
        &query(
            "api.example.com.default.svc.cluster.local",
            RecordType::A,
            false
        ),
        0
    ));
    assert!(forward(
        &query("api.example.com", RecordType::TXT, false),
        0
    ));
    assert!(forward(&query("api.example.com", RecordType::MX, false), 0));
    // Another scope does not see the name.
    assert!(forward(&query("api.example.com", RecordType::A, false), 7));
    assert!(forward(b"not a dns message", 0));
    assert!(forward(&[], 0));
}
