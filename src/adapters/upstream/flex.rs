//! Deserializers that accept the JSON types the gateway is known to mix up: numbers
//! as strings and strings as numbers, booleans as 0/1 or "true", and the like.

use serde::{Deserialize, Deserializer, de::Error};
use serde_json::Value;

/// `true`/`false`, `1`/`0`, or `"true"`/`"1"` (some tables call `success` an integer).
pub fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    opt_bool(d)?.ok_or_else(|| D::Error::custom("expected a boolean"))
}

/// Like [`bool`], `None` for null.
pub fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(b)),
        Value::Number(n) if n.as_u64() == Some(1) => Ok(Some(true)),
        Value::Number(n) if n.as_u64() == Some(0) => Ok(Some(false)),
        Value::String(s) if s == "true" || s == "1" => Ok(Some(true)),
        Value::String(s) if s == "false" || s == "0" => Ok(Some(false)),
        other => Err(D::Error::custom(format!("expected a boolean, got {other}"))),
    }
}

/// A number or a string, as text; `None` for null.
pub fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(b.to_string())),
        other => Err(D::Error::custom(format!("expected a string, got {other}"))),
    }
}

/// A code of digits: a JSON number loses leading zeros, so it is padded to 4 digits.
pub fn opt_code<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Number(n) => Ok(Some(match n.as_u64() {
            Some(v) => format!("{v:04}"),
            None => n.to_string(),
        })),
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(D::Error::custom(format!("expected a code, got {other}"))),
    }
}

/// A non-negative integer given as a number or a numeric string.
pub fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("expected an unsigned integer, got {n}"))),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("expected an unsigned integer, got {s:?}"))),
        other => Err(D::Error::custom(format!(
            "expected an unsigned integer, got {other}"
        ))),
    }
}

/// Like [`opt_u64`], bounded to `u32`.
pub fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    opt_u64(d)?
        .map(|v| u32::try_from(v).map_err(|_| D::Error::custom("number too large")))
        .transpose()
}

/// A number given as a number or a numeric string.
pub fn opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        // A number a double cannot hold (`1e400`) is refused, never dropped.
        Value::Number(n) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("number {n} out of range"))),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("expected a number, got {s:?}"))),
        other => Err(D::Error::custom(format!("expected a number, got {other}"))),
    }
}

/// A decimal number's text exactly as written (serde_json keeps it: the
/// `arbitrary_precision` feature), given as a number or a numeric string.
pub fn opt_decimal<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::String(s) => Ok(Some(s.trim().to_owned())),
        other => Err(D::Error::custom(format!("expected a number, got {other}"))),
    }
}

/// An array (null or missing: empty).
pub fn list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}
