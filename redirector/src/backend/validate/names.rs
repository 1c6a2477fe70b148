//! Syntax checks for the names that appear in an XBackend: DNS labels and subdomains
//! (RFC 1123), hostnames, SAN hostnames and URIs.
//!
//! Each function returns the message part of a `ValidationError`, so the caller only adds
//! the field path. Hostnames are normalised before they are checked (ASCII lowercase, one
//! trailing dot removed) because DNS is case-insensitive and `a.example.` and `a.example`
//! are the same name: without normalising, `svc.cluster.local.` would slip past the
//! `.cluster.local` rule and `Example.COM` would be a distinct key from `example.com`.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Longest DNS name, in characters, without the trailing dot (RFC 1035 / RFC 1123).
const MAX_NAME: usize = 253;
/// Longest DNS label.
const MAX_LABEL: usize = 63;

/// RFC 1123 label: 1..=63 of `[a-z0-9-]`, starting and ending with an alphanumeric.
pub fn dns_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if label.len() > MAX_LABEL {
        return Err(format!("must be at most {MAX_LABEL} characters"));
    }
    let bytes = label.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let inner_ok = bytes.iter().all(|&b| alnum(b) || b == b'-');
    let ends_ok =
        bytes.first().is_some_and(|&b| alnum(b)) && bytes.last().is_some_and(|&b| alnum(b));
    if inner_ok && ends_ok {
        Ok(())
    } else {
        Err(format!(
            "{label:?} is not a valid DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit)"
        ))
    }
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters in total.
pub fn dns_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > MAX_NAME {
        return Err(format!("must be at most {MAX_NAME} characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(format!("{name:?} has an empty label"));
        }
        dns_label(label).map_err(|_| format!("{name:?} is not a valid RFC 1123 DNS name"))?;
    }
    Ok(())
}

/// Lowercases and removes one trailing dot, the forms in which the same DNS name can be
/// written. Anything else (two trailing dots, spaces) is left for the syntax check to reject.
pub fn normalize_hostname(raw: &str) -> String {
    let lower = raw.to_ascii_lowercase();
    match lower.strip_suffix('.') {
        Some(stripped) => stripped.to_owned(),
        None => lower,
    }
}

/// A precise hostname a connection can be made to (and sent as SNI): a DNS name, never
/// an IP literal or a wildcard. Returns the normalised name.
///
/// Stricter than upstream: the `PreciseHostname` pattern admits dotted-decimal strings
/// such as `10.0.0.1`, and admits names whose last label is numeric (`127.1`, which the
/// C resolver reads as 127.0.0.1). Both are rejected here because an IP-shaped name would
/// bypass the resolver's address checks and turn a Backend into a pinhole to that IP.
pub fn precise_hostname(raw: &str) -> Result<String, String> {
    let name = normalize_hostname(raw);
    if name.contains('*') {
        return Err("wildcards are not allowed; name one exact host".to_owned());
    }
    if is_ip_literal(&name) {
        return Err("must be a DNS name, not an IP address".to_owned());
    }
    dns_subdomain(&name)?;
    Ok(name)
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

/// `true` when the name is inside the cluster's own DNS domain, which upstream forbids
/// for external hostnames (an in-cluster Service must not masquerade as external).
pub fn is_cluster_local(name: &str) -> bool {
    name == "cluster.local" || name.ends_with(".cluster.local")
}

/// A SAN of type Hostname: a DNS name, optionally with a leading `*.` (certificates may
/// carry wildcard SANs, and upstream's `Hostname` type allows exactly this form).
pub fn san_hostname(raw: &str) -> Result<String, String> {
    let name = normalize_hostname(raw);
    let rest = name.strip_prefix("*.").unwrap_or(&name);
    if rest.contains('*') {
        return Err("a wildcard is only allowed as the whole first label (\"*.\")".to_owned());
    }
    if is_ip_literal(rest) {
        return Err("must be a DNS name, not an IP address".to_owned());
    }
    dns_subdomain(rest)?;
    Ok(name)
}

/// A SAN of type URI: an absolute URI with a scheme and an authority (`scheme://...`),
/// as upstream's pattern requires; SPIFFE IDs are the common case.
pub fn san_uri(uri: &str) -> Result<(), String> {
    if uri.len() > MAX_NAME {
        return Err(format!("must be at most {MAX_NAME} characters"));
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
