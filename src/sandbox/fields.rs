//! Strictly typed access to the fields of one operation object.
//!
//! The sandbox exists to catch client mistakes, so a value of the wrong JSON
//! type is an error even where a lenient gateway might coerce it.

use serde_json::{Map, Value};

use super::error::OpError;

/// Fewest and most digits of a phone number in international format.
const PHONE_DIGITS: std::ops::RangeInclusive<usize> = 7..=15;

/// Fields of one JSON object; nested objects report paths like `voice.gender`.
pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
}

impl<'a> Fields<'a> {
    /// Wraps the top-level operation object.
    pub fn new(obj: &'a Map<String, Value>) -> Self {
        Self {
            obj,
            prefix: String::new(),
        }
    }

    /// Path of `name` as it appears in error texts.
    pub fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// `null` counts as absent: clients commonly serialize unset options so.
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    /// Whether the field is present and not `null`.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The client's message id: a JSON integer greater than zero.
    pub fn id(&self) -> Result<u64, OpError> {
        let value = self
            .get("id")
            .ok_or_else(|| OpError::missing(self.path("id")))?;
        value
            .as_u64()
            .filter(|id| *id > 0)
            .ok_or_else(|| OpError::invalid(self.path("id")))
    }

    /// Phone number: a JSON integer of 7 to 15 digits, no plus sign (docs/gateway.md#identity).
    pub fn phone(&self) -> Result<u64, OpError> {
        let value = self
            .get("phone")
            .ok_or_else(|| OpError::missing(self.path("phone")))?;
        value
            .as_u64()
            .filter(|p| PHONE_DIGITS.contains(&p.to_string().len()))
            .ok_or_else(|| OpError::invalid(self.path("phone")))
    }

    /// A required string; blank counts as missing.
    pub fn req_str(&self, name: &str) -> Result<&'a str, OpError> {
        match self.opt_str(name)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(OpError::missing(self.path(name))),
        }
    }

    /// An optional string.
    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(OpError::invalid(self.path(name))),
        }
    }

    /// A required absolute http(s) URL.
    pub fn req_link(&self, name: &str) -> Result<&'a str, OpError> {
        let link = self.req_str(name)?;
        self.check_link(name, link)
    }

    /// An optional absolute http(s) URL.
    pub fn opt_link(&self, name: &str) -> Result<Option<&'a str>, OpError> {
        self.opt_str(name)?
            .map(|link| self.check_link(name, link))
            .transpose()
    }

    fn check_link(&self, name: &str, link: &'a str) -> Result<&'a str, OpError> {
        if is_http_url(link) {
            Ok(link)
        } else {
            Err(OpError::invalid(self.path(name)))
        }
    }

    /// An optional JSON boolean.
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(OpError::invalid(self.path(name))),
        }
    }

    /// An optional non-negative JSON integer.
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, OpError> {
        self.get(name)
            .map(|v| v.as_u64().ok_or_else(|| OpError::invalid(self.path(name))))
            .transpose()
    }

    /// An optional lifetime in whole seconds within `min..=max`.
    pub fn lifetime(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, OpError> {
        match self.opt_u64(name)? {
            Some(secs) if !(min..=max).contains(&secs) => Err(OpError::invalid(self.path(name))),
            other => Ok(other),
        }
    }

    /// A required nested object, whose fields report paths under `name.`.
    pub fn req_object(&self, name: &str) -> Result<Fields<'a>, OpError> {
        match self.get(name) {
            None => Err(OpError::missing(self.path(name))),
            Some(Value::Object(obj)) => Ok(Fields {
                obj,
                prefix: format!("{}.", self.path(name)),
            }),
            Some(_) => Err(OpError::invalid(self.path(name))),
        }
    }

    /// An optional JSON array.
    pub fn opt_array(&self, name: &str) -> Result<Option<&'a Vec<Value>>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(OpError::invalid(self.path(name))),
        }
    }

    /// Wraps `obj`, an element of the array `name` at `index`.
    pub fn element(&self, name: &str, index: usize, obj: &'a Map<String, Value>) -> Fields<'a> {
        Fields {
            obj,
            prefix: format!("{}[{index}].", self.path(name)),
        }
    }
}

/// Whether `link` is an absolute `http`/`https` URL with a host.
pub fn is_http_url(link: &str) -> bool {
    url::Url::parse(link)
        .map(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .unwrap_or(false)
}
