//! Syntax checks for the names that appear in an XBackend: DNS labels and subdomains
//! (RFC 1123), `PreciseHostname`s, SAN hostnames and URIs, API groups and kinds.
//!
//! Each function implements one upstream format (the pattern it mirrors is named in
//! [`crate::backend::constraints`]) and returns the message part of a `ValidationError`,
//! so the caller only adds the field path. Checks never rewrite a value: upstream rejects
//! `API.example.com` and `api.example.com.` (the pattern is lowercase, without a trailing
//! dot), so they are rejected here too, with the accepted spelling in the message, rather
//! than silently normalised into something `kubectl apply` would refuse.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::backend::constraints::{MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN};

/// RFC 1123 label: 1..=63 of `[a-z0-9-]`, starting and ending with an alphanumeric
/// (`format.dns1123Label()` in CEL, and the `Namespace` pattern).
pub fn dns_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if label.len() > MAX_DNS_LABEL {
        return Err(format!("must be at most {MAX_DNS_LABEL} characters"));
    }
    if is_label(label) {
        Ok(())
    } else {
        Err(format!(
            "{label:?} is not a valid DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit)"
        ))
    }
}

/// RFC 1123 subdomain: dot-separated labels of at most 63 characters, at most 253 in
/// total. Kubernetes object names (`metadata.name`, referenced ConfigMaps and Secrets).
pub fn dns_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > MAX_DNS_SUBDOMAIN {
        return Err(format!("must be at most {MAX_DNS_SUBDOMAIN} characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(format!("{name:?} has an empty label"));
        }
        if label.len() > MAX_DNS_LABEL {
            return Err(format!(
                "{name:?} has a label longer than {MAX_DNS_LABEL} characters"
            ));
        }
        if !is_label(label) {
            return Err(format!(
                "{name:?} is not a valid RFC 1123 DNS name (lowercase letters, digits, '-' and '.')"
            ));
        }
    }
    Ok(())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, the label of every DNS pattern upstream uses.
fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.iter().all(|&b| alnum(b) || b == b'-')
        && bytes.first().is_some_and(|&b| alnum(b))
        && bytes.last().is_some_and(|&b| alnum(b))
}

/// The spelling upstream accepts for a name that differs only by case or one trailing
/// dot, for the error message.
fn canonical(raw: &str) -> String {
    let lower = raw.to_ascii_lowercase();
    match lower.strip_suffix('.') {
        Some(stripped) => stripped.to_owned(),
        None => lower,
    }
}

/// Upstream `PreciseHostname` (a name a connection is made to and sent as SNI): lowercase
/// DNS labels, at most 253 characters, no wildcard, no trailing dot.
///
/// Stricter than upstream (see the list in `validate`): an IP literal, or a name whose
/// last label is numeric (`10.0.0.1`, `127.1`, `0x7f.1`, which the C resolver reads as
/// addresses) is rejected although the pattern admits some of them, because an IP-shaped
/// name would bypass the resolver's address checks and turn a Backend into a pinhole to
/// that IP; and a label longer than 63 characters, which DNS cannot carry.
pub fn precise_hostname(raw: &str) -> Result<(), String> {
    let name = canonical(raw);
    if raw.is_empty() {
        return Err("required".to_owned());
    }
    if raw.contains('*') {
        return Err("wildcards are not allowed; name one exact host".to_owned());
    }
    if is_ip_literal(&name) {
        return Err("must be a DNS name, not an IP address".to_owned());
    }
    if name != raw && dns_subdomain(&name).is_ok() {
        return Err(format!(
            "{raw:?} must be lowercase without a trailing dot; write {name:?}"
        ));
    }
    dns_subdomain(raw)
}

/// `true` for anything a resolver could take as an address instead of a name: IPv4 and
/// IPv6 literals (bracketed or not) and names whose last label is a number, decimal or
/// `0x` hex, which `inet_aton` style parsers accept as shorthand IPv4 (`127.1`, `0x7f.1`).
pub fn is_ip_literal(name: &str) -> bool {
    let unbracketed = name
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(name);
    if unbracketed.parse::<Ipv4Addr>().is_ok() || unbracketed.parse::<Ipv6Addr>().is_ok() {
        return true;
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    let decimal = !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit());
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    decimal || hex
}

/// `spec.externalHostname.hostname`: a [`precise_hostname`] outside the cluster's domain
/// (upstream CEL `!self.endsWith('.cluster.local')`). The domain is tested first, on the
/// lowercase form, so that `DB.svc.cluster.local.` is told the real problem at once.
pub fn external_hostname(raw: &str) -> Result<(), String> {
    if is_cluster_local(&canonical(raw)) {
        return Err(
            "must not end with .cluster.local (in-cluster names are not external)".to_owned(),
        );
    }
    precise_hostname(raw)
}

/// `true` when the name is inside the cluster's own DNS domain, which upstream forbids
/// for external hostnames (an in-cluster Service must not masquerade as external).
/// Stricter than upstream's `!self.endsWith('.cluster.local')`: `cluster.local` itself
/// is refused too.
pub fn is_cluster_local(name: &str) -> bool {
    name == "cluster.local" || name.ends_with(".cluster.local")
}

/// A SAN of type `Hostname`: a `PreciseHostname`, optionally with a leading `*.`
/// (certificates may carry wildcard SANs, and upstream's pattern allows exactly this).
/// Stricter than upstream as [`precise_hostname`] is: no IP literals, labels <= 63.
pub fn san_hostname(raw: &str) -> Result<(), String> {
    if raw.is_empty() {
        return Err("must not be empty".to_owned());
    }
    let rest = raw.strip_prefix("*.").unwrap_or(raw);
    if rest.contains('*') {
        return Err("a wildcard is only allowed as the whole first label (\"*.\")".to_owned());
    }
    precise_hostname(rest).map_err(|e| match e.as_str() {
        "required" => "must not be empty after \"*.\"".to_owned(),
        _ => e,
    })
}

/// A SAN of type `URI`: an absolute URI with a scheme and an authority
/// (`scheme://authority...`), as upstream's pattern requires; SPIFFE IDs are the common
/// case. Stricter than upstream: the scheme must follow RFC 3986 (a letter, then letters,
/// digits, `+`, `-`, `.`) and whitespace is refused, since no certificate can carry either.
pub fn san_uri(uri: &str) -> Result<(), String> {
    if uri.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if uri.len() > MAX_DNS_SUBDOMAIN {
        return Err(format!("must be at most {MAX_DNS_SUBDOMAIN} characters"));
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain whitespace".to_owned());
    }
    let Some((scheme, rest)) = uri.split_once(':') else {
        return Err(
            "must be an absolute URI with a scheme, e.g. spiffe://trust.domain/path".to_owned(),
        );
    };
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return Err(format!("{scheme:?} is not a valid URI scheme"));
    }
    if !rest.starts_with("//") {
        return Err("must have an authority (scheme://authority/...)".to_owned());
    }
    Ok(())
}

/// Gateway API `Group`: empty (the core API group) or a lowercase DNS subdomain.
pub fn group(group: &str) -> Result<(), String> {
    if group.is_empty() {
        return Ok(());
    }
    dns_subdomain(group)
        .map_err(|_| format!("{group:?} is not a valid API group (empty for core, or a DNS name)"))
}

/// Gateway API `Kind`: 1..=63 characters, a letter first, then letters, digits and `-`,
/// not ending with `-`.
pub fn kind(kind: &str) -> Result<(), String> {
    if kind.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if kind.len() > MAX_DNS_LABEL {
        return Err(format!("must be at most {MAX_DNS_LABEL} characters"));
    }
    let bytes = kind.as_bytes();
    let ok = bytes
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphabetic)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if ok {
        Ok(())
    } else {
        Err(format!("{kind:?} is not a valid kind name"))
    }
}
