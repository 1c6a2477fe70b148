//! A bound on how far a YAML file expands. An alias replays its anchor's whole subtree,
//! so a file of a few KiB can name millions of nodes (`b: [*a, *a, ...]` over a long
//! `a`); serde_yaml_ng bounds how many aliases are followed, not what they replay, and
//! building those `Value`s took a 19 KB file to 2 GB (found while seeding the fuzz corpus,
//! see fuzz/README.md), four times the DaemonSet's memory limit. So a file is first walked without building
//! anything, counting nodes, and refused when it holds more than its text could spell
//! out plus a margin for ordinary anchors.

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// Nodes that aliases may add beyond one per byte of text: ample for anchors shared by
/// thousands of objects, and at most some 10 MB of `Value`s.
const ALIAS_ALLOWANCE: usize = 100_000;

/// Walks every document of `text`, failing once they expand to more nodes than allowed.
/// Syntax errors fail here too, as they would when building the values.
pub(super) fn check(text: &str) -> Result<(), serde_yaml_ng::Error> {
    // Written out, a node takes at least a byte: only aliases can exceed this.
    let left = Cell::new(text.len().saturating_add(ALIAS_ALLOWANCE));
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        Walk(&left).deserialize(document)?;
    }
    Ok(())
}

/// Visits a value and everything inside it, spending one unit of the budget per node.
#[derive(Clone, Copy)]
struct Walk<'a>(&'a Cell<usize>);

impl Walk<'_> {
    fn spend<E: de::Error>(self) -> Result<(), E> {
        let Some(left) = self.0.get().checked_sub(1) else {
            return Err(E::custom(format!(
                "its aliases expand it to more nodes than its size allows \
                 (one per byte plus {ALIAS_ALLOWANCE}); write the repeated parts out"
            )));
        };
        self.0.set(left);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.spend()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.spend()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.spend()
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.spend()
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.spend()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.spend()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.spend()
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<(), E> {
        self.spend()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.spend()
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.spend()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.spend()?;
        self.deserialize(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.spend()?;
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.spend()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.spend()?;
        while map.next_entry_seed(self, self)?.is_some() {}
        Ok(())
    }

    /// A tagged value (`!Tag value`): serde_yaml_ng hands the tag as the variant.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        self.spend()?;
        let ((), value) = data.variant_seed(self)?;
        value.newtype_variant_seed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input the fuzz harness blew up on (fuzz/corpus/backend_yaml/
    /// regression-alias-quadratic.yaml): 5,000 scalars replayed by 3,000 aliases,
    /// 15 million nodes from 19 KB.
    fn quadratic(scalars: usize, aliases: usize) -> String {
        format!(
            "a: &a [{}]\nb: [{}]\n",
            "x,".repeat(scalars),
            "*a,".repeat(aliases)
        )
    }

    #[test]
    fn alias_expansion_beyond_the_budget_is_refused() {
        let error = check(&quadratic(5000, 3000)).unwrap_err().to_string();
        assert!(error.contains("aliases expand it"), "{error}");
        // The parse of the whole file fails the same way, without building the values.
        let parsed = super::super::parse_text(&quadratic(5000, 3000)).unwrap_err();
        assert!(parsed.contains("its aliases expand it"), "{parsed}");
    }

    #[test]
    fn ordinary_anchors_and_tags_pass() {
        assert!(check(&quadratic(10, 1000)).is_ok());
        let text = "common: &tls {mode: ServerOnly, validation: {hostname: a.example.com}}\n\
                    tls: *tls\n\
                    ---\n\
                    tagged: !Thing {x: [1, 2.5, true, ~, 18446744073709551616]}\n\
                    ---\n";
        check(text).unwrap();
    }

    #[test]
    fn syntax_errors_still_fail() {
        assert!(check("a: [unclosed").is_err());
        assert!(check("b: *undefined").is_err());
    }
}
