//! Sends whose text carries a secret (a verification's one-time code) that must not
//! rest in the store. A claim keeps two things of its request: the fingerprint that
//! tells a retry from a different request with the same id, and the gateway's answer
//! it replays. A plain SHA-256 of a request holding a 6-digit code is no secret (a
//! million guesses find the code), and the answer of a `call/otp` is the code itself.
//!
//! So a confidential call's fingerprint is an HMAC under a key that is not in the store:
//! equal requests still have equal fingerprints, so exactly-once holds unchanged (a
//! retry with the same id replays, waits or resolves as every send does, and a different
//! request with the id is a conflict), but the stored value tells nothing about the code
//! to whoever reads the store. And the `code` of the answer is dropped before it is
//! stored: the verification keeps the code itself (sealed, see `verify/`), so its
//! retries never need the claim's copy.

use std::sync::Arc;

use serde_json::Value;

use crate::core::domain::Operation;
use crate::core::ports::gateway::Gateway;
use crate::core::ports::store::{AcceptedOutcome, Fingerprint, Settlement};

/// How the claims of a confidential call are kept: see the module.
#[derive(Clone)]
pub struct Confidential {
    key: Arc<[u8; 32]>,
}

impl std::fmt::Debug for Confidential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Confidential(..)")
    }
}

impl Confidential {
    /// Fingerprints keyed by `key` (32 bytes derived from a secret outside the store).
    pub fn new(key: [u8; 32]) -> Self {
        Self { key: Arc::new(key) }
    }

    /// The keyed fingerprint of `op` (as `gateway` receives it).
    pub fn fingerprint(&self, gateway: &dyn Gateway, op: &Operation) -> Fingerprint {
        Fingerprint(crate::core::mac::tag(
            &self.key[..],
            &[&gateway.canonical(op)],
        ))
    }

    /// The settlement as it may be stored: an accepted answer without its `code`.
    pub fn at_rest(&self, settlement: Settlement) -> Settlement {
        match settlement {
            Settlement::Accepted(outcome, message) => {
                let (payload, had_code) = without_code(outcome.payload);
                Settlement::Accepted(
                    AcceptedOutcome {
                        payload,
                        // Its answer is not kept whole: a replay of a voice call says the
                        // code is lost (RESULT_LOST), as after a recovered outcome.
                        recovered: outcome.recovered || had_code,
                        ..outcome
                    },
                    message,
                )
            }
            other => other,
        }
    }
}

/// The payload without its `code`, and whether it had one.
fn without_code(payload: Value) -> (Value, bool) {
    match payload {
        Value::Object(mut fields) => {
            let had = fields.remove("code").is_some();
            (Value::Object(fields), had)
        }
        other => (other, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::domain::{ClientId, OtpCode, Output, Phone, Recipient, TelegramOtp};
    use crate::core::ports::gateway::{ItemOutcome, PayloadError, UpstreamError};

    fn otp(code: &str) -> Operation {
        Operation::SendTelegramOtp(TelegramOtp {
            to: Recipient {
                id: ClientId::new(7).unwrap(),
                phone: Phone::parse("380971234567").unwrap(),
            },
            code: OtpCode::parse(code).unwrap(),
            lifetime: None,
        })
    }

    /// A gateway that only writes operations (as their debug form).
    #[derive(Debug)]
    struct Writing;

    #[tonic::async_trait]
    impl Gateway for Writing {
        async fn call(
            &self,
            _: &[&Operation],
            _: &[Option<String>],
            _: Option<tokio::time::Instant>,
        ) -> Result<Vec<ItemOutcome>, UpstreamError> {
            Err(UpstreamError::Unreachable("a test gateway".into()))
        }

        fn timeout(&self) -> std::time::Duration {
            std::time::Duration::ZERO
        }

        fn canonical(&self, op: &Operation) -> Vec<u8> {
            format!("{op:?}").into_bytes()
        }

        fn parse_output(&self, _: &Operation, _: Value) -> Result<Output, PayloadError> {
            Err(PayloadError::new("test", "a test gateway".into()))
        }
    }

    #[test]
    fn fingerprints_tell_requests_apart_only_with_the_key() {
        let a = Confidential::new([1; 32]);
        let b = Confidential::new([2; 32]);
        let print = |c: &Confidential, code| c.fingerprint(&Writing, &otp(code));
        assert_eq!(print(&a, "123456"), print(&a, "123456"));
        assert_ne!(print(&a, "123456"), print(&a, "123457"));
        assert_ne!(print(&a, "123456"), print(&b, "123456"));
        assert_ne!(
            print(&a, "123456"),
            crate::core::dispatch::fingerprint(&Writing, &otp("123456"))
        );
    }

    #[test]
    fn a_stored_answer_loses_its_code() {
        let settled = Confidential::new([1; 32]).at_rest(Settlement::Accepted(
            AcceptedOutcome {
                msg_id: None,
                parts: 0,
                payload: serde_json::json!({"code": "0471", "price": 0.2}),
                recovered: false,
            },
            None,
        ));
        let Settlement::Accepted(outcome, _) = settled else {
            panic!("still accepted")
        };
        assert_eq!(outcome.payload, serde_json::json!({"price": 0.2}));
        assert!(outcome.recovered, "a replay cannot give the code back");
    }
}
