//! Kubernetes resource quantities, as far as the pod specs of deploy/ write them.

use anyhow::{Context, Result, bail};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A memory quantity (`512Mi`, `1G`, `1048576`) in bytes.
pub fn bytes(quantity: &Quantity) -> Result<u64> {
    let text = quantity.0.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: u64 = number
        .parse()
        .with_context(|| format!("quantity {text}: not a whole number"))?;
    let unit: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        other => bail!("quantity {text}: unit {other} is not supported"),
    };
    number
        .checked_mul(unit)
        .with_context(|| format!("quantity {text} overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() -> Result<()> {
        assert_eq!(bytes(&Quantity("512Mi".into()))?, 512 << 20);
        assert_eq!(bytes(&Quantity("2k".into()))?, 2000);
        assert!(bytes(&Quantity("1.5Gi".into())).is_err());
        Ok(())
    }
}
